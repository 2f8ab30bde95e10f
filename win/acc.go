package win

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/onesided/rma"
	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/fallback"
	"github.com/onesided/rma/internal/core"
	"github.com/onesided/rma/op"
)

// Buffer is origin or result memory described by an MPI datatype
// (rma.Buffer).
type Buffer = rma.Buffer

// Contiguous describes b as len(b)/dt.Size() consecutive elements of dt
// (rma.Contiguous).
func Contiguous(b []byte, dt datatype.Basic) Buffer { return rma.Contiguous(b, dt) }

// Region is where an operation lands: Count instances of Type at
// displacement Disp (in the target's displacement units) of rank Rank's window.
type Region struct {
	Rank  int           // the target rank (or ProcNull)
	Disp  int           // where instance 0 of Type starts, in the target's displacement units
	Type  datatype.Type // the layout of one instance in the target's window
	Count int           // the number of instances
}

// Accumulate combines origin, len(origin)/dt.Size() elements of dt, into
// target's window at disp with o (MPI_Accumulate): each element becomes
// target o origin (origin o target for a user-defined op, as op.Register
// says), atomically per element. It returns once origin may be reused;
// Flush completes it at the target.
func (w *Window) Accumulate(ctx context.Context, origin []byte, dt datatype.Basic, target, disp int, o op.Op) error {
	n, err := elements(origin, dt)
	if err != nil {
		return err
	}
	return w.AccumulateTo(ctx, Buffer{Data: origin, Type: dt.Type(), Count: n}, Region{Rank: target, Disp: disp, Type: dt.Type(), Count: n}, o)
}

// GetAccumulate is Accumulate that also returns the target's old contents
// in result (MPI_Get_accumulate). origin and result hold the same number
// of elements (ErrInvalid otherwise, as their type signatures differ),
// except with NO_OP, which ignores origin. It returns when result holds the
// old values.
func (w *Window) GetAccumulate(ctx context.Context, origin, result []byte, dt datatype.Basic, target, disp int, o op.Op) error {
	n, err := elements(result, dt)
	if err != nil {
		return err
	}
	if o != op.NoOp && len(origin) != len(result) {
		return fmt.Errorf("%w: GetAccumulate of %d origin bytes into %d result bytes", ErrInvalid, len(origin), len(result))
	}
	return w.GetAccumulateTo(ctx, Buffer{Data: origin, Type: dt.Type(), Count: n}, Buffer{Data: result, Type: dt.Type(), Count: n},
		Region{Rank: target, Disp: disp, Type: dt.Type(), Count: n}, o)
}

// elements is the number of dt elements in b, which must hold whole ones.
func elements(b []byte, dt datatype.Basic) (int, error) {
	if !dt.Valid() {
		return 0, fmt.Errorf("%w: invalid datatype %v", ErrInvalid, dt)
	}
	if len(b)%dt.Size() != 0 {
		return 0, fmt.Errorf("%w: %d bytes is not a whole number of %v elements", ErrInvalid, len(b), dt)
	}
	return len(b) / dt.Size(), nil
}

// AccumulateTo is Accumulate with derived datatypes at origin and target.
// Their type signatures must match (counts may differ); the target layout
// must not overlap and must lie in the target's window.
func (w *Window) AccumulateTo(ctx context.Context, origin Buffer, t Region, o op.Op) error {
	if t.Rank == ProcNull {
		if err := nullOp(o, op.Accumulate, t); err != nil {
			return err
		}
		return w.nullCall()
	}
	basic, d, err := w.check(ctx, o, op.Accumulate, &origin, nil, &t)
	if err != nil || d.empty {
		return err
	}
	if route := w.policy.Accumulate(o, basic); route != atomics.Engine {
		return w.nicAccumulate(ctx, o, basic, route, origin, Buffer{}, t, d)
	}
	fop := &w.async[t.Rank]
	return w.send(ctx, fallback.KindAccumulate, o, basic, origin, t, d, fop)
}

// GetAccumulateTo is GetAccumulate with derived datatypes. Neither the
// target layout nor the result layout, which receives, may overlap.
func (w *Window) GetAccumulateTo(ctx context.Context, origin, result Buffer, t Region, o op.Op) error {
	if t.Rank == ProcNull {
		if err := nullOp(o, op.GetAccumulate, t); err != nil {
			return err
		}
		return w.nullCall()
	}
	if o == op.NoOp {
		origin = Buffer{Type: t.Type, Count: t.Count}
	}
	_, d, err := w.check(ctx, o, op.GetAccumulate, &origin, &result, &t)
	if err != nil || d.empty {
		return err
	}
	return w.fetching(ctx, o, origin, result, t, d)
}

