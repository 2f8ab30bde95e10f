package datatype

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

func TestBasicTable(t *testing.T) {
	type row struct {
		b                                         Basic
		size, align                               uintptr
		integer, float, complex, logical, byt, pr bool
		name, mpi                                 string
	}
	rows := []row{
		{Int8, unsafe.Sizeof(int8(0)), unsafe.Alignof(int8(0)), true, false, false, false, false, false, "int8", "MPI_INT8_T"},
		{Int16, 2, unsafe.Alignof(int16(0)), true, false, false, false, false, false, "int16", "MPI_INT16_T"},
		{Int32, 4, unsafe.Alignof(int32(0)), true, false, false, false, false, false, "int32", "MPI_INT32_T"},
		{Int64, 8, unsafe.Alignof(int64(0)), true, false, false, false, false, false, "int64", "MPI_INT64_T"},
		{Uint8, 1, 1, true, false, false, false, false, false, "uint8", "MPI_UINT8_T"},
		{Uint16, 2, unsafe.Alignof(uint16(0)), true, false, false, false, false, false, "uint16", "MPI_UINT16_T"},
		{Uint32, 4, unsafe.Alignof(uint32(0)), true, false, false, false, false, false, "uint32", "MPI_UINT32_T"},
		{Uint64, 8, unsafe.Alignof(uint64(0)), true, false, false, false, false, false, "uint64", "MPI_UINT64_T"},
		{Float32, 4, unsafe.Alignof(float32(0)), false, true, false, false, false, false, "float32", "MPI_FLOAT"},
		{Float64, 8, unsafe.Alignof(float64(0)), false, true, false, false, false, false, "float64", "MPI_DOUBLE"},
		{Complex64, 8, unsafe.Alignof(complex64(0)), false, false, true, false, false, false, "complex64", "MPI_C_FLOAT_COMPLEX"},
		{Complex128, 16, unsafe.Alignof(complex128(0)), false, false, true, false, false, false, "complex128", "MPI_C_DOUBLE_COMPLEX"},
		{Byte, 1, 1, false, false, false, false, true, false, "byte", "MPI_BYTE"},
		{Bool, unsafe.Sizeof(false), unsafe.Alignof(false), false, false, false, true, false, false, "bool", "MPI_C_BOOL"},
		{Float32Int, unsafe.Sizeof(PairFloat32Int{}), unsafe.Alignof(PairFloat32Int{}), false, false, false, false, false, true, "float32int", "MPI_FLOAT_INT"},
		{Float64Int, unsafe.Sizeof(PairFloat64Int{}), unsafe.Alignof(PairFloat64Int{}), false, false, false, false, false, true, "float64int", "MPI_DOUBLE_INT"},
		{Int64Int, unsafe.Sizeof(PairInt64Int{}), unsafe.Alignof(PairInt64Int{}), false, false, false, false, false, true, "int64int", "MPI_LONG_INT"},
		{Int32Int, 8, 4, false, false, false, false, false, true, "int32int", "MPI_2INT"},
		{Int16Int, 8, 4, false, false, false, false, false, true, "int16int", "MPI_SHORT_INT"},
	}
	if len(rows) != int(MaxBasic) || !slices.Equal(Basics(), func() []Basic {
		var s []Basic
		for _, r := range rows {
			s = append(s, r.b)
		}
		return s
	}()) {
		t.Fatalf("table does not list every Basic")
	}
	for _, r := range rows {
		b := r.b
		if !b.Valid() || b.Size() != int(r.size) || b.Align() != int(r.align) || b.String() != r.name || b.MPIName() != r.mpi {
			t.Errorf("%v: size %d align %d name %q %q", b, b.Size(), b.Align(), b.String(), b.MPIName())
		}
		if b.IsInteger() != r.integer || b.IsFloat() != r.float || b.IsComplex() != r.complex ||
			b.IsLogical() != r.logical || b.IsByte() != r.byt || b.IsPair() != r.pr {
			t.Errorf("%v: wrong class", b)
		}
		bt := b.Type()
		if !bt.Valid() || bt.Basic() != b || bt.Count() != 1 || bt.Size() != int64(r.size) ||
			bt.Extent() != int64(r.size) || bt.LB() != 0 || bt.TrueExtent() != int64(r.size) ||
			!bt.IsContiguous() || bt.String() != r.name {
			t.Errorf("%v.Type() = %v", b, bt)
		}
	}
	if unsafe.Sizeof(uintptr(0)) == 8 {
		if Float64Int.Size() != 16 || Int64Int.Size() != 16 {
			t.Errorf("pair sizes on 64-bit: %d %d", Float64Int.Size(), Int64Int.Size())
		}
		if unsafe.Offsetof(PairInt16Int{}.I) != 4 || unsafe.Offsetof(PairFloat64Int{}.I) != 8 {
			t.Errorf("pair index offsets")
		}
	}
	for _, b := range []Basic{0, MaxBasic + 1, 255} {
		if b.Valid() || b.Size() != 0 || b.Align() != 0 || b.MPIName() != "" || b.IsInteger() || b.Type().Valid() {
			t.Errorf("invalid %d looks valid", b)
		}
		if !strings.HasPrefix(b.String(), "Basic(") {
			t.Errorf("String of invalid: %q", b.String())
		}
	}
}

