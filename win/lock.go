package win

import (
	"context"
	"encoding/binary"
	"fmt"
)

// The lock on a rank's window is a reader-writer lock of NIC atomics in
// its sync page, in words that each belong to one rank: a reader sets its
// own word of syncReaders, then reads the owner word, and steps back (its
// word cleared) while a writer is there; a writer takes the owner word
// with a compare-and-swap, which stops new readers, then waits until no
// reader's word is set. Each is one rank's, so a waiter that finds a word
// of a rank that is gone clears it (a compare-and-swap from the gone
// rank's value): a dead rank's lock does not block the living for ever.
// The target's CPU takes no part.

// lockShared takes a shared lock on rank. If ctx ends, it leaves the lock
// words as it found them.
func (w *Window) lockShared(ctx context.Context, rank int) error {
	n, me := len(w.remote), w.rank
	mine := syncReaders(n) + 8*me
	var word [8]byte
	for i := 0; ; {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := w.syncAdd(ctx, rank, mine, 1); err != nil {
			return err
		}
		// If the read fails (ctx ended, say), what was added is taken
		// back below all the same.
		err := w.syncRead(ctx, rank, syncOwner, word[:])
		if err == nil && binary.NativeEndian.Uint64(word[:]) == 0 {
			return nil
		}
		// A writer holds the lock or waits for its readers (or the
		// read failed): step back so it is not starved.
		if _, uerr := w.syncAdd(ctx, rank, mine, ^uint64(0)); err == nil {
			err = uerr
		}
		if err != nil {
			return err
		}
		for {
			if err := w.syncRead(ctx, rank, syncOwner, word[:]); err != nil {
				return err
			}
			owner := binary.NativeEndian.Uint64(word[:])
			if owner == 0 {
				break
			}
			if w.takeBack(ctx, rank, syncOwner, owner) {
				continue
			}
			if err := backoff(ctx, i); err != nil {
				return err
			}
			i++
		}
	}
}

// takeBack clears rank's sync word at off, whose value v (a rank+1 in the
// owner word, 1 in a reader's word) says which rank holds it, if that rank
// is gone and rank, whose memory holds the word, has fenced it off: a
// holder that this rank merely suspects (its liveness connection broke,
// say) may be alive and still writing under its lock, and rank's fence
// (fabric.Fenced) is what guarantees that nothing it sends lands after
// the take-back. It reports whether it did (or another waiter did first).
func (w *Window) takeBack(ctx context.Context, rank, off int, v uint64) bool {
	holder := int(v - 1)
	if off != syncOwner {
		holder = (off - syncReaders(len(w.remote))) / 8
	}
	if holder < 0 || holder >= len(w.remote) || holder == w.rank || !w.gone(holder) {
		return false
	}
	if fenced, err := w.f.Fenced(ctx, rank, holder); err != nil || !fenced {
		return false
	}
	_, err := w.syncCAS(ctx, rank, off, v, 0)
	return err == nil
}

// lockExclusive takes the exclusive lock on rank: it takes the owner word,
// which stops new readers, then waits for the readers to leave. If ctx
// ends, it undoes exactly what it had done.
func (w *Window) lockExclusive(ctx context.Context, rank int) (err error) {
	n := len(w.remote)
	me := uint64(w.rank + 1)
	for i := 0; ; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		old, err := w.syncCAS(ctx, rank, syncOwner, 0, me)
		if err != nil {
			return err
		}
		if old == 0 {
			break
		}
		if w.takeBack(ctx, rank, syncOwner, old) {
			continue
		}
		if err := backoff(ctx, i); err != nil {
			return err
		}
	}
	defer func() {
		if err != nil {
			w.syncCAS(context.Background(), rank, syncOwner, me, 0)
		}
	}()
	if cap(w.ep.readers) < 8*n {
		w.ep.readers = make([]byte, 8*n)
	}
	readers := w.ep.readers[:8*n]
	for i := 0; ; i++ {
		if err := w.syncRead(ctx, rank, syncReaders(n), readers); err != nil {
			return err
		}
		busy := false
		for r := range n {
			if v := binary.NativeEndian.Uint64(readers[8*r:]); v != 0 && !w.takeBack(ctx, rank, syncReaders(n)+8*r, v) {
				busy = true
			}
		}
		if !busy {
			return nil
		}
		if err := backoff(ctx, i); err != nil {
			return err
		}
	}
}

