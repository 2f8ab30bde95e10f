package win

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/fallback"
	"github.com/onesided/rma/internal/core"
	"github.com/onesided/rma/internal/fabric"
	"github.com/onesided/rma/op"
)

// region is a registered range of a target's window memory: the whole
// window, or one attached region of a dynamic window.
type region struct {
	addr uint64 // remote address of its first byte
	rkey uint32
	id   uint32 // the target engine's window id for it
	size int64
}

// locate finds the region holding displacement disp of rank's window and
// the byte offset of disp in it. The caller checks the epoch.
func (w *Window) locate(ctx context.Context, rank, disp int) (region, int64, error) {
	if w.flavor == FlavorDynamic {
		return w.dynLocate(ctx, rank, disp)
	}
	t := &w.remote[rank]
	off := int64(disp) * t.dispUnit
	if disp < 0 || off/t.dispUnit != int64(disp) {
		return region{}, 0, fmt.Errorf("%w: displacement %d", ErrOutOfWindow, disp)
	}
	return region{addr: t.addr, rkey: t.rkey, id: w.id, size: t.size}, off, nil
}

// address checks that n bytes at displacement disp lie in rank's window and
// returns their remote address and key. For n == 0 it checks the epoch
// and the displacement's sign only (emptyDisp): a call that moves no data
// succeeds wherever else it points.
func (w *Window) address(ctx context.Context, rank, disp, n int) (uint64, uint32, error) {
	if err := w.checkEpoch(ctx, rank); err != nil {
		return 0, 0, err
	}
	if n == 0 {
		return 0, 0, w.emptyDisp(disp)
	}
	reg, off, err := w.locate(ctx, rank, disp)
	if err != nil {
		return 0, 0, err
	}
	if n < 0 || off > reg.size || int64(n) > reg.size-off {
		return 0, 0, fmt.Errorf("%w: %d bytes at displacement %d (x%d) of rank %d's %d-byte window",
			ErrOutOfWindow, n, disp, w.remote[rank].dispUnit, rank, reg.size)
	}
	return reg.addr + uint64(off), reg.rkey, nil
}

// emptyCall checks a call with datatypes that moves no data: its epoch,
// and its displacement (emptyDisp).
func (w *Window) emptyCall(ctx context.Context, t Region) error {
	if err := w.checkEpoch(ctx, t.Rank); err != nil {
		return err
	}
	return w.emptyDisp(t.Disp)
}

// emptyDisp checks the displacement of a call that moves no data: as in
// MPICH, a negative one is an error on a window that is not dynamic, and
// any other succeeds, beyond the window's end or in no attached region.
func (w *Window) emptyDisp(disp int) error {
	if disp < 0 && w.flavor != FlavorDynamic {
		return fmt.Errorf("%w: displacement %d", ErrOutOfWindow, disp)
	}
	return nil
}

// Put writes origin to target's window at disp (MPI_Put). It returns once
// origin may be reused; Flush, FlushAll or UnlockAll complete it at the target.
func (w *Window) Put(ctx context.Context, origin []byte, target, disp int) error {
	if target == ProcNull {
		return w.nullCall()
	}
	addr, rkey, err := w.address(ctx, target, disp, len(origin))
	if err != nil || len(origin) == 0 {
		return err
	}
	return w.f.Write(ctx, target, origin, addr, rkey)
}

// Get reads len(result) bytes of target's window at disp into result
// (MPI_Get). It returns when result holds them.
func (w *Window) Get(ctx context.Context, result []byte, target, disp int) error {
	if target == ProcNull {
		return w.nullCall()
	}
	addr, rkey, err := w.address(ctx, target, disp, len(result))
	if err != nil || len(result) == 0 {
		return err
	}
	if err := w.ordered(ctx, target); err != nil {
		return err
	}
	return w.f.Read(ctx, target, result, addr, rkey)
}

