package op

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/onesided/rma/datatype"
)

// firstNonZero keeps the left operand unless it is zero: associative, not
// commutative.
func firstNonZero(in, inout []int32) {
	for i, x := range in {
		if x != 0 {
			inout[i] = x
		}
	}
}

func addInt64(in, inout []int64) {
	for i, x := range in {
		inout[i] += x
	}
}

func TestRegisterAndCreate(t *testing.T) {
	reg, err := Register("test-first-non-zero", firstNonZero, false)
	if err != nil {
		t.Fatal(err)
	}
	if !reg.IsUser() || reg.Predefined() || !reg.Registered() || reg.Commutative() || reg.String() != "test-first-non-zero" || reg.Basic() != datatype.Int32 {
		t.Errorf("registered op %d: %v user %v registered %v commutative %v basic %v", reg, reg, reg.IsUser(), reg.Registered(), reg.Commutative(), reg.Basic())
	}
	if o, ok := Lookup("test-first-non-zero"); !ok || o != reg {
		t.Errorf("Lookup = %v, %v", o, ok)
	}
	if _, ok := Lookup("nope"); ok {
		t.Error("Lookup of an unknown name")
	}
	loc, err := Create(addInt64, true)
	if err != nil {
		t.Fatal(err)
	}
	defer Free(loc)
	if !loc.IsUser() || loc.Registered() || !loc.Commutative() || !strings.HasPrefix(loc.String(), "USER(") || loc.Basic() != datatype.Int64 || loc == reg {
		t.Errorf("created op %d: %v", loc, loc)
	}
	if loc < reg {
		t.Errorf("created op %d below registered op %d: created ops come from the top", loc, reg)
	}
	if Sum.Basic() != 0 {
		t.Error("Basic of a predefined op")
	}

	for name, err := range map[string]error{
		"duplicate":      second(Register("test-first-non-zero", firstNonZero, false)),
		"empty name":     second(Register("", firstNonZero, false)),
		"predefined":     second(Register("SUM", addInt64, true)),
		"nil register":   second(Register[int64]("x", nil, true)),
		"nil create":     second(Create[int64](nil, true)),
		"free reg":       Free(reg),
		"free sum":       Free(Sum),
		"free undefined": Free(FirstUser + 63),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

func second[A, B any](_ A, b B) B { return b }

func TestUserCheck(t *testing.T) {
	reg, err := Register("test-check-add", addInt64, true)
	if err != nil {
		t.Fatal(err)
	}
	loc, err := Create(firstNonZero, false)
	if err != nil {
		t.Fatal(err)
	}
	defer Free(loc)
	u8, err := Create(func(in, inout []uint8) {}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer Free(u8)
	cases := []struct {
		o    Op
		b    datatype.Basic
		use  Use
		want error
	}{
		{reg, datatype.Int64, Accumulate, nil},
		{reg, datatype.Int64, GetAccumulate, nil},
		{reg, datatype.Int64, Collective, nil},
		{reg, datatype.Uint64, Accumulate, ErrOpDatatype},
		{reg, datatype.Float64, Collective, ErrOpDatatype},
		{loc, datatype.Int32, Collective, nil},
		{loc, datatype.Int32, Accumulate, ErrOpUse},
		{loc, datatype.Int32, GetAccumulate, ErrOpUse},
		{loc, datatype.Int64, Collective, ErrOpDatatype},
		{u8, datatype.Uint8, Collective, nil},
		{u8, datatype.Byte, Collective, nil},
		{u8, datatype.Int8, Collective, ErrOpDatatype},
		{reg, 0, Collective, ErrInvalid},
		{reg, datatype.Int64, 0, ErrInvalid},
		{FirstUser + 64, datatype.Int64, Collective, ErrInvalid},
	}
	for _, c := range cases {
		err := Check(c.o, c.b, c.use)
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("Check(%v, %v, %v) = %v, want %v", c.o, c.b, c.use, err, c.want)
		}
		var e *Error
		if err != nil && (!errors.As(err, &e) || e.Op != c.o) {
			t.Errorf("Check(%v, %v, %v): %#v", c.o, c.b, c.use, err)
		}
	}
	// Apply refuses the wrong type and an undefined value, like Check.
	b := make([]byte, 8)
	if err := Apply(reg, datatype.Uint64, b, b); !errors.Is(err, ErrOpDatatype) {
		t.Errorf("Apply on the wrong type: %v", err)
	}
	if err := Apply(FirstUser+64, datatype.Int64, b, b); !errors.Is(err, ErrInvalid) {
		t.Errorf("Apply of an undefined op: %v", err)
	}
	// After Free, the value is undefined.
	tmp, _ := Create(addInt64, true)
	if err := Free(tmp); err != nil {
		t.Fatal(err)
	}
	if err := Check(tmp, datatype.Int64, Collective); !errors.Is(err, ErrInvalid) {
		t.Errorf("Check of a freed op: %v", err)
	}
	if err := Free(tmp); !errors.Is(err, ErrInvalid) {
		t.Errorf("double Free: %v", err)
	}
}

// TestUserApply: target = fn(in=origin, inout=target) through every entry
// point, on aligned and misaligned buffers, with aliasing.
func TestUserApply(t *testing.T) {
	o, err := Create(firstNonZero, false)
	if err != nil {
		t.Fatal(err)
	}
	defer Free(o)
	const n = 1000 // more than a staging chunk
	target := make([]int32, n)
	origin := make([]int32, n)
	for i := range target {
		target[i] = int32(i%3) * 10 // zero every third
		origin[i] = int32(i%2) * 7  // zero every second
	}
	want := make([]int32, n)
	for i := range want {
		want[i] = target[i]
		if origin[i] != 0 {
			want[i] = origin[i]
		}
	}
	tb, ob := datatype.AsBytes(target), datatype.AsBytes(origin)

	// Aligned.
	got := slices.Clone(target)
	if err := Apply(o, datatype.Int32, datatype.AsBytes(got), ob); err != nil || !slices.Equal(got, want) {
		t.Fatalf("Apply: %v", err)
	}
	// Misaligned target and origin (offset 1 in byte buffers).
	mt := make([]byte, len(tb)+1)[1:]
	mo := make([]byte, len(ob)+3)[3:]
	copy(mt, tb)
	copy(mo, ob)
	if err := Apply(o, datatype.Int32, mt, mo); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(mt, datatype.AsBytes(want)) || !slices.Equal(mo, ob) {
		t.Error("misaligned Apply differs or modified origin")
	}
	// ApplyFetch.
	got = slices.Clone(target)
	old := make([]int32, n)
	if err := ApplyFetch(o, datatype.Int32, datatype.AsBytes(got), ob, datatype.AsBytes(old)); err != nil || !slices.Equal(got, want) || !slices.Equal(old, target) {
		t.Errorf("ApplyFetch: %v", err)
	}
	// ReduceLocal(in, inout) = Apply(inout, in).
	got = slices.Clone(target)
	if err := ReduceLocal(o, datatype.Int32, ob, datatype.AsBytes(got)); err != nil || !slices.Equal(got, want) {
		t.Errorf("ReduceLocal: %v", err)
	}
	if err := ReduceLocal(Replace, datatype.Int32, ob, datatype.AsBytes(got)); !errors.Is(err, ErrOpUse) {
		t.Errorf("ReduceLocal(REPLACE): %v", err)
	}
	// ApplyType with a strided target: every other element of a window.
	win := make([]int32, 2*n)
	for i := range win {
		win[i] = -1
	}
	for i := 0; i < n; i++ {
		win[2*i] = target[i]
	}
	every2nd, err := datatype.Vector(n, 1, 2, datatype.Int32.Type())
	if err != nil {
		t.Fatal(err)
	}
	old = make([]int32, n)
	if err := ApplyType(o, every2nd, 1, datatype.AsBytes(win), 0, ob, datatype.AsBytes(old)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if win[2*i] != want[i] || win[2*i+1] != -1 || old[i] != target[i] {
			t.Fatalf("ApplyType: element %d = %d (old %d), want %d", i, win[2*i], old[i], want[i])
		}
	}
	// Aliasing: target and origin the very same slice.
	got = slices.Clone(target)
	if err := Apply(o, datatype.Int32, datatype.AsBytes(got), datatype.AsBytes(got)); err != nil || !slices.Equal(got, target) {
		t.Errorf("aliased Apply: %v", err)
	}
	// Empty buffers are fine and do not call fn.
	if err := Apply(o, datatype.Int32, nil, nil); err != nil {
		t.Error(err)
	}
}

// Every element type can carry a user op.
func TestUserEveryType(t *testing.T) {
	testUserType[int8](t)
	testUserType[int16](t)
	testUserType[int32](t)
	testUserType[int64](t)
	testUserType[uint8](t)
	testUserType[uint16](t)
	testUserType[uint32](t)
	testUserType[uint64](t)
	testUserType[float32](t)
	testUserType[float64](t)
	testUserType[complex64](t)
	testUserType[complex128](t)
	testUserType[datatype.PairFloat32Int](t)
	testUserType[datatype.PairFloat64Int](t)
	testUserType[datatype.PairInt64Int](t)
	testUserType[datatype.PairInt32Int](t)
	testUserType[datatype.PairInt16Int](t)
}

// testUserType applies "keep the right operand, swap in the left where the
// index is odd" and checks every element, aligned and misaligned.
func testUserType[T datatype.Element](t *testing.T) {
	o, err := Create(func(in, inout []T) {
		for i := range inout {
			if i%2 == 1 {
				inout[i] = in[i]
			}
		}
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer Free(o)
	b := datatype.Of[T]()
	es := b.Size()
	const n = 300
	tgt := make([]byte, n*es)
	org := make([]byte, n*es)
	for i := range tgt {
		tgt[i], org[i] = byte(i), byte(i*7+1)
	}
	want := slices.Clone(tgt)
	for i := 1; i < n; i += 2 {
		copy(want[i*es:(i+1)*es], org[i*es:])
	}
	for _, off := range []int{0, 1} {
		// Chunks staged for misaligned buffers restart the index, so use
		// whole staging chunks of even length: userChunk is even.
		mt := make([]byte, len(tgt)+off)[off:]
		mo := make([]byte, len(org)+off)[off:]
		copy(mt, tgt)
		copy(mo, org)
		if err := Apply(o, b, mt, mo); err != nil {
			t.Fatalf("%v offset %d: %v", b, off, err)
		}
		if !equalElems[T](mt, want) {
			t.Errorf("%v offset %d: wrong result", b, off)
		}
	}
}

// equalElems compares buffers of T element by element, ignoring the
// padding of the pair structs (which a Go assignment need not copy).
func equalElems[T any](a, b []byte) bool {
	typ := reflect.TypeFor[T]()
	es := int(typ.Size())
	for i := 0; i+es <= len(a); i += es {
		if typ.Kind() != reflect.Struct {
			if !slices.Equal(a[i:i+es], b[i:i+es]) {
				return false
			}
			continue
		}
		for f := 0; f < typ.NumField(); f++ {
			lo, hi := i+int(typ.Field(f).Offset), i+int(typ.Field(f).Offset+typ.Field(f).Type.Size())
			if !slices.Equal(a[lo:hi], b[lo:hi]) {
				return false
			}
		}
	}
	return len(a) == len(b)
}

func TestUserBool(t *testing.T) {
	o, err := Create(func(in, inout []bool) {
		for i := range inout {
			inout[i] = in[i] && !inout[i] // not commutative
		}
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer Free(o)
	tgt := []byte{0, 1, 0, 2, 0}
	org := []byte{5, 1, 0, 0, 1}
	if err := Apply(o, datatype.Bool, tgt, org); err != nil {
		t.Fatal(err)
	}
	if want := []byte{1, 0, 0, 0, 1}; !slices.Equal(tgt, want) {
		t.Errorf("bool op: %v, want %v", tgt, want)
	}
}

func TestUserPanic(t *testing.T) {
	o, err := Create(func(in, inout []int64) { panic("boom") }, true)
	if err != nil {
		t.Fatal(err)
	}
	defer Free(o)
	b := make([]byte, 16)
	for _, err := range []error{
		Apply(o, datatype.Int64, b, b),
		ApplyFetch(o, datatype.Int64, b, b, make([]byte, 16)),
		ApplyType(o, datatype.Int64.Type(), 2, b, 0, b, nil),
	} {
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "panicked: boom") {
			t.Errorf("panicking op: %v", err)
		}
	}
}

func TestUserNoAlloc(t *testing.T) {
	o, err := Create(addInt64, true)
	if err != nil {
		t.Fatal(err)
	}
	defer Free(o)
	tgt := make([]int64, 64)
	org := make([]int64, 64)
	res := make([]int64, 64)
	tb, ob, rb := datatype.AsBytes(tgt), datatype.AsBytes(org), datatype.AsBytes(res)
	if n := testing.AllocsPerRun(100, func() {
		Apply(o, datatype.Int64, tb, ob)
		ApplyFetch(o, datatype.Int64, tb, ob, rb)
		ApplyType(o, datatype.Int64.Type(), 64, tb, 0, ob, rb)
		ReduceLocal(o, datatype.Int64, ob, tb)
		Check(o, datatype.Int64, Collective)
	}); n != 0 {
		t.Errorf("%v allocations per run, want 0", n)
	}
	// Misaligned: staged through pooled buffers; few allocations once warm.
	mt := make([]byte, len(tb)+1)[1:]
	mo := make([]byte, len(ob)+1)[1:]
	Apply(o, datatype.Int64, mt, mo)
	if n := testing.AllocsPerRun(100, func() { Apply(o, datatype.Int64, mt, mo) }); n > 1 {
		t.Errorf("misaligned: %v allocations per run", n)
	}
}

func TestCreateTableFull(t *testing.T) {
	var made []Op
	defer func() {
		for _, o := range made {
			Free(o)
		}
	}()
	for {
		o, err := Create(addInt64, true)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatal(err)
			}
			break
		}
		made = append(made, o)
		if len(made) > maxUser {
			t.Fatal("more ops than values")
		}
	}
	// With the table full, Register fails too, and a freed value is reused.
	if _, err := Register("test-full", addInt64, true); !errors.Is(err, ErrInvalid) {
		t.Errorf("Register with a full table: %v", err)
	}
	last := made[len(made)-1]
	Free(last)
	o, err := Create(addInt64, true)
	if err != nil || o != last {
		t.Errorf("Create after Free = %v, %v; want %v", o, err, last)
	}
}

func TestRegistryConcurrent(t *testing.T) {
	d0 := RegistryDigest()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := Register(fmt.Sprintf("test-concurrent-%d", g), addInt64, true); err != nil {
				t.Error(err)
			}
			buf := make([]int64, 4)
			for i := 0; i < 200; i++ {
				o, err := Create(addInt64, true)
				if err != nil {
					t.Error(err)
					return
				}
				if err := Apply(o, datatype.Int64, datatype.AsBytes(buf), datatype.AsBytes([]int64{1, 1, 1, 1})); err != nil {
					t.Error(err)
				}
				_ = o.String()
				if err := Free(o); err != nil {
					t.Error(err)
				}
			}
			if buf[3] != 200 {
				t.Errorf("sum %d", buf[3])
			}
		}()
	}
	wg.Wait()
	if RegistryDigest() == d0 {
		t.Error("digest unchanged by Register")
	}
	if d1, d2 := RegistryDigest(), RegistryDigest(); d1 != d2 {
		t.Error("digest not deterministic")
	}
}

// The view of aligned bytes is the memory itself: fn sees the window.
func TestUserInPlace(t *testing.T) {
	var seen unsafe.Pointer
	o, _ := Create(func(in, inout []float64) { seen = unsafe.Pointer(&inout[0]) }, true)
	defer Free(o)
	buf := make([]float64, 4)
	Apply(o, datatype.Float64, datatype.AsBytes(buf), datatype.AsBytes(buf))
	if seen != unsafe.Pointer(&buf[0]) {
		t.Error("aligned buffers were copied")
	}
}