func (w *Window) unlockShared(ctx context.Context, rank int) error {
	_, err := w.syncAdd(ctx, rank, syncReaders(len(w.remote))+8*w.rank, ^uint64(0))
	return err
}

func (w *Window) unlockExclusive(ctx context.Context, rank int) error {
	me := uint64(w.rank + 1)
	_, err := w.syncCAS(ctx, rank, syncOwner, me, 0)
	return err
}

// Lock starts a passive-target access epoch to target (MPI_Win_lock). A
// shared lock admits other shared lockers; an exclusive one none. The lock
// is a reader-writer lock in target's memory driven by NIC atomics, so the
// target's CPU takes no part; a writer, once it is the one waiting for
// the readers to leave, stops new readers, so a stream of readers cannot
// starve it. A lock held by a rank that is lost is taken back (see the
// package doc, "Cancellation and failures"). With NoCheck no lock is taken. If ctx
// ends first, Lock returns its error and the lock is as if Lock had not
// been called. Lock of ProcNull locks nothing: it opens an epoch for calls
// to ProcNull (see ProcNull).
func (w *Window) Lock(ctx context.Context, lt LockType, target int, a Assert) error {
	if err := w.lockMu(ctx); err != nil {
		return err
	}
	defer w.mu.Unlock()
	if w.freed.Load() {
		return ErrFreed
	}
	if target == ProcNull {
		w.ep.nullLock.Store(true)
		return nil
	}
	if err := w.checkRank(target); err != nil {
		return err
	}
	if lt != LockShared && lt != LockExclusive {
		return fmt.Errorf("%w: lock type %d", ErrInvalid, lt)
	}
	if a&^NoCheck != 0 {
		return fmt.Errorf("%w: Lock takes only the NoCheck assertion (got %#x)", ErrInvalid, int(a))
	}
	if w.ep.inFence() || w.ep.lockAll.Load() || w.ep.access[target].Load() != 0 {
		return fmt.Errorf("%w: Lock of rank %d inside another epoch to it", ErrEpoch, target)
	}
	if w.ep.startGroup != nil {
		return fmt.Errorf("%w: Lock of rank %d inside a Start epoch", ErrEpoch, target)
	}
	bit := accShared
	if lt == LockExclusive {
		bit = accExclusive
	}
	if a&NoCheck == 0 {
		var err error
		if lt == LockShared {
			err = w.lockShared(ctx, target)
		} else {
			err = w.lockExclusive(ctx, target)
		}
		if err != nil {
			return err
		}
	} else {
		bit |= accNoCheck
	}
	w.ep.leaveFence()
	w.ep.access[target].Store(bit)
	if target == w.rank {
		w.syncLocal()
	}
	return nil
}

// Unlock completes every RMA call to target of the epoch, at the target,
// and releases the lock (MPI_Win_unlock).
func (w *Window) Unlock(ctx context.Context, target int) error {
	if err := w.lockMu(ctx); err != nil {
		return err
	}
	defer w.mu.Unlock()
	if w.freed.Load() {
		return ErrFreed
	}
	if target == ProcNull {
		w.ep.nullLock.Store(false)
		return nil
	}
	if err := w.checkRank(target); err != nil {
		return err
	}
	bits := w.ep.access[target].Load()
	if bits&(accShared|accExclusive) == 0 {
		return fmt.Errorf("%w: Unlock of rank %d without Lock", ErrEpoch, target)
	}
	if target == w.rank {
		w.syncLocal()
	}
	// A failed call of the epoch, or a lost target, ends it all the same;
	// an ended context does not (call Unlock again).
	err := w.flush(ctx, target)
	if err != nil && ctx.Err() != nil {
		return err
	}
	var uerr error
	switch {
	case bits&accNoCheck != 0: // nothing to release
	case bits&accExclusive != 0:
		uerr = w.unlockExclusive(ctx, target)
	default:
		uerr = w.unlockShared(ctx, target)
	}
	w.ep.access[target].Store(0)
	if err == nil {
		err = uerr
	}
	return err
}

