package win

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/onesided/rma/internal/fabric"
)

// Assert is a set of MPI assertions on an epoch call (MPI_MODE_*). Each call
// takes those MPI-4.1 12.5.5 lists for it, and returns ErrInvalid for any
// other, as MPICH does: Fence NoStore, NoPut, NoPrecede and NoSucceed; Post
// NoCheck, NoStore and NoPut; Start, Lock and LockAll NoCheck. This
// implementation uses NoCheck (skip the lock protocol) and NoSucceed (no
// epoch follows a fence).
type Assert int

const (
	NoCheck   Assert = 1 << iota // MPI_MODE_NOCHECK
	NoStore                      // MPI_MODE_NOSTORE
	NoPut                        // MPI_MODE_NOPUT
	NoPrecede                    // MPI_MODE_NOPRECEDE
	NoSucceed                    // MPI_MODE_NOSUCCEED
)

// LockType is a passive-target lock's kind.
type LockType int

const (
	LockShared    LockType = iota + 1 // MPI_LOCK_SHARED
	LockExclusive                     // MPI_LOCK_EXCLUSIVE
)

// Per-target access state bits.
const (
	accShared    uint32 = 1 << iota // Lock(LockShared)
	accExclusive                    // Lock(LockExclusive)
	accStarted                      // in Start's group
	accNoCheck                      // Lock with NoCheck: no lock was taken
)

// The synchronisation page of a window, per rank: lock words, PSCW
// counters (one per peer) and the head of the dynamic region table.
const (
	syncLock   = 0  // readers in the low 32 bits, writers (holding or waiting) in the high 32
	syncOwner  = 8  // rank+1 of the exclusive holder, 0 if none
	syncFence  = 16 // barriers (Fence, Free) entered by the other ranks
	syncPosted = 64 // + 8*r: Posts rank r made to this rank
	regionHead = 64 // dynamic windows: the head of the region table, at syncTable (see dynamic.go)
	regionSize = 32 // dynamic windows: one entry of the region table, in a buffer of its own
)

func syncCompleted(n int) int { return syncPosted + 8*n } // + 8*r: Completes of rank r
func syncTable(n int) int     { return (syncCompleted(n) + 8*n + 63) &^ 63 }
func syncSize(n int) int      { return (syncTable(n) + regionHead + 4095) &^ 4095 }

type epochs struct {
	// fence: a Fence without NoSucceed was the last epoch call; fenceUsed:
	// an RMA call was made since, so the fence epoch has really started
	// (MPI-4.1 12.5.1: a fence starts an epoch only if RMA calls and
	// another fence follow; until then Lock, LockAll, Post and Start may
	// begin other epochs instead).
	fence     atomic.Bool
	fenceUsed atomic.Bool
	lockAll   atomic.Bool
	noCheck   bool            // LockAll with NoCheck: no lock was taken
	access    []atomic.Uint32 // per target
	// nullLock: Lock of ProcNull was called and not yet Unlock of
	// ProcNull, which makes calls to ProcNull valid (they need an epoch);
	// startOpen: a Start epoch is open (startGroup is not nil), readable
	// without mu.
	nullLock  atomic.Bool
	startOpen atomic.Bool

	startGroup  []int    // Start's group; nil outside an access epoch
	started     []uint64 // per target: Posts consumed by Start
	exposeGroup []int    // Post's group; nil outside an exposure epoch
	waited      []uint64 // per origin: Completes consumed by Wait

	barriers       uint64 // barriers this rank entered (see barrier)
	barrierPending bool   // the last one's wait was cut short by its context
}

func (e *epochs) init(n int) {
	e.access = make([]atomic.Uint32, n)
	e.started = make([]uint64, n)
	e.waited = make([]uint64, n)
}

// inFence reports whether a fence epoch has started: a Fence opened one
// and RMA calls were made in it.
func (e *epochs) inFence() bool { return e.fence.Load() && e.fenceUsed.Load() }

// leaveFence gives up a fence epoch in which no RMA call was made, for an
// epoch of another kind.
func (e *epochs) leaveFence() { e.fence.Store(false) }

