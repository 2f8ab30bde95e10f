package op

import (
	"unsafe"

	"github.com/onesided/rma/datatype"
)

// A kernel applies op o element by element: target[i] = target[i] o
// origin[i]. The buffers have the same, non-zero length, a multiple of the
// element size; they need not be aligned.
type kernel func(o Op, target, origin []byte)

// kernels[o][b] is nil where MPI does not define o on b, and for NO_OP.
var kernels [numOps][datatype.MaxBasic + 1]kernel

func init() {
	regInteger[int8](datatype.Int8)
	regInteger[int16](datatype.Int16)
	regInteger[int32](datatype.Int32)
	regInteger[int64](datatype.Int64)
	regInteger[uint8](datatype.Uint8)
	regInteger[uint16](datatype.Uint16)
	regInteger[uint32](datatype.Uint32)
	regInteger[uint64](datatype.Uint64)
	for _, o := range []Op{Max, Min, Sum, Prod} {
		kernels[o][datatype.Float32] = floatK[float32]
		kernels[o][datatype.Float64] = floatK[float64]
	}
	for _, o := range []Op{Sum, Prod} {
		kernels[o][datatype.Complex64] = complex64K
		kernels[o][datatype.Complex128] = complex128K
	}
	// Bool and Byte are bytes: the integer kernels on uint8 store 1/0 for
	// the logical ops and work bit by bit for the bitwise ones.
	for _, o := range []Op{Land, Lor, Lxor} {
		kernels[o][datatype.Bool] = intK[uint8]
	}
	for _, o := range []Op{Band, Bor, Bxor} {
		kernels[o][datatype.Byte] = intK[uint8]
	}
	for _, o := range []Op{Maxloc, Minloc} {
		kernels[o][datatype.Float32Int] = pairK[float32]
		kernels[o][datatype.Float64Int] = pairK[float64]
		kernels[o][datatype.Int64Int] = pairK[int64]
		kernels[o][datatype.Int32Int] = pairK[int32]
		kernels[o][datatype.Int16Int] = pairK[int16]
	}
	for b := datatype.Basic(1); b <= datatype.MaxBasic; b++ {
		kernels[Replace][b] = replaceK
	}
}

func regInteger[T integer](b datatype.Basic) {
	for _, o := range []Op{Max, Min, Sum, Prod, Land, Lor, Lxor, Band, Bor, Bxor} {
		kernels[o][b] = intK[T]
	}
}

type integer interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

type float interface{ ~float32 | ~float64 }

type ordered interface{ integer | float }

// pair has the layout of the datatype.Pair* structs.
type pair[V ordered] struct {
	v V
	i int32
}

// chunk is the number of elements staged at a time through aligned
// buffers on the stack when a buffer is not aligned for its element type.
const chunk = 64

// view returns b as a []T when it is suitably aligned; len(b) > 0.
func view[T any](b []byte) ([]T, bool) {
	var z T
	p := unsafe.Pointer(unsafe.SliceData(b))
	if uintptr(p)%unsafe.Alignof(z) != 0 {
		return nil, false
	}
	return unsafe.Slice((*T)(p), len(b)/int(unsafe.Sizeof(z))), true
}

func view2[T any](t, s []byte) ([]T, []T, bool) {
	tt, ok1 := view[T](t)
	ss, ok2 := view[T](s)
	return tt, ss, ok1 && ok2
}

// stage copies up to chunk elements from the start of b into buf and returns
// them and their size in bytes.
func stage[T any](buf *[chunk]T, b []byte) ([]T, int) {
	var z T
	size := int(unsafe.Sizeof(z))
	n := min(len(b)/size, chunk)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(buf)), n*size), b)
	return buf[:n], n * size
}

// unstage copies nbytes of buf back to the start of b.
func unstage[T any](b []byte, buf *[chunk]T, nbytes int) {
	copy(b[:nbytes], unsafe.Slice((*byte)(unsafe.Pointer(buf)), nbytes))
}

func replaceK(_ Op, t, s []byte) { copy(t, s) }

// The drivers below all have the same shape: direct typed access when both
// buffers are aligned, else staging through stack buffers. The per-op loops
// are called directly (not through func values) so that the stack buffers do
// not escape and nothing is allocated.

func intK[T integer](o Op, t, s []byte) {
	if tt, ss, ok := view2[T](t, s); ok {
		intS(o, tt, ss)
		return
	}
	var tb, sb [chunk]T
	for len(t) > 0 {
		tt, n := stage(&tb, t)
		ss, _ := stage(&sb, s)
		intS(o, tt, ss)
		unstage(t, &tb, n)
		t, s = t[n:], s[n:]
	}
}

func floatK[T float](o Op, t, s []byte) {
	if tt, ss, ok := view2[T](t, s); ok {
		floatS(o, tt, ss)
		return
	}
	var tb, sb [chunk]T
	for len(t) > 0 {
		tt, n := stage(&tb, t)
		ss, _ := stage(&sb, s)
		floatS(o, tt, ss)
		unstage(t, &tb, n)
		t, s = t[n:], s[n:]
	}
}

