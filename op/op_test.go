package op

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/onesided/rma/datatype"
)

var (
	ints    = []datatype.Basic{datatype.Int8, datatype.Int16, datatype.Int32, datatype.Int64, datatype.Uint8, datatype.Uint16, datatype.Uint32, datatype.Uint64}
	floats  = []datatype.Basic{datatype.Float32, datatype.Float64}
	cplxs   = []datatype.Basic{datatype.Complex64, datatype.Complex128}
	pairs   = []datatype.Basic{datatype.Float32Int, datatype.Float64Int, datatype.Int64Int, datatype.Int32Int, datatype.Int16Int}
	allBase = datatype.Basics()
)

func cat(s ...[]datatype.Basic) []datatype.Basic { return slices.Concat(s...) }

// allowed is MPI-4.1 §6.9.2, written out independently of the package.
var allowed = map[Op][]datatype.Basic{
	Max:     cat(ints, floats),
	Min:     cat(ints, floats),
	Sum:     cat(ints, floats, cplxs),
	Prod:    cat(ints, floats, cplxs),
	Land:    cat(ints, []datatype.Basic{datatype.Bool}),
	Lor:     cat(ints, []datatype.Basic{datatype.Bool}),
	Lxor:    cat(ints, []datatype.Basic{datatype.Bool}),
	Band:    cat(ints, []datatype.Basic{datatype.Byte}),
	Bor:     cat(ints, []datatype.Basic{datatype.Byte}),
	Bxor:    cat(ints, []datatype.Basic{datatype.Byte}),
	Maxloc:  pairs,
	Minloc:  pairs,
	Replace: allBase,
	NoOp:    allBase,
}

func TestOpNames(t *testing.T) {
	want := []string{"MAX", "MIN", "SUM", "PROD", "LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR", "MAXLOC", "MINLOC", "REPLACE", "NO_OP"}
	ops := Ops()
	if len(ops) != len(want) || len(allowed) != len(want) {
		t.Fatalf("%d ops", len(ops))
	}
	for i, o := range ops {
		if o.String() != want[i] || !o.Predefined() || o.IsUser() {
			t.Errorf("%d: %v", i, o)
		}
	}
	if Op(0).String() != "Op(0)" || Op(0).Predefined() || (FirstUser+62).String() != "USER(62)" || !Op(200).IsUser() || Op(100).String() != "Op(100)" {
		t.Error("invalid op names")
	}
	if !Sum.Commutative() || Replace.Commutative() || NoOp.Commutative() || Op(0).Commutative() {
		t.Error("Commutative")
	}
	if FetchAndOp != GetAccumulate || Accumulate.String() != "Accumulate" || Use(9).String() != "Use(9)" {
		t.Error("uses")
	}
}

func TestCheckTable(t *testing.T) {
	for _, o := range Ops() {
		for _, b := range allBase {
			ok := slices.Contains(allowed[o], b)
			for _, use := range []Use{Accumulate, GetAccumulate, Collective} {
				err := Check(o, b, use)
				useOK := !(o == Replace && use == Collective) && !(o == NoOp && use != GetAccumulate)
				var e *Error
				switch {
				case !ok:
					if !errors.Is(err, ErrOpDatatype) || !errors.As(err, &e) || e.Op != o || e.Basic != b || e.Use != use {
						t.Errorf("Check(%v, %v, %v) = %v, want ErrOpDatatype", o, b, use, err)
					}
				case !useOK:
					if !errors.Is(err, ErrOpUse) || !errors.As(err, &e) || e.Op != o || e.Use != use {
						t.Errorf("Check(%v, %v, %v) = %v, want ErrOpUse", o, b, use, err)
					}
				case err != nil:
					t.Errorf("Check(%v, %v, %v) = %v", o, b, use, err)
				}
			}
			// The kernel table agrees with the rules.
			_, kerr := kernelFor(o, b)
			if (kerr == nil) != ok {
				t.Errorf("kernel for (%v, %v): %v", o, b, kerr)
			}
		}
	}
	msgs := map[string]error{
		"op: MAXLOC is not defined on float64 (MPI defines it on value-index pairs only)":                  Check(Maxloc, datatype.Float64, Accumulate),
		"op: MAX is not defined on complex64 (MPI defines it on integers and floating point only)":         Check(Max, datatype.Complex64, Collective),
		"op: LAND is not defined on byte (MPI defines it on integers and bool only)":                       Check(Land, datatype.Byte, Accumulate),
		"op: BOR is not defined on bool (MPI defines it on integers and byte only)":                        Check(Bor, datatype.Bool, Accumulate),
		"op: SUM is not defined on int32int (MPI defines it on integers, floating point and complex only)": Check(Sum, datatype.Int32Int, GetAccumulate),
		"op: REPLACE cannot be used in a collective (MPI allows it only in the accumulate family)":         Check(Replace, datatype.Int32, Collective),
		"op: NO_OP cannot be used in Accumulate (MPI allows it only in GetAccumulate and FetchAndOp)":      Check(NoOp, datatype.Int32, Accumulate),
		"op: compare-and-swap is not defined on float64 (MPI defines it on integers, byte and bool only)":  CheckCompareAndSwap(datatype.Float64),
		"op: user-defined op USER(60) is not defined in this process (neither registered nor created)":     Check(FirstUser+60, datatype.Int32, Accumulate),
	}
	for want, err := range msgs {
		if err == nil || err.Error() != want {
			t.Errorf("got %v, want %q", err, want)
		}
	}
	for _, err := range []error{
		Check(0, datatype.Int32, Accumulate), Check(numOps, datatype.Int32, Accumulate),
		Check(Sum, 0, Accumulate), Check(Sum, datatype.MaxBasic+1, Accumulate),
		Check(Sum, datatype.Int32, 0), Check(Sum, datatype.Int32, numUses),
		CheckCompareAndSwap(0),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("invalid argument: %v", err)
		}
	}
	for _, b := range allBase {
		err := CheckCompareAndSwap(b)
		ok := slices.Contains(ints, b) || b == datatype.Byte || b == datatype.Bool
		if (err == nil) != ok || (!ok && !errors.Is(err, ErrOpDatatype)) {
			t.Errorf("CheckCompareAndSwap(%v) = %v", b, err)
		}
	}
}

