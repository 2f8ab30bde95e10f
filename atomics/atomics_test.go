package atomics

import (
	"errors"
	"math/bits"
	"testing"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/verbs"
)

func TestDefaultRoutes(t *testing.T) {
	p := DefaultPolicy(verbs.AtomicHCA, nil)
	cases := []struct {
		o    op.Op
		b    datatype.Basic
		want Route
	}{
		{op.Sum, datatype.Int64, NICFetchAdd},
		{op.Sum, datatype.Uint64, NICFetchAdd},
		{op.Sum, datatype.Int32, Engine},
		{op.Sum, datatype.Float64, Engine},
		{op.Max, datatype.Int64, Engine},
		{op.NoOp, datatype.Float64, NICRead},
		{op.NoOp, datatype.Int64, NICRead},
		{op.NoOp, datatype.Int32, Engine},
		{op.Replace, datatype.Int64, Engine},
	}
	for _, c := range cases {
		if got := p.FetchAndOp(c.o, c.b); got != c.want {
			t.Errorf("FetchAndOp(%v, %v) = %v, want %v", c.o, c.b, got, c.want)
		}
	}
	if got := p.CompareAndSwap(datatype.Int64); got != NICCompareSwap {
		t.Errorf("CompareAndSwap(int64) = %v", got)
	}
	if got := p.CompareAndSwap(datatype.Int32); got != Engine {
		t.Errorf("CompareAndSwap(int32) = %v", got)
	}
	for _, off := range []Policy{DefaultPolicy(verbs.AtomicNone, nil), DefaultPolicy(verbs.AtomicHCA, errors.New("x"))} {
		if got := off.FetchAndOp(op.Sum, datatype.Int64); got != Engine {
			t.Errorf("without NIC atomics: %v", got)
		}
	}
}

func TestProbe(t *testing.T) {
	host := func(add uint64) (uint64, uint64, error) { return ProbeValue, ProbeValue + add, nil }
	if err := Probe(host); err != nil {
		t.Fatalf("host-order NIC refused: %v", err)
	}
	swapped := func(add uint64) (uint64, uint64, error) {
		return bits.ReverseBytes64(ProbeValue), bits.ReverseBytes64(bits.ReverseBytes64(ProbeValue) + add), nil
	}
	if err := Probe(swapped); !errors.Is(err, verbs.ErrNotSupported) {
		t.Fatalf("byte-swapping NIC: got %v, want ErrNotSupported", err)
	}
}