func complex64K(o Op, t, s []byte) {
	if tt, ss, ok := view2[complex64](t, s); ok {
		complex64S(o, tt, ss)
		return
	}
	var tb, sb [chunk]complex64
	for len(t) > 0 {
		tt, n := stage(&tb, t)
		ss, _ := stage(&sb, s)
		complex64S(o, tt, ss)
		unstage(t, &tb, n)
		t, s = t[n:], s[n:]
	}
}

func complex128K(o Op, t, s []byte) {
	if tt, ss, ok := view2[complex128](t, s); ok {
		complex128S(o, tt, ss)
		return
	}
	var tb, sb [chunk]complex128
	for len(t) > 0 {
		tt, n := stage(&tb, t)
		ss, _ := stage(&sb, s)
		complex128S(o, tt, ss)
		unstage(t, &tb, n)
		t, s = t[n:], s[n:]
	}
}

func pairK[V ordered](o Op, t, s []byte) {
	if tt, ss, ok := view2[pair[V]](t, s); ok {
		pairS(o, tt, ss)
		return
	}
	var tb, sb [chunk]pair[V]
	for len(t) > 0 {
		tt, n := stage(&tb, t)
		ss, _ := stage(&sb, s)
		pairS(o, tt, ss)
		unstage(t, &tb, n)
		t, s = t[n:], s[n:]
	}
}

func b2i[T integer](b bool) T {
	var r T
	if b {
		r = 1
	}
	return r
}

func intS[T integer](o Op, t, s []T) {
	s = s[:len(t)]
	switch o {
	case Max:
		for i, x := range s {
			t[i] = max(t[i], x)
		}
	case Min:
		for i, x := range s {
			t[i] = min(t[i], x)
		}
	case Sum:
		for i, x := range s {
			t[i] += x
		}
	case Prod:
		for i, x := range s {
			t[i] *= x
		}
	case Land:
		for i, x := range s {
			t[i] = b2i[T](t[i] != 0 && x != 0)
		}
	case Lor:
		for i, x := range s {
			t[i] = b2i[T](t[i] != 0 || x != 0)
		}
	case Lxor:
		for i, x := range s {
			t[i] = b2i[T]((t[i] != 0) != (x != 0))
		}
	case Band:
		for i, x := range s {
			t[i] &= x
		}
	case Bor:
		for i, x := range s {
			t[i] |= x
		}
	case Bxor:
		for i, x := range s {
			t[i] ^= x
		}
	}
}

// floatS uses Go's built-in max and min: a NaN operand gives NaN, and
// max(-0, +0) = +0, min(-0, +0) = -0 (IEEE 754-2019 maximum and minimum).
func floatS[T float](o Op, t, s []T) {
	s = s[:len(t)]
	switch o {
	case Max:
		for i, x := range s {
			t[i] = max(t[i], x)
		}
	case Min:
		for i, x := range s {
			t[i] = min(t[i], x)
		}
	case Sum:
		for i, x := range s {
			t[i] += x
		}
	case Prod:
		for i, x := range s {
			t[i] *= x
		}
	}
}

// The complex product is (a+bi)(c+di) = (ac-bd) + (ad+bc)i with every
// product rounded on its own (the explicit conversions forbid fused
// multiply-add), so that it gives the same bits on every architecture.

func complex64S(o Op, t, s []complex64) {
	s = s[:len(t)]
	switch o {
	case Sum:
		for i, x := range s {
			t[i] += x
		}
	case Prod:
		for i, x := range s {
			a, b, c, d := real(t[i]), imag(t[i]), real(x), imag(x)
			t[i] = complex(float32(a*c)-float32(b*d), float32(a*d)+float32(b*c))
		}
	}
}

func complex128S(o Op, t, s []complex128) {
	s = s[:len(t)]
	switch o {
	case Sum:
		for i, x := range s {
			t[i] += x
		}
	case Prod:
		for i, x := range s {
			a, b, c, d := real(t[i]), imag(t[i]), real(x), imag(x)
			t[i] = complex(float64(a*c)-float64(b*d), float64(a*d)+float64(b*c))
		}
	}
}

// pairS implements MAXLOC and MINLOC. For MAXLOC the result is the pair with
// the greater value; on equal values (== comparison, so -0 equals +0) the
// value is max(u, v) and the index the lower of the two. A NaN value wins,
// like MAX's NaN; if both values are NaN the pair with the lower index wins.
// MINLOC is the same with "smaller" and min. Padding bytes are unspecified.
func pairS[V ordered](o Op, t, s []pair[V]) {
	s = s[:len(t)]
	switch o {
	case Maxloc:
		for i := range s {
			a, b := &t[i], &s[i]
			switch {
			case a.v == b.v:
				a.v = max(a.v, b.v)
				a.i = min(a.i, b.i)
			case a.v != a.v: // a is NaN
				if b.v != b.v && b.i < a.i {
					a.v, a.i = b.v, b.i
				}
			case b.v != b.v || b.v > a.v:
				a.v, a.i = b.v, b.i
			}
		}
	case Minloc:
		for i := range s {
			a, b := &t[i], &s[i]
			switch {
			case a.v == b.v:
				a.v = min(a.v, b.v)
				a.i = min(a.i, b.i)
			case a.v != a.v:
				if b.v != b.v && b.i < a.i {
					a.v, a.i = b.v, b.i
				}
			case b.v != b.v || b.v < a.v:
				a.v, a.i = b.v, b.i
			}
		}
	}
}
