package win_test

import (
	"context"
	"fmt"
	"log"

	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/win"
)

// Typed RMA on Go slices: rank 0 writes float64 values into rank 1's
// window, adds to them, and reads them back, with no conversion to bytes.
func ExamplePutSlice() {
	ctx := context.Background()
	var g *group.Group // from group.Join
	w, err := win.CreateSlice(ctx, g, make([]float64, 16))
	if err != nil {
		log.Fatal(err)
	}
	defer w.Free(ctx)
	if g.Rank() == 0 {
		if err := w.Lock(ctx, win.LockExclusive, 1, 0); err != nil {
			log.Fatal(err)
		}
		// Displacements are in the window's unit: here, float64 elements.
		if err := win.PutSlice(ctx, w, []float64{1.5, 2.5, 3.5}, 1, 4); err != nil {
			log.Fatal(err)
		}
		if err := w.Flush(ctx, 1); err != nil {
			log.Fatal(err)
		}
		if err := win.AccumulateSlice(ctx, w, []float64{10, 10, 10}, 1, 4, op.Sum); err != nil {
			log.Fatal(err)
		}
		got := make([]float64, 3)
		// NO_OP reads atomically with respect to other accumulates.
		if err := win.GetAccumulateSlice(ctx, w, nil, got, 1, 4, op.NoOp); err != nil {
			log.Fatal(err)
		}
		if err := w.Unlock(ctx, 1); err != nil {
			log.Fatal(err)
		}
		fmt.Println(got) // [11.5 12.5 13.5]
	}
}

// Request-based reads from every rank, completed together: Waitall
// returns once each buffer holds its rank's values.
func ExampleWaitall() {
	ctx := context.Background()
	var g *group.Group // from group.Join
	w, err := win.CreateSlice(ctx, g, make([]int32, 1024))
	if err != nil {
		log.Fatal(err)
	}
	defer w.Free(ctx)
	if err := w.LockAll(ctx); err != nil {
		log.Fatal(err)
	}
	bufs := make([][]byte, g.Size())
	reqs := make([]*win.Request, g.Size())
	for t := range reqs {
		bufs[t] = make([]byte, 4*1024)
		if reqs[t], err = w.RGet(ctx, bufs[t], t, 0); err != nil {
			log.Fatal(err)
		}
	}
	if err := win.Waitall(ctx, reqs); err != nil {
		log.Fatal(err) // joins a *win.RequestError per failed request
	}
	if err := w.UnlockAll(ctx); err != nil {
		log.Fatal(err)
	}
}
