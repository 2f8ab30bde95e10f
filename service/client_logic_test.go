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

// TestLaneEngineEvents: a lane carrying an engine message is done when
// both its send's completion and its reply have come, in either order; a
// reply with another sequence number, or a second one, is not taken; an
// abandoned lane is freed by its last event; a failed send ends the lane
// without a reply; and the serialized path's sequence numbers never carry
// laneSeqTag nor are 0.
func TestLaneEngineEvents(t *testing.T) {
	c := &Client{}
	c.initLanes()
	reply := []byte{msgOK, 0, 0, 0, 0, 0, 0, 0, 42}
	start := func() (int, *lane, uint32) {
		t.Helper()
		i := c.takeLane()
		if i < 0 {
			t.Fatal("no free lane")
		}
		l := &c.lanes[i]
		seq := laneSeqTag | c.laneSeq.Add(1)<<4&^laneSeqTag | uint32(i)
		c.engines.Add(1)
		l.done.Store(false)
		l.replyLen = 0
		l.events.Store(2)
		l.seq.Store(seq)
		l.posted = true
		return i, l, seq
	}
	for _, replyFirst := range []bool{true, false} {
		i, l, seq := start()
		if c.laneReply(seq^1<<4, reply) || c.laneReply(seq&^laneSeqTag, reply) {
			t.Fatalf("reply first %v: a reply of another sequence number was taken", replyFirst)
		}
		if replyFirst {
			if !c.laneReply(seq, reply) || l.isDone() {
				t.Fatalf("reply first: taken %v, done %v after the reply alone", true, l.isDone())
			}
			c.laneDone(i, nil)
		} else {
			c.laneDone(i, nil)
			if l.isDone() {
				t.Fatal("done after the send's completion alone")
			}
			if !c.laneReply(seq, reply) {
				t.Fatal("the reply was not taken")
			}
		}
		if !l.isDone() || l.err != nil || string(l.reply[:l.replyLen]) != string(reply) || c.engines.Load() != 0 {
			t.Fatalf("reply first %v: done %v, err %v, reply %x, engine lanes %d", replyFirst, l.isDone(), l.err, l.reply[:l.replyLen], c.engines.Load())
		}
		if c.laneReply(seq, reply) {
			t.Fatalf("reply first %v: a second reply was taken", replyFirst)
		}
		l.seq.Store(0)
		c.putLane(i)
	}

	// Abandoned by its caller: the last event frees it.
	i, l, seq := start()
	l.abandoned = true
	c.laneDone(i, nil)
	if c.free.Load()&(1<<i) != 0 {
		t.Fatal("an abandoned lane was freed before its reply")
	}
	c.laneReply(seq, reply)
	if c.free.Load()&(1<<i) == 0 || l.abandoned || l.seq.Load() != 0 || c.engines.Load() != 0 {
		t.Fatalf("abandoned lane after both events: free %v, abandoned %v, seq %#x, engine lanes %d",
			c.free.Load()&(1<<i) != 0, l.abandoned, l.seq.Load(), c.engines.Load())
	}

	// A failed send: no reply will come; the lane ends with the error and
	// the client has failed.
	i, l, _ = start()
	c.laneDone(i, verbs.ErrPeerLost)
	if !l.isDone() || !errors.Is(l.err, verbs.ErrPeerLost) || !c.failed.Load() || c.engines.Load() != 0 {
		t.Fatalf("failed send: done %v, err %v, client failed %v, engine lanes %d", l.isDone(), l.err, c.failed.Load(), c.engines.Load())
	}

	for _, from := range []uint32{0, laneSeqTag - 1, 1<<32 - 1} {
		c.seq = from
		c.nextSeq()
		if c.seq == 0 || c.seq&laneSeqTag != 0 {
			t.Errorf("nextSeq after %#x: %#x", from, c.seq)
		}
	}
}

// TestLaneList: the completion of a list's signalled last work request
// completes the list's other lanes, once; a later completion of one of
// them (its flush, after the QP failed) changes nothing.
func TestLaneList(t *testing.T) {
	c := &Client{}
	c.initLanes()
	var ls [3]int
	for k := range ls {
		ls[k] = c.takeLane()
		l := &c.lanes[ls[k]]
		l.done.Store(false)
		l.posted = true
	}
	last := ls[2]
	c.lanes[last].list = 1<<ls[0] | 1<<ls[1]
	c.laneDone(last, nil)
	for _, i := range ls {
		if l := &c.lanes[i]; !l.isDone() || l.err != nil || l.posted {
			t.Fatalf("lane %d after its list's completion: done %v, err %v, posted %v", i, l.isDone(), l.err, l.posted)
		}
	}
	if c.lanes[last].list != 0 {
		t.Fatalf("the signalled lane keeps its list %#x", c.lanes[last].list)
	}
	c.laneDone(ls[0], verbs.ErrFlushed)
	if l := &c.lanes[ls[0]]; l.err != nil {
		t.Fatalf("a second completion of lane %d set its error: %v", ls[0], l.err)
	}
}