// LockAll starts a shared passive-target access epoch to every rank
// (MPI_Win_lock_all): a shared lock on each (each not lost: calls to a
// lost rank fail with ErrPeerLost). The only assertion it takes
// is NoCheck (no other process holds or will attempt a conflicting lock):
// then no lock is taken. If ctx ends first, LockAll returns its error and
// releases the locks it had taken.
func (w *Window) LockAll(ctx context.Context, asserts ...Assert) error {
	if err := w.lockMu(ctx); err != nil {
		return err
	}
	defer w.mu.Unlock()
	if w.freed.Load() {
		return ErrFreed
	}
	var a Assert
	for _, x := range asserts {
		a |= x
	}
	if a&^NoCheck != 0 {
		return fmt.Errorf("%w: LockAll takes only the NoCheck assertion (got %#x)", ErrInvalid, int(a))
	}
	if w.ep.inFence() || w.ep.lockAll.Load() || w.ep.anyAccess() {
		return fmt.Errorf("%w: LockAll inside another epoch", ErrEpoch)
	}
	if a&NoCheck == 0 {
		for r := range w.remote {
			if w.gone(r) {
				continue // nothing to lock: calls to it fail with its error
			}
			if err := w.lockShared(ctx, r); err != nil {
				if w.gone(r) && ctx.Err() == nil {
					continue // lost meanwhile
				}
				for q := 0; q < r; q++ {
					w.unlockShared(context.Background(), q)
				}
				return err
			}
		}
	}
	w.ep.leaveFence()
	w.ep.noCheck = a&NoCheck != 0
	w.ep.lockAll.Store(true)
	w.syncLocal()
	return nil
}

// UnlockAll completes every RMA call of the epoch at its target and ends
// the epoch (MPI_Win_unlock_all).
func (w *Window) UnlockAll(ctx context.Context) error {
	if err := w.lockMu(ctx); err != nil {
		return err
	}
	defer w.mu.Unlock()
	if w.freed.Load() {
		return ErrFreed
	}
	if !w.ep.lockAll.Load() {
		return fmt.Errorf("%w: UnlockAll without LockAll", ErrEpoch)
	}
	w.syncLocal()
	// As Unlock: an error ends the epoch, an ended context does not.
	first := w.flushAll(ctx)
	if first != nil && ctx.Err() != nil {
		return first
	}
	for r := range w.remote {
		if w.ep.noCheck {
			break // no lock was taken
		}
		if w.gone(r) {
			continue // its window is gone, and what it held with it
		}
		if err := w.unlockShared(ctx, r); err != nil && first == nil {
			first = err
		}
	}
	w.ep.lockAll.Store(false)
	return first
}

// openForFree is ErrEpoch if an epoch other than a fence epoch is open
// and every peer of the window lives.
func (e *epochs) openForFree(ctx context.Context, w *Window) error {
	if err := w.lockMu(ctx); err != nil {
		return err
	}
	open := e.lockAll.Load() || e.anyAccess() || e.exposeGroup != nil
	w.mu.Unlock()
	if !open {
		return nil
	}
	for r := range w.remote {
		if w.f.PeerErr(r) != nil {
			return nil
		}
	}
	return fmt.Errorf("%w: Free inside an epoch (Unlock, UnlockAll, Complete or Wait first)", ErrEpoch)
}

// releaseAll ends whatever epochs are open, for Free.
func (e *epochs) releaseAll(ctx context.Context, w *Window) error {
	// Free may get here with its context ended: then only if w.mu is free.
	if err := w.lockMu(ctx); err != nil && !w.mu.TryLock() {
		return err
	}
	defer w.mu.Unlock()
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	if e.lockAll.Swap(false) && !e.noCheck {
		for r := range w.remote {
			keep(w.unlockShared(ctx, r))
		}
	}
	for r := range e.access {
		bits := e.access[r].Swap(0)
		switch {
		case bits&accNoCheck != 0:
		case bits&accExclusive != 0:
			keep(w.unlockExclusive(ctx, r))
		case bits&accShared != 0:
			keep(w.unlockShared(ctx, r))
		}
	}
	e.fence.Store(false)
	e.nullLock.Store(false)
	e.startOpen.Store(false)
	e.startGroup, e.exposeGroup = nil, nil
	return first
}
