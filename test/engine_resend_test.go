//go:build integration

package test

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/onesided/rma/group"
	"github.com/onesided/rma/internal/fabric"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/win"
)

func init() { workers["engineresend"] = workEngineResend }

const (
	resendFaults  = 12  // replies rank 1 loses with their connection
	resendWorkers = 4   // rank 0's goroutines
	resendCalls   = 150 // per goroutine: a FetchAndOp and an Accumulate each
)

// workEngineResend (2 ranks): rank 1's engine applies requests and, for
// the first resendFaults of them it serves, fails the connection instead
// of sending the reply (fabric.FailReplies), as a connection that fails
// while replies are on the wire would. Rank 0's goroutines meanwhile do
// int32 FetchAndOp SUM 1 and Accumulate SUM 1 through rank 1's engine. The
// requests cut short are sent again on the re-established connection, and
// rank 1 applies each once: every call succeeds, the FetchAndOps return
// every old value from 0 exactly once, and both counters end at the number
// of calls.
func workEngineResend(ctx context.Context, g *group.Group) error {
	me := g.Rank()
	f := fabric.OfGroup(g)
	w, err := win.Allocate(ctx, g, 64, 1)
	if err != nil {
		return err
	}
	if me == 1 {
		f.FailReplies(resendFaults)
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	const n = resendWorkers * resendCalls
	if me == 0 {
		if err := w.Lock(ctx, win.LockShared, 1, 0); err != nil {
			return err
		}
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			first error
			seen  = make([]int, n)
		)
		fail := func(err error) {
			mu.Lock()
			if first == nil {
				first = err
			}
			mu.Unlock()
		}
		start := time.Now()
		for i := 0; i < resendWorkers; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; k < resendCalls; k++ {
					cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
					old, err := win.FetchAndOp(cctx, w, int32(1), 1, 0, op.Sum)
					if err == nil {
						err = win.AccumulateSlice(cctx, w, []int32{1}, 1, 4, op.Sum)
					}
					cancel()
					if err != nil {
						fail(fmt.Errorf("goroutine %d call %d: %w", i, k, err))
						return
					}
					if old < 0 || int(old) >= n {
						fail(fmt.Errorf("goroutine %d call %d: FetchAndOp returned %d, want 0 to %d", i, k, old, n-1))
						return
					}
					mu.Lock()
					seen[old]++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if first != nil {
			stacks()
			return first
		}
		if err := w.Flush(ctx, 1); err != nil {
			return err
		}
		for v, c := range seen {
			if c != 1 {
				return fmt.Errorf("FetchAndOp returned old value %d %d times, want once", v, c)
			}
		}
		var b [8]byte
		if err := w.Get(ctx, b[:], 1, 0); err != nil {
			return err
		}
		if err := w.Unlock(ctx, 1); err != nil {
			return err
		}
		fa, acc := int32(binary.NativeEndian.Uint32(b[:])), int32(binary.NativeEndian.Uint32(b[4:]))
		fmt.Printf("rank 0: %d FetchAndOps and %d Accumulates in %v; counters %d and %d\n", n, n, time.Since(start).Round(time.Millisecond), fa, acc)
		if fa != n || acc != n {
			return fmt.Errorf("counters %d (FetchAndOp) and %d (Accumulate), want %d each", fa, acc, n)
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if me == 1 {
		left := f.RepliesToFail()
		fmt.Printf("rank 1: %d replies lost with their connections\n", resendFaults-left)
		if left != 0 {
			return fmt.Errorf("%d of the %d replies to lose were not served", left, resendFaults)
		}
	}
	if err := w.Free(ctx); err != nil {
		return err
	}
	fmt.Println("engineresend=ok")
	return nil
}

// TestEngineResendAppliedOnce: engine requests cut short by a connection
// failure after the target applied them are sent again and not applied
// twice; see workEngineResend.
func TestEngineResendAppliedOnce(t *testing.T) {
	l := newLaunch(t, "engineresend", 2)
	finished(t, l.run(3*time.Minute), "engineresend")
}
