package op_test

import (
	"errors"
	"fmt"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
)

// ReduceLocal is one step of a reduction: inout[i] = in[i] o inout[i].
// MINLOC keeps the smaller value and, on equal values, the lower index.
func ExampleReduceLocal() {
	in := []datatype.PairFloat64Int{{V: 1.5, I: 0}, {V: 2, I: 0}, {V: 7, I: 0}}
	inout := []datatype.PairFloat64Int{{V: 3, I: 1}, {V: 2, I: 1}, {V: -1, I: 1}}
	err := op.ReduceLocal(op.Minloc, datatype.Float64Int, datatype.AsBytes(in), datatype.AsBytes(inout))
	fmt.Println(inout, err)
	// Output: [{1.5 0} {2 0} {-1 1}] <nil>
}

// The target side of MPI_Compare_and_swap: the element is replaced only if
// it equals compare, and the old value comes back either way.
func ExampleCompareAndSwap() {
	target := []int32{5}
	old := make([]int32, 1)
	for _, compare := range []int32{4, 5} {
		swapped, err := op.CompareAndSwap(datatype.Int32, datatype.AsBytes(target),
			datatype.AsBytes([]int32{compare}), datatype.AsBytes([]int32{9}), datatype.AsBytes(old))
		fmt.Println(compare, swapped, err, old[0], target[0])
	}
	// Output:
	// 4 false <nil> 5 5
	// 5 true <nil> 5 9
}

// The target side of FetchAndOp and GetAccumulate: the old contents come
// back in result, then the op is applied.
func ExampleApplyFetch() {
	target := []uint64{0b1100, 7}
	result := make([]uint64, 2)
	err := op.ApplyFetch(op.Bxor, datatype.Uint64, datatype.AsBytes(target),
		datatype.AsBytes([]uint64{0b1010, 7}), datatype.AsBytes(result))
	fmt.Printf("%v %04b %d, was %04b %d\n", err, target[0], target[1], result[0], result[1])
	// Output: <nil> 0110 0, was 1100 7
}

// Every error of the package is an *Error that names the op, the datatype
// and the kind of call concerned.
func ExampleError() {
	err := op.Check(op.Replace, datatype.Float64, op.Collective)
	var oe *op.Error
	if errors.As(err, &oe) {
		fmt.Println(oe.Op, oe.Basic, oe.Use, errors.Is(err, op.ErrOpUse))
	}
	// Output: REPLACE float64 a collective true
}
