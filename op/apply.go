package op

import (
	"fmt"

	"github.com/onesided/rma/datatype"
)

// kernelFor returns the kernel of (o, b): nil with a nil error for NO_OP on
// a valid type, or the reason it has none.
func kernelFor(o Op, b datatype.Basic) (kernel, error) {
	if o >= FirstUser {
		return userKernelFor(o, b)
	}
	if o < numOps && b <= datatype.MaxBasic {
		if k := kernels[o][b]; k != nil {
			return k, nil
		}
		if o == NoOp && b.Valid() {
			return nil, nil
		}
	}
	return nil, checkArgs(o, b)
}

func lengthError(o Op, b datatype.Basic, format string, args ...any) error {
	return &Error{Op: o, Basic: b, Err: ErrLength, Msg: fmt.Sprintf(format, args...)}
}

// Apply applies op o element by element to target, with origin as the
// second operand, as an accumulate updates its target:
//
//	target[i] = target[i] o origin[i]   for i in 0 .. len(target)/b.Size()-1
//
// REPLACE sets target[i] = origin[i]; NO_OP leaves target unchanged (origin
// may then be empty). A user-defined op is called as fn(in=origin,
// inout=target), so it sets target[i] = origin[i] o target[i], as MPI calls
// a user function and as [Register] says. The buffers hold elements of type b in host byte order
// and Go layout; they need not be aligned (misaligned buffers are staged
// through aligned copies). They must have the same length, a multiple of
// b.Size() (else the error wraps [ErrLength]), and must not partially
// overlap (target and origin may be the very same slice). MPI's
// restrictions by kind of call are not checked here: use [Check] first.
// Undefined (o, b) pairs are refused with [ErrOpDatatype], invalid values with
// [ErrInvalid]; nothing is modified on error.
//
// Semantics per type (see the package documentation for details): integer
// SUM and PROD wrap around (two's complement); float MAX and MIN return NaN if
// an operand is NaN and order -0 below +0; complex PROD is the textbook
// product rounded term by term; the logical ops treat non-zero as true and
// store 1 or 0; MAXLOC and MINLOC keep the lower index on equal values.
//
// A user-defined op (see [Create], [Register]) is applied as
// fn(in=origin, inout=target), that is target[i] = origin[i] o target[i],
// on elements of the type it is bound to (else [ErrOpDatatype]). If fn
// panics, the panic is recovered and reported as an error wrapping
// [ErrInvalid]; target may then be partly updated.
//
// Apply does not allocate (for a user-defined op: on buffers aligned for
// its element type). It is not atomic: concurrent Apply calls on the
// same target bytes must be serialized by the caller.
func Apply(o Op, b datatype.Basic, target, origin []byte) error {
	k, err := kernelFor(o, b)
	if err != nil {
		return err
	}
	es := b.Size()
	if len(target)%es != 0 || (len(origin) != len(target) && !(k == nil && len(origin) == 0)) {
		return lengthError(o, b, "%v on %v: target of %d bytes and origin of %d bytes (want equal lengths, multiples of %d)",
			o, b, len(target), len(origin), es)
	}
	if k != nil && len(target) > 0 {
		if o >= FirstUser {
			return callUser(o, b, func() { k(o, target, origin) })
		}
		k(o, target, origin)
	}
	return nil
}

// ApplyFetch is [Apply] that first copies the old contents of target into
// result (the fetching forms: GetAccumulate, FetchAndOp). result must have the
// length of target and must not overlap target or origin.
func ApplyFetch(o Op, b datatype.Basic, target, origin, result []byte) error {
	k, err := kernelFor(o, b)
	if err != nil {
		return err
	}
	es := b.Size()
	if len(target)%es != 0 || len(result) != len(target) ||
		(len(origin) != len(target) && !(k == nil && len(origin) == 0)) {
		return lengthError(o, b, "%v on %v: target of %d bytes, origin of %d, result of %d (want equal lengths, multiples of %d)",
			o, b, len(target), len(origin), len(result), es)
	}
	copy(result, target)
	if k != nil && len(target) > 0 {
		if o >= FirstUser {
			return callUser(o, b, func() { k(o, target, origin) })
		}
		k(o, target, origin)
	}
	return nil
}

