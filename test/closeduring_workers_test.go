//go:build integration

package test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/verbs"
	"github.com/onesided/rma/win"
)

func init() { workers["closeduring"] = workCloseDuring }

// workCloseDuring: while goroutines make every kind of call to the other
// rank (NIC atomics, READs, WRITEs of a MiB, engine accumulates and a Get
// through the engine, flushes), the group is closed under them (a misuse:
// windows go first). Every call must then return an error matching
// verbs.ErrClosed or ErrPeerLost (the peer closes too) within seconds; the
// process must not crash.
func workCloseDuring(ctx context.Context, g *group.Group) error {
	w, err := win.Allocate(ctx, g, 2<<20, 1, win.PackSmallBlocks())
	if err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	peer := 1 - g.Rank()
	vec, err := datatype.Vector(500, 1, 2, datatype.Int32.Type())
	if err != nil {
		return err
	}
	calls := []struct {
		name string
		f    func(ctx context.Context) error
	}{
		{"FetchAndOp", func(ctx context.Context) error {
			_, err := win.FetchAndOp(ctx, w, int64(1), peer, 0, op.Sum)
			return err
		}},
		{"Get", func(ctx context.Context) error { return w.Get(ctx, make([]byte, 64), peer, 64) }},
		{"Put of 1 MiB and Flush", func(ctx context.Context) error {
			if err := w.Put(ctx, make([]byte, 1<<20), peer, 1<<20); err != nil {
				return err
			}
			return w.Flush(ctx, peer)
		}},
		{"Accumulate and Flush", func(ctx context.Context) error {
			if err := w.Accumulate(ctx, make([]byte, 64), datatype.Float64, peer, 128, op.Sum); err != nil {
				return err
			}
			return w.Flush(ctx, peer)
		}},
		{"GetTo through the engine", func(ctx context.Context) error {
			return w.GetTo(ctx, win.Buffer{Data: make([]byte, 2000), Type: datatype.Int32.Type(), Count: 500},
				win.Region{Rank: peer, Disp: 4096, Type: vec, Count: 1})
		}},
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	type outcome struct {
		n    int
		err  error
		took time.Duration
	}
	outs := make([]outcome, len(calls))
	succeeded := make([]atomic.Int64, len(calls))
	var closedAt time.Time
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				if err := safely(func() error { return c.f(cctx) }); err != nil {
					mu.Lock()
					outs[i] = outcome{n, err, time.Since(closedAt)}
					mu.Unlock()
					return
				}
				succeeded[i].Add(1)
			}
		}()
	}
	// Close once every kind of call has succeeded on both ranks (a Put of
	// a MiB takes a while on an emulated host), and at least 300 ms in.
	dir, me := os.Getenv("RMA_TEST_DIR"), g.Rank()
	time.Sleep(300 * time.Millisecond)
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		all := true
		for i := range succeeded {
			all = all && succeeded[i].Load() > 0
		}
		if all {
			break
		}
	}
	os.WriteFile(filepath.Join(dir, fmt.Sprintf("called.%d", me)), nil, 0o644)
	wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
	waitFile(wctx, filepath.Join(dir, fmt.Sprintf("called.%d", peer)))
	wcancel()
	mu.Lock()
	closedAt = time.Now()
	mu.Unlock()
	cerr := g.Close()
	fmt.Printf("Close under %d goroutines' calls: %v\n", len(calls), cerr)
	wg.Wait()
	var bad []error
	for i, o := range outs {
		fmt.Printf("%s: %d calls, then %v (%v after Close began)\n", calls[i].name, o.n, o.err, o.took.Round(time.Millisecond))
		if !errors.Is(o.err, verbs.ErrClosed) && !errors.Is(o.err, win.ErrPeerLost) {
			bad = append(bad, fmt.Errorf("%s: %v, want an error matching verbs.ErrClosed or win.ErrPeerLost", calls[i].name, o.err))
		}
		if o.n == 0 {
			bad = append(bad, fmt.Errorf("%s: no call succeeded before Close", calls[i].name))
		}
	}
	// Free, after the group: it fails, and releases this rank's part.
	if err := w.Free(cctx); !errors.Is(err, verbs.ErrClosed) {
		bad = append(bad, fmt.Errorf("Free after the group's Close: %v, want an error matching verbs.ErrClosed", err))
	}
	if err := errors.Join(bad...); err != nil {
		return err
	}
	fmt.Println("closeduring=ok")
	return nil
}

func init() { workers["reqclose"] = workReqClose }

