//go:build integration

package test

import (
	"encoding/binary"
	"math"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
)

// num is one element in a type-independent form, for a plain-Go reference
// of the predefined ops that does not use the library's kernels.
type num struct {
	i   int64      // integers, byte, bool (0/1), pair values of integer pairs
	f   float64    // floats and float pair values
	c   complex128 // complex
	idx int32      // pair index
}

func isFloat(b datatype.Basic) bool {
	return b == datatype.Float32 || b == datatype.Float64 || b == datatype.Float32Int || b == datatype.Float64Int
}

func isComplex(b datatype.Basic) bool { return b == datatype.Complex64 || b == datatype.Complex128 }

// encode writes n as an element of b (host byte order, Go layout).
func encode(b datatype.Basic, n num) []byte {
	ne := binary.NativeEndian
	out := make([]byte, b.Size())
	switch b {
	case datatype.Int8, datatype.Uint8, datatype.Byte:
		out[0] = byte(n.i)
	case datatype.Bool:
		if n.i != 0 {
			out[0] = 1
		}
	case datatype.Int16, datatype.Uint16:
		ne.PutUint16(out, uint16(n.i))
	case datatype.Int32, datatype.Uint32:
		ne.PutUint32(out, uint32(n.i))
	case datatype.Int64, datatype.Uint64:
		ne.PutUint64(out, uint64(n.i))
	case datatype.Float32:
		ne.PutUint32(out, math.Float32bits(float32(n.f)))
	case datatype.Float64:
		ne.PutUint64(out, math.Float64bits(n.f))
	case datatype.Complex64:
		ne.PutUint32(out, math.Float32bits(float32(real(n.c))))
		ne.PutUint32(out[4:], math.Float32bits(float32(imag(n.c))))
	case datatype.Complex128:
		ne.PutUint64(out, math.Float64bits(real(n.c)))
		ne.PutUint64(out[8:], math.Float64bits(imag(n.c)))
	case datatype.Float32Int:
		copy(out, datatype.AsBytes([]datatype.PairFloat32Int{{V: float32(n.f), I: n.idx}}))
	case datatype.Float64Int:
		copy(out, datatype.AsBytes([]datatype.PairFloat64Int{{V: n.f, I: n.idx}}))
	case datatype.Int64Int:
		copy(out, datatype.AsBytes([]datatype.PairInt64Int{{V: n.i, I: n.idx}}))
	case datatype.Int32Int:
		copy(out, datatype.AsBytes([]datatype.PairInt32Int{{V: int32(n.i), I: n.idx}}))
	case datatype.Int16Int:
		copy(out, datatype.AsBytes([]datatype.PairInt16Int{{V: int16(n.i), I: n.idx}}))
	}
	return out
}

// truncate wraps an integer to b's width, as two's complement arithmetic does.
func truncate(b datatype.Basic, v int64) int64 {
	switch b {
	case datatype.Int8:
		return int64(int8(v))
	case datatype.Uint8, datatype.Byte:
		return int64(uint8(v))
	case datatype.Int16:
		return int64(int16(v))
	case datatype.Uint16:
		return int64(uint16(v))
	case datatype.Int32:
		return int64(int32(v))
	case datatype.Uint32:
		return int64(uint32(v))
	}
	return v
}

func truth(v int64) int64 {
	if v != 0 {
		return 1
	}
	return 0
}

// refApply returns target o origin, computed with Go arithmetic.
func refApply(o op.Op, b datatype.Basic, t, x num) num {
	fl, cx := isFloat(b), isComplex(b)
	switch o {
	case op.Replace:
		return x
	case op.Sum:
		switch {
		case cx:
			t.c += x.c
		case fl:
			t.f += x.f
		default:
			t.i = truncate(b, t.i+x.i)
		}
	case op.Prod:
		switch {
		case cx:
			t.c *= x.c
		case fl:
			t.f *= x.f
		default:
			t.i = truncate(b, t.i*x.i)
		}
	case op.Max:
		if fl {
			t.f = math.Max(t.f, x.f)
		} else if x.i > t.i {
			t.i = x.i
		}
	case op.Min:
		if fl {
			t.f = math.Min(t.f, x.f)
		} else if x.i < t.i {
			t.i = x.i
		}
	case op.Land:
		t.i = truth(t.i) & truth(x.i)
	case op.Lor:
		t.i = truth(t.i) | truth(x.i)
	case op.Lxor:
		t.i = truth(t.i) ^ truth(x.i)
	case op.Band:
		t.i = truncate(b, t.i&x.i)
	case op.Bor:
		t.i = truncate(b, t.i|x.i)
	case op.Bxor:
		t.i = truncate(b, t.i^x.i)
	case op.Maxloc, op.Minloc:
		tv, xv := float64(t.i), float64(x.i)
		if fl {
			tv, xv = t.f, x.f
		}
		better := xv > tv
		if o == op.Minloc {
			better = xv < tv
		}
		if better || (xv == tv && x.idx < t.idx) {
			return x
		}
	}
	return t
}

// contribution is what rank r contributes (r = -1: the window's initial value) to
// element e of the accumulate of o on b: small numbers, so that every sum
// and product is exact in every type and the result does not depend on the
// order the ranks' updates are applied in.
func contribution(o op.Op, b datatype.Basic, r, e int) num {
	k := int64(r + 2)
	var n num
	switch o {
	case op.Prod:
		n.i = 1 + int64((r+e+4)%3)
	case op.Land, op.Lor, op.Lxor:
		n.i = int64((r*3 + e) % 2)
		if r < 0 {
			n.i = int64(e % 2)
		}
	case op.Band, op.Bor, op.Bxor:
		n.i = (k*37 + int64(e)*11) & 0x7f
	case op.Maxloc, op.Minloc:
		n.i = int64((r + e + 3) % 3)
		n.idx = int32(10*r + e)
	default:
		n.i = k*3 + int64(e)
		if b != datatype.Uint8 && b != datatype.Uint16 && b != datatype.Uint32 && b != datatype.Uint64 && b != datatype.Byte && r%2 == 1 {
			n.i = -n.i // negative operands where the type has them
		}
	}
	n.f = float64(n.i)
	n.c = complex(float64(n.i), float64(n.i%2))
	return n
}