func TestPairLayout(t *testing.T) {
	check := func(name string, s1, s2, a1, a2, o1, o2 uintptr) {
		if s1 != s2 || a1 != a2 || o1 != o2 {
			t.Errorf("%s: internal pair layout differs", name)
		}
	}
	check("float32", unsafe.Sizeof(pair[float32]{}), unsafe.Sizeof(datatype.PairFloat32Int{}), unsafe.Alignof(pair[float32]{}), unsafe.Alignof(datatype.PairFloat32Int{}), unsafe.Offsetof(pair[float32]{}.i), unsafe.Offsetof(datatype.PairFloat32Int{}.I))
	check("float64", unsafe.Sizeof(pair[float64]{}), unsafe.Sizeof(datatype.PairFloat64Int{}), unsafe.Alignof(pair[float64]{}), unsafe.Alignof(datatype.PairFloat64Int{}), unsafe.Offsetof(pair[float64]{}.i), unsafe.Offsetof(datatype.PairFloat64Int{}.I))
	check("int64", unsafe.Sizeof(pair[int64]{}), unsafe.Sizeof(datatype.PairInt64Int{}), unsafe.Alignof(pair[int64]{}), unsafe.Alignof(datatype.PairInt64Int{}), unsafe.Offsetof(pair[int64]{}.i), unsafe.Offsetof(datatype.PairInt64Int{}.I))
	check("int32", unsafe.Sizeof(pair[int32]{}), unsafe.Sizeof(datatype.PairInt32Int{}), unsafe.Alignof(pair[int32]{}), unsafe.Alignof(datatype.PairInt32Int{}), unsafe.Offsetof(pair[int32]{}.i), unsafe.Offsetof(datatype.PairInt32Int{}.I))
	check("int16", unsafe.Sizeof(pair[int16]{}), unsafe.Sizeof(datatype.PairInt16Int{}), unsafe.Alignof(pair[int16]{}), unsafe.Alignof(datatype.PairInt16Int{}), unsafe.Offsetof(pair[int16]{}.i), unsafe.Offsetof(datatype.PairInt16Int{}.I))
}

// ---- the reference: element by element, decoding with encoding/binary ----

var ne = binary.NativeEndian

func getU(b []byte, n int) uint64 {
	switch n {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(ne.Uint16(b))
	case 4:
		return uint64(ne.Uint32(b))
	}
	return ne.Uint64(b)
}

func getI(b []byte, n int) int64 {
	switch n {
	case 1:
		return int64(int8(b[0]))
	case 2:
		return int64(int16(ne.Uint16(b)))
	case 4:
		return int64(int32(ne.Uint32(b)))
	}
	return int64(ne.Uint64(b))
}

func putU(b []byte, n int, v uint64) {
	switch n {
	case 1:
		b[0] = byte(v)
	case 2:
		ne.PutUint16(b, uint16(v))
	case 4:
		ne.PutUint32(b, uint32(v))
	default:
		ne.PutUint64(b, v)
	}
}

func bit(c bool) uint64 {
	if c {
		return 1
	}
	return 0
}

func refInt(o Op, x, y int64) int64 {
	switch o {
	case Max:
		if y > x {
			return y
		}
		return x
	case Min:
		if y < x {
			return y
		}
		return x
	case Sum:
		return x + y
	case Prod:
		return x * y
	case Land:
		return int64(bit(x != 0 && y != 0))
	case Lor:
		return int64(bit(x != 0 || y != 0))
	case Lxor:
		return int64(bit((x != 0) != (y != 0)))
	case Band:
		return x & y
	case Bor:
		return x | y
	case Bxor:
		return x ^ y
	}
	panic(o)
}

func refUint(o Op, x, y uint64) uint64 {
	switch o {
	case Max:
		if y > x {
			return y
		}
		return x
	case Min:
		if y < x {
			return y
		}
		return x
	case Sum:
		return x + y
	case Prod:
		return x * y
	case Land:
		return bit(x != 0 && y != 0)
	case Lor:
		return bit(x != 0 || y != 0)
	case Lxor:
		return bit((x != 0) != (y != 0))
	case Band:
		return x & y
	case Bor:
		return x | y
	case Bxor:
		return x ^ y
	}
	panic(o)
}