// anyAccess reports whether an access epoch other than a fence or LockAll
// is open: a Lock, or a Start (even of an empty group).
func (e *epochs) anyAccess() bool {
	if e.startGroup != nil {
		return true
	}
	for i := range e.access {
		if e.access[i].Load() != 0 {
			return true
		}
	}
	return false
}

// accessOpen reports whether some access epoch is open: a Fence without
// NoSucceed was the last fence, or LockAll, a Lock (of ProcNull too) or a
// Start is open. A call to ProcNull needs one, as in MPICH.
func (e *epochs) accessOpen() bool {
	if e.fence.Load() || e.lockAll.Load() || e.startOpen.Load() || e.nullLock.Load() {
		return true
	}
	for i := range e.access {
		if e.access[i].Load() != 0 {
			return true
		}
	}
	return false
}

// passiveOpen reports whether a passive-target epoch is open: LockAll, or a
// Lock of some rank or of ProcNull. FlushAll, and the request-based calls
// and Flush of ProcNull, need one.
func (e *epochs) passiveOpen() bool {
	return e.lockAll.Load() || e.nullLock.Load() || e.anyLocked()
}

// anyLocked reports whether Lock holds some rank.
func (e *epochs) anyLocked() bool {
	for i := range e.access {
		if e.access[i].Load()&(accShared|accExclusive) != 0 {
			return true
		}
	}
	return false
}

// checkRank is ErrRank unless rank is one of the window's.
func (w *Window) checkRank(rank int) error {
	if rank < 0 || rank >= len(w.remote) {
		return fmt.Errorf("%w: rank %d, group of %d", ErrRank, rank, len(w.remote))
	}
	return nil
}

// checkEpoch says whether an RMA call to rank may be made now.
func (w *Window) checkEpoch(ctx context.Context, rank int) error {
	if w.freed.Load() {
		return ErrFreed
	}
	// A call whose context has ended does nothing (not even part of it).
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := w.checkRank(rank); err != nil {
		return err
	}
	if w.ep.lockAll.Load() || w.ep.access[rank].Load() != 0 {
		return nil
	}
	if w.ep.fence.Load() {
		if !w.ep.fenceUsed.Load() {
			w.ep.fenceUsed.Store(true)
		}
		return nil
	}
	return fmt.Errorf("%w: RMA call to rank %d outside an access epoch (Fence, Lock, LockAll or Start first)", ErrEpoch, rank)
}

func (w *Window) syncWord(off int) *uint64 { return (*uint64)(unsafe.Pointer(&w.syncMem[off])) }

// Fence closes the current fence epoch, if any, and opens the next unless
// a has NoSucceed (MPI_Win_fence). It is collective: when it returns, every
// RMA call any rank made on the window before its Fence has completed. As
// MPI says, the epoch a Fence opens starts only if RMA calls follow: until
// the first one, Lock, LockAll, Post and Start may begin other epochs (the
// fence epoch is then given up, as in MPICH).
func (w *Window) Fence(ctx context.Context, a Assert) error {
	if err := w.lockMu(ctx); err != nil {
		return err
	}
	defer w.mu.Unlock()
	if w.freed.Load() {
		return ErrFreed
	}
	if a&^(NoStore|NoPut|NoPrecede|NoSucceed) != 0 {
		return fmt.Errorf("%w: Fence takes NoStore, NoPut, NoPrecede and NoSucceed only (got %#x)", ErrInvalid, int(a))
	}
	if w.ep.lockAll.Load() || w.ep.anyAccess() || w.ep.exposeGroup != nil {
		return fmt.Errorf("%w: Fence inside a lock or post-start-complete-wait epoch", ErrEpoch)
	}
	if err := w.flushAll(ctx); err != nil {
		return err
	}
	if err := w.barrier(ctx); err != nil {
		return err
	}
	w.ep.fence.Store(a&NoSucceed == 0)
	w.ep.fenceUsed.Store(false)
	return nil
}

// syncLocal orders this goroutine's loads and stores of the local window
// memory with the engine's updates (see fabric.SyncEngine). The calls that
// end or begin an epoch exposing this rank's memory make it: Lock and
// Unlock of this rank, LockAll and UnlockAll, Post, Wait and a true Test,
// Sync, and Fence and Free (in barrier).
func (w *Window) syncLocal() { w.f.SyncEngine() }