// workReqClose: requests whose replies can no longer come complete, with
// an error, by Test and Waitany as by Wait. Rank 1 stops itself (SIGSTOP),
// so that its engine answers nothing; rank 0 starts an RGetTo of many
// small blocks (its window made with PackSmallBlocks) and two
// RGetAccumulates to it, all through rank 1's engine, closes its group, and then completes them: the first by calling Test
// until it reports done, the others by Waitany. Then it resumes rank 1
// (SIGCONT), which frees what it has and finishes.
func workReqClose(ctx context.Context, g *group.Group) error {
	w, err := win.Allocate(ctx, g, 8<<20, 1, win.PackSmallBlocks())
	if err != nil {
		return err
	}
	pids, err := g.AllGather(ctx, binary.NativeEndian.AppendUint64(nil, uint64(os.Getpid())))
	if err != nil {
		return err
	}
	if g.Rank() == 0 {
		if err := w.LockAll(ctx); err != nil {
			return err
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if g.Rank() == 1 {
		syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		// Resumed by rank 0 after its Close: rank 0 is gone.
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		fmt.Printf("Free after the peer closed its group: %v\n", w.Free(fctx))
		fmt.Println("reqclose=ok")
		return nil
	}
	time.Sleep(300 * time.Millisecond) // rank 1 has stopped
	i32 := datatype.Int32.Type()
	vec, err := datatype.Vector(100, 1, 2, i32)
	if err != nil {
		return err
	}
	// RDMA READs need no engine: this one may or may not be done at Close.
	// (It goes first: with accumulate ordering an RGet waits for the
	// engine requests before it.)
	rg, err := w.RGet(ctx, make([]byte, 4<<20), 1, 4<<20)
	if err != nil {
		return fmt.Errorf("RGet: %w", err)
	}
	var reqs []*win.Request
	r, err := w.RGetTo(ctx, win.Buffer{Data: make([]byte, 400), Type: i32, Count: 100}, win.Region{Rank: 1, Type: vec, Count: 1})
	if err != nil {
		return fmt.Errorf("RGetTo: %w", err)
	}
	reqs = append(reqs, r)
	f64 := datatype.Float64.Type()
	for k := 0; k < 2; k++ {
		r, err := w.RGetAccumulate(ctx, win.Buffer{Data: make([]byte, 8), Type: f64, Count: 1}, win.Buffer{Data: make([]byte, 8), Type: f64, Count: 1},
			win.Region{Rank: 1, Disp: 1024 + 8*k, Type: f64, Count: 1}, op.Sum)
		if err != nil {
			return fmt.Errorf("RGetAccumulate: %w", err)
		}
		reqs = append(reqs, r)
	}
	if done, err := reqs[0].Test(); done {
		return fmt.Errorf("RGetTo done (%v) while its target is stopped", err)
	}

	fmt.Printf("Close with 3 requests in flight: %v\n", g.Close())
	var bad []error
	start := time.Now()
	calls := 0
	for ; calls < 100000 && time.Since(start) < 10*time.Second; calls++ {
		if done, err := reqs[0].Test(); done {
			fmt.Printf("Test: done after %d calls (%v): %v\n", calls+1, time.Since(start).Round(time.Millisecond), err)
			if !errors.Is(err, verbs.ErrClosed) {
				bad = append(bad, fmt.Errorf("Test of the RGetTo after Close: %v, want an error matching verbs.ErrClosed", err))
			}
			break
		}
	}
	if calls == 100000 || time.Since(start) >= 10*time.Second {
		bad = append(bad, fmt.Errorf("Test of the RGetTo after Close: still not done after %d calls (%v)", calls, time.Since(start).Round(time.Millisecond)))
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for k := 0; k < 2; k++ {
		i, err := win.Waitany(wctx, reqs[1:])
		fmt.Printf("Waitany: %d, %v\n", i, err)
		if i == win.Undefined || !errors.Is(err, verbs.ErrClosed) {
			bad = append(bad, fmt.Errorf("Waitany of the RGetAccumulates after Close: %d, %v, want an index and an error matching verbs.ErrClosed", i, err))
			break
		}
	}
	i, err := win.Waitany(wctx, []*win.Request{rg})
	fmt.Printf("Waitany of a 4 MiB RGet: %d, %v\n", i, err)
	if i != 0 || err != nil && !errors.Is(err, verbs.ErrClosed) {
		bad = append(bad, fmt.Errorf("Waitany of an RGet after Close: %d, %v, want 0 and nil or an error matching verbs.ErrClosed", i, err))
	}
	syscall.Kill(int(binary.NativeEndian.Uint64(pids[1])), syscall.SIGCONT)
	if err := w.Free(wctx); !errors.Is(err, verbs.ErrClosed) {
		bad = append(bad, fmt.Errorf("Free after the group's Close: %v, want an error matching verbs.ErrClosed", err))
	}
	if err := errors.Join(bad...); err != nil {
		return err
	}
	fmt.Println("reqclose=ok")
	return nil
}