// ApplyType applies o to count consecutive instances of datatype t laid out
// in window, the first at byte base, taking the operands from origin (the
// origin data packed in type-map order, count*t.Size() bytes; empty for
// NO_OP). If result is not nil (count*t.Size() bytes) it first receives the
// old contents of the target elements, packed in type-map order. This is the
// target side of an accumulate with a derived target datatype.
//
// Everything is checked before window is touched: the (o, basic) pair as in
// [Apply], the lengths ([ErrLength]), that the data lies inside window (an
// error wrapping datatype.ErrOutOfRange) and, except for NO_OP, that the
// target elements do not overlap (datatype.ErrOverlap), as MPI requires. It
// does not allocate. It is not atomic (see [Apply]).
func ApplyType(o Op, t datatype.Type, count int, window []byte, base int64, origin, result []byte) error {
	b := t.Basic()
	k, err := kernelFor(o, b)
	if err != nil {
		return err
	}
	if err := t.Fits(count, int64(len(window)), base); err != nil {
		return err
	}
	size := int64(count) * t.Size()
	if int64(len(origin)) != size && !(k == nil && len(origin) == 0) || result != nil && int64(len(result)) != size {
		return lengthError(o, b, "%v on %d instances of %v: origin of %d bytes and result of %d bytes (want %d)",
			o, count, b, len(origin), len(result), size)
	}
	if o != NoOp && t.OverlapsN(count) {
		return &datatype.Error{Err: datatype.ErrOverlap,
			Msg: fmt.Sprintf("%v: the target datatype (%d instances of %v) has overlapping elements", o, count, b)}
	}
	if size == 0 || k == nil && result == nil {
		return nil
	}
	if o >= FirstUser {
		return callUser(o, b, func() { applyType(k, o, t, count, window, base, origin, result, size) })
	}
	applyType(k, o, t, count, window, base, origin, result, size)
	return nil
}

// applyType is the walk of ApplyType, once everything is checked.
func applyType(k kernel, o Op, t datatype.Type, count int, window []byte, base int64, origin, result []byte, size int64) {
	b := t.Basic()
	if t.IsContiguous() {
		lo := base + t.TrueLB()
		w := window[lo : lo+size]
		if result != nil {
			copy(result, w)
		}
		if k != nil {
			k(o, w, origin)
		}
		return
	}
	es := int64(b.Size())
	var pos int64
	t.ForEachBlock(count, func(off int64, n int) bool {
		lo, nb := base+off, int64(n)*es
		w := window[lo : lo+nb]
		if result != nil {
			copy(result[pos:pos+nb], w)
		}
		if k != nil {
			k(o, w, origin[pos:pos+nb])
		}
		pos += nb
		return true
	})
}

// CompareAndSwap is the target side of MPI_Compare_and_swap on one element
// of type b: result receives the old value of target, and target is set to
// origin if its old value equals compare (bit for bit; for Bool, 0 and 1 are
// the values, as MPI's C bool). It reports whether it swapped. Every buffer
// must be b.Size() bytes ([ErrLength]); b must be an integer, Byte or Bool
// ([ErrOpDatatype], see [CheckCompareAndSwap]). result may be nil. It is not
// atomic (see [Apply]) and does not allocate.
func CompareAndSwap(b datatype.Basic, target, compare, origin, result []byte) (bool, error) {
	if err := CheckCompareAndSwap(b); err != nil {
		return false, err
	}
	n := b.Size()
	if len(target) != n || len(compare) != n || len(origin) != n || (result != nil && len(result) != n) {
		return false, &Error{Basic: b, Err: ErrLength,
			Msg: fmt.Sprintf("compare-and-swap on %v: buffers of %d, %d, %d and %d bytes (want %d)",
				b, len(target), len(compare), len(origin), len(result), n)}
	}
	copy(result, target)
	if string(target) != string(compare) {
		return false, nil
	}
	copy(target, origin)
	return true, nil
}
