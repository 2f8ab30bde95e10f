//go:build integration

package test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/win"
)

func init() { workers["deathepochs"] = workDeathEpochs }

// workDeathEpochs (3 ranks): rank 2 dies holding locks and inside epochs of
// eight windows; ranks 0 and 1 must then take the locks it held, have the
// calls that wait for it fail with ErrPeerLost, end the epochs it was part
// of, go on among themselves on every window, and free them all.
func workDeathEpochs(ctx context.Context, g *group.Group) error {
	dir, me := os.Getenv("RMA_TEST_DIR"), g.Rank()
	names := []string{"excl", "shared", "lockall", "writer", "post", "start", "fence", "complete", "unlockall"}
	ws := map[string]*win.Window{}
	for _, name := range names {
		w, err := win.Allocate(ctx, g, 64, 8)
		if err != nil {
			return fmt.Errorf("allocate %s: %w", name, err)
		}
		ws[name] = w
	}
	must := func(what string, err error) error {
		if err != nil {
			return fmt.Errorf("before the death: %s: %w", what, err)
		}
		return nil
	}
	// Before the death.
	var errs []error
	switch me {
	case 2:
		errs = append(errs,
			must("excl: Lock(exclusive, 0)", ws["excl"].Lock(ctx, win.LockExclusive, 0, 0)),
			must("shared: Lock(shared, 0)", ws["shared"].Lock(ctx, win.LockShared, 0, 0)),
			must("lockall: LockAll", ws["lockall"].LockAll(ctx)),
			must("complete: Post([0])", ws["complete"].Post(ctx, []int{0}, 0)))
	case 1:
		errs = append(errs,
			must("writer: Lock(shared, 0)", ws["writer"].Lock(ctx, win.LockShared, 0, 0)),
			must("complete: Post([0])", ws["complete"].Post(ctx, []int{0}, 0)))
	case 0:
		errs = append(errs,
			must("post: Post([2])", ws["post"].Post(ctx, []int{2}, 0)),
			must("unlockall: LockAll", ws["unlockall"].LockAll(ctx)))
	}
	errs = append(errs, must("fence: Fence", ws["fence"].Fence(ctx, 0)))
	if me == 0 {
		errs = append(errs, must("complete: Start([1 2])", ws["complete"].Start(ctx, []int{1, 2}, 0)))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if me == 2 {
		// A writer waiting for rank 1's shared lock when it dies: it
		// holds the owner word.
		go ws["writer"].Lock(ctx, win.LockExclusive, 0, 0)
		time.Sleep(300 * time.Millisecond)
		os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644)
		<-ctx.Done() // killed before this
		return ctx.Err()
	}
	if err := waitFile(ctx, filepath.Join(dir, "killed")); err != nil {
		return err
	}

	// After the death: every call within 20 s (it waited for ever before).
	var fails []string
	check := func(what string, wantLost bool, call func(ctx context.Context) error) {
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		start := time.Now()
		err := call(c)
		took := time.Since(start).Round(time.Millisecond)
		ok := err == nil
		if wantLost {
			ok = errors.Is(err, win.ErrPeerLost)
		}
		fmt.Printf("rank %d: %s: %v in %v\n", me, what, err, took)
		if !ok {
			want := "nil"
			if wantLost {
				want = "ErrPeerLost"
			}
			fails = append(fails, fmt.Sprintf("%s: %v after %v, want %s", what, err, took, want))
		}
	}
	// step waits until the other survivor has reached the same step.
	step := func(name string) {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s.%d", name, me)), nil, 0o644)
		waitFile(ctx, filepath.Join(dir, fmt.Sprintf("%s.%d", name, 1-me)))
	}
	lockUnlock := func(w *win.Window, lt win.LockType, target int) func(context.Context) error {
		return func(c context.Context) error {
			if err := w.Lock(c, lt, target, 0); err != nil {
				return err
			}
			return w.Unlock(c, target)
		}
	}
	one := u64(math.Float64bits(1))

	// Locks the dead rank held: exclusive, shared, LockAll's shared.
	if me == 1 {
		check("excl: Lock(exclusive, 0) held by the dead rank", false, lockUnlock(ws["excl"], win.LockExclusive, 0))
	} else {
		check("shared: Lock(exclusive, 0) shared by the dead rank", false, lockUnlock(ws["shared"], win.LockExclusive, 0))
	}
	check(fmt.Sprintf("lockall: Lock(exclusive, %d) inside the dead rank's LockAll", 1-me), false, lockUnlock(ws["lockall"], win.LockExclusive, 1-me))
	// The writer that died waiting for rank 1's shared lock.
	if me == 1 {
		check("writer: Unlock(0) of the shared lock", false, func(c context.Context) error { return ws["writer"].Unlock(c, 0) })
	}
	step("writer")
	if me == 0 {
		check("writer: Lock(shared, 0) after a dead waiting writer", false, lockUnlock(ws["writer"], win.LockShared, 0))
	}
	step("writer2")
	check("writer: Lock(exclusive, 0) after a dead waiting writer", false, lockUnlock(ws["writer"], win.LockExclusive, 0))

	// Post-start-complete-wait with the dead rank.
	if me == 0 {
		check("post: Wait for the dead rank's Complete", true, func(c context.Context) error { return ws["post"].Wait(c) })
		check("post: Post([1]) after", false, func(c context.Context) error { return ws["post"].Post(c, []int{1}, 0) })
		step("post")
		check("post: Wait for rank 1", false, func(c context.Context) error { return ws["post"].Wait(c) })
	} else {
		check("start: Start([2]) with the dead rank", true, func(c context.Context) error { return ws["start"].Start(c, []int{2}, 0) })
		check("start: Lock(exclusive, 0) after", false, lockUnlock(ws["start"], win.LockExclusive, 0))
		step("post")
		check("post: Start([0]) and Complete", false, func(c context.Context) error {
			if err := ws["post"].Start(c, []int{0}, 0); err != nil {
				return err
			}
			return ws["post"].Put(c, one, 0, 0)
		})
		check("post: Complete", false, func(c context.Context) error { return ws["post"].Complete(c) })
	}
	if me == 0 {
		check("complete: Complete to ranks 1 and the dead 2", true, func(c context.Context) error { return ws["complete"].Complete(c) })
		check("complete: Lock(exclusive, 1) after", false, lockUnlock(ws["complete"], win.LockExclusive, 1))
	} else {
		check("complete: Wait for rank 0's Complete", false, func(c context.Context) error { return ws["complete"].Wait(c) })
	}

	// A fence epoch: the next Fence cannot complete; the epoch ends.
	check("fence: Fence without the dead rank", true, func(c context.Context) error { return ws["fence"].Fence(c, 0) })
	check(fmt.Sprintf("fence: Lock(exclusive, %d) after", 1-me), false, lockUnlock(ws["fence"], win.LockExclusive, 1-me))

	// UnlockAll with an accumulate to the dead rank: it fails, and ends the epoch.
	if me == 0 {
		w := ws["unlockall"]
		// It fails at the call or at UnlockAll, which ends the epoch either way.
		aerr := w.Accumulate(ctx, one, datatype.Float64, 2, 0, op.Sum)
		check("unlockall: Accumulate to the dead rank, UnlockAll", true, func(c context.Context) error { return errors.Join(aerr, w.UnlockAll(c)) })
		check("unlockall: LockAll again, FetchAndOp to 1", false, func(c context.Context) error {
			if err := w.LockAll(c); err != nil {
				return err
			}
			_, err := win.FetchAndOp(c, w, int64(1), 1, 1, op.Sum)
			return err
		})
		check("unlockall: UnlockAll", false, func(c context.Context) error { return w.UnlockAll(c) })
		check("unlockall: Lock(exclusive, 1) after", false, lockUnlock(w, win.LockExclusive, 1))
	}

	// Free returns on every window (with an error, as rank 2 cannot come).
	step("free")
	for _, name := range names {
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		start := time.Now()
		err := ws[name].Free(c)
		cancel()
		fmt.Printf("rank %d: %s: Free: %v in %v\n", me, name, err, time.Since(start).Round(time.Millisecond))
		if errors.Is(err, context.DeadlineExceeded) {
			fails = append(fails, fmt.Sprintf("%s: Free: %v", name, err))
		}
	}
	if len(fails) > 0 {
		return fmt.Errorf("%d failures:\n%s", len(fails), strings.Join(fails, "\n"))
	}
	fmt.Println("survivors=ok")
	return nil
}