// refMaxMin: NaN if either is NaN; -0 < +0.
func refMaxMin(isMax bool, x, y float64) float64 {
	if math.IsNaN(x) || math.IsNaN(y) {
		return math.NaN()
	}
	if x == y {
		if x == 0 && math.Signbit(x) != math.Signbit(y) {
			if isMax {
				return 0
			}
			return math.Copysign(0, -1)
		}
		return x
	}
	if (x > y) == isMax {
		return x
	}
	return y
}

func refF64(o Op, x, y float64) float64 {
	switch o {
	case Max, Min:
		return refMaxMin(o == Max, x, y)
	case Sum:
		return x + y
	case Prod:
		return x * y
	}
	panic(o)
}

func refF32(o Op, x, y float32) float32 {
	switch o {
	case Max, Min:
		return float32(refMaxMin(o == Max, float64(x), float64(y)))
	case Sum: // exact in float64, then rounded once
		return float32(float64(x) + float64(y))
	case Prod:
		return float32(float64(x) * float64(y))
	}
	panic(o)
}

func refC128(o Op, x, y complex128) complex128 {
	a, b, c, d := real(x), imag(x), real(y), imag(y)
	switch o {
	case Sum:
		return complex(a+c, b+d)
	case Prod:
		return complex(float64(a*c)-float64(b*d), float64(a*d)+float64(b*c))
	}
	panic(o)
}

func refC64(o Op, x, y complex64) complex64 {
	a, b, c, d := float64(real(x)), float64(imag(x)), float64(real(y)), float64(imag(y))
	switch o {
	case Sum:
		return complex(float32(a+c), float32(b+d))
	case Prod: // each product exact in float64, rounded to float32
		return complex(float32(a*c)-float32(b*d), float32(a*d)+float32(b*c))
	}
	panic(o)
}

// refLoc for pairs; values as float64 (exact for float32/float64) or int64.
func refLocF(isMax bool, xv float64, xi int32, yv float64, yi int32) (float64, int32) {
	xn, yn := math.IsNaN(xv), math.IsNaN(yv)
	switch {
	case xn && yn:
		if yi < xi {
			return yv, yi
		}
		return xv, xi
	case xn:
		return xv, xi
	case yn:
		return yv, yi
	case xv == yv:
		return refMaxMin(isMax, xv, yv), min(xi, yi)
	case (xv > yv) == isMax:
		return xv, xi
	}
	return yv, yi
}

func refLocI(isMax bool, xv int64, xi int32, yv int64, yi int32) (int64, int32) {
	switch {
	case xv == yv:
		return xv, min(xi, yi)
	case (xv > yv) == isMax:
		return xv, xi
	}
	return yv, yi
}

// refElem applies o to one element: t = t o s.
func refElem(o Op, b datatype.Basic, t, s []byte) {
	n := b.Size()
	switch {
	case o == NoOp:
	case o == Replace:
		copy(t[:n], s[:n])
	case b == datatype.Int8 || b == datatype.Int16 || b == datatype.Int32 || b == datatype.Int64:
		putU(t, n, uint64(refInt(o, getI(t, n), getI(s, n))))
	case b.IsInteger():
		putU(t, n, refUint(o, getU(t, n), getU(s, n)))
	case b == datatype.Byte:
		putU(t, 1, refUint(o, uint64(t[0]), uint64(s[0])))
	case b == datatype.Bool:
		putU(t, 1, refUint(o, uint64(t[0]), uint64(s[0]))) // logical ops store 1/0
	case b == datatype.Float32:
		r := refF32(o, math.Float32frombits(ne.Uint32(t)), math.Float32frombits(ne.Uint32(s)))
		ne.PutUint32(t, math.Float32bits(r))
	case b == datatype.Float64:
		r := refF64(o, math.Float64frombits(ne.Uint64(t)), math.Float64frombits(ne.Uint64(s)))
		ne.PutUint64(t, math.Float64bits(r))
	case b == datatype.Complex64:
		x := complex(math.Float32frombits(ne.Uint32(t)), math.Float32frombits(ne.Uint32(t[4:])))
		y := complex(math.Float32frombits(ne.Uint32(s)), math.Float32frombits(ne.Uint32(s[4:])))
		r := refC64(o, x, y)
		ne.PutUint32(t, math.Float32bits(real(r)))
		ne.PutUint32(t[4:], math.Float32bits(imag(r)))
	case b == datatype.Complex128:
		x := complex(math.Float64frombits(ne.Uint64(t)), math.Float64frombits(ne.Uint64(t[8:])))
		y := complex(math.Float64frombits(ne.Uint64(s)), math.Float64frombits(ne.Uint64(s[8:])))
		r := refC128(o, x, y)
		ne.PutUint64(t, math.Float64bits(real(r)))
		ne.PutUint64(t[8:], math.Float64bits(imag(r)))
	case b.IsPair():
		isMax := o == Maxloc
		io := pairIndexOffset(b)
		xi, yi := int32(ne.Uint32(t[io:])), int32(ne.Uint32(s[io:]))
		var ri int32
		switch b {
		case datatype.Float32Int:
			var r float64
			r, ri = refLocF(isMax, float64(math.Float32frombits(ne.Uint32(t))), xi, float64(math.Float32frombits(ne.Uint32(s))), yi)
			ne.PutUint32(t, math.Float32bits(float32(r)))
		case datatype.Float64Int:
			var r float64
			r, ri = refLocF(isMax, math.Float64frombits(ne.Uint64(t)), xi, math.Float64frombits(ne.Uint64(s)), yi)
			ne.PutUint64(t, math.Float64bits(r))
		default:
			vs := map[datatype.Basic]int{datatype.Int64Int: 8, datatype.Int32Int: 4, datatype.Int16Int: 2}[b]
			var r int64
			r, ri = refLocI(isMax, getI(t, vs), xi, getI(s, vs), yi)
			putU(t, vs, uint64(r))
		}
		ne.PutUint32(t[io:], uint32(ri))
	default:
		panic("no reference for " + o.String() + " on " + b.String())
	}
}

