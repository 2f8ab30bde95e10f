//go:build integration

package test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/onesided/rma/group"
	"github.com/onesided/rma/internal/fabric"
	"github.com/onesided/rma/win"
)

func init() { workers["falsesuspicion"] = workFalseSuspicion }

// suspicionHold is how long rank 1 holds the lock after rank 2 suspects it.
const suspicionHold = time.Second

// workFalseSuspicion (3 ranks): rank 1 holds rank 0's exclusive lock and
// has read the counter there; rank 2 then believes rank 1 dead (its fabric
// marks it lost, as its liveness connection breaking on a lossy wire would)
// while rank 1 is alive and its RDMA to rank 0 works. Rank 2's Lock must
// wait for rank 1's Unlock, not take the lock back: both increments count
// (the counter ends at 2, rank 2 reads 1). Then rank 0 itself fences rank
// 1 off while it holds the lock again: rank 2 takes the lock back at once,
// and rank 1's Put under the lock it lost fails and does not land (the
// second counter ends at 1).
func workFalseSuspicion(ctx context.Context, g *group.Group) error {
	dir, me := os.Getenv("RMA_TEST_DIR"), g.Rank()
	w, err := win.Allocate(ctx, g, 64, 1)
	if err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	mark := func(name string) error { return os.WriteFile(filepath.Join(dir, name), nil, 0o644) }
	await := func(name string) error { return waitFile(ctx, filepath.Join(dir, name)) }
	var buf [8]byte
	incr := func(disp int) (old uint64, err error) {
		if err := w.Get(ctx, buf[:], 0, disp); err != nil {
			return 0, err
		}
		if err := w.Flush(ctx, 0); err != nil {
			return 0, err
		}
		old = binary.NativeEndian.Uint64(buf[:])
		binary.NativeEndian.PutUint64(buf[:], old+1)
		if err := w.Put(ctx, buf[:], 0, disp); err != nil {
			return old, err
		}
		return old, w.Flush(ctx, 0)
	}
	switch me {
	case 1:
		// Phase 1: hold the lock across rank 2's suspicion.
		if err := w.Lock(ctx, win.LockExclusive, 0, 0); err != nil {
			return err
		}
		if err := w.Get(ctx, buf[:], 0, 0); err != nil {
			return err
		}
		if err := w.Flush(ctx, 0); err != nil {
			return err
		}
		old := binary.NativeEndian.Uint64(buf[:])
		if err := mark("holding"); err != nil {
			return err
		}
		if err := await("suspected"); err != nil {
			return err
		}
		time.Sleep(suspicionHold) // rank 2's Lock tries meanwhile
		binary.NativeEndian.PutUint64(buf[:], old+1)
		if err := w.Put(ctx, buf[:], 0, 0); err != nil {
			return fmt.Errorf("phase 1: Put under the lock: %w", err)
		}
		if err := w.Unlock(ctx, 0); err != nil {
			return fmt.Errorf("phase 1: Unlock: %w", err)
		}
		fmt.Printf("rank 1: phase 1: read %d under the lock, unlocked at %d\n", old, time.Now().UnixNano())
		// Phase 2: hold it again; rank 0 fences this rank off.
		if err := w.Lock(ctx, win.LockExclusive, 0, 0); err != nil {
			return err
		}
		if err := w.Get(ctx, buf[:], 0, 8); err != nil {
			return err
		}
		if err := w.Flush(ctx, 0); err != nil {
			return err
		}
		old = binary.NativeEndian.Uint64(buf[:])
		if err := mark("holding2"); err != nil {
			return err
		}
		if err := await("done2"); err != nil {
			return err
		}
		binary.NativeEndian.PutUint64(buf[:], old+1)
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		perr := w.Put(c, buf[:], 0, 8)
		if perr == nil {
			perr = w.Flush(c, 0)
		}
		fmt.Printf("rank 1: phase 2: Put after rank 0 fenced it off: %v\n", perr)
		if !errors.Is(perr, win.ErrPeerLost) {
			return fmt.Errorf("phase 2: Put after rank 0 fenced this rank off: %v, want ErrPeerLost", perr)
		}
		if err := mark("failed2"); err != nil {
			return err
		}
	case 2:
		if err := await("holding"); err != nil {
			return err
		}
		fabric.OfGroup(g).MarkLost(1, errors.New("test: suspected, as when its liveness connection breaks"))
		if err := mark("suspected"); err != nil {
			return err
		}
		start := time.Now()
		if err := w.Lock(ctx, win.LockExclusive, 0, 0); err != nil {
			return fmt.Errorf("phase 1: Lock: %w", err)
		}
		locked := time.Now()
		old, err := incr(0)
		if err != nil {
			return fmt.Errorf("phase 1: increment: %w", err)
		}
		if err := w.Unlock(ctx, 0); err != nil {
			return err
		}
		fmt.Printf("rank 2: phase 1: Lock waited %v (locked at %d), read %d\n", locked.Sub(start).Round(time.Millisecond), locked.UnixNano(), old)
		if old != 1 {
			return fmt.Errorf("phase 1: rank 2 read %d under the lock, want 1: it took the lock while rank 1, suspected but alive, held it", old)
		}
		if err := await("fenced"); err != nil {
			return err
		}
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		start = time.Now()
		if err := w.Lock(c, win.LockExclusive, 0, 0); err != nil {
			return fmt.Errorf("phase 2: Lock of the fenced holder's lock: %w", err)
		}
		fmt.Printf("rank 2: phase 2: took the fenced holder's lock in %v\n", time.Since(start).Round(time.Millisecond))
		if _, err := incr(8); err != nil {
			return fmt.Errorf("phase 2: increment: %w", err)
		}
		if err := w.Unlock(ctx, 0); err != nil {
			return err
		}
		if err := mark("done2"); err != nil {
			return err
		}
	case 0:
		if err := await("holding2"); err != nil {
			return err
		}
		f := fabric.OfGroup(g)
		f.MarkLost(1, errors.New("test: fenced off by the target"))
		for {
			ok, err := f.Fenced(ctx, 0, 1)
			if err != nil {
				return err
			}
			if ok {
				break
			}
			time.Sleep(time.Millisecond)
		}
		if err := mark("fenced"); err != nil {
			return err
		}
		if err := await("done2"); err != nil {
			return err
		}
		if err := await("failed2"); err != nil {
			return err
		}
		if err := w.Lock(ctx, win.LockShared, 0, 0); err != nil {
			return err
		}
		var both [16]byte
		if err := w.Get(ctx, both[:], 0, 0); err != nil {
			return err
		}
		if err := w.Unlock(ctx, 0); err != nil {
			return err
		}
		c1, c2 := binary.NativeEndian.Uint64(both[:]), binary.NativeEndian.Uint64(both[8:])
		fmt.Printf("counter1=%d\ncounter2=%d\n", c1, c2)
		if c1 != 2 || c2 != 1 {
			return fmt.Errorf("counters %d and %d, want 2 (both increments of phase 1) and 1 (rank 1's Put after its fence did not land)", c1, c2)
		}
		if err := mark("checked"); err != nil {
			return err
		}
	}
	// The ranks disagree on who is alive: no collective Free. Each leaves
	// once rank 0 has checked.
	if err := await("checked"); err != nil {
		return err
	}
	fmt.Println("falsesuspicion=ok")
	os.Exit(0)
	return nil
}

// TestFalseSuspicionLock: see workFalseSuspicion.
func TestFalseSuspicionLock(t *testing.T) {
	l := newLaunch(t, "falsesuspicion", 3)
	outs := l.run(3 * time.Minute)
	finished(t, outs, "falsesuspicion")
	t.Logf("counters at rank 0: %s and %s", value(t, outs[0], "counter1"), value(t, outs[0], "counter2"))
}