func TestOf(t *testing.T) {
	checks := []struct{ got, want Basic }{
		{Of[int8](), Int8}, {Of[int16](), Int16}, {Of[int32](), Int32}, {Of[int64](), Int64},
		{Of[uint8](), Uint8}, {Of[byte](), Uint8}, {Of[uint16](), Uint16}, {Of[uint32](), Uint32}, {Of[uint64](), Uint64},
		{Of[float32](), Float32}, {Of[float64](), Float64}, {Of[complex64](), Complex64}, {Of[complex128](), Complex128},
		{Of[bool](), Bool}, {Of[PairFloat32Int](), Float32Int}, {Of[PairFloat64Int](), Float64Int},
		{Of[PairInt64Int](), Int64Int}, {Of[PairInt32Int](), Int32Int}, {Of[PairInt16Int](), Int16Int},
	}
	for i, c := range checks {
		if c.got != c.want {
			t.Errorf("%d: Of = %v, want %v", i, c.got, c.want)
		}
	}
	viaScalar := func() Basic { return ofScalar[float32]() }
	if viaScalar() != Float32 {
		t.Errorf("Of through a Scalar type parameter")
	}
}

func ofScalar[T Scalar]() Basic { return Of[T]() }

func TestAsBytesView(t *testing.T) {
	s := []PairFloat64Int{{1.5, 3}, {-2, 7}}
	b := AsBytes(s)
	if len(b) != 2*Float64Int.Size() {
		t.Fatalf("len %d", len(b))
	}
	v, err := View[PairFloat64Int](b)
	if err != nil || len(v) != 2 || v[1] != s[1] || &v[0] != &s[0] {
		t.Fatalf("View = %v, %v", v, err)
	}
	if _, err := View[int64](b[1:9]); !errors.Is(err, ErrInvalid) {
		t.Errorf("misaligned view: %v", err)
	}
	if _, err := View[int64](b[:7]); !errors.Is(err, ErrInvalid) {
		t.Errorf("short view: %v", err)
	}
	if v, err := View[int64](nil); err != nil || v != nil {
		t.Errorf("empty view: %v %v", v, err)
	}
	if AsBytes([]int32(nil)) != nil {
		t.Errorf("AsBytes(nil)")
	}
	if v, err := View[bool]([]byte{0, 1, 1}); err != nil || len(v) != 3 || v[0] || !v[2] {
		t.Errorf("View[bool] of 0, 1, 1 = %v, %v", v, err)
	}
	if v, err := View[bool]([]byte{2, 1, 0}); !errors.Is(err, ErrInvalid) {
		t.Errorf("View[bool] of 2, 1, 0 = %v, %v; want an error wrapping ErrInvalid (a Go bool is 0 or 1)", v, err)
	}
}