func pairIndexOffset(b datatype.Basic) int {
	switch b {
	case datatype.Float32Int:
		return int(unsafe.Offsetof(datatype.PairFloat32Int{}.I))
	case datatype.Float64Int:
		return int(unsafe.Offsetof(datatype.PairFloat64Int{}.I))
	case datatype.Int64Int:
		return int(unsafe.Offsetof(datatype.PairInt64Int{}.I))
	case datatype.Int32Int:
		return int(unsafe.Offsetof(datatype.PairInt32Int{}.I))
	}
	return int(unsafe.Offsetof(datatype.PairInt16Int{}.I))
}

// sameElem compares one element, NaN equal to any NaN, pair padding ignored.
func sameElem(b datatype.Basic, x, y []byte) bool {
	n := b.Size()
	f32 := func(x, y []byte) bool {
		a, c := math.Float32frombits(ne.Uint32(x)), math.Float32frombits(ne.Uint32(y))
		return ne.Uint32(x) == ne.Uint32(y) || (a != a && c != c)
	}
	f64 := func(x, y []byte) bool {
		a, c := math.Float64frombits(ne.Uint64(x)), math.Float64frombits(ne.Uint64(y))
		return ne.Uint64(x) == ne.Uint64(y) || (a != a && c != c)
	}
	switch b {
	case datatype.Float32:
		return f32(x, y)
	case datatype.Float64:
		return f64(x, y)
	case datatype.Complex64:
		return f32(x, y) && f32(x[4:], y[4:])
	case datatype.Complex128:
		return f64(x, y) && f64(x[8:], y[8:])
	case datatype.Float32Int:
		return f32(x, y) && slices.Equal(x[4:8], y[4:8])
	case datatype.Float64Int:
		return f64(x, y) && slices.Equal(x[8:12], y[8:12])
	case datatype.Int64Int:
		return slices.Equal(x[:12], y[:12])
	case datatype.Int16Int:
		return slices.Equal(x[:2], y[:2]) && slices.Equal(x[4:8], y[4:8])
	}
	return slices.Equal(x[:n], y[:n])
}

// ---- edge values ----

func enc(b datatype.Basic, f func(p []byte)) []byte {
	p := make([]byte, b.Size())
	f(p)
	return p
}

func edges(b datatype.Basic) [][]byte {
	n := b.Size()
	var out [][]byte
	addU := func(vs ...uint64) {
		for _, v := range vs {
			out = append(out, enc(b, func(p []byte) { putU(p, n, v) }))
		}
	}
	f32s := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 0.5, 3, -2.75, math.MaxFloat32, -math.MaxFloat32,
		math.SmallestNonzeroFloat32, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.Float32frombits(0xffc00001), 1e-30, 16777217}
	f64s := []float64{0, math.Copysign(0, -1), 1, -1, 0.5, 3, -2.75, math.MaxFloat64, -math.MaxFloat64,
		math.SmallestNonzeroFloat64, math.Inf(1), math.Inf(-1), math.NaN(), math.Float64frombits(0xfff8000000000001), 1e-300, 1 << 53}
	switch {
	case b.IsInteger():
		bits := uint(8 * n)
		mask := uint64(1)<<(bits-1)<<1 - 1
		min := uint64(1) << (bits - 1)
		addU(0, 1, 2, 3, mask, mask-1, min, min-1, min+1, 0x5555555555555555&mask, 0xaaaaaaaaaaaaaaaa&mask, 7&mask)
	case b == datatype.Byte:
		addU(0, 1, 0x55, 0xaa, 0xff, 0x80, 0x0f)
	case b == datatype.Bool:
		addU(0, 1, 2, 0xff)
	case b == datatype.Float32:
		for _, f := range f32s {
			addU(uint64(math.Float32bits(f)))
		}
	case b == datatype.Float64:
		for _, f := range f64s {
			addU(math.Float64bits(f))
		}
	case b == datatype.Complex64:
		for _, re := range f32s[:13] {
			for _, im := range []float32{0, -1, 2.5, float32(math.Inf(1)), float32(math.NaN())} {
				out = append(out, enc(b, func(p []byte) {
					ne.PutUint32(p, math.Float32bits(re))
					ne.PutUint32(p[4:], math.Float32bits(im))
				}))
			}
		}
	case b == datatype.Complex128:
		for _, re := range f64s[:13] {
			for _, im := range []float64{0, -1, 2.5, math.Inf(1), math.NaN()} {
				out = append(out, enc(b, func(p []byte) {
					ne.PutUint64(p, math.Float64bits(re))
					ne.PutUint64(p[8:], math.Float64bits(im))
				}))
			}
		}
	case b.IsPair():
		io := pairIndexOffset(b)
		var vals [][]byte
		switch b {
		case datatype.Float32Int:
			for _, f := range []float32{0, float32(math.Copysign(0, -1)), 1, -1, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 2.5} {
				vals = append(vals, enc(datatype.Float32, func(p []byte) { ne.PutUint32(p, math.Float32bits(f)) }))
			}
		case datatype.Float64Int:
			for _, f := range []float64{0, math.Copysign(0, -1), 1, -1, math.Inf(1), math.Inf(-1), math.NaN(), 2.5} {
				vals = append(vals, enc(datatype.Float64, func(p []byte) { ne.PutUint64(p, math.Float64bits(f)) }))
			}
		default:
			vs := map[datatype.Basic]int{datatype.Int64Int: 8, datatype.Int32Int: 4, datatype.Int16Int: 2}[b]
			bits := uint(8 * vs)
			mask := uint64(1)<<(bits-1)<<1 - 1
			for _, v := range []uint64{0, 1, mask, 1 << (bits - 1), mask >> 1, 5} {
				p := make([]byte, vs)
				putU(p, vs, v)
				vals = append(vals, p)
			}
		}
		for _, v := range vals {
			for _, idx := range []int32{0, 1, -1, math.MaxInt32, math.MinInt32, 5} {
				out = append(out, enc(b, func(p []byte) {
					for i := range p {
						p[i] = 0xee // padding
					}
					copy(p, v)
					ne.PutUint32(p[io:], uint32(idx))
				}))
			}
		}
	}
	return out
}