// barrier is the window's own barrier, for Fence and Free. Each rank adds
// one to the syncFence word of every other rank with a NIC atomic, then
// waits until its own word holds one from each for every barrier it has
// entered. It belongs to the window, not to the group (whose Barrier runs
// over the bootstrap connections): Fences of two windows of one group,
// called from two goroutines, never pair with each other, as MPI has each
// window a communication context of its own. The sum is exact: no rank
// can enter barrier k+1 before every rank has entered barrier k, so while
// a rank waits in barrier k the others have each entered k-1, k or, only
// once all have entered k, k+1.
//
// The notices, once posted, are awaited whatever ctx says (see syncAdd):
// a barrier whose wait ctx cut short is pending, and the next call resumes
// its wait instead of entering another (a Fence retried after its context
// ended completes the one the other ranks have seen).
func (w *Window) barrier(ctx context.Context) error {
	n, me := len(w.remote), w.g.Rank()
	if !w.ep.barrierPending {
		if err := ctx.Err(); err != nil {
			return err
		}
		w.syncLocal()
		w.ep.barriers++
		w.ep.barrierPending = true
		var first error // every live rank is told, so that none waits for ever
		for r := range n {
			if r == me {
				continue
			}
			if _, err := w.syncAdd(ctx, r, syncFence, 1); err != nil && first == nil {
				first = err
			}
		}
		if first != nil {
			return first
		}
	}
	p := w.syncWord(syncFence)
	want := w.ep.barriers * uint64(n-1)
	for i := 0; atomic.LoadUint64(p) < want; i++ {
		// A rank that closed the group has left this barrier already (it
		// passes only once every rank has entered); one lost has not.
		for r := range n {
			if err := w.f.PeerErr(r); err != nil && !errors.Is(err, fabric.ErrPeerLeft) {
				return err
			}
		}
		if err := backoff(ctx, i); err != nil {
			return err
		}
	}
	w.ep.barrierPending = false
	w.syncLocal()
	return nil
}

// lockMu takes w.mu, which the epoch calls hold while they wait (a Lock
// for a lock held elsewhere, a Start for its Posts), unless ctx ends first:
// a call made meanwhile from another goroutine (a misuse of the window,
// but not a reason to ignore its context) waits at most that long.
func (w *Window) lockMu(ctx context.Context) error {
	for i := 0; !w.mu.TryLock(); i++ {
		if err := backoff(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// backoff waits a little longer each time it is called in a poll loop.
func backoff(ctx context.Context, i int) error {
	if i < 16 {
		runtime.Gosched()
	} else {
		d := time.Microsecond << min(i-16, 10)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	return ctx.Err()
}

// landTimeout bounds the wait for a synchronisation atomic that has been
// posted: far above the time the transport takes to give up on a dead peer.
const landTimeout = 10 * time.Second

// syncAdd and syncCAS run a NIC atomic on rank's sync page for the lock and
// post-start-complete-wait protocols. A posted atomic lands whether or not
// its caller still waits, so these always wait for its completion (bounded
// by landTimeout), whatever ctx says: the protocols then know exactly what
// they have changed, and can undo it when the caller gives up. The caller's
// context is checked between atomics, never during one.
func (w *Window) syncAdd(ctx context.Context, rank, off int, add uint64) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), landTimeout)
	defer cancel()
	t := &w.remote[rank]
	return w.f.FetchAdd(ctx, rank, t.syncAddr+uint64(off), t.syncRKey, add)
}

func (w *Window) syncCAS(ctx context.Context, rank, off int, compare, swap uint64) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), landTimeout)
	defer cancel()
	t := &w.remote[rank]
	return w.f.CompareSwap(ctx, rank, t.syncAddr+uint64(off), t.syncRKey, compare, swap)
}

// undo reverts a partial lock acquisition, even when the caller's context
// has ended.
func (w *Window) undo(rank int, off int, add uint64) {
	w.syncAdd(context.Background(), rank, off, add)
}

