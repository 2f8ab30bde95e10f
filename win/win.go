package win

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/fallback"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/internal/fabric"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/verbs"
)

// Errors of window calls; match them with errors.Is. Errors from the
// network wrap verbs.ErrPeerLost, verbs.ErrRemoteAccess and the like.
var (
	// ErrRank: the target rank is not in the group.
	ErrRank = errors.New("win: target rank out of range")
	// ErrOutOfWindow: the target region is not inside the target's window.
	ErrOutOfWindow = errors.New("win: target region outside the window")
	// ErrAlignment: a NIC atomic's target is not 8-byte aligned.
	ErrAlignment = errors.New("win: misaligned atomic target")
	// ErrInvalid: a bad argument (buffer length, negative size, ...).
	ErrInvalid = errors.New("win: invalid argument")
	// ErrNotSupported: the operation is valid MPI but not available on
	// this window (yet).
	ErrNotSupported = verbs.ErrNotSupported
	// ErrEpoch: the call needs an access epoch that is not open (or
	// opens one that is already open).
	ErrEpoch = errors.New("win: wrong synchronization epoch")
	// ErrFreed: the window was freed.
	ErrFreed = errors.New("win: window freed")
	// ErrUndeclared: the window declared the ops it uses, and not this one.
	ErrUndeclared = errors.New("win: op not declared for this window")
)

// Window is memory that every process of a group exposes for remote access
// (MPI_Win). Its RMA calls are safe for concurrent use from many
// goroutines; Allocate, Free and the epoch calls are collective or
// per-process synchronisation and are called from one goroutine.
type Window struct {
	g   *group.Group
	f   *fabric.Fabric
	mem []byte
	mr  *verbs.MR

	size     int
	dispUnit int
	remote   []target
	policy   atomics.Policy

	id      uint32
	cfg     config
	target  *fallback.Target
	client  *fallback.Client
	async   []fallback.Op        // per target: fire-and-forget accumulates
	sinks   []fallback.ErrorSink // per target: their first error, for Flush
	lockAll atomic.Bool
	freed   atomic.Bool
	mu      sync.Mutex // epoch calls
}

type target struct {
	addr     uint64
	rkey     uint32
	size     int64
	dispUnit int64
}

const targetInfoSize = 8 + 4 + 8 + 8

// Allocate creates a window of size bytes on every rank of g, with the
// given displacement unit (MPI_Win_allocate). It is collective; sizes may
// differ between ranks. The memory is page aligned, zeroed, off the Go heap
// and registered for remote read, write and atomics.
func Allocate(ctx context.Context, g *group.Group, size, dispUnit int, opts ...Option) (*Window, error) {
	if size < 0 || dispUnit < 1 {
		return nil, fmt.Errorf("%w: size %d, displacement unit %d", ErrInvalid, size, dispUnit)
	}
	w := &Window{g: g, f: g.Fabric(), size: size, dispUnit: dispUnit, id: g.NextWindowID()}
	w.cfg = config{ordered: true}
	for _, o := range opts {
		o(&w.cfg)
	}
	switch {
	case w.cfg.anyOp:
		w.policy = atomics.AnyOpPolicy()
	case w.cfg.pairs != nil:
		w.policy = atomics.DeclaredPolicy(g.DeviceAttr().AtomicCap, g.NICAtomics(), w.cfg.pairs)
	default:
		w.policy = atomics.DefaultPolicy(g.DeviceAttr().AtomicCap, g.NICAtomics())
	}
	w.target, w.client = g.Engine()
	w.async = make([]fallback.Op, g.Size())
	w.sinks = make([]fallback.ErrorSink, g.Size())
	for r := range w.async {
		w.async[r].Sink = &w.sinks[r]
	}
	mem, err := verbs.Alloc(max(size, 8))
	if err != nil {
		return nil, err
	}
	w.mem = mem
	if w.mr, err = w.f.Register(mem, verbs.AccessRemoteRead|verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic); err != nil {
		verbs.Free(mem)
		return nil, err
	}
	// Serve accumulates to the window before any rank can learn of it.
	w.target.AddWindow(w.id, w.mem[:size:size])
	var mine [targetInfoSize]byte
	binary.LittleEndian.PutUint64(mine[0:], w.mr.Addr())
	binary.LittleEndian.PutUint32(mine[8:], w.mr.RKey())
	binary.LittleEndian.PutUint64(mine[12:], uint64(size))
	binary.LittleEndian.PutUint64(mine[20:], uint64(dispUnit))
	all, err := g.AllGather(ctx, mine[:])
	if err != nil {
		w.target.RemoveWindow(w.id)
		w.release()
		return nil, err
	}
	w.remote = make([]target, len(all))
	for r, b := range all {
		if len(b) != targetInfoSize {
			w.target.RemoveWindow(w.id)
			w.release()
			return nil, fmt.Errorf("win: rank %d sent %d bytes of window info", r, len(b))
		}
		w.remote[r] = target{
			addr:     binary.LittleEndian.Uint64(b[0:]),
			rkey:     binary.LittleEndian.Uint32(b[8:]),
			size:     int64(binary.LittleEndian.Uint64(b[12:])),
			dispUnit: int64(binary.LittleEndian.Uint64(b[20:])),
		}
	}
	return w, nil
}

