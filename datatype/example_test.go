package datatype_test

import (
	"errors"
	"fmt"

	"github.com/onesided/rma/datatype"
)

// A column of a 4×5 row-major matrix of float64.
func ExampleVector() {
	col, err := datatype.Vector(4, 1, 5, datatype.Float64.Type())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(col.Count(), col.Size(), col.Extent(), col.Overlaps())
	fmt.Println(col.Blocks())
	// Output:
	// 4 32 128 false
	// [{0 1} {40 1} {80 1} {120 1}]
}

// The MAPVALS example of the MPI standard builds, per target process, an
// indexed block datatype selecting the elements to get.
func ExampleIndexedBlock() {
	mapvals, _ := datatype.IndexedBlock(1, []int{7, 2, 3, 9}, datatype.Int32.Type())
	fmt.Println(mapvals.Blocks())
	fmt.Println(mapvals.LB(), mapvals.Extent())
	// The target region must lie inside the window (here 10 int32).
	fmt.Println(mapvals.Fits(1, 40, 0))
	err := mapvals.Fits(1, 36, 0)
	fmt.Println(errors.Is(err, datatype.ErrOutOfRange))
	// Output:
	// [{28 1} {8 2} {36 1}]
	// 8 32
	// <nil>
	// true
}

// A 2×3 block of a 4×6 row-major array, sent over the network as a
// compact encoding.
func ExampleSubarray() {
	sub, _ := datatype.Subarray([]int{4, 6}, []int{2, 3}, []int{1, 2}, datatype.OrderC, datatype.Uint8.Type())
	fmt.Println(sub.Blocks(), sub.Extent())
	enc, _ := sub.MarshalBinary()
	back, err := datatype.Unmarshal(enc)
	fmt.Println(len(enc), back.Equal(sub), err)
	// Output:
	// [{8 3} {14 3}] 24
	// 11 true <nil>
}