// lockShared takes a shared lock on rank: it adds a reader, and steps back
// while a writer holds or waits for the lock. If ctx ends, it leaves the
// lock word as it found it.
func (w *Window) lockShared(ctx context.Context, rank int) error {
	t := &w.remote[rank]
	lock := t.syncAddr + syncLock
	for i := 0; ; {
		if err := ctx.Err(); err != nil {
			return err
		}
		old, err := w.syncAdd(ctx, rank, syncLock, 1)
		if err != nil {
			return err
		}
		if old>>32 == 0 {
			return nil
		}
		// A writer holds or waits: step back so it is not starved.
		if _, err := w.syncAdd(ctx, rank, syncLock, ^uint64(0)); err != nil {
			return err
		}
		for {
			v, err := w.f.Read8(ctx, rank, lock, t.syncRKey)
			if err != nil {
				return err
			}
			if v>>32 == 0 {
				break
			}
			if err := backoff(ctx, i); err != nil {
				return err
			}
			i++
		}
	}
}

// lockExclusive takes the exclusive lock on rank: it announces a writer
// (which stops new readers), takes the owner word, then waits for the
// readers to leave. If ctx ends, it undoes exactly what it had done.
func (w *Window) lockExclusive(ctx context.Context, rank int) (err error) {
	t := &w.remote[rank]
	lock := t.syncAddr + syncLock
	me := uint64(w.g.Rank() + 1)
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := w.syncAdd(ctx, rank, syncLock, 1<<32); err != nil {
		return err
	}
	owned := false
	defer func() {
		if err != nil {
			if owned {
				w.undo(rank, syncOwner, -me)
			}
			w.undo(rank, syncLock, ^uint64(1<<32-1))
		}
	}()
	for i := 0; ; i++ {
		old, err := w.syncCAS(ctx, rank, syncOwner, 0, me)
		if err != nil {
			return err
		}
		if old == 0 {
			owned = true
			break
		}
		if err := backoff(ctx, i); err != nil {
			return err
		}
	}
	for i := 0; ; i++ {
		v, err := w.f.Read8(ctx, rank, lock, t.syncRKey)
		if err != nil {
			return err
		}
		if uint32(v) == 0 {
			return nil
		}
		if err := backoff(ctx, i); err != nil {
			return err
		}
	}
}

func (w *Window) unlockShared(ctx context.Context, rank int) error {
	_, err := w.syncAdd(ctx, rank, syncLock, ^uint64(0))
	return err
}

func (w *Window) unlockExclusive(ctx context.Context, rank int) error {
	me := uint64(w.g.Rank() + 1)
	if _, err := w.syncCAS(ctx, rank, syncOwner, me, 0); err != nil {
		return err
	}
	_, err := w.syncAdd(ctx, rank, syncLock, ^uint64(1<<32-1))
	return err
}

// Lock starts a passive-target access epoch to target (MPI_Win_lock). A
// shared lock admits other shared lockers; an exclusive one none. The lock
// is a reader-writer lock in target's memory driven by NIC atomics, so the
// target's CPU takes no part; a waiting writer stops new readers, so a
// stream of readers cannot starve it. With NoCheck no lock is taken. If ctx
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
	if target == w.g.Rank() {
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
	if target == w.g.Rank() {
		w.syncLocal()
	}
	if err := w.flush(ctx, target); err != nil {
		return err
	}
	var err error
	switch {
	case bits&accNoCheck != 0: // nothing to release
	case bits&accExclusive != 0:
		err = w.unlockExclusive(ctx, target)
	default:
		err = w.unlockShared(ctx, target)
	}
	w.ep.access[target].Store(0)
	return err
}

