package win

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/fallback"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/internal/errs"
	"github.com/onesided/rma/internal/fabric"
	"github.com/onesided/rma/internal/grouphooks"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/verbs"
)

// Errors of window calls; match them with errors.Is. Errors from the
// network wrap verbs.ErrPeerLost, verbs.ErrRemoteAccess and the like.
var (
	// ErrRank: the target rank is not in the group (an ErrInvalid).
	ErrRank = errs.Refine("win: target rank out of range", errs.ErrInvalid)
	// ErrOutOfWindow: the target region is not inside the target's window
	// (fallback.ErrOutOfWindow, a target's refusal, matches it too).
	ErrOutOfWindow = errs.ErrOutOfWindow
	// ErrAlignment: a NIC atomic's target is not 8-byte aligned.
	ErrAlignment = errs.ErrAlignment
	// ErrInvalid: a bad argument (buffer length, negative size, ...). The
	// ErrInvalid of packages verbs, datatype, op and coll match it too.
	ErrInvalid = errs.ErrInvalid
	// ErrNotSupported: the operation is valid MPI but not available here.
	ErrNotSupported = verbs.ErrNotSupported
	// ErrEpoch: the call needs a synchronisation epoch that is not open,
	// or opens one that conflicts with an open one.
	ErrEpoch = errs.ErrEpoch
	// ErrFreed: the window was freed.
	ErrFreed = errors.New("win: window freed")
	// ErrPeerLost: the target process is gone (it stopped answering for
	// the group's peer timeout).
	ErrPeerLost = verbs.ErrPeerLost
	// ErrOutcomeUnknown: the connection to a live target failed before the
	// completion of a NIC atomic told whether the target applied it (the
	// transport gave up on a lossy wire); the update may or may not have
	// happened.
	ErrOutcomeUnknown = verbs.ErrOutcomeUnknown
	// ErrUndeclared: the window declared the ops it uses, and not this one.
	ErrUndeclared = errors.New("win: op not declared for this window")
	// ErrNotCreated: window creation failed on another rank (its own
	// error is returned there), so it failed on every rank.
	ErrNotCreated = errors.New("win: window not created on every rank")
)

// ProcNull is the target rank of a call that does nothing (MPI_PROC_NULL).
// As in MPICH, such a call still needs the epoch a call to any rank needs,
// and fails with ErrEpoch outside it: an RMA call needs an access epoch of
// any kind (Fence, Lock, LockAll or Start), a request-based call, Flush or
// FlushLocal a passive-target one (Lock or LockAll). Lock of ProcNull opens
// one for calls to ProcNull, and Unlock of ProcNull closes it; neither
// waits or locks anything. An accumulate-family call checks its op,
// datatype and buffer sizes first, as MPICH does, whatever the target.
// Its value is Open MPI's; -1 stays an invalid rank.
const ProcNull = -2

// nullCall is the result of an RMA call to ProcNull: nothing, in an
// access epoch of any kind; ErrEpoch outside one (MPICH checks the epoch
// before it looks at the target).
func (w *Window) nullCall() error {
	if w.freed.Load() {
		return ErrFreed
	}
	if !w.ep.accessOpen() {
		return fmt.Errorf("%w: RMA call to ProcNull outside an access epoch (Fence, Lock, LockAll or Start first)", ErrEpoch)
	}
	return nil
}

// nullPassive is the result of a request-based call, Flush or FlushLocal
// of ProcNull: nothing, in a passive-target epoch (LockAll, or a Lock of
// some rank or of ProcNull); ErrEpoch elsewhere, as for any other target.
func (w *Window) nullPassive() error {
	if w.freed.Load() {
		return ErrFreed
	}
	if !w.ep.passiveOpen() {
		return fmt.Errorf("%w: request-based call or flush of ProcNull outside a passive-target epoch (Lock or LockAll first)", ErrEpoch)
	}
	return nil
}

// Flavor says how a window's memory was provided (MPI_WIN_CREATE_FLAVOR).
type Flavor int

