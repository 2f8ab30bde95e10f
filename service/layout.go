package service

import (
	"context"
	"fmt"

	"github.com/onesided/rma"
	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/fallback"
	"github.com/onesided/rma/op"
)

// AccumulateTo is Accumulate into a derived target layout (MPI_Accumulate
// with a target datatype): origin holds the t.Count x t.Type.Count()
// elements of t.Type's basic datatype, packed in type-map order, and each
// target element of the layout becomes target o origin. The layout must
// lie in the window and its elements must not overlap. It is routed as
// Accumulate: a NIC route one element at a time (each 8-byte aligned),
// the engine in messages of whole elements (the layout split as package
// fallback splits a group window's).
func (w *Window) AccumulateTo(ctx context.Context, origin []byte, t rma.Layout, o op.Op) error {
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return w.layoutCall(ctx, fallback.KindAccumulate, origin, nil, t, o)
}

// GetAccumulateTo is GetAccumulate with a derived target layout: result
// receives the old values of the layout's elements packed in type-map
// order; origin holds as many elements (none for NO_OP).
func (w *Window) GetAccumulateTo(ctx context.Context, origin, result []byte, t rma.Layout, o op.Op) error {
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return w.layoutCall(ctx, fallback.KindGetAccumulate, origin, result, t, o)
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