// LockAll starts a shared passive-target access epoch to every rank
// (MPI_Win_lock_all): a shared lock on each. The only assertion it takes
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
			if err := w.lockShared(ctx, r); err != nil {
				for q := 0; q < r; q++ {
					w.undo(q, syncLock, ^uint64(0))
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
	if err := w.flushAll(ctx); err != nil {
		return err
	}
	var first error
	for r := range w.remote {
		if w.ep.noCheck {
			break // no lock was taken
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
	if err := w.lockMu(ctx); err != nil {
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

// Flush completes, at the target, every RMA call this rank made to target
// (MPI_Win_flush). As MPI says, it may be called only in a passive-target
// epoch to target (Lock of target, or LockAll); elsewhere, in a fence or
// post-start-complete-wait epoch too, it fails with ErrEpoch, as MPICH's
// does.
func (w *Window) Flush(ctx context.Context, target int) error {
	if err := w.passive(target, "flush"); err != nil || target == ProcNull {
		return err
	}
	return w.flush(ctx, target)
}

// FlushAll completes every RMA call to every target (MPI_Win_flush_all).
// Like Flush, it may be called only in a passive-target epoch: LockAll,
// or a Lock of some rank.
func (w *Window) FlushAll(ctx context.Context) error {
	if w.freed.Load() {
		return ErrFreed
	}
	if !w.ep.passiveOpen() {
		return fmt.Errorf("%w: flush outside a passive-target epoch (Lock or LockAll first)", ErrEpoch)
	}
	return w.flushAll(ctx)
}

// FlushLocal completes every RMA call to target at the origin: its buffers
// may be reused (MPI_Win_flush_local). Origin data is copied when a call
// is made, so this completes them remotely, which implies it.
func (w *Window) FlushLocal(ctx context.Context, target int) error { return w.Flush(ctx, target) }

// FlushLocalAll is FlushLocal for every target (MPI_Win_flush_local_all).
func (w *Window) FlushLocalAll(ctx context.Context) error { return w.FlushAll(ctx) }

// Sync makes this rank's loads and stores to its window memory and the
// RMA updates it has seen consistent with each other (MPI_Win_sync): a full
// memory barrier, and a synchronisation with the goroutine that applies
// other ranks' active messages.
func (w *Window) Sync() error {
	if w.freed.Load() {
		return ErrFreed
	}
	var x atomic.Uint64
	x.Add(1) // a locked instruction: a full fence on every platform Go supports
	w.syncLocal()
	return nil
}

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
	me := w.g.Rank()
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
		if err := w.waitWord(ctx, syncPosted+8*t, w.ep.started[t]+1); err != nil {
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
	me := w.g.Rank()
	for _, t := range w.ep.startGroup {
		if err := w.flush(ctx, t); err != nil {
			return err
		}
	}
	// Each target is told once: a Complete retried after an error does not
	// tell again the targets already told.
	for len(w.ep.startGroup) > 0 {
		t := w.ep.startGroup[0]
		if _, err := w.syncAdd(ctx, t, syncCompleted(len(w.remote))+8*me, 1); err != nil {
			return err
		}
		w.ep.access[t].Store(0)
		w.ep.startGroup = w.ep.startGroup[1:]
	}
	w.ep.startGroup = nil
	w.ep.startOpen.Store(false)
	return nil
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
	n := len(w.remote)
	for _, o := range w.ep.exposeGroup {
		if err := w.waitWord(ctx, syncCompleted(n)+8*o, w.ep.waited[o]+1); err != nil {
			return err
		}
	}
	w.endExposure()
	return nil
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

// waitWord waits until this rank's sync word at off reaches want; peers
// raise it with NIC atomics.
func (w *Window) waitWord(ctx context.Context, off int, want uint64) error {
	p := w.syncWord(off)
	for i := 0; atomic.LoadUint64(p) < want; i++ {
		if err := backoff(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// flush completes every operation to target: request-based operations
// completed (see completeRequests), active messages answered, RDMA
// operations completed; it returns the first error of a fire-and-forget
// operation since the last flush.
func (w *Window) flush(ctx context.Context, target int) error {
	if err := w.completeRequests(ctx, target); err != nil {
		return err
	}
	if err := w.f.FlushMessages(ctx, target); err != nil {
		return err
	}
	err := w.f.Flush(ctx, target)
	if aerr := w.sinks[target].Take(); aerr != nil {
		return w.f.Settled(ctx, target, aerr) // an accumulate lost with a dying peer's connection
	}
	return err
}

func (w *Window) flushAll(ctx context.Context) error {
	var first error
	for r := range w.remote {
		if err := w.flush(ctx, r); err != nil && first == nil {
			first = err
		}
	}
	w.endRequests(first)
	return first
}

// ordered waits, when the window keeps accumulate ordering, until this
// rank's accumulates to target have been applied, so that an RDMA READ or
// NIC atomic posted next cannot overtake them.
func (w *Window) ordered(ctx context.Context, target int) error {
	if w.cfg.ordered && w.f.Pending(target) {
		return w.f.FlushMessages(ctx, target)
	}
	return nil
}
