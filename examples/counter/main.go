// Command counter is a shared counter: every rank adds 1 to an int64 in
// rank 0's window with FetchAndOp(SUM), which the NIC applies with no help
// from rank 0's CPU. Rank 0 prints the total and the latency of one
// FetchAndOp. Run it with the launcher:
//
//	rmarun -n 4 counter [-iters N]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/win"
)

func main() {
	iters := flag.Int("iters", 10000, "FetchAndOp calls per rank")
	flag.Parse()
	if err := run(*iters); err != nil {
		fmt.Fprintln(os.Stderr, "counter:", err)
		os.Exit(1)
	}
}

func run(iters int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	g, err := group.JoinEnv(ctx) // RMA_RANK, RMA_SIZE, RMA_ADDR, RMA_SECRET (rmarun sets them)
	if err != nil {
		return err
	}
	defer g.Close()
	w, err := win.Allocate(ctx, g, 8, 8)
	if err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	lat := make([]time.Duration, iters)
	var last int64
	start := time.Now()
	for i := range lat {
		t := time.Now()
		if last, err = win.FetchAndOp(ctx, w, int64(1), 0, 0, op.Sum); err != nil {
			return err
		}
		lat[i] = time.Since(t)
	}
	elapsed := time.Since(start)
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	fmt.Printf("rank %d on %s: %d adds in %v, last old value %d, FetchAndOp median %.1f us\n",
		g.Rank(), g.Device(), iters, elapsed.Round(time.Millisecond), last, us(lat[len(lat)/2]))
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if g.Rank() == 0 {
		if err := w.LockAll(ctx); err != nil {
			return err
		}
		total, err := win.FetchAndOp(ctx, w, int64(0), 0, 0, op.NoOp)
		if err != nil {
			return err
		}
		if err := w.UnlockAll(ctx); err != nil {
			return err
		}
		want := int64(iters * g.Size())
		fmt.Printf("total %d (expected %d): %s\n", total, want, map[bool]string{true: "correct", false: "WRONG"}[total == want])
		fmt.Printf("FetchAndOp(SUM, int64) latency: median %.1f us, min %.1f us, p99 %.1f us (rank 0, %d calls while %d ranks add at once)\n",
			us(lat[len(lat)/2]), us(lat[0]), us(lat[len(lat)*99/100]), iters, g.Size())
		if total != want {
			w.Free(ctx)
			return fmt.Errorf("total %d, want %d", total, want)
		}
	}
	return w.Free(ctx)
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
