//go:build integration

package test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/onesided/rma"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/service"
	"github.com/onesided/rma/win"
)

// The MCS queue lock of TestConfMCSMutex, written once against the
// rma.Window contract with every word at one target: the tail, the
// counter and the owner word, then each worker's "next" and "blocked"
// words. It runs on a group window's view of rank 0 (every rank a
// worker) and on a service window (workers in one process, two of them
// sharing a Client). Inside the critical section a worker increments the
// counter with Get, +1, Put, Flush, having swapped its id into the owner
// word, which must have held no one (and must hold its id when it
// leaves); mutual exclusion makes the counter exactly workers x
// iterations.

const (
	mcsOneIters   = 100
	mcsOneNil     = -1
	mcsOneTail    = 0 // byte displacements of the int64 words
	mcsOneCounter = 8
	mcsOneOwner   = 16
	mcsOneNodes   = 24 // worker r: next at mcsOneNodes+16r, blocked 8 bytes on
)

func mcsOneNext(r int64) int    { return mcsOneNodes + 16*int(r) }
func mcsOneBlocked(r int64) int { return mcsOneNodes + 16*int(r) + 8 }

// mcsOneReplace stores v at disp with Accumulate(REPLACE) and flushes it.
func mcsOneReplace(ctx context.Context, w rma.Window, v int64, disp int) error {
	if _, err := rma.FetchAndOp(ctx, w, v, disp, op.Replace); err != nil {
		return err
	}
	return w.Flush(ctx)
}

// mcsOneWorker runs worker me's iterations (me >= 1: 0 in the owner word
// is no one); the words start at zero except the tail, which is set to
// nil before any worker starts.
func mcsOneWorker(ctx context.Context, w rma.Window, me int64) error {
	spin := func(disp int, while func(int64) bool) (int64, error) {
		for i := 0; ; i++ {
			v, err := rma.FetchAndOp(ctx, w, int64(0), disp, op.NoOp)
			if err != nil || !while(v) {
				return v, err
			}
			if i > 64 {
				time.Sleep(20 * time.Microsecond) // let the holder's calls through on a 2-CPU guest
			}
		}
	}
	for it := 0; it < mcsOneIters; it++ {
		// Acquire.
		if err := mcsOneReplace(ctx, w, mcsOneNil, mcsOneNext(me)); err != nil {
			return err
		}
		if err := mcsOneReplace(ctx, w, 1, mcsOneBlocked(me)); err != nil {
			return err
		}
		prev, err := rma.FetchAndOp(ctx, w, me, mcsOneTail, op.Replace)
		if err != nil {
			return err
		}
		if prev != mcsOneNil {
			if err := mcsOneReplace(ctx, w, me, mcsOneNext(prev)); err != nil {
				return err
			}
			if _, err := spin(mcsOneBlocked(me), func(v int64) bool { return v == 1 }); err != nil {
				return err
			}
		}
		// The critical section.
		if old, err := rma.FetchAndOp(ctx, w, me, mcsOneOwner, op.Replace); err != nil || old != 0 {
			return fmt.Errorf("iteration %d: worker %d entered while the owner word held %d (%v)", it, me, old, err)
		}
		var b [8]byte
		if err := w.Get(ctx, b[:], mcsOneCounter); err != nil {
			return err
		}
		binary.NativeEndian.PutUint64(b[:], binary.NativeEndian.Uint64(b[:])+1)
		if err := w.Put(ctx, b[:], mcsOneCounter); err != nil {
			return err
		}
		if err := w.Flush(ctx); err != nil {
			return err
		}
		if old, err := rma.FetchAndOp(ctx, w, int64(0), mcsOneOwner, op.Replace); err != nil || old != me {
			return fmt.Errorf("iteration %d: worker %d left and found the owner word %d (%v)", it, me, old, err)
		}
		// Release.
		next, err := rma.FetchAndOp(ctx, w, int64(0), mcsOneNext(me), op.NoOp)
		if err != nil {
			return err
		}
		if next == mcsOneNil {
			old, err := rma.CompareAndSwap(ctx, w, me, mcsOneNil, mcsOneTail)
			if err != nil {
				return err
			}
			if old == me {
				continue
			}
			if next, err = spin(mcsOneNext(me), func(v int64) bool { return v == mcsOneNil }); err != nil {
				return err
			}
		}
		if err := mcsOneReplace(ctx, w, 0, mcsOneBlocked(next)); err != nil {
			return err
		}
	}
	return nil
}

