//go:build integration

package test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/win"
)

func init() { workers["cancel-slots"] = workCancelSlots }

// workCancelSlots: with two work-request slots kept busy by 4 MiB Gets,
// Accumulates through the engine with contexts of 50 to 250 us end while
// they wait for a slot; each returns its context's error, and the Flush
// after it, with a live context, must not return that error again.
func workCancelSlots(ctx context.Context, g *group.Group) error {
	w, err := win.Allocate(ctx, g, 4<<20, 8)
	if err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	if g.Rank() == 0 {
		var stop atomic.Bool
		getErr := make(chan error, 1)
		go func() { // keeps the slots busy
			buf := make([]byte, 4<<20)
			for !stop.Load() {
				if err := w.Get(ctx, buf, 1, 0); err != nil {
					getErr <- err
					return
				}
			}
			getErr <- nil
		}()
		cancelled := 0
		var stale error
		for i := 0; i < 300 && cancelled < 10 && stale == nil; i++ {
			actx, acancel := context.WithTimeout(ctx, time.Duration(50+i%200)*time.Microsecond)
			err := win.AccumulateSlice(actx, w, []float64{1}, 1, 8, op.Sum)
			acancel()
			if err == nil {
				continue
			}
			cancelled++
			fctx, fcancel := context.WithTimeout(ctx, 10*time.Second)
			if ferr := w.Flush(fctx, 1); ferr != nil {
				stale = fmt.Errorf("Accumulate %d returned %v, then Flush with a live context returned %v", i, err, ferr)
			}
			fcancel()
		}
		stop.Store(true)
		if err := <-getErr; err != nil {
			return fmt.Errorf("Get: %w", err)
		}
		if stale != nil {
			return stale
		}
		fmt.Printf("cancelled=%d\n", cancelled)
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	fmt.Println("cancelslots=ok")
	return w.Free(ctx)
}

func TestCancelWaitingForSlot(t *testing.T) {
	l := newLaunch(t, "cancel-slots", 2, "RMA_SLOTS=2")
	outs := l.run(2 * time.Minute)
	if n, _ := strconv.Atoi(value(t, outs[0], "cancelled")); n == 0 {
		t.Error("no Accumulate was cancelled while it waited for a slot: the case was not tried")
	}
	finished(t, outs, "cancelslots")
	t.Logf("%s Accumulates cancelled, no Flush after them failed", value(t, outs[0], "cancelled"))
}
