package win

import (
	"context"
	"fmt"

	"github.com/onesided/rma"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
)

// Target is a window seen from this rank as one target rank's memory: the
// Window's calls with that rank as their target, and the contract a
// service window satisfies too (rma.Window), so that code written against
// rma.Window runs on both. Its Lock is Window.Lock with no assertion.
type Target struct {
	w    *Window
	rank int
}

var _ rma.Window = (*Target)(nil)

// Target returns the window's view of rank (see type Target). The views
// are made with the window: Target does not allocate.
func (w *Window) Target(rank int) *Target {
	if rank < 0 || rank >= len(w.views) {
		return &Target{w, rank} // ProcNull's calls do nothing, the others' fail with ErrRank
	}
	return &w.views[rank]
}

// Rank is the target's rank in the window's group.
func (t *Target) Rank() int { return t.rank }

// Put is Window.Put to the target.
func (t *Target) Put(ctx context.Context, origin []byte, disp int) error {
	return t.w.Put(ctx, origin, t.rank, disp)
}

// Get is Window.Get from the target.
func (t *Target) Get(ctx context.Context, result []byte, disp int) error {
	return t.w.Get(ctx, result, t.rank, disp)
}

// Accumulate is Window.Accumulate to the target.
func (t *Target) Accumulate(ctx context.Context, origin []byte, dt datatype.Basic, disp int, o op.Op) error {
	return t.w.Accumulate(ctx, origin, dt, t.rank, disp, o)
}

// GetAccumulate is Window.GetAccumulate to the target.
func (t *Target) GetAccumulate(ctx context.Context, origin, result []byte, dt datatype.Basic, disp int, o op.Op) error {
	return t.w.GetAccumulate(ctx, origin, result, dt, t.rank, disp, o)
}

// PutTo is Window.PutTo to the target's layout l.
func (t *Target) PutTo(ctx context.Context, origin Buffer, l rma.Layout) error {
	return t.w.PutTo(ctx, origin, t.region(l))
}

// GetTo is Window.GetTo from the target's layout l.
func (t *Target) GetTo(ctx context.Context, result Buffer, l rma.Layout) error {
	return t.w.GetTo(ctx, result, t.region(l))
}

// AccumulateTo is Window.AccumulateTo to the target's layout l.
func (t *Target) AccumulateTo(ctx context.Context, origin Buffer, l rma.Layout, o op.Op) error {
	return t.w.AccumulateTo(ctx, origin, t.region(l), o)
}

// GetAccumulateTo is Window.GetAccumulateTo to the target's layout l.
func (t *Target) GetAccumulateTo(ctx context.Context, origin, result Buffer, l rma.Layout, o op.Op) error {
	return t.w.GetAccumulateTo(ctx, origin, result, t.region(l), o)
}

// region is the target's layout l as a Region.
func (t *Target) region(l rma.Layout) Region {
	return Region{Rank: t.rank, Disp: l.Disp, Type: l.Type, Count: l.Count}
}

// FetchAndOp is Window.FetchAndOp to the target.
func (t *Target) FetchAndOp(ctx context.Context, origin, result []byte, dt datatype.Basic, disp int, o op.Op) error {
	return t.w.FetchAndOp(ctx, origin, result, dt, t.rank, disp, o)
}

// CompareAndSwap is Window.CompareAndSwap to the target.
func (t *Target) CompareAndSwap(ctx context.Context, origin, compare, result []byte, dt datatype.Basic, disp int) error {
	return t.w.CompareAndSwap(ctx, origin, compare, result, dt, t.rank, disp)
}

// request turns a Window's request into an rma.Request: a nil *Request
// (a failed call) into a nil interface.
func request(r *Request, err error) (rma.Request, error) {
	if r == nil {
		return nil, err
	}
	return r, err
}

// RPut is Window.RPut to the target.
func (t *Target) RPut(ctx context.Context, origin []byte, disp int) (rma.Request, error) {
	return request(t.w.RPut(ctx, origin, t.rank, disp))
}

// RGet is Window.RGet from the target.
func (t *Target) RGet(ctx context.Context, result []byte, disp int) (rma.Request, error) {
	return request(t.w.RGet(ctx, result, t.rank, disp))
}

// RAccumulate is Window.RAccumulate to the target, on len(origin) bytes
// of dt elements.
func (t *Target) RAccumulate(ctx context.Context, origin []byte, dt datatype.Basic, disp int, o op.Op) (rma.Request, error) {
	n, err := elements(origin, dt)
	if err != nil {
		return nil, err
	}
	return request(t.w.RAccumulate(ctx, Buffer{Data: origin, Type: dt.Type(), Count: n}, Region{Rank: t.rank, Disp: disp, Type: dt.Type(), Count: n}, o))
}

// RGetAccumulate is Window.RGetAccumulate to the target, on len(result)
// bytes of dt elements (origin holds as many, except for NO_OP).
func (t *Target) RGetAccumulate(ctx context.Context, origin, result []byte, dt datatype.Basic, disp int, o op.Op) (rma.Request, error) {
	n, err := elements(result, dt)
	if err != nil {
		return nil, err
	}
	if o != op.NoOp && len(origin) != len(result) {
		return nil, fmt.Errorf("%w: RGetAccumulate of %d origin bytes into %d result bytes", ErrInvalid, len(origin), len(result))
	}
	return request(t.w.RGetAccumulate(ctx, Buffer{Data: origin, Type: dt.Type(), Count: n}, Buffer{Data: result, Type: dt.Type(), Count: n},
		Region{Rank: t.rank, Disp: disp, Type: dt.Type(), Count: n}, o))
}

// Lock is Window.Lock of the target, with no assertion.
func (t *Target) Lock(ctx context.Context, lt rma.LockType) error {
	return t.w.Lock(ctx, lt, t.rank, 0)
}

// Unlock is Window.Unlock of the target.
func (t *Target) Unlock(ctx context.Context) error { return t.w.Unlock(ctx, t.rank) }

// Flush is Window.Flush of the target.
func (t *Target) Flush(ctx context.Context) error { return t.w.Flush(ctx, t.rank) }