func (w *Window) release() {
	if w.mr != nil {
		w.mr.Close()
		w.mr = nil
	}
	if w.mem != nil {
		verbs.Free(w.mem)
		w.mem = nil
	}
}

// Free releases the window on every rank (MPI_Win_free). It is collective:
// it completes this rank's outstanding operations and waits until every
// rank has done so before the memory is deregistered.
func (w *Window) Free(ctx context.Context) error {
	if w.freed.Swap(true) {
		return ErrFreed
	}
	err := w.flushAll(ctx)
	if berr := w.g.Barrier(ctx); err == nil {
		err = berr
	}
	w.target.RemoveWindow(w.id)
	w.release()
	return err
}

// Bytes is this rank's window memory. Local loads and stores on it follow
// MPI's rules for the window's local copy: synchronise with the epoch calls.
func (w *Window) Bytes() []byte { return w.mem[:w.size:w.size] }

// Size is this rank's window size in bytes; DispUnit its displacement unit.
func (w *Window) Size() int     { return w.size }
func (w *Window) DispUnit() int { return w.dispUnit }

// Group is the window's group.
func (w *Window) Group() *group.Group { return w.g }

// RouteFetchAndOp says which path FetchAndOp(o) on dt takes on this window.
func (w *Window) RouteFetchAndOp(o op.Op, dt datatype.Basic) atomics.Route {
	return w.policy.FetchAndOp(o, dt)
}

// RouteCompareAndSwap says which path CompareAndSwap on dt takes.
func (w *Window) RouteCompareAndSwap(dt datatype.Basic) atomics.Route {
	return w.policy.CompareAndSwap(dt)
}

// LockAll starts a shared passive-target access epoch to every rank
// (MPI_Win_lock_all).
func (w *Window) LockAll(ctx context.Context) error {
	if w.freed.Load() {
		return ErrFreed
	}
	if !w.lockAll.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: LockAll while already locked", ErrEpoch)
	}
	return nil
}

// UnlockAll completes every operation of the epoch at every target and ends
// it (MPI_Win_unlock_all).
func (w *Window) UnlockAll(ctx context.Context) error {
	if !w.lockAll.Load() {
		return fmt.Errorf("%w: UnlockAll without LockAll", ErrEpoch)
	}
	if err := w.flushAll(ctx); err != nil {
		return err
	}
	w.lockAll.Store(false)
	return nil
}

// Flush completes, at the target, every operation this rank started to
// target (MPI_Win_flush).
func (w *Window) Flush(ctx context.Context, target int) error {
	if err := w.checkEpoch(target); err != nil {
		return err
	}
	return w.flush(ctx, target)
}

