package win

import (
	"context"
	"sync"
	"unsafe"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
)

func bytesOf[T any](p *T) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(p)), unsafe.Sizeof(*p)) }

// scratch holds the operands and result of a typed call, so that no Go
// value of the caller's escapes to the heap (the engine route keeps the
// result buffer until the reply comes).
type scratch [3][16]byte

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// FetchAndOp is Window.FetchAndOp on a Go value: it applies o with operand v
// to the element of type T at target's disp and returns the old value.
func FetchAndOp[T datatype.Scalar](ctx context.Context, w *Window, v T, target, disp int, o op.Op) (T, error) {
	s := scratchPool.Get().(*scratch)
	n := int(unsafe.Sizeof(v))
	*(*T)(unsafe.Pointer(&s[0])) = v
	err := w.FetchAndOp(ctx, s[0][:n], s[1][:n], datatype.Of[T](), target, disp, o)
	old := *(*T)(unsafe.Pointer(&s[1]))
	scratchPool.Put(s)
	return old, err
}

// CompareAndSwap is Window.CompareAndSwap on Go values: it stores swap at
// target's disp if the element there equals compare, and returns the old value.
func CompareAndSwap[T datatype.Scalar](ctx context.Context, w *Window, compare, swap T, target, disp int) (T, error) {
	s := scratchPool.Get().(*scratch)
	n := int(unsafe.Sizeof(swap))
	*(*T)(unsafe.Pointer(&s[0])) = swap
	*(*T)(unsafe.Pointer(&s[1])) = compare
	err := w.CompareAndSwap(ctx, s[0][:n], s[1][:n], s[2][:n], datatype.Of[T](), target, disp)
	old := *(*T)(unsafe.Pointer(&s[2]))
	scratchPool.Put(s)
	return old, err
}
