package coll_test

import (
	"context"
	"fmt"

	"github.com/onesided/rma/coll"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
)

// Every rank contributes a vector; every rank gets the sum, and a prefix
// reduction in rank order with a non-commutative user-defined op.
func Example() {
	ctx := context.Background()
	g, err := group.JoinEnv(ctx) // RMA_RANK, RMA_SIZE, RMA_ADDR, RMA_SECRET
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Close()
	c, err := coll.New(ctx, g)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close(ctx)

	mine := []float64{float64(g.Rank()), 1}
	sum := make([]float64, 2)
	if err := coll.AllreduceOf(ctx, c, mine, sum, op.Sum); err != nil {
		fmt.Println(err)
		return
	}

	// "The first non-zero value": associative, not commutative. Scan
	// gives rank i the first non-zero of ranks 0..i, element by element.
	first, _ := op.Create(func(in, inout []int64) {
		for i, x := range in {
			if x != 0 {
				inout[i] = x
			}
		}
	}, false)
	defer op.Free(first)
	v := []int64{int64(g.Rank() % 2), int64(g.Rank() / 2)}
	prefix := make([]int64, 2)
	if err := coll.ScanOf(ctx, c, v, prefix, first); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(g.Rank(), sum, prefix)
}