// operands returns target and origin vectors holding every pair of edge
// values, followed by random elements.
func operands(b datatype.Basic, r *rand.Rand) (tgt, org []byte) {
	e := edges(b)
	for _, x := range e {
		for _, y := range e {
			tgt = append(tgt, x...)
			org = append(org, y...)
		}
	}
	for i := 0; i < 3*chunk+5; i++ {
		x, y := e[r.Intn(len(e))], e[r.Intn(len(e))]
		if r.Intn(2) == 0 && !b.IsPair() {
			x, y = make([]byte, b.Size()), make([]byte, b.Size())
			r.Read(x)
			r.Read(y)
		}
		tgt = append(tgt, x...)
		org = append(org, y...)
	}
	return tgt, org
}

// placed copies p to a buffer at the given misalignment from an 8-byte
// boundary (16 for complex128 on some platforms does not matter: Go aligns
// it to 8).
func placed(p []byte, misalign int) []byte {
	backing := make([]uint64, len(p)/8+3)
	all := unsafe.Slice((*byte)(unsafe.Pointer(&backing[0])), len(backing)*8)
	out := all[misalign : misalign+len(p)]
	copy(out, p)
	return out
}

func TestApplyAgainstReference(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for _, o := range Ops() {
		for _, b := range allowed[o] {
			tgt, org := operands(b, r)
			want := slices.Clone(tgt)
			es := b.Size()
			for i := 0; i < len(want); i += es {
				refElem(o, b, want[i:i+es], org[i:i+es])
			}
			for _, mis := range [][2]int{{0, 0}, {1, 0}, {0, 3}, {5, 5}, {2, 6}} {
				tb, ob := placed(tgt, mis[0]), placed(org, mis[1])
				if err := Apply(o, b, tb, ob); err != nil {
					t.Fatalf("Apply(%v, %v): %v", o, b, err)
				}
				for i := 0; i < len(want); i += es {
					if !sameElem(b, tb[i:i+es], want[i:i+es]) {
						t.Fatalf("%v on %v (misaligned %v), element %d: %x o %x = %x, want %x",
							o, b, mis, i/es, tgt[i:i+es], org[i:i+es], tb[i:i+es], want[i:i+es])
					}
				}
				if !slices.Equal(ob, org) {
					t.Fatalf("%v on %v: origin modified", o, b)
				}
				// ApplyFetch returns the old target.
				tb = placed(tgt, mis[0])
				res := make([]byte, len(tgt))
				if err := ApplyFetch(o, b, tb, ob, res); err != nil || !slices.Equal(res, tgt) {
					t.Fatalf("ApplyFetch(%v, %v): %v", o, b, err)
				}
				for i := 0; i < len(want); i += es {
					if !sameElem(b, tb[i:i+es], want[i:i+es]) {
						t.Fatalf("ApplyFetch %v on %v: element %d", o, b, i/es)
					}
				}
			}
		}
	}
}

