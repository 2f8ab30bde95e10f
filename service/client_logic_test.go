package service

import (
	"context"
	"errors"
	"math/bits"
	"testing"

	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/verbs"
)

// orderNIC is one byte-order word as a NIC in the given byte order would
// see it: swap says the NIC takes and returns words byte-swapped.
type orderNIC struct {
	word uint64
	swap bool
	err  error // every call's, if set
}

func (n *orderNIC) conv(v uint64) uint64 {
	if n.swap {
		return bits.ReverseBytes64(v)
	}
	return v
}

func (n *orderNIC) Read8(ctx context.Context, addr uint64, rkey uint32) (uint64, error) {
	return n.conv(n.word), n.err
}

func (n *orderNIC) FetchAdd(ctx context.Context, addr uint64, rkey uint32, add uint64) (uint64, error) {
	if n.err != nil {
		return 0, n.err
	}
	old := n.word
	n.word = n.conv(n.conv(old) + add)
	return n.conv(old), nil
}

func (n *orderNIC) CompareSwap(ctx context.Context, addr uint64, rkey uint32, compare, swap uint64) (uint64, error) {
	panic("the probe does not compare-and-swap")
}

// TestProbeOrder: a NIC in host byte order passes the probe; a byte-swapping
// one fails it with ErrNotSupported (the client then takes the engine); an
// error of the connection ends it with that error, which Dial returns.
func TestProbeOrder(t *testing.T) {
	ctx := context.Background()
	host := &orderNIC{word: atomics.ProbeValue}
	if err := probeOrder(ctx, host, 64, 1); err != nil || host.word != atomics.ProbeValue+1 {
		t.Errorf("host order: %v, word %#x", err, host.word)
	}
	swapped := &orderNIC{word: atomics.ProbeValue, swap: true}
	if err := probeOrder(ctx, swapped, 64, 1); !errors.Is(err, verbs.ErrNotSupported) {
		t.Errorf("byte-swapped: %v, want ErrNotSupported", err)
	}
	lost := &orderNIC{word: atomics.ProbeValue, err: verbs.ErrPeerLost}
	if err := probeOrder(ctx, lost, 64, 1); !errors.Is(err, verbs.ErrPeerLost) || errors.Is(err, verbs.ErrNotSupported) {
		t.Errorf("connection lost: %v, want ErrPeerLost only", err)
	}
}
