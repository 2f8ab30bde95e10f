package win

import (
	"context"

	"github.com/onesided/rma"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
)

// The typed calls of a group window are those of package rma on the
// window's view of the target rank (Window.Target).

// FetchAndOp is rma.FetchAndOp on target: it applies o with operand v to
// the element of type T at target's disp and returns the old value.
func FetchAndOp[T datatype.Scalar](ctx context.Context, w *Window, v T, target, disp int, o op.Op) (T, error) {
	return rma.FetchAndOp(ctx, w.Target(target), v, disp, o)
}

// CompareAndSwap is rma.CompareAndSwap on target: it stores swap at
// target's disp if the element there equals compare, and returns the old
// value.
func CompareAndSwap[T datatype.Scalar](ctx context.Context, w *Window, compare, swap T, target, disp int) (T, error) {
	return rma.CompareAndSwap(ctx, w.Target(target), compare, swap, disp)
}

// PutSlice is rma.PutSlice on target: it writes the elements of origin to
// target's window from displacement disp on (in the target's displacement
// units), in host byte order.
func PutSlice[T datatype.Element](ctx context.Context, w *Window, origin []T, target, disp int) error {
	return rma.PutSlice(ctx, w.Target(target), origin, disp)
}

// GetSlice is rma.GetSlice on target: it reads len(result) elements of
// type T from target's window at disp into result.
func GetSlice[T datatype.Element](ctx context.Context, w *Window, result []T, target, disp int) error {
	return rma.GetSlice(ctx, w.Target(target), result, disp)
}

// AccumulateSlice is rma.AccumulateSlice on target.
func AccumulateSlice[T datatype.Element](ctx context.Context, w *Window, origin []T, target, disp int, o op.Op) error {
	return rma.AccumulateSlice(ctx, w.Target(target), origin, disp, o)
}

// GetAccumulateSlice is rma.GetAccumulateSlice on target.
func GetAccumulateSlice[T datatype.Element](ctx context.Context, w *Window, origin, result []T, target, disp int, o op.Op) error {
	return rma.GetAccumulateSlice(ctx, w.Target(target), origin, result, disp, o)
}