// flush completes every operation to target: active messages answered,
// RDMA operations completed; it returns the first error of a
// fire-and-forget operation since the last flush.
func (w *Window) flush(ctx context.Context, target int) error {
	if err := w.f.FlushMessages(ctx, target); err != nil {
		return err
	}
	err := w.f.Flush(ctx, target)
	if aerr := w.sinks[target].Take(); aerr != nil {
		return aerr
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

// FlushAll completes every operation to every target (MPI_Win_flush_all).
func (w *Window) FlushAll(ctx context.Context) error {
	if err := w.checkEpoch(0); err != nil {
		return err
	}
	return w.flushAll(ctx)
}

func (w *Window) checkEpoch(rank int) error {
	if w.freed.Load() {
		return ErrFreed
	}
	if rank < 0 || rank >= len(w.remote) {
		return fmt.Errorf("%w: rank %d, group of %d", ErrRank, rank, len(w.remote))
	}
	if !w.lockAll.Load() {
		return fmt.Errorf("%w: RMA call outside an access epoch (call LockAll first)", ErrEpoch)
	}
	return nil
}

// address checks that n bytes at displacement disp lie in rank's window and
// returns their remote address.
func (w *Window) address(rank, disp, n int) (uint64, error) {
	if err := w.checkEpoch(rank); err != nil {
		return 0, err
	}
	t := &w.remote[rank]
	if disp < 0 || n < 0 {
		return 0, fmt.Errorf("%w: displacement %d, length %d", ErrOutOfWindow, disp, n)
	}
	off := int64(disp) * t.dispUnit
	if off/t.dispUnit != int64(disp) || off > t.size || int64(n) > t.size-off {
		return 0, fmt.Errorf("%w: %d bytes at displacement %d (x%d) of rank %d's %d-byte window",
			ErrOutOfWindow, n, disp, t.dispUnit, rank, t.size)
	}
	return t.addr + uint64(off), nil
}

// Put writes origin to target's window at disp (MPI_Put). It returns once
// origin may be reused; Flush, FlushAll or UnlockAll complete it at the target.
func (w *Window) Put(ctx context.Context, origin []byte, target, disp int) error {
	addr, err := w.address(target, disp, len(origin))
	if err != nil || len(origin) == 0 {
		return err
	}
	return w.f.Write(ctx, target, origin, addr, w.remote[target].rkey)
}

// Get reads len(result) bytes of target's window at disp into result
// (MPI_Get). It returns when result holds them.
func (w *Window) Get(ctx context.Context, result []byte, target, disp int) error {
	addr, err := w.address(target, disp, len(result))
	if err != nil || len(result) == 0 {
		return err
	}
	if err := w.ordered(ctx, target); err != nil {
		return err
	}
	return w.f.Read(ctx, target, result, addr, w.remote[target].rkey)
}

// FetchAndOp applies o to one element of type dt at target's disp with the
// operand in origin, and returns the element's old value in result
// (MPI_Fetch_and_op). origin and result hold one dt each (origin is
// ignored for NO_OP). It returns when result holds the old value.
func (w *Window) FetchAndOp(ctx context.Context, origin, result []byte, dt datatype.Basic, target, disp int, o op.Op) error {
	if err := op.Check(o, dt, op.GetAccumulate); err != nil {
		return err
	}
	n := dt.Size()
	if len(result) != n || (o != op.NoOp && len(origin) != n) {
		return fmt.Errorf("%w: FetchAndOp on %v takes %d-byte buffers (origin %d, result %d)", ErrInvalid, dt, n, len(origin), len(result))
	}
	if !w.policy.Declared(o, dt) {
		return fmt.Errorf("%w: %v on %v", ErrUndeclared, o, dt)
	}
	route := w.policy.FetchAndOp(o, dt)
	if route == atomics.Engine || route == atomics.NICCompareSwapLoop {
		var ob []byte
		if o != op.NoOp {
			ob = origin
		}
		return w.fetching(ctx, fallback.KindGetAccumulate, o, Buffer{ob, dt.Type(), 1}, Buffer{result, dt.Type(), 1},
			Region{Rank: target, Disp: disp, Type: dt.Type(), Count: 1})
	}
	addr, err := w.atomicAddress(target, disp)
	if err != nil {
		return err
	}
	if err := w.ordered(ctx, target); err != nil {
		return err
	}
	var old uint64
	switch route {
	case atomics.NICFetchAdd:
		old, err = w.f.FetchAdd(ctx, target, addr, w.remote[target].rkey, load64(origin))
	case atomics.NICRead:
		old, err = w.f.Read8(ctx, target, addr, w.remote[target].rkey)
	}
	if err != nil {
		return err
	}
	store64(result, old)
	return nil
}

// CompareAndSwap replaces one element of type dt at target's disp by
// origin if it equals compare, and returns its old value in result
// (MPI_Compare_and_swap). It returns when result holds the old value.
func (w *Window) CompareAndSwap(ctx context.Context, origin, compare, result []byte, dt datatype.Basic, target, disp int) error {
	if err := op.CheckCompareAndSwap(dt); err != nil {
		return err
	}
	n := dt.Size()
	if len(origin) != n || len(compare) != n || len(result) != n {
		return fmt.Errorf("%w: CompareAndSwap on %v takes %d-byte buffers", ErrInvalid, dt, n)
	}
	if w.policy.CompareAndSwap(dt) == atomics.Engine {
		return w.compareAndSwapEngine(ctx, origin, compare, result, dt, target, disp)
	}
	addr, err := w.atomicAddress(target, disp)
	if err != nil {
		return err
	}
	if err := w.ordered(ctx, target); err != nil {
		return err
	}
	old, err := w.f.CompareSwap(ctx, target, addr, w.remote[target].rkey, load64(compare), load64(origin))
	if err != nil {
		return err
	}
	store64(result, old)
	return nil
}

func (w *Window) atomicAddress(target, disp int) (uint64, error) {
	addr, err := w.address(target, disp, 8)
	if err != nil {
		return 0, err
	}
	if addr%8 != 0 {
		return 0, fmt.Errorf("%w: displacement %d (x%d) is %d bytes past an 8-byte boundary",
			ErrAlignment, disp, w.remote[target].dispUnit, addr%8)
	}
	return addr, nil
}

// load64 and store64 move an 8-byte element in host byte order, the order
// of window memory and of the NIC's atomic operands.
func load64(b []byte) uint64     { return binary.NativeEndian.Uint64(b) }
func store64(b []byte, v uint64) { binary.NativeEndian.PutUint64(b, v) }
