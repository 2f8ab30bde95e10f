//go:build integration

package test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/win"
)

func init() { workers["peerdeath"] = workPeerDeath }

const peerTimeout = 500 * time.Millisecond

func waitFile(ctx context.Context, path string) error {
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// workPeerDeath: rank 3 is killed inside a LockAll epoch; the others check
// that calls to it fail with ErrPeerLost, that they still work among
// themselves, and that Free and Close return.
func workPeerDeath(ctx context.Context, g *group.Group) error {
	dir := os.Getenv("RMA_TEST_DIR")
	w, err := win.Allocate(ctx, g, 64, 8)
	if err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if g.Rank() == 3 {
		os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644)
		<-ctx.Done() // killed before this
		return ctx.Err()
	}
	if err := waitFile(ctx, filepath.Join(dir, "killed")); err != nil {
		return err
	}
	one := u64(math.Float64bits(1))
	start := time.Now()
	// An accumulate through rank 3's engine, pending when the loss is found.
	dctx, dcancel := context.WithTimeout(ctx, 20*peerTimeout)
	defer dcancel()
	aerr := w.Accumulate(dctx, one, datatype.Float64, 3, 0, op.Max)
	if aerr == nil {
		aerr = w.Flush(dctx, 3)
	}
	if dctx.Err() != nil {
		buf := make([]byte, 1<<20)
		fmt.Printf("stuck:\n%s\n", buf[:runtime.Stack(buf, true)])
	}
	if !errors.Is(aerr, win.ErrPeerLost) {
		return fmt.Errorf("accumulate and flush to the dead rank: %v, want ErrPeerLost", aerr)
	}
	fmt.Printf("detected_ms=%d\n", time.Since(start).Milliseconds())
	// New calls of every kind fail the same way, at once or within the timeout.
	var b [8]byte
	calls := map[string]error{
		"put+flush": func() error {
			if err := w.Put(ctx, b[:], 3, 0); err != nil {
				return err
			}
			return w.Flush(ctx, 3)
		}(),
		"get":            w.Get(ctx, b[:], 3, 0),
		"fetch-and-op":   func() error { _, err := win.FetchAndOp(ctx, w, int64(1), 3, 1, op.Sum); return err }(),
		"get-accumulate": w.GetAccumulate(ctx, one, b[:], datatype.Float64, 3, 2, op.Sum),
	}
	for name, err := range calls {
		if !errors.Is(err, win.ErrPeerLost) {
			return fmt.Errorf("%s to the dead rank: %v, want ErrPeerLost", name, err)
		}
	}
	// The survivors still work among themselves.
	for t := 0; t < 3; t++ {
		if _, err := win.FetchAndOp(ctx, w, int64(1), t, 1, op.Sum); err != nil {
			return fmt.Errorf("fetch-and-op to survivor %d: %w", t, err)
		}
		if err := w.Accumulate(ctx, one, datatype.Float64, t, 2, op.Sum); err != nil {
			return err
		}
		if err := w.Flush(ctx, t); err != nil {
			return fmt.Errorf("flush to survivor %d: %w", t, err)
		}
	}
	fmt.Println("survivors=ok")
	// The survivors wait for one another before Free (a collective that
	// fails at once now that rank 3 is gone, and releases this rank's
	// window): each adds 1 to word 3 of rank 0 and polls it until all
	// three have, then adds 1 again, its last access to rank 0; rank 0
	// frees only once the word reaches 6.
	wait := func(want int64) error {
		for {
			n, err := win.FetchAndOp(ctx, w, int64(0), 0, 3, op.NoOp)
			if err != nil || n >= want {
				return err
			}
			time.Sleep(time.Millisecond)
		}
	}
	for _, want := range []int64{3, 6} {
		if _, err := win.FetchAndOp(ctx, w, int64(1), 0, 3, op.Sum); err != nil {
			return fmt.Errorf("survivors' barrier: %w", err)
		}
		if want == 3 || g.Rank() == 0 {
			if err := wait(want); err != nil {
				return fmt.Errorf("survivors' barrier: %w", err)
			}
		}
	}
	// Free is collective and rank 3 cannot take part: it must return, with an error.
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ferr := w.Free(fctx)
	fmt.Printf("free returned: %v\n", ferr)
	return nil
}