const (
	FlavorAllocate Flavor = iota // MPI_WIN_FLAVOR_ALLOCATE: Allocate
	FlavorCreate                 // MPI_WIN_FLAVOR_CREATE: Create, CreateSlice
	FlavorDynamic                // MPI_WIN_FLAVOR_DYNAMIC: CreateDynamic
)

// String returns "allocate", "create" or "dynamic", as MPI names the
// flavors.
func (f Flavor) String() string {
	switch f {
	case FlavorAllocate:
		return "allocate"
	case FlavorCreate:
		return "create"
	case FlavorDynamic:
		return "dynamic"
	}
	return fmt.Sprintf("Flavor(%d)", int(f))
}

// Model is a window's memory model (MPI_WIN_MODEL, MPI-4.1 12.4).
type Model int

const (
	ModelSeparate Model = iota + 1 // MPI_WIN_SEPARATE: public and private copies differ until synchronised
	ModelUnified                   // MPI_WIN_UNIFIED: one copy, which RMA calls update in place
)

// String returns "separate" or "unified".
func (m Model) String() string {
	switch m {
	case ModelSeparate:
		return "separate"
	case ModelUnified:
		return "unified"
	}
	return fmt.Sprintf("Model(%d)", int(m))
}

// Window is memory that every process of a group exposes for remote access
// (MPI_Win). Its RMA calls are safe for concurrent use from many
// goroutines; creation, Free and the epoch calls are collective or
// per-process synchronisation and are called from one goroutine.
type Window struct {
	g    *group.Group
	f    transport // the connections to the window's peers, in the window's ranks
	rank int       // this rank
	mem  []byte    // the window's memory (nil for a dynamic window)
	mr   registration

	flavor   Flavor
	size     int
	dispUnit int
	remote   []target
	views    []Target  // Target(rank)
	nics     []rankNIC // the NIC atomics to each rank
	policy   atomics.Policy
	access   verbs.Access // remote rights of the window's memory registrations
	pin      runtime.Pinner
	served   bool // the group's engine serves the window's id for it
	// freeing: Free has begun (one cut short by its context is resumed by
	// the next); freeEntered: it has entered its barrier (the other ranks
	// counted it).
	freeing, freeEntered bool
	keep                 any // a caller's typed slice, kept reachable

	id     uint32
	cfg    config
	target *fallback.Target
	client *fallback.Client
	async  []fallback.Op        // per target: fire-and-forget accumulates
	sinks  []fallback.ErrorSink // per target: their first error, for Flush

	// Synchronisation: a registered page per window holding the lock words,
	// the post-start-complete-wait counters and the dynamic region table.
	syncMem []byte
	syncMR  registration
	ep      epochs

	dyn  dynamic  // attached regions (dynamic windows)
	reqs requests // outstanding request-based operations (request.go)

	freed atomic.Bool
	mu    sync.Mutex // epoch calls
}

// target is what this rank knows of another rank's window.
type target struct {
	addr     uint64
	rkey     uint32
	size     int64
	dispUnit int64
	syncAddr uint64
	syncRKey uint32
}

// targetInfoSize is what each rank tells the others of its window: address,
// rkey, size, displacement unit, sync page address and rkey, whether its
// device has usable NIC atomics, a digest of its window options, whether
// its part of the window failed, and the window's id.
const targetInfoSize = 8 + 4 + 8 + 8 + 8 + 4 + 1 + 8 + 1 + 4

// Allocate creates a window of size bytes on every rank of g, with the
// given displacement unit (MPI_Win_allocate). It is collective; sizes may
// differ between ranks. The memory is page aligned, zeroed, off the Go heap
// and registered for remote read, write and atomics.
func Allocate(ctx context.Context, g *group.Group, size, dispUnit int, opts ...Option) (*Window, error) {
	var mem []byte
	failed := validUnit(dispUnit)
	if size < 0 {
		failed = fmt.Errorf("%w: size %d", ErrInvalid, size)
	}
	if failed == nil {
		mem, failed = verbs.Alloc(max(size, 8))
	}
	return create(ctx, g, FlavorAllocate, mem, size, dispUnit, opts, failed) // which frees mem if it fails
}