// Spot checks of the documented semantics, written with typed values.
func TestSemantics(t *testing.T) {
	i8 := []int8{127, -128, 100}
	if err := Apply(Sum, datatype.Int8, datatype.AsBytes(i8), datatype.AsBytes([]int8{1, -1, 100})); err != nil ||
		!slices.Equal(i8, []int8{-128, 127, -56}) {
		t.Errorf("int8 wrap: %v %v", i8, err)
	}
	u64 := []uint64{math.MaxUint64, 1 << 63}
	Apply(Prod, datatype.Uint64, datatype.AsBytes(u64), datatype.AsBytes([]uint64{2, 2}))
	if !slices.Equal(u64, []uint64{math.MaxUint64 - 1, 0}) {
		t.Errorf("uint64 prod wrap: %v", u64)
	}
	negz := math.Copysign(0, -1)
	f := []float64{0, negz, math.NaN(), 1}
	Apply(Max, datatype.Float64, datatype.AsBytes(f), datatype.AsBytes([]float64{negz, 0, 1, math.NaN()}))
	if math.Signbit(f[0]) || math.Signbit(f[1]) || !math.IsNaN(f[2]) || !math.IsNaN(f[3]) {
		t.Errorf("float max: %v", f)
	}
	f = []float64{0, negz}
	Apply(Min, datatype.Float64, datatype.AsBytes(f), datatype.AsBytes([]float64{negz, 0}))
	if !math.Signbit(f[0]) || !math.Signbit(f[1]) {
		t.Errorf("float min: %v", f)
	}
	bl := []byte{0, 2, 7, 0}
	Apply(Lor, datatype.Bool, bl, []byte{0, 0, 9, 5})
	if !slices.Equal(bl, []byte{0, 1, 1, 1}) {
		t.Errorf("bool lor: %v", bl)
	}
	li := []int32{5, 0, -3}
	Apply(Lxor, datatype.Int32, datatype.AsBytes(li), datatype.AsBytes([]int32{7, 0, 0}))
	if !slices.Equal(li, []int32{0, 0, 1}) {
		t.Errorf("int lxor: %v", li)
	}
	c := []complex128{complex(1, 2)}
	Apply(Prod, datatype.Complex128, datatype.AsBytes(c), datatype.AsBytes([]complex128{complex(3, -1)}))
	if c[0] != complex(5, 5) {
		t.Errorf("complex prod: %v", c)
	}
	p := []datatype.PairFloat64Int{f64i(3, 7), f64i(3, 7), f64i(1, 2), f64i(negz, 4)}
	Apply(Maxloc, datatype.Float64Int, datatype.AsBytes(p), datatype.AsBytes([]datatype.PairFloat64Int{f64i(3, 2), f64i(2, 0), f64i(5, 9), f64i(0, 6)}))
	if p[0] != f64i(3, 2) || p[1] != f64i(3, 7) || p[2] != f64i(5, 9) ||
		p[3].I != 4 || math.Signbit(p[3].V) {
		t.Errorf("maxloc: %v", p)
	}
	q := []datatype.PairInt16Int{i16i(-5, 1), i16i(-5, 1)}
	Apply(Minloc, datatype.Int16Int, datatype.AsBytes(q), datatype.AsBytes([]datatype.PairInt16Int{i16i(-5, 0), i16i(-6, 8)}))
	if q[0] != i16i(-5, 0) || q[1] != i16i(-6, 8) {
		t.Errorf("minloc: %v", q)
	}
	// Replace and NoOp.
	r := []float32{1, 2}
	Apply(Replace, datatype.Float32, datatype.AsBytes(r), datatype.AsBytes([]float32{9, 8}))
	Apply(NoOp, datatype.Float32, datatype.AsBytes(r), nil)
	if !slices.Equal(r, []float32{9, 8}) {
		t.Errorf("replace/noop: %v", r)
	}
	// Native complex product agrees where Go does not fuse.
	x, y := complex(1.1, -2.3), complex(4.7, 0.3)
	z := []complex128{x}
	Apply(Prod, datatype.Complex128, datatype.AsBytes(z), datatype.AsBytes([]complex128{y}))
	if w := x * y; cmplxClose(z[0], w) == false {
		t.Errorf("complex prod %v vs %v", z[0], w)
	}
}

func cmplxClose(a, b complex128) bool {
	return math.Abs(real(a)-real(b)) <= 1e-15*math.Abs(real(b)) && math.Abs(imag(a)-imag(b)) <= 1e-15*math.Abs(imag(b))
}

func TestApplyErrors(t *testing.T) {
	tgt := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	orig := slices.Clone(tgt)
	cases := []struct {
		err  error
		want error
	}{
		{Apply(Sum, datatype.Int32, tgt, tgt[:4]), ErrLength},
		{Apply(Sum, datatype.Int32, tgt[:6], tgt[:6]), ErrLength},
		{Apply(Sum, datatype.Int64, tgt[:4], tgt[:4]), ErrLength},
		{Apply(Max, datatype.Complex64, tgt, tgt), ErrOpDatatype},
		{Apply(Maxloc, datatype.Int64, tgt, tgt), ErrOpDatatype},
		{Apply(Band, datatype.Float64, tgt, tgt), ErrOpDatatype},
		{Apply(0, datatype.Int64, tgt, tgt), ErrInvalid},
		{Apply(FirstUser+61, datatype.Int64, tgt, tgt), ErrInvalid},
		{Apply(NoOp, 0, tgt, tgt), ErrInvalid},
		{Apply(Sum, 0, tgt, tgt), ErrInvalid},
		{Apply(Sum, 200, tgt, tgt), ErrInvalid},
		{Apply(NoOp, datatype.Int32, tgt, tgt[:4]), ErrLength},
		{ApplyFetch(Sum, datatype.Int32, tgt, tgt, tgt[:4]), ErrLength},
		{ApplyFetch(Prod, datatype.Bool, tgt, tgt, tgt), ErrOpDatatype},
	}
	for i, c := range cases {
		var e *Error
		if !errors.Is(c.err, c.want) || !errors.As(c.err, &e) || !strings.HasPrefix(c.err.Error(), "op: ") {
			t.Errorf("%d: %v, want %v", i, c.err, c.want)
		}
	}
	if !slices.Equal(tgt, orig) {
		t.Error("target modified by a refused call")
	}
	if err := Apply(Sum, datatype.Int32, nil, nil); err != nil {
		t.Error(err)
	}
}

