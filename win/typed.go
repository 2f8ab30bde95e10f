package win

import (
	"context"
	"unsafe"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
)

func bytesOf[T any](p *T) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(p)), unsafe.Sizeof(*p)) }

// FetchAndOp is Window.FetchAndOp on a Go value: it applies o with operand v
// to the element of type T at target's disp and returns the old value.
func FetchAndOp[T datatype.Scalar](ctx context.Context, w *Window, v T, target, disp int, o op.Op) (T, error) {
	var old T
	err := w.FetchAndOp(ctx, bytesOf(&v), bytesOf(&old), datatype.Of[T](), target, disp, o)
	return old, err
}

// CompareAndSwap is Window.CompareAndSwap on Go values: it stores swap at
// target's disp if the element there equals compare, and returns the old value.
func CompareAndSwap[T datatype.Scalar](ctx context.Context, w *Window, compare, swap T, target, disp int) (T, error) {
	var old T
	err := w.CompareAndSwap(ctx, bytesOf(&swap), bytesOf(&compare), bytesOf(&old), datatype.Of[T](), target, disp)
	return old, err
}