// TestPackZeroExtent: instances of a type with a zero extent all lie on
// the same bytes, so any count fits a small buffer; packing more than any
// allocation can hold is an error, not a panic.
func TestPackZeroExtent(t *testing.T) {
	z, err := Resized(Int64.Type(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	src := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	got, err := AppendPack(nil, src, 3, z)
	if err != nil || !bytes.Equal(got, bytes.Repeat(src, 3)) {
		t.Errorf("AppendPack of 3 zero-extent int64s = %v, %v; want the 8 bytes three times", got, err)
	}
	for _, count := range []int{1 << 58, 1<<62 - 1, int(maxInt)} {
		if _, err := AppendPack(nil, src, count, z); !errors.Is(err, ErrInvalid) {
			t.Errorf("AppendPack of %d zero-extent int64s: %v, want an error wrapping ErrInvalid", count, err)
		}
	}
}

func TestConstructorErrors(t *testing.T) {
	i32 := Int32.Type()
	big, err := Contiguous(huge, Int64.Type())
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		err  error
	}{
		{"contiguous negative", second(Contiguous(-1, i32))},
		{"contiguous invalid old", second(Contiguous(1, Type{}))},
		{"vector negative count", second(Vector(-1, 1, 1, i32))},
		{"vector negative blocklen", second(Vector(1, -1, 1, i32))},
		{"vector stride overflow", second(Vector(2, 1, math.MaxInt, big))},
		{"hvector span overflow", second(Hvector(math.MaxInt, 1, math.MaxInt, big))},
		{"indexed mismatch", second(Indexed([]int{1, 2}, []int{0}, i32))},
		{"indexed negative", second(Indexed([]int{1, -2}, []int{0, 4}, i32))},
		{"indexed displacement overflow", second(Indexed([]int{1}, []int{math.MaxInt}, big))},
		{"indexed block negative", second(IndexedBlock(-1, []int{0}, i32))},
		{"hindexed mismatch", second(Hindexed([]int{1}, nil, i32))},
		{"hindexed block negative", second(HindexedBlock(-1, []int{0}, i32))},
		{"count overflow", second(Contiguous(math.MaxInt, Contiguous2(i32)))},
		{"size overflow", second(Contiguous(1<<21, big))},
		{"resized negative", second(Resized(i32, 0, -4))},
		{"resized overflow", second(Resized(i32, math.MaxInt64, 4))},
		{"subarray empty", second(Subarray(nil, nil, nil, OrderC, i32))},
		{"subarray mismatch", second(Subarray([]int{4, 4}, []int{2}, []int{0, 0}, OrderC, i32))},
		{"subarray subsize", second(Subarray([]int{4}, []int{5}, []int{0}, OrderC, i32))},
		{"subarray start", second(Subarray([]int{4}, []int{2}, []int{3}, OrderC, i32))},
		{"subarray negative start", second(Subarray([]int{4}, []int{2}, []int{-1}, OrderC, i32))},
		{"subarray zero size", second(Subarray([]int{0}, []int{0}, []int{0}, OrderC, i32))},
		{"subarray order", second(Subarray([]int{4}, []int{2}, []int{0}, Order(7), i32))},
		{"subarray overflow", second(Subarray([]int{1 << 30, 1 << 30, 1 << 30}, []int{1, 1, 1}, []int{0, 0, 0}, OrderC, Int64.Type()))},
	}
	for _, c := range cases {
		var de *Error
		if !errors.Is(c.err, ErrInvalid) || !errors.As(c.err, &de) || !strings.HasPrefix(c.err.Error(), "datatype: ") {
			t.Errorf("%s: error %v", c.name, c.err)
		}
	}
}

func Contiguous2(t Type) Type { return must(Contiguous(2, t)) }

func second(_ Type, err error) error { return err }

func TestCompactForms(t *testing.T) {
	// A contiguous type of 2^40 elements is one block.
	c := must(Contiguous(huge, Int8.Type()))
	if bs := c.Blocks(); len(bs) != 1 || bs[0] != (Block{0, huge}) || !c.IsContiguous() {
		t.Fatalf("big contiguous: %v", bs)
	}
	// Instances of a contiguous type merge into a single run.
	calls := 0
	c2 := must(Contiguous(1000, Float64.Type()))
	c2.ForEachBlock(1<<20, func(off int64, n int) bool {
		calls++
		if off != 0 || n != 1000<<20 {
			t.Errorf("run %d %d", off, n)
		}
		return true
	})
	if calls != 1 {
		t.Fatalf("%d runs", calls)
	}
	// A vector of a million blocks stays one block and one loop.
	v := must(Vector(1<<20, 1, 2, Float64.Type()))
	if len(v.p.blocks) != 1 || len(v.p.levels) != 1 || v.Extent() != ((1<<20)-1)*16+8 {
		t.Fatalf("vector form: %v", v)
	}
	calls = 0
	v.ForEachBlock(1, func(off int64, n int) bool {
		if off != int64(calls)*16 || n != 1 {
			t.Fatalf("run %d: %d %d", calls, off, n)
		}
		calls++
		return true
	})
	if calls != 1<<20 || v.Overlaps() {
		t.Fatalf("%d runs", calls)
	}
	// Early stop.
	calls = 0
	v.ForEachBlock(3, func(off int64, n int) bool { calls++; return calls < 10 })
	if calls != 10 {
		t.Fatalf("no early stop: %d", calls)
	}
	// A 3-D subarray whose last two dimensions are whole is one block and
	// one loop.
	s := must(Subarray([]int{1000, 1000, 1000}, []int{10, 500, 1000}, []int{3, 200, 0}, OrderC, Int32.Type()))
	if len(s.p.blocks) != 1 || len(s.p.levels) != 1 || s.Count() != 10*500*1000 ||
		s.Extent() != 4e9 || s.LB() != 0 || s.TrueLB() != (3*1000*1000+200*1000)*4 {
		t.Fatalf("subarray form: %v", s)
	}
	if s.Overlaps() || s.OverlapsN(5) {
		t.Fatal("subarray overlaps")
	}
	// The same in Fortran order: dimensions reversed.
	f := must(Subarray([]int{1000, 1000, 1000}, []int{1000, 500, 10}, []int{0, 200, 3}, OrderFortran, Int32.Type()))
	if !f.Equal(s) {
		t.Fatalf("Fortran %v != C %v", f, s)
	}
	// Vector of vectors: two loops, no expansion.
	vv := must(Contiguous(1000, must(Vector(1000, 2, 3, Int32.Type()))))
	if len(vv.p.blocks) != 1 || len(vv.p.levels) != 2 {
		t.Fatalf("vector of vectors: %v", vv)
	}
	// Overlapping strided type found analytically and by the slow path.
	o := must(Hvector(3, 1, 4, Int64.Type()))
	if !o.Overlaps() {
		t.Fatal("stride 4 over int64 does not overlap")
	}
	inter := must(Hvector(2, 1, 8, must(Hvector(2, 1, 16, Int64.Type())))) // 0,16,8,24: interleaved, disjoint
	if inter.Overlaps() {
		t.Fatalf("interleaved type overlaps: %v", inter.Blocks())
	}
	// Resized to a smaller extent: instances overlap.
	r := must(Resized(must(Contiguous(4, Int32.Type())), 0, 8))
	if r.Overlaps() || !r.OverlapsN(2) || r.OverlapsN(1) {
		t.Fatal("resized overlaps")
	}
	z := must(Resized(Int32.Type(), 0, 0))
	if !z.OverlapsN(2) || z.OverlapsN(1) {
		t.Fatal("zero extent")
	}
}

func TestBoundsRules(t *testing.T) {
	// MPI's epsilon: the extent is rounded up to the alignment.
	h := must(Hindexed([]int{1, 1}, []int{0, 2}, Int32.Type()))
	if h.LB() != 0 || h.TrueUB() != 6 || h.Extent() != 8 || !h.Overlaps() {
		t.Fatalf("hindexed: %v", h)
	}
	// As Open MPI (opal_datatype_add), unlike MPICH: 12, not 10.
	if v := must(Hvector(2, 1, 6, Int32.Type())); v.Extent() != 12 {
		t.Fatalf("hvector(2, 1, 6 bytes, int32): extent %d, want 12", v.Extent())
	}
	// Negative displacements.
	n := must(Indexed([]int{2, 1}, []int{3, -2}, Float64.Type()))
	if n.LB() != -16 || n.UB() != 40 || n.TrueLB() != -16 || n.Count() != 3 {
		t.Fatalf("negative: %v", n)
	}
	if bs := n.Blocks(); !slices.Equal(bs, []Block{{24, 2}, {-16, 1}}) {
		t.Fatalf("blocks %v", bs)
	}
	// Negative stride vector.
	v := must(Vector(3, 2, -4, Int16.Type()))
	if v.LB() != -16 || v.UB() != 4 || !slices.Equal(v.Blocks(), []Block{{0, 2}, {-8, 2}, {-16, 2}}) {
		t.Fatalf("negative stride: %v %v", v, v.Blocks())
	}
	// Pairs keep their padded extent.
	p := must(Contiguous(2, Float64Int.Type()))
	if p.Extent() != 2*int64(Float64Int.Size()) || p.Size() != p.Extent() || !p.IsContiguous() {
		t.Fatalf("pairs: %v", p)
	}
	// Sticky bounds: a contiguous of a resized type uses its extent.
	r := must(Resized(Int32.Type(), -4, 12))
	c := must(Contiguous(3, r))
	if c.LB() != -4 || c.Extent() != 36 || !slices.Equal(c.Blocks(), []Block{{0, 1}, {12, 1}, {24, 1}}) {
		t.Fatalf("resized: %v %v", c, c.Blocks())
	}
	// Empty types.
	e := must(Vector(0, 3, 2, Int32.Type()))
	if e.Count() != 0 || e.Extent() != 0 || e.Blocks() != nil || e.Overlaps() || e.Fits(5, 0, -100) != nil {
		t.Fatalf("empty: %v", e)
	}
	es := must(Subarray([]int{4, 4}, []int{0, 2}, []int{1, 1}, OrderC, Int32.Type()))
	if es.Count() != 0 || es.Extent() != 64 {
		t.Fatalf("empty subarray: %v", es)
	}
}

func TestFitsAndIteration(t *testing.T) {
	v := must(Vector(4, 2, 3, Int32.Type())) // 0..8, 12..20, 24..32, 36..44; extent 44
	if err := v.Fits(1, 44, 0); err != nil {
		t.Fatal(err)
	}
	if err := v.Fits(2, 88, 0); err != nil {
		t.Fatal(err)
	}
	if err := v.Fits(2, 87, 0); !errors.Is(err, ErrOutOfRange) {
		t.Fatal(err)
	}
	if err := v.Fits(1, 100, -1); !errors.Is(err, ErrOutOfRange) {
		t.Fatal(err)
	}
	if err := v.Fits(1, 100, math.MaxInt64-10); !errors.Is(err, ErrOutOfRange) {
		t.Fatal(err)
	}
	if err := v.Fits(-1, 100, 0); !errors.Is(err, ErrInvalid) {
		t.Fatal(err)
	}
	if err := v.Fits(math.MaxInt/4, math.MaxInt64, 0); !errors.Is(err, ErrInvalid) {
		t.Fatal(err)
	}
	if err := (Type{}).Fits(1, 100, 0); !errors.Is(err, ErrInvalid) {
		t.Fatal(err)
	}
	if err := v.ForEachBlock(-1, func(int64, int) bool { return true }); !errors.Is(err, ErrInvalid) {
		t.Fatal(err)
	}
	lo, hi, err := v.Bounds(3)
	if err != nil || lo != 0 || hi != 2*44+44 {
		t.Fatalf("bounds %d %d %v", lo, hi, err)
	}
	if (Type{}).Blocks() != nil || (Type{}).Count() != 0 || (Type{}).Overlaps() || (Type{}).String() != "datatype.Type(invalid)" {
		t.Fatal("zero Type")
	}
	if _, err := AppendPack(nil, make([]byte, 10), 1, v); !errors.Is(err, ErrOutOfRange) {
		t.Fatal(err)
	}
	if err := Unpack(make([]byte, 44), make([]byte, 31), 1, v); !errors.Is(err, ErrInvalid) {
		t.Fatal(err)
	}
	if !strings.Contains(v.String(), "x4@12") {
		t.Errorf("String %q", v.String())
	}
}

func TestSameSignature(t *testing.T) {
	c3 := must(Contiguous(3, Int32.Type()))
	c2 := must(Contiguous(2, Int32.Type()))
	v := must(Vector(2, 3, 5, Int32.Type()))
	cases := []struct {
		ac int
		a  Type
		bc int
		b  Type
		ok bool
	}{
		{2, c3, 6, Int32.Type(), true},
		{2, c3, 3, c2, true},
		{1, v, 3, c2, true},
		{1, v, 5, Int32.Type(), false},
		{2, c3, 6, Uint32.Type(), false},
		{0, c3, 0, Float64.Type(), true},
		{-1, c3, -3, Int32.Type(), false},
		{1, Type{}, 1, Type{}, false},
		{math.MaxInt, must(Contiguous(4, Int8.Type())), math.MaxInt, must(Contiguous(4, Int8.Type())), true},
		{math.MaxInt, must(Contiguous(4, Int8.Type())), math.MaxInt - 1, must(Contiguous(4, Int8.Type())), false},
	}
	for i, c := range cases {
		if got := SameSignature(c.ac, c.a, c.bc, c.b); got != c.ok {
			t.Errorf("%d: SameSignature = %v", i, got)
		}
	}
}

func TestUnmarshalStrict(t *testing.T) {
	v := must(Resized(must(Vector(3, 2, -5, Float64.Type())), -8, 100))
	enc, err := v.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var u Type
	if err := u.UnmarshalBinary(enc); err != nil || !u.Equal(v) {
		t.Fatalf("round trip: %v %v", u, err)
	}
	for i := 0; i < len(enc); i++ {
		if _, err := Unmarshal(enc[:i]); !errors.Is(err, ErrInvalid) {
			t.Errorf("truncated at %d: %v", i, err)
		}
	}
	if _, err := Unmarshal(append(slices.Clone(enc), 0)); !errors.Is(err, ErrInvalid) {
		t.Error("trailing byte accepted")
	}
	pt, n, err := UnmarshalPrefix(append(slices.Clone(enc), 9, 9))
	if err != nil || n != len(enc) || !pt.Equal(v) {
		t.Errorf("prefix: %v %d %v", pt, n, err)
	}
	bad := map[string][]byte{
		"version":       {2, byte(Int32), 0, 1, 0, 1, 0},
		"basic":         {1, 0, 0, 1, 0, 1, 0},
		"basic high":    {1, byte(MaxBasic + 1), 0, 1, 0, 1, 0},
		"flags":         {1, byte(Int32), 2, 1, 0, 1, 0},
		"zero length":   {1, byte(Int32), 0, 1, 0, 0, 0},
		"non-minimal":   {1, byte(Int32), 0, 1, 0, 0x81, 0x00, 0},
		"unmerged":      {1, byte(Int32), 0, 2, 0, 1, 8, 1, 0},
		"loop of one":   {1, byte(Int32), 0, 1, 0, 1, 1, 1, 16},
		"mergeable":     {1, byte(Int32), 0, 1, 0, 1, 1, 2, 8},
		"loop no block": {1, byte(Int32), 0, 0, 1, 2, 8},
		"many blocks":   {1, byte(Int32), 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0, 1},
		"many loops":    {1, byte(Int32), 0, 1, 0, 1, 100},
		"huge varint":   {1, byte(Int32), 0, 1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0},
		"count overflow": {1, byte(Int8), 0, 1, 0, 1, 2,
			0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40, 4, // 2^62 at stride 2
			0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40, 0x02}, // ... times 2^62
		"extent overflow": {1, byte(Int8), 1, 1, 0, 1, 0, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
	}
	for name, b := range bad {
		if _, err := Unmarshal(b); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s accepted: %v", name, err)
		}
	}
	// A predefined type decodes to the predefined value.
	enc, _ = Float32Int.Type().MarshalBinary()
	if d, err := Unmarshal(enc); err != nil || d != Float32Int.Type() || len(enc) != 7 {
		t.Errorf("predefined: %v %v % x", d, err, enc)
	}
	if _, err := (Type{}).MarshalBinary(); !errors.Is(err, ErrInvalid) {
		t.Error("zero Type marshalled")
	}
}

func FuzzUnmarshal(f *testing.F) {
	for _, typ := range []Type{
		Int32.Type(),
		must(Vector(3, 2, -5, Float64.Type())),
		must(Resized(must(Vector(3, 2, 5, Float64.Type())), -8, 100)),
		must(Indexed([]int{1, 3, 2}, []int{5, -1, 20}, Complex64.Type())),
		must(Subarray([]int{5, 6, 7}, []int{2, 3, 4}, []int{1, 2, 3}, OrderC, Int16Int.Type())),
		must(Contiguous(3, must(Vector(4, 1, 3, must(Hvector(2, 2, 7, Uint8.Type())))))),
	} {
		enc, _ := typ.MarshalBinary()
		f.Add(enc)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		typ, n, err := UnmarshalPrefix(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			return
		}
		enc, err := typ.MarshalBinary()
		if err != nil || !bytes.Equal(enc, data[:n]) {
			t.Fatalf("re-encoding differs: % x vs % x", enc, data[:n])
		}
		// Check the invariants on types small enough to walk.
		if typ.Count() > 1<<14 {
			return
		}
		total := 0
		lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
		es := int64(typ.Basic().Size())
		typ.ForEachBlock(1, func(off int64, k int) bool {
			total += k
			lo, hi = min(lo, off), max(hi, off+int64(k)*es)
			return true
		})
		if total != typ.Count() {
			t.Fatalf("walk total %d != count %d", total, typ.Count())
		}
		if total > 0 && (lo != typ.TrueLB() || hi != typ.TrueUB()) {
			t.Fatalf("walk bounds [%d,%d) != true bounds [%d,%d)", lo, hi, typ.TrueLB(), typ.TrueUB())
		}
		_ = typ.Overlaps()
		_ = typ.OverlapsN(3)
		_ = typ.Fits(2, 1<<20, 0)
	})
}

