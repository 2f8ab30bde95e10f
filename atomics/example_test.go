package atomics_test

import (
	"errors"
	"fmt"

	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/verbs"
)

// MPI's default (same_op_no_op) on a window whose ranks all have usable
// NIC atomics: every predefined op on a 64-bit integer goes to the NIC, so
// that ops mixed on one word stay atomic; everything else to the target's
// engine. Without NIC atomics, everything goes to the engine.
func ExampleDefaultPolicy() {
	p := atomics.DefaultPolicy(true)
	fmt.Println(p.FetchAndOp(op.Sum, datatype.Int64))
	fmt.Println(p.FetchAndOp(op.Replace, datatype.Uint64))
	fmt.Println(p.FetchAndOp(op.NoOp, datatype.Int64))
	fmt.Println(p.CompareAndSwap(datatype.Int64))
	fmt.Println(p.FetchAndOp(op.Sum, datatype.Float64), p.FetchAndOp(op.Sum, datatype.Int32))
	fmt.Println(atomics.DefaultPolicy(false).FetchAndOp(op.Sum, datatype.Int64))
	// Output:
	// nic-fetch-add
	// nic-compare-swap-loop
	// nic-read
	// nic-compare-swap
	// engine engine
	// engine
}

// A window that declares its ops (MPICH's which_accumulate_ops): if the NIC
// can do every declared pair they go to the NIC; one pair it cannot do
// sends every accumulate to the engine, so that they may share locations.
// Undeclared ops are refused (NO_OP is always allowed).
func ExampleDeclaredPolicy() {
	nic := atomics.DeclaredPolicy(true, []atomics.Pair{{Op: op.Sum, Basic: datatype.Int64}})
	fmt.Println(nic.FetchAndOp(op.Sum, datatype.Int64), nic.Declared(op.Max, datatype.Int64), nic.Declared(op.NoOp, datatype.Int64))
	mixed := atomics.DeclaredPolicy(true, []atomics.Pair{
		{Op: op.Sum, Basic: datatype.Int64},
		{Op: op.Sum, Basic: datatype.Float64},
	})
	fmt.Println(mixed.FetchAndOp(op.Sum, datatype.Int64), mixed.UsesNIC())
	// Output:
	// nic-fetch-add false true
	// engine false
}

// any_op: every accumulate goes through the target's engine.
func ExampleAnyOpPolicy() {
	p := atomics.AnyOpPolicy()
	fmt.Println(p.FetchAndOp(op.Sum, datatype.Int64), p.Declared(op.Band, datatype.Uint8))
	// Output: engine true
}

// A device's remote atomics are used only if it reports them and the
// start-up probe found them in host byte order.
func ExampleUsable() {
	fmt.Println(atomics.Usable(verbs.AtomicHCA, nil))
	fmt.Println(atomics.Usable(verbs.AtomicNone, nil))
	fmt.Println(atomics.Usable(verbs.AtomicGlob, errors.New("probe failed")))
	// Output:
	// true
	// false
	// false
}

// Probe with a fetch-and-add that works in host byte order, and with one
// that byte-swaps (as a NIC in the wrong endianness would).
func ExampleProbe() {
	word := uint64(atomics.ProbeValue)
	good := func(add uint64) (uint64, uint64, error) {
		old := word
		word += add
		return old, word, nil
	}
	fmt.Println(atomics.Probe(good))
	swapped := func(add uint64) (uint64, uint64, error) {
		v := uint64(atomics.ProbeValue)
		old := v>>56 | v>>40&0xff00 | v>>24&0xff0000 | v>>8&0xff000000 |
			v<<8&0xff00000000 | v<<24&0xff0000000000 | v<<40&0xff000000000000 | v<<56
		return old, old + add, nil
	}
	err := atomics.Probe(swapped)
	fmt.Println(errors.Is(err, verbs.ErrNotSupported))
	// Output:
	// <nil>
	// true
}
