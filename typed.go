package rma

import (
	"context"
	"fmt"
	"sync"
	"unsafe"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
)

// scratch holds the operands and result of a typed call, so that no Go
// value of the caller's escapes to the heap (the engine route keeps the
// result buffer until the reply comes).
type scratch [3][16]byte

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// FetchAndOp is Window.FetchAndOp on a Go value: it applies o with operand v
// to the element of type T at disp and returns the old value.
func FetchAndOp[T datatype.Scalar](ctx context.Context, w Window, v T, disp int, o op.Op) (T, error) {
	s := scratchPool.Get().(*scratch)
	n := int(unsafe.Sizeof(v))
	*(*T)(unsafe.Pointer(&s[0])) = v
	err := w.FetchAndOp(ctx, s[0][:n], s[1][:n], datatype.Of[T](), disp, o)
	old := result[T](s[1][:n], err)
	scratchPool.Put(s)
	return old, err
}

// CompareAndSwap is Window.CompareAndSwap on Go values: it stores swap at
// disp if the element there equals compare, and returns the old value.
func CompareAndSwap[T datatype.Scalar](ctx context.Context, w Window, compare, swap T, disp int) (T, error) {
	s := scratchPool.Get().(*scratch)
	n := int(unsafe.Sizeof(swap))
	*(*T)(unsafe.Pointer(&s[0])) = swap
	*(*T)(unsafe.Pointer(&s[1])) = compare
	err := w.CompareAndSwap(ctx, s[0][:n], s[1][:n], s[2][:n], datatype.Of[T](), disp)
	old := result[T](s[2][:n], err)
	scratchPool.Put(s)
	return old, err
}

// result is the value a typed call returns: the T in b (a bool byte other
// than 0 and 1 reads as true), or T's zero value if the call failed (b
// then holds whatever an earlier call left in the scratch buffer).
func result[T datatype.Scalar](b []byte, err error) T {
	var v T
	if err == nil {
		if datatype.Of[T]() == datatype.Bool && b[0] > 1 {
			b[0] = 1
		}
		v = *(*T)(unsafe.Pointer(&b[0]))
	}
	return v
}

// PutSlice is Window.Put on Go values: it writes the elements of origin
// from disp on, in host byte order. Like Put, it returns once origin may
// be reused; Flush or Unlock completes it at the target.
func PutSlice[T datatype.Element](ctx context.Context, w Window, origin []T, disp int) error {
	return w.Put(ctx, datatype.AsBytes(origin), disp)
}

// GetSlice is Window.Get on Go values: it reads len(result) elements of
// type T at disp into result, and returns when they are there. For bool, a
// byte other than 0 and 1 in the window reads as true (as C converts it).
func GetSlice[T datatype.Element](ctx context.Context, w Window, result []T, disp int) error {
	err := w.Get(ctx, datatype.AsBytes(result), disp)
	FixBools(result)
	return err
}

// AccumulateSlice is Window.Accumulate on Go values: each element of the
// window from disp on becomes target o origin (origin o target for a
// user-defined op), atomically per element, for the len(origin) elements
// of origin, with T's datatype (datatype.Of). It returns once origin may
// be reused.
func AccumulateSlice[T datatype.Element](ctx context.Context, w Window, origin []T, disp int, o op.Op) error {
	return w.Accumulate(ctx, datatype.AsBytes(origin), datatype.Of[T](), disp, o)
}

// GetAccumulateSlice is Window.GetAccumulate on Go values: it applies o
// with origin to len(result) elements of the window at disp and returns
// their old values in result. origin must have len(result) elements,
// except for op.NoOp, which ignores it (it may be nil). It returns when
// result holds the old values; bools read as in GetSlice.
func GetAccumulateSlice[T datatype.Element](ctx context.Context, w Window, origin, result []T, disp int, o op.Op) error {
	if o != op.NoOp && len(origin) != len(result) {
		return fmt.Errorf("%w: GetAccumulateSlice with %d origin and %d result elements", ErrInvalid, len(origin), len(result))
	}
	if o == op.NoOp {
		origin = nil
	}
	err := w.GetAccumulate(ctx, datatype.AsBytes(origin), datatype.AsBytes(result), datatype.Of[T](), disp, o)
	FixBools(result)
	return err
}

// FixBools makes every element of a []bool that was filled from window
// memory a valid Go bool: a byte other than 0 becomes true. It does
// nothing to other element types.
func FixBools[T datatype.Element](s []T) {
	if datatype.Of[T]() != datatype.Bool {
		return
	}
	b := datatype.AsBytes(s)
	for i := range b {
		if b[i] > 1 {
			b[i] = 1
		}
	}
}