// Create creates a window over the caller's memory (MPI_Win_create). It is
// collective. mem stays pinned (it cannot move, and the garbage collector
// keeps it) until Free; the caller must not let it be reused before then.
func Create(ctx context.Context, g *group.Group, mem []byte, dispUnit int, opts ...Option) (*Window, error) {
	return create(ctx, g, FlavorCreate, mem, len(mem), dispUnit, opts, validUnit(dispUnit))
}

// CreateSlice creates a window over a typed slice, with the element size as
// displacement unit, so that displacement i is s[i].
func CreateSlice[T datatype.Element](ctx context.Context, g *group.Group, s []T, opts ...Option) (*Window, error) {
	w, err := Create(ctx, g, datatype.AsBytes(s), int(unsafe.Sizeof(*new(T))), opts...)
	if err == nil {
		w.keep = s
	}
	return w, err
}

// CreateDynamic creates a window with no memory (MPI_Win_create_dynamic);
// each rank then exposes memory with Attach. Displacements on a dynamic
// window are addresses: see Address.
func CreateDynamic(ctx context.Context, g *group.Group, opts ...Option) (*Window, error) {
	return create(ctx, g, FlavorDynamic, nil, 0, 1, opts, nil)
}

func validUnit(dispUnit int) error {
	if dispUnit < 1 {
		return fmt.Errorf("%w: displacement unit %d", ErrInvalid, dispUnit)
	}
	return nil
}

// create makes the window on this rank and exchanges what the others need
// of it. A part that fails here (failed, given by the caller, or a
// registration below) still takes the window's id and joins the exchange,
// so that every rank fails the creation (the others with ErrNotCreated)
// and the group's collectives and window ids stay in step.
func create(ctx context.Context, g *group.Group, flavor Flavor, mem []byte, size, dispUnit int, opts []Option, failed error) (*Window, error) {
	w := &Window{g: g, f: link{f: fabric.OfGroup(g), world: grouphooks.FabricRanks(g)}, rank: g.Rank(),
		flavor: flavor, mem: mem, size: size, dispUnit: dispUnit, id: grouphooks.NextWindowID(g)}
	w.target, w.client = grouphooks.Engine(g)
	nic := atomics.Usable(g.DeviceAttr().AtomicCap, g.NICAtomics())
	if err := w.build(ctx, g.Size(), nic, opts, failed, g.AllGather); err != nil {
		return nil, err
	}
	return w, nil
}

