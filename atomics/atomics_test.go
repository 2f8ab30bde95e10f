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
	p := DefaultPolicy(true)
	cases := []struct {
		o    op.Op
		b    datatype.Basic
		want Route
	}{
		{op.Sum, datatype.Int64, NICFetchAdd},
		{op.Sum, datatype.Uint64, NICFetchAdd},
		{op.Sum, datatype.Int32, Engine},
		{op.Sum, datatype.Float64, Engine},
		{op.NoOp, datatype.Float64, Engine}, // the engine's element, not torn by a READ
		{op.NoOp, datatype.Float32Int, Engine},
		{op.NoOp, datatype.Uint64, NICRead},
		{op.NoOp, datatype.Int64, NICRead},
		{op.NoOp, datatype.Int32, Engine},
		{op.Replace, datatype.Float64, Engine},
		{op.Max, datatype.Int32, Engine},
		{op.Maxloc, datatype.Int64Int, Engine},
		{op.FirstUser, datatype.Int64, NICCompareSwapLoop}, // applied by the origin, like MAX
		{op.FirstUser, datatype.Float64, Engine},
	}
	// Every predefined op MPI defines on integers is a NIC operation on a
	// 64-bit integer of a default window, so that ops mixed on one word
	// stay atomic with each other.
	for _, o := range []op.Op{op.Replace, op.Min, op.Max, op.Prod, op.Land, op.Lor, op.Lxor, op.Band, op.Bor, op.Bxor} {
		for _, b := range []datatype.Basic{datatype.Int64, datatype.Uint64} {
			cases = append(cases, struct {
				o    op.Op
				b    datatype.Basic
				want Route
			}{o, b, NICCompareSwapLoop})
		}
	}
	// NO_OP reads with the NIC only the words the NIC alone writes: on
	// every other type it goes where that type's other ops go.
	for _, b := range datatype.Basics() {
		want := Engine
		if b == datatype.Int64 || b == datatype.Uint64 {
			want = NICRead
		}
		cases = append(cases, struct {
			o    op.Op
			b    datatype.Basic
			want Route
		}{op.NoOp, b, want})
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
	off := DefaultPolicy(false)
	for _, o := range []op.Op{op.Sum, op.Replace, op.NoOp} {
		if got := off.FetchAndOp(o, datatype.Int64); got != Engine {
			t.Errorf("without NIC atomics: %v int64 goes to %v", o, got)
		}
	}
	if got := off.CompareAndSwap(datatype.Int64); got != Engine {
		t.Errorf("without NIC atomics: CompareAndSwap goes to %v", got)
	}
}

func TestUsable(t *testing.T) {
	if !Usable(verbs.AtomicHCA, nil) || !Usable(verbs.AtomicGlob, nil) {
		t.Error("a device with atomics that passed the probe is not usable")
	}
	if Usable(verbs.AtomicNone, nil) || Usable(verbs.AtomicHCA, errors.New("byte order")) {
		t.Error("a device without atomics, or that failed the probe, is usable")
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

func TestDeclaredAndAnyOpRoutes(t *testing.T) {
	nicOnly := DeclaredPolicy(true, []Pair{{op.Sum, datatype.Int64}, {op.Max, datatype.Int64}})
	if r := nicOnly.FetchAndOp(op.Max, datatype.Int64); r != NICCompareSwapLoop {
		t.Errorf("declared NIC-capable MAX int64: %v", r)
	}
	if r := nicOnly.Accumulate(op.Sum, datatype.Int64); r != NICFetchAdd {
		t.Errorf("declared SUM int64: %v", r)
	}
	if !nicOnly.Declared(op.Max, datatype.Int64) || nicOnly.Declared(op.Min, datatype.Int64) || !nicOnly.Declared(op.NoOp, datatype.Float64) {
		t.Error("Declared does not follow the declaration")
	}
	mixed := DeclaredPolicy(true, []Pair{{op.Sum, datatype.Int64}, {op.Max, datatype.Float64}})
	for _, c := range []struct {
		o op.Op
		b datatype.Basic
	}{{op.Sum, datatype.Int64}, {op.Max, datatype.Float64}, {op.NoOp, datatype.Int64}} {
		if r := mixed.FetchAndOp(c.o, c.b); r != Engine {
			t.Errorf("window mixing NIC and engine pairs sends %v %v to %v", c.o, c.b, r)
		}
	}
	if r := mixed.CompareAndSwap(datatype.Int64); r != Engine {
		t.Errorf("CAS on a mixed window: %v", r)
	}
	anyOp := AnyOpPolicy()
	if r := anyOp.FetchAndOp(op.Sum, datatype.Int64); r != Engine {
		t.Errorf("any-op SUM int64: %v", r)
	}
}