// FetchAndOp applies o to one element of type dt at target's disp with the
// operand in origin, and returns the element's old value in result
// (MPI_Fetch_and_op). origin and result hold one dt each (origin is
// ignored for NO_OP). It returns when result holds the old value.
func (w *Window) FetchAndOp(ctx context.Context, origin, result []byte, dt datatype.Basic, target, disp int, o op.Op) error {
	// The arguments are checked first, also for ProcNull (as in MPICH).
	if err := op.Check(o, dt, op.GetAccumulate); err != nil {
		return err
	}
	n := dt.Size()
	if len(result) != n || (o != op.NoOp && len(origin) != n) {
		return fmt.Errorf("%w: FetchAndOp on %v takes %d-byte buffers (origin %d, result %d)", ErrInvalid, dt, n, len(origin), len(result))
	}
	if target == ProcNull {
		return w.nullCall()
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
		t := Region{Rank: target, Disp: disp, Type: dt.Type(), Count: 1}
		d, err := w.resolve(ctx, &t, true)
		if err != nil {
			return err
		}
		return w.fetching(ctx, o, Buffer{Data: ob, Type: dt.Type(), Count: 1}, Buffer{Data: result, Type: dt.Type(), Count: 1}, t, d)
	}
	addr, rkey, err := w.atomicAddress(ctx, target, disp)
	if err != nil {
		return err
	}
	if err := w.ordered(ctx, target); err != nil {
		return err
	}
	var old uint64
	switch route {
	case atomics.NICFetchAdd:
		old, err = w.f.FetchAdd(ctx, target, addr, rkey, load64(origin))
	case atomics.NICRead:
		old, err = w.f.Read8(ctx, target, addr, rkey)
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
	// The arguments are checked first, also for ProcNull (as in MPICH).
	if err := op.CheckCompareAndSwap(dt); err != nil {
		return err
	}
	n := dt.Size()
	if len(origin) != n || len(compare) != n || len(result) != n {
		return fmt.Errorf("%w: CompareAndSwap on %v takes %d-byte buffers", ErrInvalid, dt, n)
	}
	if target == ProcNull {
		return w.nullCall()
	}
	if w.policy.CompareAndSwap(dt) == atomics.Engine {
		return w.compareAndSwapEngine(ctx, origin, compare, result, dt, target, disp)
	}
	addr, rkey, err := w.atomicAddress(ctx, target, disp)
	if err != nil {
		return err
	}
	if err := w.ordered(ctx, target); err != nil {
		return err
	}
	old, err := w.f.CompareSwap(ctx, target, addr, rkey, load64(compare), load64(origin))
	if err != nil {
		return err
	}
	store64(result, old)
	return nil
}

func (w *Window) atomicAddress(ctx context.Context, target, disp int) (uint64, uint32, error) {
	addr, rkey, err := w.address(ctx, target, disp, 8)
	if err != nil {
		return 0, 0, err
	}
	if addr%8 != 0 {
		return 0, 0, fmt.Errorf("%w: displacement %d (x%d) is %d bytes past an 8-byte boundary",
			ErrAlignment, disp, w.remote[target].dispUnit, addr%8)
	}
	return addr, rkey, nil
}

// load64 and store64 move an 8-byte element in host byte order, the order
// of window memory and of the NIC's atomic operands.
func load64(b []byte) uint64     { return binary.NativeEndian.Uint64(b) }
func store64(b []byte, v uint64) { binary.NativeEndian.PutUint64(b, v) }

// checkData is core.CheckData for a Region.
func checkData(name string, b *Buffer, t *Region) (empty bool, err error) {
	return core.CheckData(name, *b, t.Type, t.Count)
}

// PutTo is Put with datatypes at origin and target (MPI_Put): the origin's
// elements are written, in type-map order, to the target layout.
func (w *Window) PutTo(ctx context.Context, origin Buffer, t Region) error {
	if t.Rank == ProcNull {
		return w.nullCall()
	}
	if empty, err := checkData("origin", &origin, &t); err != nil || empty {
		if err == nil {
			err = w.emptyCall(ctx, t)
		}
		return err
	}
	d, err := w.resolve(ctx, &t, true)
	if err != nil {
		return err
	}
	if w.packs(t, putEngineBlock) && !t.Type.OverlapsN(t.Count) {
		return w.send(ctx, fallback.KindAccumulate, op.Replace, t.Type.Basic(), origin, t, d, &w.async[t.Rank])
	}
	data := core.Packed(origin)
	pos := int64(0)
	esz := int64(t.Type.Basic().Size())
	t.Type.ForEachBlock(t.Count, func(off int64, n int) bool {
		err = w.f.Write(ctx, t.Rank, data[pos:pos+int64(n)*esz], d.reg.addr+uint64(d.off+off), d.reg.rkey)
		pos += int64(n) * esz
		return err == nil
	})
	return err
}

// With PackSmallBlocks, a Put or Get whose target layout has many small
// blocks goes to the target's engine as packed data: one RDMA operation per
// block costs about a round trip of work in the NIC for each. Many is more
// than one block, averaging under putEngineBlock bytes for a Put and
// getEngineBlock for a Get: on Soft-RoCE, writing 1000 blocks of 1 KiB one
// by one and through the engine took about as long, and at 4 KiB one by
// one was faster; reading 1 KiB blocks one by one took 1.3 to 6 times
// longer, and 4 KiB blocks 1.4 times.
const (
	putEngineBlock = 1 << 10
	getEngineBlock = 4 << 10
)

// packs reports whether a Put (or, with avg getEngineBlock, a Get) of t
// goes to the target's engine: PackSmallBlocks was given and manyBlocks.
func (w *Window) packs(t Region, avg int64) bool { return w.cfg.pack && manyBlocks(t, avg) }

// manyBlocks reports whether t's layout has more than one block and fewer
// than one per avg bytes of data, counting at most that many.
func manyBlocks(t Region, avg int64) bool {
	if t.Type.IsContiguous() {
		return false
	}
	limit := max(1, int64(t.Count)*t.Type.Size()/avg)
	var blocks int64
	t.Type.ForEachBlock(t.Count, func(int64, int) bool {
		blocks++
		return blocks <= limit
	})
	return blocks > limit
}

// GetTo is Get with datatypes (MPI_Get): the target layout's elements are
// read into the result layout, whose entries must not overlap (it
// receives). It returns when result holds them.
func (w *Window) GetTo(ctx context.Context, result Buffer, t Region) error {
	if t.Rank == ProcNull {
		return w.nullCall()
	}
	if empty, err := checkData("result", &result, &t); err != nil || empty {
		if err == nil {
			err = w.emptyCall(ctx, t)
		}
		return err
	}
	d, err := w.resolve(ctx, &t, false)
	if err != nil {
		return err
	}
	if w.packs(t, getEngineBlock) {
		fop, err := w.startFetch(ctx, op.NoOp, Buffer{Type: t.Type, Count: t.Count}, result, t, d)
		if err != nil {
			return err
		}
		return w.finish(ctx, t.Rank, fop, nil)
	}
	if err := w.ordered(ctx, t.Rank); err != nil {
		return err
	}
	esz := int64(t.Type.Basic().Size())
	var segs []fabric.Segment
	t.Type.ForEachBlock(t.Count, func(off int64, n int) bool {
		segs = append(segs, fabric.Segment{Addr: d.reg.addr + uint64(d.off+off), Len: n * int(esz)})
		return true
	})
	buf := result.Data
	contiguous := result.Type.IsContiguous() && result.Type.TrueLB() == 0
	total := int64(result.Count) * result.Type.Size()
	if !contiguous {
		buf = make([]byte, total)
	}
	if err := w.f.ReadV(ctx, t.Rank, d.reg.rkey, buf[:total], segs); err != nil {
		return err
	}
	if !contiguous {
		return datatype.Unpack(result.Data, buf, result.Count, result.Type)
	}
	return nil
}
