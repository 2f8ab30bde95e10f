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

// AccumulateTo is Window.AccumulateTo to the target's layout t, origin
// holding its elements packed.
func (t *Target) AccumulateTo(ctx context.Context, origin []byte, l rma.Layout, o op.Op) error {
	n, err := layoutElements(l)
	if err != nil {
		return err
	}
	return t.w.AccumulateTo(ctx, Buffer{origin, l.Type.Basic().Type(), n}, Region{Rank: t.rank, Disp: l.Disp, Type: l.Type, Count: l.Count}, o)
}

// GetAccumulateTo is Window.GetAccumulateTo to the target's layout t,
// origin and result holding its elements packed.
func (t *Target) GetAccumulateTo(ctx context.Context, origin, result []byte, l rma.Layout, o op.Op) error {
	n, err := layoutElements(l)
	if err != nil {
		return err
	}
	b := l.Type.Basic().Type()
	return t.w.GetAccumulateTo(ctx, Buffer{origin, b, n}, Buffer{result, b, n}, Region{Rank: t.rank, Disp: l.Disp, Type: l.Type, Count: l.Count}, o)
}

// layoutElements is the number of elements of l.
func layoutElements(l rma.Layout) (int, error) {
	if !l.Type.Valid() || l.Count < 0 {
		return 0, fmt.Errorf("%w: target layout of %d x %v", ErrInvalid, l.Count, l.Type)
	}
	return l.Count * l.Type.Count(), nil
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
	return request(t.w.RAccumulate(ctx, Buffer{origin, dt.Type(), n}, Region{Rank: t.rank, Disp: disp, Type: dt.Type(), Count: n}, o))
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
	return request(t.w.RGetAccumulate(ctx, Buffer{origin, dt.Type(), n}, Buffer{result, dt.Type(), n},
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
