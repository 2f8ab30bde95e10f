package service

import (
	"context"
	"fmt"

	"github.com/onesided/rma"
	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/fallback"
	"github.com/onesided/rma/internal/core"
	"github.com/onesided/rma/op"
)

// Calls with datatypes (the rma.Window contract's PutTo, GetTo,
// AccumulateTo and GetAccumulateTo): origin and result are checked against
// the target layout as on a group window (core.CheckData) and packed in
// type-map order; the layout must lie in the window.

// PutTo is Put with datatypes (MPI_Put): origin's elements are written, in
// type-map order, to the layout t, whose elements must not overlap; one
// Put per contiguous block of t.
func (w *Window) PutTo(ctx context.Context, origin rma.Buffer, t rma.Layout) error {
	empty, err := core.CheckData("origin", origin, t.Type, t.Count)
	if err != nil {
		return err
	}
	if err := fallback.Check(fallback.KindAccumulate, op.Replace, t.Type, t.Count, int64(t.Disp), int64(w.size)); err != nil {
		return err
	}
	if empty {
		return nil
	}
	return forBlocks(t, core.Packed(origin), func(b []byte, disp int) error { return w.Put(ctx, b, disp) })
}

// GetTo is Get with datatypes (MPI_Get): the layout t's elements are read
// into result, in type-map order; one Get per contiguous block of t.
func (w *Window) GetTo(ctx context.Context, result rma.Buffer, t rma.Layout) error {
	empty, err := core.CheckData("result", result, t.Type, t.Count)
	if err != nil {
		return err
	}
	if err := fallback.Check(fallback.KindGetAccumulate, op.NoOp, t.Type, t.Count, int64(t.Disp), int64(w.size)); err != nil {
		return err
	}
	if empty {
		return nil
	}
	packed, place := core.Unpacked(result)
	if err := forBlocks(t, packed, func(b []byte, disp int) error { return w.Get(ctx, b, disp) }); err != nil {
		return err
	}
	return place()
}

// forBlocks calls fn for each contiguous block of the layout t, in
// type-map order, with the block's part of data (t's elements packed) and
// its displacement; it stops at fn's first error.
func forBlocks(t rma.Layout, data []byte, fn func(b []byte, disp int) error) error {
	esz := t.Type.Basic().Size()
	var err error
	t.Type.ForEachBlock(t.Count, func(off int64, n int) bool {
		err = fn(data[:n*esz], t.Disp+int(off))
		data = data[n*esz:]
		return err == nil
	})
	return err
}

// AccumulateTo is Accumulate with datatypes (MPI_Accumulate): each element
// of the layout t becomes target o origin, origin's elements taken in
// type-map order. The layout's elements must not overlap. It is routed as
// Accumulate: a NIC route one element at a time (each 8-byte aligned),
// the engine in messages of whole elements (the layout split as package
// fallback splits a group window's).
func (w *Window) AccumulateTo(ctx context.Context, origin rma.Buffer, t rma.Layout, o op.Op) error {
	if _, err := core.CheckData("origin", origin, t.Type, t.Count); err != nil {
		return err
	}
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return w.layoutCall(ctx, fallback.KindAccumulate, core.Packed(origin), nil, t, o)
}

// GetAccumulateTo is GetAccumulate with datatypes: result receives the old
// values of the layout's elements, in type-map order; origin holds as many
// elements (none for NO_OP: rma.Buffer{}).
func (w *Window) GetAccumulateTo(ctx context.Context, origin, result rma.Buffer, t rma.Layout, o op.Op) error {
	if o != op.NoOp {
		if _, err := core.CheckData("origin", origin, t.Type, t.Count); err != nil {
			return err
		}
	}
	if _, err := core.CheckData("result", result, t.Type, t.Count); err != nil {
		return err
	}
	packed, place := core.Unpacked(result)
	c := w.c
	c.mu.Lock()
	err := w.layoutCall(ctx, fallback.KindGetAccumulate, core.Packed(origin), packed, t, o)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return place()
}

// layoutCall is AccumulateTo (result nil) or GetAccumulateTo; c.mu is
// held.
func (w *Window) layoutCall(ctx context.Context, kind fallback.Kind, origin, result []byte, t rma.Layout, o op.Op) error {
	c := w.c
	if err := fallback.Check(kind, o, t.Type, t.Count, int64(t.Disp), int64(w.size)); err != nil {
		return err
	}
	basic := t.Type.Basic()
	n := t.Count * t.Type.Count()
	size := n * basic.Size()
	if kind == fallback.KindGetAccumulate && o == op.NoOp {
		origin = nil
	} else if len(origin) != size {
		return fmt.Errorf("%w: origin of %d bytes for %d elements of %v", rma.ErrInvalid, len(origin), n, basic)
	}
	if kind == fallback.KindGetAccumulate && len(result) != size {
		return fmt.Errorf("%w: result of %d bytes for %d elements of %v", rma.ErrInvalid, len(result), n, basic)
	}
	if n == 0 {
		return nil
	}
	need := Access(AccessAtomic)
	route := w.policy.Accumulate(o, basic)
	if kind == fallback.KindGetAccumulate {
		need, route = fetchNeeds(o), w.policy.FetchAndOp(o, basic)
	}
	if err := w.need(need); err != nil {
		return err
	}
	if err := c.begin(ctx); err != nil {
		return err
	}
	if route != atomics.Engine {
		// One element at a time, in type-map order.
		i := 0
		var err error
		t.Type.ForEachBlock(t.Count, func(off int64, k int) bool {
			for ; k > 0 && err == nil; k, i, off = k-1, i+1, off+8 {
				var org, res []byte
				if origin != nil {
					org = origin[8*i : 8*i+8]
				}
				if result != nil {
					res = result[8*i : 8*i+8]
				}
				err = w.nic(ctx, route, o, basic, org, res, t.Disp+int(off))
			}
			return err == nil
		})
		return err
	}
	maxMsg := recvSize - headerLen
	if kind == fallback.KindGetAccumulate {
		maxMsg = maxReply - headerLen // the reply, as long as the request at most, goes inline
	}
	return fallback.Split(int64(t.Disp), t.Type, t.Count, maxMsg, func(p fallback.Piece) error {
		c.nextSeq()
		b := c.buf[sendOff : sendOff+recvSize]
		putHeader(b, msgAcc, c.seq)
		req := fallback.Request{Kind: kind, Op: o, Window: w.id, Tag: c.seq}
		msg, err := fallback.AppendPiece(b[:headerLen], &req, p, origin, basic.Type(), n)
		if err != nil {
			return err
		}
		if err := c.send(len(msg)); err != nil {
			return err
		}
		if err := c.wait(ctx, c.posted, c.seq); err != nil {
			return err
		}
		var olds []byte
		if result != nil {
			olds = c.discard[:p.Elems*int64(basic.Size())]
		}
		if err := w.accReply(olds); err != nil {
			return err
		}
		if result != nil {
			return fallback.UnpackRange(result, basic.Type(), n, p.Elem, olds)
		}
		return nil
	})
}