// nullOp checks the op and datatype of an accumulate-family call to
// ProcNull, which MPI forbids whatever the target, as MPICH does before it
// returns for MPI_PROC_NULL.
func nullOp(o op.Op, use op.Use, t Region) error {
	if !t.Type.Valid() {
		return fmt.Errorf("%w: invalid target datatype", ErrInvalid)
	}
	return op.Check(o, t.Type.Basic(), use)
}

// dest is a resolved target: the region and the byte offset of the
// target layout's origin in it.
type dest struct {
	reg   region
	off   int64
	empty bool // the call moves no data: it succeeds without touching memory
}

// resolve checks the epoch and that t lies in the target's window. A call
// that writes the target layout (all but Get) receives into it, so, as in a
// receive, its entries must not overlap: a layout that moves more bytes
// than its window region holds certainly does, and is refused here in
// constant time, before anything is sized by it.
func (w *Window) resolve(ctx context.Context, t *Region, writes bool) (dest, error) {
	if err := w.checkEpoch(ctx, t.Rank); err != nil {
		return dest{}, err
	}
	return w.place(ctx, t, writes)
}

// place is resolve once the epoch has been checked.
func (w *Window) place(ctx context.Context, t *Region, writes bool) (dest, error) {
	reg, off, err := w.locateLayout(ctx, t)
	if err != nil {
		return dest{}, err
	}
	if err := t.Type.Fits(t.Count, reg.size, off); err != nil {
		return dest{}, fmt.Errorf("%w: %d x %v at displacement %d of rank %d's %d-byte window: %w",
			ErrOutOfWindow, t.Count, t.Type, t.Disp, t.Rank, reg.size, err)
	}
	if sz := t.Type.Size(); writes && sz > 0 && int64(t.Count) > reg.size/sz {
		return dest{}, fmt.Errorf("%w: %d x %v writes more bytes than rank %d's %d-byte window holds: its entries overlap",
			ErrInvalid, t.Count, t.Type, t.Rank, reg.size)
	}
	return dest{reg: reg, off: off}, nil
}

// check validates an accumulate-family call and returns its basic type
// and resolved target. origin may have no data for NO_OP. A call whose
// signatures are empty is valid whatever its datatypes are built from (MPI:
// empty signatures match) and moves nothing: its dest says so.
func (w *Window) check(ctx context.Context, o op.Op, use op.Use, origin, result *Buffer, t *Region) (datatype.Basic, dest, error) {
	if !t.Type.Valid() {
		return 0, dest{}, fmt.Errorf("%w: invalid target datatype", ErrInvalid)
	}
	basic := t.Type.Basic()
	if err := op.Check(o, basic, use); err != nil {
		return 0, dest{}, err
	}
	if !w.policy.Declared(o, basic) {
		return 0, dest{}, fmt.Errorf("%w: %v on %v", ErrUndeclared, o, basic)
	}
	if err := w.checkEpoch(ctx, t.Rank); err != nil {
		return 0, dest{}, err
	}
	// Origin and result match the target as a Put's origin or a Get's
	// result does (checkData); origin may have no data for NO_OP.
	empty := false
	if o != op.NoOp || use == op.Accumulate {
		var err error
		if empty, err = checkData("origin", origin, t); err != nil {
			return 0, dest{}, err
		}
	}
	if result != nil {
		var err error
		if empty, err = checkData("result", result, t); err != nil {
			return 0, dest{}, err
		}
	}
	if empty {
		return basic, dest{empty: true}, w.emptyDisp(t.Disp)
	}
	d, err := w.place(ctx, t, true) // the epoch is checked above
	if err != nil {
		return 0, dest{}, err
	}
	if t.Type.OverlapsN(t.Count) {
		return 0, dest{}, fmt.Errorf("%w: the target datatype %v overlaps itself", ErrInvalid, t.Type)
	}
	return basic, d, nil
}

var opPool = sync.Pool{New: func() any { return new(fallback.Op) }}