// runKillLast starts the ranks of l's worker, kills the last once it
// has written the file "ready", writes the file "killed" for the others,
// and returns their outputs once they have ended (failing the test if any
// failed).
func runKillLast(t *testing.T, l *launch, timeout time.Duration) []string {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	procs := l.startAll(ctx)
	size := len(procs)
	if err := waitFile(ctx, l.file("ready")); err != nil {
		t.Fatalf("rank %d never got ready: %v", size-1, err)
	}
	if err := procs[size-1].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	procs[size-1].cmd.Wait()
	os.WriteFile(l.file("killed"), nil, 0o644)
	return l.wait(procs[:size-1])
}

func TestPeerDeath(t *testing.T) {
	l := newLaunch(t, "peerdeath", 4, "RMA_PEER_TIMEOUT="+peerTimeout.String())
	for r, out := range runKillLast(t, l, 3*time.Minute) {
		value(t, out, "survivors")
		t.Logf("rank %d found the loss in %s ms (peer timeout %v); %s", r, value(t, out, "detected_ms"), peerTimeout,
			strings.TrimSpace(out[strings.Index(out, "free returned"):]))
	}
}

func init() { workers["cancel"] = workCancel }

// workCancel (2 ranks): every call that waits returns promptly once its
// context ends, and the window stays usable.
func workCancel(ctx context.Context, g *group.Group) error {
	w, err := win.Allocate(ctx, g, 64, 8)
	if err != nil {
		return err
	}
	usable := func(name string) error {
		if err := w.LockAll(ctx); err != nil {
			return fmt.Errorf("after %s: %w", name, err)
		}
		if _, err := win.FetchAndOp(ctx, w, int64(1), 1-g.Rank(), 0, op.Sum); err != nil {
			return fmt.Errorf("after %s: %w", name, err)
		}
		if err := w.GetAccumulate(ctx, u64(1), make([]byte, 8), datatype.Int32, 1-g.Rank(), 1, op.Sum); err != nil {
			return fmt.Errorf("after %s: %w", name, err)
		}
		return w.UnlockAll(ctx)
	}
	timed := func(name string, d time.Duration, call func(ctx context.Context) error) error {
		c, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		start := time.Now()
		err := call(c)
		late := time.Since(start) - d
		if !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%s: %v, want context.DeadlineExceeded", name, err)
		}
		if late > 500*time.Millisecond {
			return fmt.Errorf("%s returned %v after its deadline", name, late)
		}
		fmt.Printf("cancel %q: returned %v after the deadline\n", name, late.Round(time.Millisecond))
		return nil
	}
	const d = 300 * time.Millisecond
	// Rank 1 holds an exclusive lock on rank 0 while rank 0 is refused one.
	if g.Rank() == 1 {
		if err := w.Lock(ctx, win.LockExclusive, 0, 0); err != nil {
			return err
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if g.Rank() == 0 {
		if err := timed("Lock of a held lock", d, func(c context.Context) error { return w.Lock(c, win.LockShared, 0, 0) }); err != nil {
			return err
		}
		if err := timed("Start with no Post", d, func(c context.Context) error { return w.Start(c, []int{1}, 0) }); err != nil {
			return err
		}
		if err := w.Post(ctx, []int{1}, 0); err != nil {
			return err
		}
		if err := timed("Wait with no Complete", d, func(c context.Context) error { return w.Wait(c) }); err != nil {
			return err
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if g.Rank() == 1 {
		if err := w.Unlock(ctx, 0); err != nil {
			return err
		}
		// Let rank 0's exposure epoch end.
		if err := w.Start(ctx, []int{0}, 0); err != nil {
			return err
		}
		if err := w.Complete(ctx); err != nil {
			return err
		}
	} else {
		if err := w.Wait(ctx); err != nil {
			return err
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	// Calls given an already cancelled context return its error at once.
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	var b [8]byte
	peer := 1 - g.Rank()
	for name, call := range map[string]func() error{
		"FetchAndOp":    func() error { _, err := win.FetchAndOp(done, w, int64(1), peer, 0, op.Sum); return err },
		"GetAccumulate": func() error { return w.GetAccumulate(done, u64(1), b[:], datatype.Float64, peer, 2, op.Sum) },
		"Get":           func() error { return w.Get(done, b[:], peer, 0) },
		"CompareAndSwap": func() error {
			_, err := win.CompareAndSwap(done, w, int64(5), int64(6), peer, 3)
			return err
		},
	} {
		start := time.Now()
		err := call()
		if err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("%s with a cancelled context: %v", name, err)
		}
		if time.Since(start) > 500*time.Millisecond {
			return fmt.Errorf("%s with a cancelled context took %v", name, time.Since(start))
		}
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	if err := usable("cancelled calls"); err != nil {
		return err
	}
	fmt.Println("cancel=ok")
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	return w.Free(ctx)
}

func TestCancellation(t *testing.T) {
	outs := newLaunch(t, "cancel", 2).run(2 * time.Minute)
	for _, o := range outs {
		value(t, o, "cancel")
	}
}

func init() { workers["cancel-free"] = workCancelFree }

// workCancelFree (2 ranks): calls whose context has ended do nothing, on
// every route; a Free cut short by its context can be completed by calling
// Free again, while the other rank's Free waits for it; and a Free waiting
// behind another goroutine's Lock (a misuse) still honours its context.
func workCancelFree(ctx context.Context, g *group.Group) error {
	me, peer := g.Rank(), 1-g.Rank()
	var l confLog
	ended, cancel := context.WithCancel(ctx)
	cancel()

	// 1. Ended contexts: nothing is sent, on the NIC route (int64 SUM)
	// and the engine's (int32 SUM, float64 REPLACE).
	w, err := win.Allocate(ctx, g, 64, 8)
	if err != nil {
		return err
	}
	if !l.ok("LockAll", w.LockAll(ctx)) {
		return l.err()
	}
	one := confU64(1)
	four := []byte{1, 0, 0, 0}
	res := make([]byte, 8)
	for range 20 {
		l.is("FetchAndOp(int64 SUM) with an ended context", w.FetchAndOp(ended, one, res, datatype.Int64, peer, 0, op.Sum), context.Canceled)
		l.is("FetchAndOp(int32 SUM) with an ended context", w.FetchAndOp(ended, four, res[:4], datatype.Int32, peer, 1, op.Sum), context.Canceled)
		l.is("Accumulate(int32 SUM) with an ended context", w.Accumulate(ended, four, datatype.Int32, peer, 2, op.Sum), context.Canceled)
		l.is("Accumulate(float64 REPLACE) with an ended context", w.Accumulate(ended, confU64(0x4000000000000000), datatype.Float64, peer, 2, op.Replace), context.Canceled)
		l.is("Put with an ended context", w.Put(ended, one, peer, 3), context.Canceled)
		_, rerr := w.RAccumulate(ended, win.Contiguous(four, datatype.Int32), win.Region{Rank: peer, Disp: 4, Type: datatype.Int32.Type(), Count: 1}, op.Sum)
		l.is("RAccumulate with an ended context", rerr, context.Canceled)
	}
	l.ok("Flush", w.Flush(ctx, peer))
	// The epoch calls with an ended context do nothing either: the epoch
	// stays open (a Put in it works), and none opens.
	l.is("UnlockAll with an ended context", w.UnlockAll(ended), context.Canceled)
	l.ok("Put after it", w.Put(ctx, make([]byte, 8), me, 5))
	l.ok("UnlockAll", w.UnlockAll(ctx))
	l.is("LockAll(NoCheck) with an ended context", w.LockAll(ended, win.NoCheck), context.Canceled)
	l.is("Lock(NoCheck) with an ended context", w.Lock(ended, win.LockExclusive, peer, win.NoCheck), context.Canceled)
	l.is("Put after them", w.Put(ctx, make([]byte, 8), me, 5), win.ErrEpoch)
	l.ok("Lock", w.Lock(ctx, win.LockShared, peer, 0))
	l.is("Unlock with an ended context", w.Unlock(ended, peer), context.Canceled)
	l.ok("Unlock", w.Unlock(ctx, peer))
	l.ok("Post", w.Post(ctx, []int{peer}, 0))
	if err := g.Barrier(ctx); err != nil { // the peer's Post has come
		return err
	}
	l.is("Start with an ended context (its Post already there)", w.Start(ended, []int{peer}, 0), context.Canceled)
	l.ok("Start", w.Start(ctx, []int{peer}, 0))
	l.is("Complete with an ended context", w.Complete(ended), context.Canceled)
	l.ok("Complete", w.Complete(ctx))
	if err := g.Barrier(ctx); err != nil { // the peer's Complete has come
		return err
	}
	l.is("Wait with an ended context (its Complete already there)", w.Wait(ended), context.Canceled)
	l.ok("Wait", w.Wait(ctx))
	l.is("Fence with an ended context", w.Fence(ended, 0), context.Canceled)
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if b := w.Bytes(); !slices.Equal(b, make([]byte, 64)) {
		l.failf("calls with ended contexts changed rank %d's window: %x", me, b)
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	// 2. A Free with an ended context does nothing; a second Free frees.
	if me == 0 {
		l.is("Free with an ended context", w.Free(ended), context.Canceled)
		time.Sleep(200 * time.Millisecond)
	}
	l.ok("Free", w.Free(ctx))

	// 3. Rank 0's Free gives up after 5 ms; rank 1 comes 300 ms later, after
	// a Put to rank 0 in the fence epoch; rank 0's second Free completes.
	if w, err = win.Allocate(ctx, g, 64, 8); err != nil {
		return err
	}
	l.ok("Fence", w.Fence(ctx, 0))
	if me == 0 {
		short, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
		l.is("Free with a 5 ms deadline, the other rank late", w.Free(short), context.DeadlineExceeded)
		cancel()
		l.ok("Free again", w.Free(ctx))
	} else {
		time.Sleep(300 * time.Millisecond)
		l.ok("Put to the rank whose Free was cut short", w.Put(ctx, one, peer, 0))
		l.ok("Free of the late rank", w.Free(ctx))
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}

	// 4. Rank 1 holds rank 0's window locked for 2 s; a goroutine of rank 0
	// waits in Lock meanwhile, and rank 0's Free, with 300 ms, must give
	// up in about that time. Then the lock is taken, released, and Free
	// frees.
	if w, err = win.Allocate(ctx, g, 64, 8); err != nil {
		return err
	}
	if me == 1 {
		l.ok("Lock(exclusive, 0)", w.Lock(ctx, win.LockExclusive, 0, 0))
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if me == 1 {
		time.Sleep(2 * time.Second)
		l.ok("Unlock(0)", w.Unlock(ctx, 0))
	} else {
		locked := make(chan error, 1)
		go func() {
			lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			if err := w.Lock(lctx, win.LockExclusive, 0, 0); err != nil {
				locked <- err
				return
			}
			locked <- w.Unlock(lctx, 0)
		}()
		time.Sleep(100 * time.Millisecond) // the goroutine waits in Lock
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		start := time.Now()
		ferr := w.Free(short)
		took := time.Since(start)
		cancel()
		if ferr == nil || took > time.Second {
			l.failf("Free with 300 ms while another goroutine waits in Lock: %v after %v (want an error within about 300 ms)", ferr, took)
		} else {
			fmt.Printf("Free behind a waiting Lock gave up after %v: %v\n", took.Round(time.Millisecond), ferr)
		}
		l.ok("Lock and Unlock of the waiting goroutine", <-locked)
	}
	l.ok("Free", w.Free(ctx))
	if err := l.err(); err != nil {
		return err
	}
	fmt.Println("cancel-free=ok")
	return nil
}

func TestCancelFree(t *testing.T) {
	outs := newLaunch(t, "cancel-free", 2).run(2 * time.Minute)
	for _, o := range outs {
		value(t, o, "cancel-free")
	}
}