func TestPigeonholeOverlap(t *testing.T) {
	// A hostile type: 2^30 copies of one byte at stride 0. Overlaps must not
	// enumerate them.
	z := must(Hvector(1<<30, 1, 0, Int8.Type()))
	if !z.Overlaps() || z.Count() != 1<<30 {
		t.Fatal("stride 0 does not overlap")
	}
	w := must(Resized(must(Contiguous(1<<20, Int64.Type())), 0, 8))
	if w.Overlaps() || !w.OverlapsN(1<<20) {
		t.Fatal("resized instances")
	}
}

func TestConcurrentUse(t *testing.T) {
	v := must(Hvector(2, 1, 8, must(Hvector(50, 1, 16, Int64.Type()))))
	done := make(chan bool)
	for g := 0; g < 8; g++ {
		go func() {
			ok := !v.Overlaps() && len(v.Blocks()) == 100 && v.Fits(1, v.TrueUB(), 0) == nil
			done <- ok
		}()
	}
	for g := 0; g < 8; g++ {
		if !<-done {
			t.Error("concurrent use failed")
		}
	}
}

func TestNoAllocs(t *testing.T) {
	v := must(Vector(100, 3, 5, Float64.Type()))
	var sum int
	fn := func(off int64, n int) bool { sum += n; return true }
	for name, f := range map[string]func(){
		"ForEachBlock": func() { v.ForEachBlock(3, fn) },
		"Fits":         func() { v.Fits(2, 1<<20, 8) },
		"Overlaps":     func() { v.OverlapsN(4) },
		"Signature":    func() { SameSignature(2, v, 600, Float64.Type()) },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocations", name, n)
		}
	}
}

