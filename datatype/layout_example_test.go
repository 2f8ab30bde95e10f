package datatype_test

import (
	"fmt"

	"github.com/onesided/rma/datatype"
)

// Go slices as window memory and back: AsBytes and View copy nothing, Of
// names the predefined datatype of a Go type.
func ExampleView() {
	vals := []int32{1, -2, 3}
	b := datatype.AsBytes(vals)
	back, err := datatype.View[int32](b)
	fmt.Println(len(b), back, err, datatype.Of[int32](), datatype.Of[int32]().MPIName())
	_, err = datatype.View[int64](b) // 12 bytes are not a whole number of int64
	fmt.Println(err != nil)
	// Output:
	// 12 [1 -2 3] <nil> int32 MPI_INT32_T
	// true
}

// AppendPack gathers the elements a datatype selects (MPI_Pack), Unpack
// scatters them back (MPI_Unpack): here the diagonal of a 3×3 matrix.
func ExampleAppendPack() {
	m := []float64{
		1, 2, 3,
		4, 5, 6,
		7, 8, 9,
	}
	diag, _ := datatype.Vector(3, 1, 4, datatype.Float64.Type())
	packed, err := datatype.AppendPack(nil, datatype.AsBytes(m), 1, diag)
	if err != nil {
		fmt.Println(err)
		return
	}
	d, _ := datatype.View[float64](packed)
	fmt.Println(d)
	out := make([]float64, 9)
	fmt.Println(datatype.Unpack(datatype.AsBytes(out), packed, 1, diag), out)
	// Output:
	// [1 5 9]
	// <nil> [1 0 0 0 5 0 0 0 9]
}

// Resized changes a type's extent, and so where consecutive instances
// start: one float64 resized to 24 bytes picks every third element.
func ExampleResized() {
	every3rd, _ := datatype.Resized(datatype.Float64.Type(), 0, 24)
	fmt.Println(every3rd.Size(), every3rd.Extent())
	lo, hi, err := every3rd.Bounds(4) // 4 instances: elements 0, 3, 6 and 9
	fmt.Println(lo, hi, err, every3rd.Fits(4, 80, 0))
	// Output:
	// 8 24
	// 0 80 <nil> <nil>
}

// The origin and target of an RMA call must have the same type signature:
// the same basic type, the same number of elements, whatever the layouts.
func ExampleSameSignature() {
	col, _ := datatype.Vector(4, 1, 5, datatype.Float64.Type())
	fmt.Println(datatype.SameSignature(1, col, 4, datatype.Float64.Type()))
	fmt.Println(datatype.SameSignature(1, col, 4, datatype.Float32.Type()))
	fmt.Println(datatype.SameSignature(0, col, 0, datatype.Int8.Type())) // empty signatures match
	// Output:
	// true
	// false
	// true
}