// build makes a window of n ranks on this one, whose transport, rank,
// engine, flavor, memory and id are set, and exchanges what the others
// need of it through allGather (the group's, or the unit tests'). nic
// says whether this rank's device has usable NIC atomics.
func (w *Window) build(ctx context.Context, n int, nic bool, opts []Option, failed error,
	allGather func(context.Context, []byte) ([][]byte, error)) (err error) {
	size, dispUnit := w.size, w.dispUnit
	w.cfg = config{ordered: true}
	for _, o := range opts {
		o(&w.cfg)
	}
	w.async = make([]fallback.Op, n)
	w.sinks = make([]fallback.ErrorSink, n)
	for r := range w.async {
		w.async[r].Sink = &w.sinks[r]
	}
	w.ep.init(n)
	defer func() {
		if err != nil {
			w.release() // and the memory of an Allocate
		}
	}()
	if failed == nil {
		failed = w.setup(nic)
	}
	var mine [targetInfoSize]byte
	if failed == nil {
		if w.mr != nil {
			binary.LittleEndian.PutUint64(mine[0:], w.mr.Addr())
			binary.LittleEndian.PutUint32(mine[8:], w.mr.RKey())
		}
		binary.LittleEndian.PutUint64(mine[12:], uint64(size))
		binary.LittleEndian.PutUint64(mine[20:], uint64(dispUnit))
		binary.LittleEndian.PutUint64(mine[28:], w.syncMR.Addr())
		binary.LittleEndian.PutUint32(mine[36:], w.syncMR.RKey())
	} else {
		mine[49] = 1
	}
	if nic {
		mine[40] = 1
	}
	binary.LittleEndian.PutUint64(mine[41:], w.cfg.digest())
	binary.LittleEndian.PutUint32(mine[50:], w.id)
	all, err := allGather(ctx, mine[:])
	if err != nil {
		return errors.Join(failed, err)
	}
	// This rank's own failure comes first, then another rank's, then
	// options that do not agree, whatever the order of the ranks.
	var mismatch error
	w.remote = make([]target, len(all))
	w.views = make([]Target, len(all))
	w.nics = make([]rankNIC, len(all))
	for r := range w.views {
		w.views[r] = Target{w, r}
		w.nics[r] = rankNIC{w.f, r}
	}
	for r, b := range all {
		if len(b) != targetInfoSize {
			return errors.Join(failed, fmt.Errorf("win: rank %d sent %d bytes of window info", r, len(b)))
		}
		if id := binary.LittleEndian.Uint32(b[50:]); id != w.id {
			return errors.Join(failed, fmt.Errorf("%w: rank %d made window %#x, rank %d window %#x: the ranks' collective calls are out of step",
				ErrNotCreated, r, id, w.rank, w.id))
		}
		if b[49] != 0 {
			if failed == nil {
				failed = fmt.Errorf("%w: rank %d failed to make its part", ErrNotCreated, r)
			}
			continue
		}
		t := &w.remote[r]
		t.addr = binary.LittleEndian.Uint64(b[0:])
		t.rkey = binary.LittleEndian.Uint32(b[8:])
		t.size = int64(binary.LittleEndian.Uint64(b[12:]))
		t.dispUnit = int64(binary.LittleEndian.Uint64(b[20:]))
		t.syncAddr = binary.LittleEndian.Uint64(b[28:])
		t.syncRKey = binary.LittleEndian.Uint32(b[36:])
		if t.dispUnit < 1 || t.size < 0 {
			return errors.Join(failed, fmt.Errorf("win: rank %d sent size %d, displacement unit %d", r, t.size, t.dispUnit))
		}
		nic = nic && b[40] == 1
		if binary.LittleEndian.Uint64(b[41:]) != w.cfg.digest() && mismatch == nil {
			mismatch = fmt.Errorf("%w: rank %d created the window with other accumulate options than rank %d (%v)",
				ErrInvalid, r, w.rank, w.Info().AccumulateOps)
		}
	}
	if failed != nil {
		return failed
	}
	if mismatch != nil {
		return mismatch
	}
	// Every rank routes every (op, datatype) pair the same way: a NIC
	// atomic and a target-CPU update must never meet on one word.
	switch {
	case w.cfg.anyOp:
		w.policy = atomics.AnyOpPolicy()
	case w.cfg.pairs != nil:
		w.policy = atomics.DeclaredPolicy(nic, w.cfg.pairs)
	default:
		w.policy = atomics.DefaultPolicy(nic)
	}
	return nil
}

// setup registers the window's memory and its sync page, and has the
// engine serve accumulates to it before any rank can learn of it. An id
// the engine serves already (it never should: ids are unique in a process)
// fails the creation on every rank.
func (w *Window) setup(nic bool) (err error) {
	// The right to remote atomics follows this rank's device; whether the
	// window uses them is agreed in create.
	w.access = verbs.AccessRemoteRead | verbs.AccessRemoteWrite
	if nic {
		w.access |= verbs.AccessRemoteAtomic
	}
	if len(w.mem) > 0 {
		w.pin.Pin(unsafe.SliceData(w.mem))
		if w.mr, err = w.f.Register(w.mem, w.access); err != nil {
			return err
		}
	}
	if w.syncMem, err = verbs.Alloc(syncSize(len(w.async))); err != nil {
		return err
	}
	if w.syncMR, err = w.f.Register(w.syncMem, verbs.AccessRemoteRead|verbs.AccessRemoteAtomic); err != nil {
		return err
	}
	if w.flavor != FlavorDynamic {
		if err = w.target.AddWindow(w.id, w.mem[:w.size:w.size]); err != nil {
			return err
		}
		w.served = true
	}
	return nil
}