// mcsOneRun runs workers 0..n-1 (ws[r] is worker r's window) and checks
// the counter.
func mcsOneRun(ctx context.Context, ws []rma.Window, ids []int64) error {
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for r := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = mcsOneWorker(ctx, ws[r], ids[r])
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func init() { workers["conf-mcs-one"] = workConfMCSOne }

// workConfMCSOne: every rank a worker on rank 0's window (its Target view).
func workConfMCSOne(ctx context.Context, g *group.Group) error {
	w, err := win.Allocate(ctx, g, mcsOneNodes+16*(g.Size()+1), 1)
	if err != nil {
		return err
	}
	t := w.Target(0)
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	if g.Rank() == 0 {
		if err := mcsOneReplace(ctx, t, mcsOneNil, mcsOneTail); err != nil {
			return err
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	start := time.Now()
	if err := mcsOneRun(ctx, []rma.Window{t}, []int64{int64(g.Rank()) + 1}); err != nil {
		return err
	}
	if err := w.FlushAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	var b [8]byte
	if err := t.Get(ctx, b[:], mcsOneCounter); err != nil {
		return err
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	got, want := int64(binary.NativeEndian.Uint64(b[:])), int64(g.Size()*mcsOneIters)
	fmt.Printf("mcs_one: counter %d of %d in %v\n", got, want, time.Since(start).Round(time.Millisecond))
	if got != want {
		return fmt.Errorf("counter %d after %d ranks x %d locked increments, want %d", got, g.Size(), mcsOneIters, want)
	}
	if err := w.Free(ctx); err != nil {
		return err
	}
	fmt.Println("mcs_one=ok")
	return nil
}

func init() { svcModes["mcs-one"] = svcConfMCSOne }

// svcConfMCSOne: four workers on window "counter", two sharing a Client.
func svcConfMCSOne(ctx context.Context, addr string) error {
	const n = 4
	ws, closeAll, err := svcWorkerWindows(ctx, addr, n)
	if err != nil {
		return err
	}
	defer closeAll()
	ids := make([]int64, n)
	for r := range ids {
		ids[r] = int64(r) + 1
	}
	if err := mcsOneReplace(ctx, ws[0], mcsOneNil, mcsOneTail); err != nil {
		return err
	}
	start := time.Now()
	if err := mcsOneRun(ctx, ws, ids); err != nil {
		return err
	}
	var b [8]byte
	if err := ws[0].Get(ctx, b[:], mcsOneCounter); err != nil {
		return err
	}
	got := int64(binary.NativeEndian.Uint64(b[:]))
	fmt.Printf("mcs_one: counter %d of %d in %v\n", got, n*mcsOneIters, time.Since(start).Round(time.Millisecond))
	if got != n*mcsOneIters {
		return fmt.Errorf("counter %d after %d workers x %d locked increments, want %d", got, n, mcsOneIters, n*mcsOneIters)
	}
	fmt.Println("mcs_one=ok")
	return nil
}

// svcWorkerWindows opens window "counter" for n workers of one process:
// workers 0 and 1 share a Client (their calls in flight together on one
// connection), the others have one each. closeAll closes the clients.
func svcWorkerWindows(ctx context.Context, addr string, n int) (ws []rma.Window, closeAll func(), err error) {
	var cls []*service.Client
	closeAll = func() {
		for _, cl := range cls {
			cl.Close()
		}
	}
	ws = make([]rma.Window, n)
	for r := range n {
		if r == 1 {
			ws[1] = ws[0]
			continue
		}
		cl, err := service.Dial(ctx, addr, svcConfig())
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		cls = append(cls, cl)
		if ws[r], err = cl.Open(ctx, "counter"); err != nil {
			closeAll()
			return nil, nil, err
		}
	}
	return ws, closeAll, nil
}

// TestConfMCSOneTarget runs the MCS lock on a group window, 4 ranks.
func TestConfMCSOneTarget(t *testing.T) {
	outs := newLaunch(t, "conf-mcs-one", 4).run(4 * time.Minute)
	value(t, outs[0], "mcs_one")
}

// TestConfMCSOneTargetService runs it on service windows.
func TestConfMCSOneTargetService(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := newSvcTest(t, ctx)
	srv, addr := s.server("server", 0)
	out := s.client("client", addr, "mcs-one").wait(t, false)
	s.stop(srv)
	if v := value(t, out, "mcs_one"); v != "ok" {
		t.Errorf("mcs_one=%s", v)
	}
}
