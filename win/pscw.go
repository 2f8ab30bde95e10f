package win

import (
	"context"
	"fmt"
	"sync/atomic"
)

// Post starts an exposure epoch for the ranks of origins (MPI_Win_post):
// each may then Start an access epoch to this rank. It does not wait.
func (w *Window) Post(ctx context.Context, origins []int, a Assert) error {
	if err := w.lockMu(ctx); err != nil {
		return err
	}
	defer w.mu.Unlock()
	if w.freed.Load() {
		return ErrFreed
	}
	if a&^(NoCheck|NoStore|NoPut) != 0 {
		return fmt.Errorf("%w: Post takes NoCheck, NoStore and NoPut only (got %#x)", ErrInvalid, int(a))
	}
	if w.ep.exposeGroup != nil || w.ep.inFence() {
		return fmt.Errorf("%w: Post inside an exposure or fence epoch", ErrEpoch)
	}
	if err := w.checkGroup(origins); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	w.syncLocal()
	w.ep.leaveFence()
	// Once one origin has been told, the epoch exists: the others are told
	// too, whatever ctx says (each notice is one atomic, awaited).
	me := w.rank
	for _, o := range origins {
		if _, err := w.syncAdd(ctx, o, syncPosted+8*me, 1); err != nil {
			return err
		}
	}
	w.ep.exposeGroup = append([]int{}, origins...)
	return nil
}

// Start starts an access epoch to the ranks of targets (MPI_Win_start); it
// waits until each has posted a matching exposure epoch.
func (w *Window) Start(ctx context.Context, targets []int, a Assert) error {
	if err := w.lockMu(ctx); err != nil {
		return err
	}
	defer w.mu.Unlock()
	if w.freed.Load() {
		return ErrFreed
	}
	if a&^NoCheck != 0 {
		return fmt.Errorf("%w: Start takes only the NoCheck assertion (got %#x)", ErrInvalid, int(a))
	}
	// As in MPICH, a Start epoch and Lock epochs exclude each other, whatever
	// their ranks (MPI: distinct access epochs of a window must be disjoint).
	if w.ep.anyAccess() || w.ep.inFence() || w.ep.lockAll.Load() {
		return fmt.Errorf("%w: Start inside another access epoch (Lock, LockAll, Start or fence)", ErrEpoch)
	}
	if err := w.checkGroup(targets); err != nil {
		return err
	}
	for _, t := range targets {
		if err := w.waitWord(ctx, t, syncPosted+8*t, w.ep.started[t]+1); err != nil {
			return err
		}
	}
	w.ep.leaveFence()
	for _, t := range targets {
		w.ep.started[t]++
		w.ep.access[t].Store(accStarted)
	}
	w.ep.startGroup = append([]int{}, targets...)
	w.ep.startOpen.Store(true)
	return nil
}

// Complete ends the access epoch started by Start (MPI_Win_complete): it
// completes every RMA call of the epoch at its target, then tells each
// target so.
func (w *Window) Complete(ctx context.Context) error {
	if err := w.lockMu(ctx); err != nil {
		return err
	}
	defer w.mu.Unlock()
	if w.freed.Load() {
		return ErrFreed
	}
	if w.ep.startGroup == nil {
		return fmt.Errorf("%w: Complete without Start", ErrEpoch)
	}
	// As Unlock: an error ends the epoch (every target that can be told
	// is), an ended context does not (call Complete again).
	me := w.rank
	var first error
	for _, t := range w.ep.startGroup {
		if err := w.flush(ctx, t); err != nil {
			if ctx.Err() != nil {
				return err
			}
			if first == nil {
				first = err
			}
		}
	}
	for _, t := range w.ep.startGroup {
		if _, err := w.syncAdd(ctx, t, syncCompleted(len(w.remote))+8*me, 1); err != nil && first == nil {
			first = err
		}
		w.ep.access[t].Store(0)
	}
	w.ep.startGroup = nil
	w.ep.startOpen.Store(false)
	return first
}

// Wait ends the exposure epoch started by Post (MPI_Win_wait): it waits
// until every rank of the Post's group has called Complete, so that all
// their RMA calls to this rank are done.
func (w *Window) Wait(ctx context.Context) error {
	if err := w.lockMu(ctx); err != nil {
		return err
	}
	defer w.mu.Unlock()
	if w.freed.Load() {
		return ErrFreed
	}
	if w.ep.exposeGroup == nil {
		return fmt.Errorf("%w: Wait without Post", ErrEpoch)
	}
	// An origin gone before its Complete ends the epoch with its error
	// (once the others have completed); an ended context does not.
	n := len(w.remote)
	var first error
	for _, o := range w.ep.exposeGroup {
		if err := w.waitWord(ctx, o, syncCompleted(n)+8*o, w.ep.waited[o]+1); err != nil {
			if ctx.Err() != nil {
				return err
			}
			if first == nil {
				first = err
			}
		}
	}
	w.endExposure()
	return first
}

// Test is Wait without waiting (MPI_Win_test): it reports whether the
// exposure epoch has ended, ending it if every origin has completed.
func (w *Window) Test() (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.freed.Load() {
		return false, ErrFreed
	}
	if w.ep.exposeGroup == nil {
		return false, fmt.Errorf("%w: Test without Post", ErrEpoch)
	}
	n := len(w.remote)
	for _, o := range w.ep.exposeGroup {
		if atomic.LoadUint64(w.syncWord(syncCompleted(n)+8*o)) < w.ep.waited[o]+1 {
			return false, nil
		}
	}
	w.endExposure()
	return true, nil
}

func (w *Window) endExposure() {
	w.syncLocal()
	for _, o := range w.ep.exposeGroup {
		w.ep.waited[o]++
	}
	w.ep.exposeGroup = nil
}

func (w *Window) checkGroup(ranks []int) error {
	seen := make(map[int]bool, len(ranks))
	for _, r := range ranks {
		if r < 0 || r >= len(w.remote) {
			return fmt.Errorf("%w: rank %d in a group of %d", ErrRank, r, len(w.remote))
		}
		if seen[r] {
			return fmt.Errorf("%w: rank %d twice in the group", ErrInvalid, r)
		}
		seen[r] = true
	}
	return nil
}
