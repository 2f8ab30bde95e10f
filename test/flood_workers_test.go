//go:build integration

package test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/win"
)

func init() { workers["flood"] = workFlood }

// Flood sizes: floodGoroutines per rank, each floodCalls GetAccumulates of
// floodElems float64 (64000 bytes, several active messages each, with
// replies as long) to the other ranks in turn.
const (
	floodGoroutines = 8
	floodCalls      = 12
	floodElems      = 8000
)

// workFlood: every rank's goroutines do GetAccumulate(SUM) of 1s into
// their own region of every other rank's window at once, so that the
// engines reply to each other with long replies while their requests keep
// coming; run with few receive buffers (RMA_RECV_BUFFERS=1), the peers'
// NICs must retry (RNR) and the calls be slower, none fail. Each region
// must then hold, in every element, the number of calls its origin made
// to it.
func workFlood(ctx context.Context, g *group.Group) error {
	me, n := g.Rank(), g.Size()
	w, err := win.Allocate(ctx, g, n*floodElems*8, 8)
	if err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	start := time.Now()
	errs := make([]error, floodGoroutines)
	var wg sync.WaitGroup
	for gi := range floodGoroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			src, res := make([]float64, floodElems), make([]float64, floodElems)
			for i := range src {
				src[i] = 1
			}
			for i := range floodCalls {
				t := floodTarget(me, n, gi, i)
				if err := win.GetAccumulateSlice(ctx, w, src, res, t, me*floodElems, op.Sum); err != nil {
					errs[gi] = fmt.Errorf("goroutine %d call %d to rank %d after %v: %w", gi, i, t, time.Since(start).Round(time.Millisecond), err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	took := time.Since(start)
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	v, _ := datatype.View[float64](w.Bytes())
	for o := range n {
		want := 0
		for gi := range floodGoroutines {
			for i := range floodCalls {
				if floodTarget(o, n, gi, i) == me {
					want++
				}
			}
		}
		for i, x := range v[o*floodElems : (o+1)*floodElems] {
			if x != float64(want) {
				return fmt.Errorf("region of rank %d, element %d: %v, want %d", o, i, x, want)
			}
		}
	}
	fmt.Printf("flood_ms=%d\nflood=ok\n", took.Milliseconds())
	return w.Free(ctx)
}

// floodTarget is the target of call i of goroutine gi of rank me.
func floodTarget(me, n, gi, i int) int { return (me + 1 + (gi+i)%(n-1)) % n }
