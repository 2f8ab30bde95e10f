package win_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/win"
)

// A shared counter in rank 0's window: every rank adds 1 with a NIC
// fetch-and-add, without rank 0's CPU taking part. Run it with
// `rmarun -n 4 prog`.
func Example_counter() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g, err := group.JoinEnv(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()
	w, err := win.Allocate(ctx, g, 8, 8)
	if err != nil {
		log.Fatal(err)
	}
	defer w.Free(ctx)
	if err := w.LockAll(ctx); err != nil {
		log.Fatal(err)
	}
	old, err := win.FetchAndOp(ctx, w, int64(1), 0, 0, op.Sum)
	if err != nil {
		log.Fatal(err)
	}
	if err := w.UnlockAll(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("the counter was", old)
}

// Accumulate with derived datatypes inside a fence epoch: every second
// float64 of the origin is added to a block of rank 0's window.
func ExampleWindow_AccumulateTo() {
	ctx := context.Background()
	var g *group.Group // from group.Join
	w, err := win.CreateSlice(ctx, g, make([]float64, 100))
	if err != nil {
		log.Fatal(err)
	}
	f64 := datatype.Float64.Type()
	every2nd, _ := datatype.Vector(10, 1, 2, f64)
	origin := make([]float64, 20)
	if err := w.Fence(ctx, win.NoPrecede); err != nil {
		log.Fatal(err)
	}
	err = w.AccumulateTo(ctx,
		win.Buffer{Data: datatype.AsBytes(origin), Type: every2nd, Count: 1},
		win.Region{Rank: 0, Disp: 40, Type: f64, Count: 10}, op.Sum)
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Fence(ctx, win.NoSucceed); err != nil {
		log.Fatal(err)
	}
}

// Which path an operation takes on a window.
func ExampleWindow_Route() {
	var w *win.Window                              // from win.Allocate
	fmt.Println(w.Route(op.Sum, datatype.Int64))   // nic-fetch-add
	fmt.Println(w.Route(op.Max, datatype.Float64)) // engine
}