// release gives back what the window holds on this rank.
func (w *Window) release() {
	if w.served {
		w.target.RemoveWindow(w.id)
		w.served = false
	}
	w.detachAll()
	if w.syncMR != nil {
		w.syncMR.Close()
		w.syncMR = nil
	}
	if w.syncMem != nil {
		verbs.Free(w.syncMem)
		w.syncMem = nil
	}
	if w.mr != nil {
		w.mr.Close()
		w.mr = nil
	}
	if w.flavor == FlavorAllocate && w.mem != nil {
		verbs.Free(w.mem)
	}
	w.mem = nil
	w.pin.Unpin()
	w.keep = nil
}

// Free releases the window on every rank (MPI_Win_free). It is collective:
// it completes this rank's outstanding operations and waits until every
// rank has done so before the memory is deregistered. As MPI says, it may
// be called only once this rank's epochs are over (a fence epoch aside):
// with a Lock, LockAll, Start or Post not yet ended by Unlock, UnlockAll,
// Complete or Wait, it returns ErrEpoch and frees nothing, as MPICH's does.
// Once a peer of the window is lost, those calls may never succeed: Free
// then ends the open epochs itself (releasing the locks it can).
//
// If ctx ends before every rank has come, Free returns its error and this
// rank's part of the window stays registered (its epochs ended): call Free
// again to complete it; the other ranks wait for it as for a late rank. A
// Free whose context has ended already does nothing.
func (w *Window) Free(ctx context.Context) error {
	if w.freed.Load() {
		return ErrFreed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if !w.freeing {
		if err := w.ep.openForFree(ctx, w); err != nil {
			return err
		}
	}
	if w.freed.Swap(true) {
		return ErrFreed
	}
	w.freeing = true
	err := w.flushAll(ctx)
	if lerr := w.ep.releaseAll(ctx, w); err == nil {
		err = lerr
	}
	// A Fence whose wait its context cut short is completed first: the
	// other ranks counted it. Then Free's own barrier, or the rest of it
	// if an earlier Free entered it.
	if w.ep.barrierPending && !w.freeEntered {
		if berr := w.barrier(ctx); err == nil {
			err = berr
		}
	}
	if !w.ep.barrierPending || w.freeEntered {
		before := w.ep.barriers
		berr := w.barrier(ctx)
		w.freeEntered = w.freeEntered || w.ep.barriers != before
		if err == nil {
			err = berr
		}
	}
	if err != nil && ctx.Err() != nil && !w.peerLost() {
		// Cut short by ctx with every rank alive: the others may still
		// be on their way, and their barrier atomics land in this
		// window's memory.
		w.freed.Store(false)
		return err
	}
	w.release()
	return err
}

// peerLost reports whether a rank of the window is lost.
func (w *Window) peerLost() bool {
	for r := range w.remote {
		if err := w.f.PeerErr(r); err != nil && !errors.Is(err, fabric.ErrPeerLeft) {
			return true
		}
	}
	return false
}

// Bytes is this rank's window memory (nil for a dynamic window). Local
// loads and stores on it follow MPI's rules for the window's local copy:
// synchronise with the epoch calls (see "Local memory" in the package doc).
// After Free it is nil.
func (w *Window) Bytes() []byte {
	if w.freed.Load() || w.mem == nil {
		return nil
	}
	return w.mem[:w.size:w.size]
}

// Size is this rank's window size in bytes.
func (w *Window) Size() int { return w.size }

// DispUnit is this rank's displacement unit: a displacement disp in a call
// to this rank names byte disp*DispUnit of its window (1 for a dynamic
// window, whose displacements are addresses).
func (w *Window) DispUnit() int { return w.dispUnit }

// Flavor says how the window's memory was provided.
func (w *Window) Flavor() Flavor { return w.flavor }

// Model is the window's memory model (the MPI_WIN_MODEL attribute): always
// ModelUnified, as MPICH and Open MPI report for windows in memory their
// NIC accesses. RDMA writes and the engine's updates land in the window's
// memory itself, where loads eventually observe them; to read them without
// a data race in Go's memory model, synchronise first (see "Local memory"
// in the package doc).
func (w *Window) Model() Model { return ModelUnified }

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