// fetching runs a GetAccumulate (also FetchAndOp) and waits for its result.
func (w *Window) fetching(ctx context.Context, o op.Op, origin, result Buffer, t Region, d dest) error {
	basic := t.Type.Basic()
	if route := w.policy.FetchAndOp(o, basic); route != atomics.Engine {
		return w.nicAccumulate(ctx, o, basic, route, origin, result, t, d)
	}
	fop, err := w.startFetch(ctx, o, origin, result, t, d)
	if err != nil {
		return err
	}
	return w.finish(ctx, t.Rank, fop, nil)
}

// startFetch sends a GetAccumulate of o to the target's engine, whose
// replies fill result; finish (or a request) waits for them. If sending
// fails, it finishes the operation and returns the error.
func (w *Window) startFetch(ctx context.Context, o op.Op, origin, result Buffer, t Region, d dest) (*fallback.Op, error) {
	fop := opPool.Get().(*fallback.Op)
	fop.Result, fop.ResultType, fop.ResultCount = result.Data, result.Type, result.Count
	if err := w.send(ctx, fallback.KindGetAccumulate, o, t.Type.Basic(), origin, t, d, fop); err != nil {
		return nil, w.finish(ctx, t.Rank, fop, err)
	}
	return fop, nil
}

// finish waits for every reply of fop and recycles it.
func (w *Window) finish(ctx context.Context, rank int, fop *fallback.Op, err error) error {
	if werr := w.f.WaitOp(ctx, rank, fop); werr != nil {
		fop.Abandon() // replies still to come will not touch the result
		return werr
	}
	if err == nil {
		err = fop.Err()
	}
	fop.Reset()
	opPool.Put(fop)
	if err != nil {
		return w.f.Settled(ctx, rank, err) // a reply lost with a dying peer's connection
	}
	return err
}

// send cuts the operation into active messages and sends them.
func (w *Window) send(ctx context.Context, kind fallback.Kind, o op.Op, basic datatype.Basic, origin Buffer, t Region, d dest, fop *fallback.Op) error {
	data := core.Packed(origin)
	if origin.Count > 0 && data == nil && o != op.NoOp {
		return fmt.Errorf("%w: cannot pack the origin buffer", ErrInvalid)
	}
	// A predefined target type whose elements fit in one message is one
	// piece: no Split (nor its allocations).
	if elems := int64(t.Count); t.Type == basic.Type() && t.Count <= fallback.MaxCount &&
		elems*int64(basic.Size()) <= int64(w.f.MsgSize()-fallback.RequestHeaderSize) {
		p := fallback.Piece{Disp: d.off, Type: t.Type, Count: t.Count, Elem: 0, Elems: elems}
		return w.sendPiece(ctx, kind, o, t.Rank, d.reg.id, p, data, fop)
	}
	return fallback.Split(d.off, t.Type, t.Count, w.f.MsgSize(), func(p fallback.Piece) error {
		var b []byte
		if data != nil {
			esz := int64(basic.Size())
			b = data[p.Elem*esz : (p.Elem+p.Elems)*esz]
		}
		return w.sendPiece(ctx, kind, o, t.Rank, d.reg.id, p, b, fop)
	})
}

// sendPiece sends one active message.
func (w *Window) sendPiece(ctx context.Context, kind fallback.Kind, o op.Op, rank int, id uint32, p fallback.Piece, data []byte, fop *fallback.Op) error {
	credit, buf, err := w.f.Acquire(ctx, rank)
	if err != nil {
		return err
	}
	req := fallback.Request{Kind: kind, Op: o, Window: id, Tag: uint32(credit), Disp: p.Disp, Type: p.Type, Count: p.Count, Data: data}
	msg, err := fallback.AppendRequest(buf[:0], &req)
	if err != nil {
		w.f.Release(rank, credit)
		return err
	}
	call := w.client.Slot(w.f.slot(rank), credit)
	call.Op, call.Elem = fop, p.Elem
	fop.Start(1)
	if err := w.f.Send(ctx, rank, credit, len(msg)); err != nil {
		call.Op = nil
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			// Not sent: the caller's error alone, not a later Flush's.
			fop.Withdraw()
		} else {
			fop.Abort(err)
		}
		return err
	}
	return nil
}