// huge is 2^40, or the largest int on 32-bit platforms.
const huge = min(math.MaxInt, 1<<40)

// TestEqualManyRuns: Equal compares types of different forms run by run,
// in bounded memory: two small types with 2^35 runs between them (which
// Blocks would materialise) are told apart at once, and types of different
// forms with the same runs are equal, unless one run differs.
func TestEqualManyRuns(t *testing.T) {
	i8 := Int8.Type()
	a := must(Hvector(2, 1, 1, must(Hvector(1<<34, 1, 2, i8))))
	b := must(Contiguous(1<<35, i8))
	if a.Equal(b) || b.Equal(a) {
		t.Errorf("%v equal to %v", a, b)
	}
	v := must(Vector(1000, 1, 2, i8))
	lens, displs := make([]int, 1000), make([]int, 1000)
	for i := range lens {
		lens[i], displs[i] = 1, 2*i
	}
	h := must(Hindexed(lens, displs, i8))
	if !v.Equal(h) || !h.Equal(v) {
		t.Errorf("vector %v and hindexed %v of the same runs not equal", v, h)
	}
	displs[500]++ // one run in the middle moves: same count and bounds
	h2 := must(Hindexed(lens, displs, i8))
	if v.Equal(h2) || h2.Equal(v) {
		t.Errorf("vector %v equal to %v, whose run 500 moved", v, h2)
	}
}