func TestDeathEpochs(t *testing.T) {
	l := newLaunch(t, "deathepochs", 3, "RMA_PEER_TIMEOUT="+peerTimeout.String())
	for _, out := range runKillLast(t, l, 4*time.Minute) {
		value(t, out, "survivors")
	}
}

func init() { workers["leaveepochs"] = workLeaveEpochs }

// workLeaveEpochs (3 ranks): rank 2 closes its group without freeing the
// window; the others' Fence fails with ErrPeerLost and their Free then
// returns at once, releasing the window (Close must not find it still
// registered).
func workLeaveEpochs(ctx context.Context, g *group.Group) error {
	w, err := win.Allocate(ctx, g, 64, 8)
	if err != nil {
		return err
	}
	if err := w.Fence(ctx, 0); err != nil {
		return err
	}
	if g.Rank() == 2 {
		// Its window is still registered: Close reports that, and the
		// process exits (before the harness checks for leaked objects).
		fmt.Printf("rank 2: Close without Free: %v\n", g.Close())
		os.Exit(0)
	}
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	// Until rank 2's leaving is known, the Fence waits for it.
	start := time.Now()
	ferr := w.Fence(c, 0)
	fmt.Printf("rank %d: Fence: %v in %v\n", g.Rank(), ferr, time.Since(start).Round(time.Millisecond))
	if !errors.Is(ferr, win.ErrPeerLost) {
		return fmt.Errorf("Fence after rank 2 closed its group: %v, want ErrPeerLost", ferr)
	}
	start = time.Now()
	ferr = w.Free(c)
	fmt.Printf("rank %d: Free: %v in %v\n", g.Rank(), ferr, time.Since(start).Round(time.Millisecond))
	if c.Err() != nil {
		return fmt.Errorf("Free after a failed Fence: %v after %v", ferr, time.Since(start))
	}
	if err := g.Close(); err != nil {
		return fmt.Errorf("Close after Free: %w", err)
	}
	fmt.Println("survivors=ok")
	return nil
}

func TestLeaveEpochs(t *testing.T) {
	l := newLaunch(t, "leaveepochs", 3, "RMA_PEER_TIMEOUT="+peerTimeout.String())
	outs := l.run(2 * time.Minute)
	for _, out := range outs[:2] {
		value(t, out, "survivors")
	}
}