// compareAndSwapEngine sends a compare-and-swap to the target's engine.
func (w *Window) compareAndSwapEngine(ctx context.Context, origin, compare, result []byte, dt datatype.Basic, target, disp int) error {
	t := Region{Rank: target, Disp: disp, Type: dt.Type(), Count: 1}
	d, err := w.resolve(ctx, &t, true)
	if err != nil {
		return err
	}
	var both [32]byte
	n := copy(both[:], compare)
	copy(both[n:], origin)
	fop := opPool.Get().(*fallback.Op)
	fop.Result, fop.ResultType, fop.ResultCount = result, dt.Type(), 1
	p := fallback.Piece{Disp: d.off, Type: dt.Type(), Count: 1, Elems: 1}
	err = w.sendPiece(ctx, fallback.KindCompareAndSwap, op.Replace, target, d.reg.id, p, both[:2*n], fop)
	return w.finish(ctx, target, fop, err)
}

// nicAccumulate does an accumulate-family call element by element with NIC
// atomics: fetch-and-adds or 8-byte reads, several in flight in order on
// one connection (Fabric.Words), or compare-and-swap loops, one word at a
// time. If ctx ends part way, the words before that point are updated and
// the others not.
func (w *Window) nicAccumulate(ctx context.Context, o op.Op, basic datatype.Basic, route atomics.Route, origin, result Buffer, t Region, d dest) error {
	base := d.off
	var err error
	t.Type.ForEachBlock(t.Count, func(off int64, n int) bool {
		// NIC atomics need 8-byte aligned addresses: the window's memory
		// itself may start anywhere (Create over a caller's slice).
		if addr := d.reg.addr + uint64(base+off); addr%8 != 0 {
			err = fmt.Errorf("%w: element at byte %d of rank %d's window is at address %#x",
				ErrAlignment, base+off, t.Rank, addr)
			return false
		}
		return true
	})
	if err != nil {
		return err
	}
	if err := w.ordered(ctx, t.Rank); err != nil {
		return err
	}
	src := core.Packed(origin)
	if n := t.Count * t.Type.Count(); n > 1 && (route == atomics.NICFetchAdd || route == atomics.NICRead) {
		return w.nicWords(ctx, route == atomics.NICFetchAdd, src, result, t, d, n)
	}
	var olds []byte
	if result.Data != nil {
		olds = make([]byte, 8*t.Count*t.Type.Count())
	}
	i := 0
	var scratch *core.Scratch // the loop's operands: only a compare-and-swap loop needs them
	if route == atomics.NICCompareSwapLoop {
		scratch = new(core.Scratch)
	}
	t.Type.ForEachBlock(t.Count, func(off int64, n int) bool {
		for k := 0; k < n; k, i = k+1, i+1 {
			addr := d.reg.addr + uint64(base+off) + uint64(8*k)
			var v uint64
			if src != nil {
				v = binary.NativeEndian.Uint64(src[8*i:])
			}
			if err = ctx.Err(); err != nil {
				return false // words before this one are updated, the rest not
			}
			var old uint64
			old, err = core.Element(ctx, &w.nics[t.Rank], route, o, basic, addr, d.reg.rkey, v, scratch)
			if err != nil {
				return false
			}
			if olds != nil {
				binary.NativeEndian.PutUint64(olds[8*i:], old)
			}
		}
		return true
	})
	if err != nil || olds == nil {
		return err
	}
	return fallback.UnpackRange(result.Data, result.Type, result.Count, 0, olds)
}

// nicWords does nicAccumulate's n independent words, fetch-and-adds of
// src's words (fadd) or reads, posted in order on one connection (so
// applied in order) with several in flight.
func (w *Window) nicWords(ctx context.Context, fadd bool, src []byte, result Buffer, t Region, d dest, n int) error {
	addrs := make([]uint64, 0, n)
	t.Type.ForEachBlock(t.Count, func(off int64, k int) bool {
		for j := 0; j < k; j++ {
			addrs = append(addrs, d.reg.addr+uint64(d.off+off)+uint64(8*j))
		}
		return true
	})
	var vals, olds []uint64
	if fadd {
		vals = make([]uint64, n)
		for j := 0; j < n && src != nil; j++ {
			vals[j] = binary.NativeEndian.Uint64(src[8*j:])
		}
	}
	if result.Data != nil {
		olds = make([]uint64, n)
	}
	if err := w.f.Words(ctx, t.Rank, d.reg.rkey, fadd, addrs, vals, olds); err != nil || olds == nil {
		return err
	}
	return fallback.UnpackRange(result.Data, result.Type, result.Count, 0, datatype.AsBytes(olds))
}
