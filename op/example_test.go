package op_test

import (
	"errors"
	"fmt"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
)

// An accumulate with SUM, as the target engine applies it.
func ExampleApply() {
	target := []int64{10, 20, 30}
	origin := []int64{1, 2, 3}
	if err := op.Apply(op.Sum, datatype.Int64, datatype.AsBytes(target), datatype.AsBytes(origin)); err != nil {
		fmt.Println(err)
	}
	fmt.Println(target)
	// Output: [11 22 33]
}

// MAXLOC on value-index pairs keeps the lower index on ties.
func ExampleApply_maxloc() {
	target := []datatype.PairFloat64Int{{V: 2.5, I: 7}, {V: 1, I: 0}}
	origin := []datatype.PairFloat64Int{{V: 2.5, I: 3}, {V: 4, I: 9}}
	op.Apply(op.Maxloc, datatype.Float64Int, datatype.AsBytes(target), datatype.AsBytes(origin))
	fmt.Println(target)
	// Output: [{2.5 3} {4 9}]
}

// The rules of MPI are checked before anything is sent.
func ExampleCheck() {
	fmt.Println(op.Check(op.Sum, datatype.Float64, op.Accumulate))
	err := op.Check(op.Maxloc, datatype.Float64, op.Accumulate)
	fmt.Println(err, errors.Is(err, op.ErrOpDatatype))
	err = op.Check(op.NoOp, datatype.Int32, op.Accumulate)
	fmt.Println(err, errors.Is(err, op.ErrOpUse))
	// Output:
	// <nil>
	// op: MAXLOC is not defined on float64 (MPI defines it on value-index pairs only) true
	// op: NO_OP cannot be used in Accumulate (MPI allows it only in GetAccumulate and FetchAndOp) true
}

// A GetAccumulate with a strided target datatype: the old values come back
// packed, the window is updated in place.
func ExampleApplyType() {
	window := make([]float64, 8)
	every2nd, _ := datatype.Vector(4, 1, 2, datatype.Float64.Type())
	origin := []float64{1, 2, 3, 4}
	old := make([]float64, 4)
	err := op.ApplyType(op.Replace, every2nd, 1, datatype.AsBytes(window), 0,
		datatype.AsBytes(origin), datatype.AsBytes(old))
	fmt.Println(window, old, err)
	// Output: [1 0 2 0 3 0 4 0] [0 0 0 0] <nil>
}
