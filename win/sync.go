package win

import (
	"context"
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