func TestApplyType(t *testing.T) {
	// A window of 64 int32; the target is a vector of 4 blocks of 2, stride 5.
	win := make([]int32, 64)
	for i := range win {
		win[i] = int32(i)
	}
	v, err := datatype.Vector(4, 2, 5, datatype.Int32.Type())
	if err != nil {
		t.Fatal(err)
	}
	origin := []int32{100, 200, 300, 400, 500, 600, 700, 800, 1, 2, 3, 4, 5, 6, 7, 8}
	result := make([]int32, 16)
	wb := datatype.AsBytes(win)
	base := int64(3 * 4)
	if err := ApplyType(Sum, v, 2, wb, base, datatype.AsBytes(origin), datatype.AsBytes(result)); err != nil {
		t.Fatal(err)
	}
	var idx []int // elements touched, in type-map order
	for inst := 0; inst < 2; inst++ {
		for blk := 0; blk < 4; blk++ {
			for j := 0; j < 2; j++ {
				idx = append(idx, 3+inst*17+blk*5+j) // extent = (3*5+2) = 17 elements
			}
		}
	}
	touched := map[int]bool{}
	for k, i := range idx {
		touched[i] = true
		if result[k] != int32(i) || win[i] != int32(i)+origin[k] {
			t.Fatalf("element %d: result %d win %d", i, result[k], win[i])
		}
	}
	for i := range win {
		if !touched[i] && win[i] != int32(i) {
			t.Fatalf("element %d modified", i)
		}
	}
	// NO_OP fetch, no origin.
	if err := ApplyType(NoOp, v, 2, wb, base, nil, datatype.AsBytes(result)); err != nil || result[0] != win[3] {
		t.Fatalf("noop fetch: %v", err)
	}
	// Contiguous fast path, misaligned window.
	raw := make([]byte, 8*16+1)
	c, _ := datatype.Contiguous(4, datatype.Float64.Type())
	if err := ApplyType(Replace, c, 2, raw[1:], 8, datatype.AsBytes([]float64{1, 2, 3, 4, 5, 6, 7, 8}), nil); err != nil {
		t.Fatal(err)
	}
	if got := math.Float64frombits(ne.Uint64(raw[1+8+7*8:])); got != 8 {
		t.Fatalf("replace: %v", got)
	}
	// Errors: outside the window, overlap, lengths, undefined op.
	var de *datatype.Error
	if err := ApplyType(Sum, v, 2, wb[:100], base, datatype.AsBytes(origin), nil); !errors.Is(err, datatype.ErrOutOfRange) || !errors.As(err, &de) {
		t.Errorf("out of range: %v", err)
	}
	if err := ApplyType(Sum, v, 2, wb, -4, datatype.AsBytes(origin), nil); !errors.Is(err, datatype.ErrOutOfRange) {
		t.Errorf("negative: %v", err)
	}
	ov, _ := datatype.Hvector(2, 2, 4, datatype.Int32.Type())
	if err := ApplyType(Sum, ov, 1, wb, 0, make([]byte, 16), nil); !errors.Is(err, datatype.ErrOverlap) {
		t.Errorf("overlap: %v", err)
	}
	if err := ApplyType(NoOp, ov, 1, wb, 0, nil, make([]byte, 16)); err != nil {
		t.Errorf("overlap with NO_OP: %v", err)
	}
	if err := ApplyType(Sum, v, 2, wb, base, datatype.AsBytes(origin[:15]), nil); !errors.Is(err, ErrLength) {
		t.Errorf("length: %v", err)
	}
	if err := ApplyType(Sum, v, 2, wb, base, datatype.AsBytes(origin), make([]byte, 4)); !errors.Is(err, ErrLength) {
		t.Errorf("result length: %v", err)
	}
	if err := ApplyType(Maxloc, v, 2, wb, base, datatype.AsBytes(origin), nil); !errors.Is(err, ErrOpDatatype) {
		t.Errorf("maxloc on int32: %v", err)
	}
	if err := ApplyType(Sum, datatype.Type{}, 1, wb, 0, nil, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("zero type: %v", err)
	}
	if err := ApplyType(Sum, v, -1, wb, 0, nil, nil); !errors.Is(err, datatype.ErrInvalid) {
		t.Errorf("negative count: %v", err)
	}
}

