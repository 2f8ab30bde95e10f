package win

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/onesided/rma"
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

// LockType is a passive-target lock's kind (rma.LockType).
type LockType = rma.LockType

const (
	LockShared    = rma.LockShared    // MPI_LOCK_SHARED
	LockExclusive = rma.LockExclusive // MPI_LOCK_EXCLUSIVE
)

// Per-target access state bits.
const (
	accShared    uint32 = 1 << iota // Lock(LockShared)
	accExclusive                    // Lock(LockExclusive)
	accStarted                      // in Start's group
	accNoCheck                      // Lock with NoCheck: no lock was taken
)

// The synchronisation page of a window, per rank: the lock's owner word,
// one word per peer for each of the shared lock, the window's barrier and
// the PSCW counters, and the head of the dynamic region table. Every word
// a peer changes belongs to one rank (the owner word names its rank), so
// that the survivors of a lost rank can take back what it held.
const (
	syncOwner  = 0  // rank+1 of the writer that holds the lock or waits for its readers, 0 if none
	syncPosted = 64 // + 8*r: Posts rank r made to this rank
	regionHead = 64 // dynamic windows: the head of the region table, at syncTable (see dynamic.go)
	regionSize = 32 // dynamic windows: one entry of the region table, in a buffer of its own
)

func syncCompleted(n int) int { return syncPosted + 8*n }       // + 8*r: Completes of rank r
func syncFences(n int) int    { return syncCompleted(n) + 8*n } // + 8*r: barriers (Fence, Free) rank r entered
func syncReaders(n int) int   { return syncFences(n) + 8*n }    // + 8*r: 1 while rank r holds or takes a shared lock
func syncTable(n int) int     { return (syncReaders(n) + 8*n + 63) &^ 63 }
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
	barrierErr     error  // the pending one could not tell a live rank
	readers        []byte // lockExclusive's copy of a target's shared-lock words (under mu)
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
	// An error of the calls flushed does not keep this rank from the
	// barrier the others wait in; one whose context has ended does.
	err := w.flushAll(ctx)
	if err != nil && ctx.Err() != nil {
		return err
	}
	if berr := w.barrier(ctx); berr != nil {
		if w.ep.barrierPending {
			return berr // cut short by ctx: the next Fence completes it
		}
		// A rank is gone: no fence epoch can follow.
		w.ep.fence.Store(false)
		return berr
	}
	w.ep.fence.Store(a&NoSucceed == 0)
	w.ep.fenceUsed.Store(false)
	return err
}

// syncLocal orders this goroutine's loads and stores of the local window
// memory with the engine's updates (see fabric.SyncEngine). The calls that
// end or begin an epoch exposing this rank's memory make it: Lock and
// Unlock of this rank, LockAll and UnlockAll, Post, Wait and a true Test,
// Sync, and Fence and Free (in barrier).
func (w *Window) syncLocal() { w.f.SyncEngine() }

// barrier is the window's own barrier, for Fence and Free. Each rank adds
// one to its own word of syncFences in every other rank's page with a NIC
// atomic, then waits until the word of each other rank in its own page
// counts every barrier it has entered: rank r has entered barrier k when
// its word reaches k. It belongs to the window, not to the group (whose
// Barrier runs over the bootstrap connections): Fences of two windows of
// one group, called from two goroutines, never pair with each other, as
// MPI has each window a communication context of its own. A rank that is
// lost, or closed the group, before it entered is not waited for: the
// barrier waits for the others, then fails with its error (one that
// entered and then closed the group has passed it).
//
// The notices, once posted, are awaited whatever ctx says (see syncAdd):
// a barrier whose wait ctx cut short is pending, and the next call resumes
// its wait instead of entering another (a Fence retried after its context
// ended completes the one the other ranks have seen).
func (w *Window) barrier(ctx context.Context) error {
	n, me := len(w.remote), w.rank
	if !w.ep.barrierPending {
		if err := ctx.Err(); err != nil {
			return err
		}
		w.syncLocal()
		w.ep.barriers++
		w.ep.barrierPending = true
		w.ep.barrierErr = nil
		for r := range n {
			if r == me || w.gone(r) {
				continue
			}
			// Every live rank is told, so that none waits for ever.
			if _, err := w.syncAdd(ctx, r, syncFences(n)+8*me, 1); err != nil && !w.gone(r) && w.ep.barrierErr == nil {
				w.ep.barrierErr = err
			}
		}
	}
	err := w.ep.barrierErr
	for r := range n {
		if r == me {
			continue
		}
		p := w.syncWord(syncFences(n) + 8*r)
		for i := 0; atomic.LoadUint64(p) < w.ep.barriers; i++ {
			if perr := w.f.PeerErr(r); perr != nil {
				if atomic.LoadUint64(p) < w.ep.barriers && err == nil {
					err = perr
				}
				break
			}
			if err := backoff(ctx, i); err != nil {
				return err
			}
		}
	}
	w.ep.barrierPending = false
	w.syncLocal()
	return err
}

// lockMu takes w.mu, which the epoch calls hold while they wait (a Lock
// for a lock held elsewhere, a Start for its Posts), unless ctx ends first:
// a call made meanwhile from another goroutine (a misuse of the window,
// but not a reason to ignore its context) waits at most that long. Every
// epoch call begins with it, so that one whose context has ended already
// does nothing.
func (w *Window) lockMu(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
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

// syncRead reads rank's sync words at off into dst (8 bytes each),
// within ctx.
func (w *Window) syncRead(ctx context.Context, rank, off int, dst []byte) error {
	t := &w.remote[rank]
	return w.f.Read(ctx, rank, dst, t.syncAddr+uint64(off), t.syncRKey)
}

// gone reports whether window rank r is lost or has closed the group: what
// it held of a lock is taken back by those who wait for it. (Once this
// rank's own group is closed, every peer reads as closed, not as gone.)
func (w *Window) gone(r int) bool { return errors.Is(w.f.PeerErr(r), ErrPeerLost) }

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

// waitWord waits until this rank's sync word at off reaches want; rank
// raises it with NIC atomics. If rank is gone first, it fails with rank's
// error.
func (w *Window) waitWord(ctx context.Context, rank, off int, want uint64) error {
	p := w.syncWord(off)
	for i := 0; atomic.LoadUint64(p) < want; i++ {
		if err := w.f.PeerErr(rank); err != nil {
			if atomic.LoadUint64(p) >= want {
				break
			}
			return err
		}
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
// rank's accumulates (and packed Puts) to target have been applied, so
// that an RDMA READ or NIC atomic posted next cannot overtake them.
func (w *Window) ordered(ctx context.Context, target int) error {
	if w.cfg.ordered && w.f.Pending(target) {
		return w.f.FlushMessages(ctx, target)
	}
	return nil
}