func TestNoAllocs(t *testing.T) {
	tgt := make([]float64, 1000)
	src := make([]float64, 1000)
	tb, sb := datatype.AsBytes(tgt), datatype.AsBytes(src)
	mis := make([]byte, 8*1000+1)
	res := make([]byte, 8*999)
	v, _ := datatype.Vector(100, 3, 5, datatype.Float64.Type())
	pk := make([]byte, v.Size())
	win := make([]byte, v.Extent())
	pairs := make([]byte, datatype.Float64Int.Size()*100+3)
	for name, f := range map[string]func(){
		"aligned":    func() { Apply(Sum, datatype.Float64, tb, sb) },
		"misaligned": func() { Apply(Max, datatype.Int64, mis[1:], tb[:len(mis)-1]) },
		"pairs":      func() { Apply(Maxloc, datatype.Float64Int, pairs[3:], pairs[:len(pairs)-3]) },
		"complex":    func() { Apply(Prod, datatype.Complex128, mis[1:8*1000-15], tb[:8*1000-16]) },
		"fetch":      func() { ApplyFetch(Sum, datatype.Float64, tb[8:], sb[8:], res) },
		"type":       func() { ApplyType(Sum, v, 1, win, 0, pk, nil) },
		"type-fetch": func() { ApplyType(Min, v, 1, win, 0, pk, pk) },
		"check":      func() { Check(Sum, datatype.Float64, Accumulate) },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocations per call", name, n)
		}
	}
}

func BenchmarkApply(b *testing.B) {
	for _, c := range []struct {
		name string
		o    Op
		bt   datatype.Basic
		n    int
		mis  int
	}{
		{"Sum/float64/1M", Sum, datatype.Float64, 1 << 20, 0},
		{"Sum/float64/1", Sum, datatype.Float64, 1, 0},
		{"Sum/float64/1M/unaligned", Sum, datatype.Float64, 1 << 20, 1},
		{"Max/int64/1M", Max, datatype.Int64, 1 << 20, 0},
		{"Max/int64/1", Max, datatype.Int64, 1, 0},
		{"Max/int64/1M/unaligned", Max, datatype.Int64, 1 << 20, 1},
		{"Maxloc/float64int/1M", Maxloc, datatype.Float64Int, 1 << 20, 0},
		{"Prod/complex128/1M", Prod, datatype.Complex128, 1 << 20, 0},
	} {
		b.Run(c.name, func(b *testing.B) {
			size := c.n * c.bt.Size()
			tgt := placed(make([]byte, size), c.mis)
			src := placed(make([]byte, size), 0)
			for i := range src {
				src[i] = byte(i % 7)
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := Apply(c.o, c.bt, tgt, src); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func f64i(v float64, i int32) datatype.PairFloat64Int { return datatype.PairFloat64Int{V: v, I: i} }
func i16i(v int16, i int32) datatype.PairInt16Int     { return datatype.PairInt16Int{V: v, I: i} }

func TestViewAlignment(t *testing.T) {
	b := placed(make([]byte, 32), 0)
	if _, ok := view[float64](b); !ok {
		t.Error("aligned buffer not viewed")
	}
	if _, ok := view[float64](b[1:25]); ok {
		t.Error("misaligned buffer viewed as []float64")
	}
	if _, ok := view[pair[int16]](b[2:10]); ok {
		t.Error("misaligned buffer viewed as []pair[int16]")
	}
	if v, ok := view[pair[int16]](b[4:20]); !ok || len(v) != 2 {
		t.Error("4-aligned buffer not viewed as pairs")
	}
}

func TestCompareAndSwap(t *testing.T) {
	v := []int64{42}
	old := make([]byte, 8)
	swapped, err := CompareAndSwap(datatype.Int64, datatype.AsBytes(v), datatype.AsBytes([]int64{41}), datatype.AsBytes([]int64{7}), old)
	if err != nil || swapped || v[0] != 42 || ne.Uint64(old) != 42 {
		t.Fatalf("no swap: %v %v %v", swapped, err, v)
	}
	swapped, err = CompareAndSwap(datatype.Int64, datatype.AsBytes(v), datatype.AsBytes([]int64{42}), datatype.AsBytes([]int64{7}), nil)
	if err != nil || !swapped || v[0] != 7 {
		t.Fatalf("swap: %v %v %v", swapped, err, v)
	}
	raw := make([]byte, 9) // misaligned is fine
	ne.PutUint32(raw[1:], 5)
	if ok, err := CompareAndSwap(datatype.Uint32, raw[1:5], raw[1:5], []byte{1, 0, 0, 0}, nil); !ok || err != nil || raw[1] != 1 {
		t.Fatalf("misaligned: %v %v", ok, err)
	}
	if _, err := CompareAndSwap(datatype.Float64, old, old, old, nil); !errors.Is(err, ErrOpDatatype) {
		t.Errorf("float64: %v", err)
	}
	if _, err := CompareAndSwap(datatype.Int64, old, old[:4], old, nil); !errors.Is(err, ErrLength) {
		t.Errorf("length: %v", err)
	}
	if n := testing.AllocsPerRun(100, func() {
		CompareAndSwap(datatype.Int64, datatype.AsBytes(v), old, old, old)
	}); n != 0 {
		t.Errorf("%v allocations", n)
	}
}
