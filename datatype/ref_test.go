package datatype

import (
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"testing"
)

// refType is a naive model of an MPI datatype: its type map as a list of
// element offsets, and its bounds, computed directly from the definitions of
// the MPI standard.
type refType struct {
	basic   Basic
	offs    []int64
	lb, ub  int64
	markers bool
}

func (r *refType) es() int64  { return int64(r.basic.Size()) }
func (r *refType) ext() int64 { return r.ub - r.lb }

func (r *refType) trueBounds() (int64, int64) {
	if len(r.offs) == 0 {
		return 0, 0
	}
	lo, hi := r.offs[0], r.offs[0]+r.es()
	for _, o := range r.offs {
		lo, hi = min(lo, o), max(hi, o+r.es())
	}
	return lo, hi
}

func (r *refType) finish() *refType {
	if r.markers {
		return r
	}
	if len(r.offs) == 0 {
		r.lb, r.ub = 0, 0
		return r
	}
	lo, hi := r.trueBounds()
	a := int64(r.basic.Align())
	ext := hi - lo
	if ext%a != 0 {
		hi += a - ext%a
	}
	r.lb, r.ub = lo, hi
	return r
}

func refBasic(b Basic) *refType {
	return &refType{basic: b, offs: []int64{0}, lb: 0, ub: int64(b.Size())}
}

// refCopies is the type map made of copies of x displaced by disps.
func refCopies(x *refType, disps []int64) *refType {
	r := &refType{basic: x.basic}
	for _, d := range disps {
		for _, o := range x.offs {
			r.offs = append(r.offs, o+d)
		}
	}
	if x.markers && len(disps) > 0 {
		r.markers = true
		r.lb, r.ub = disps[0]+x.lb, disps[0]+x.ub
		for _, d := range disps {
			r.lb, r.ub = min(r.lb, d+x.lb), max(r.ub, d+x.ub)
		}
	}
	return r.finish()
}

func (r *refType) instances(count int) []int64 {
	var offs []int64
	for i := 0; i < count; i++ {
		for _, o := range r.offs {
			offs = append(offs, o+int64(i)*r.ext())
		}
	}
	return offs
}

func refOverlaps(offs []int64, es int64) bool {
	s := slices.Clone(offs)
	slices.Sort(s)
	for i := 1; i < len(s); i++ {
		if s[i] < s[i-1]+es {
			return true
		}
	}
	return false
}

// source gives small random integers, from math/rand or from fuzz input.
type source interface {
	intn(n int) int
}

type randSource struct{ r *rand.Rand }

func (s randSource) intn(n int) int { return s.r.Intn(n) }

type byteSource struct {
	b []byte
	i int
}

func (s *byteSource) intn(n int) int {
	if s.i >= len(s.b) {
		return 0
	}
	v := int(s.b[s.i])
	s.i++
	return v % n
}

func between(s source, lo, hi int) int { return lo + s.intn(hi-lo+1) }

// gen builds a random Type together with its reference model.
func gen(s source, depth int) (Type, *refType, string) {
	if depth == 0 || s.intn(4) == 0 {
		b := Basic(1 + s.intn(int(MaxBasic)))
		return b.Type(), refBasic(b), b.String()
	}
	old, ro, desc := gen(s, depth-1)
	ext := ro.ext()
	switch s.intn(9) {
	case 0:
		n := between(s, 0, 4)
		t, err := Contiguous(n, old)
		var d []int64
		for i := 0; i < n; i++ {
			d = append(d, int64(i)*ext)
		}
		return must(t, err), refCopies(ro, d), fmt.Sprintf("Contiguous(%d, %s)", n, desc)
	case 1:
		c, bl, st := between(s, 0, 4), between(s, 0, 3), between(s, -4, 6)
		t, err := Vector(c, bl, st, old)
		var d []int64
		for i := 0; i < c; i++ {
			for j := 0; j < bl; j++ {
				d = append(d, (int64(i)*int64(st)+int64(j))*ext)
			}
		}
		return must(t, err), refCopies(ro, d), fmt.Sprintf("Vector(%d, %d, %d, %s)", c, bl, st, desc)
	case 2:
		c, bl, st := between(s, 0, 4), between(s, 0, 3), between(s, -20, 40)
		t, err := Hvector(c, bl, st, old)
		var d []int64
		for i := 0; i < c; i++ {
			for j := 0; j < bl; j++ {
				d = append(d, int64(i)*int64(st)+int64(j)*ext)
			}
		}
		return must(t, err), refCopies(ro, d), fmt.Sprintf("Hvector(%d, %d, %d, %s)", c, bl, st, desc)
	case 3:
		n := between(s, 0, 4)
		bls, ds := make([]int, n), make([]int, n)
		var d []int64
		for i := range bls {
			bls[i], ds[i] = between(s, 0, 3), between(s, -4, 8)
			for j := 0; j < bls[i]; j++ {
				d = append(d, (int64(ds[i])+int64(j))*ext)
			}
		}
		t, err := Indexed(bls, ds, old)
		return must(t, err), refCopies(ro, d), fmt.Sprintf("Indexed(%v, %v, %s)", bls, ds, desc)
	case 4:
		n, bl := between(s, 0, 4), between(s, 0, 3)
		ds := make([]int, n)
		var d []int64
		for i := range ds {
			ds[i] = between(s, -4, 8)
			for j := 0; j < bl; j++ {
				d = append(d, (int64(ds[i])+int64(j))*ext)
			}
		}
		t, err := IndexedBlock(bl, ds, old)
		return must(t, err), refCopies(ro, d), fmt.Sprintf("IndexedBlock(%d, %v, %s)", bl, ds, desc)
	case 5:
		n := between(s, 0, 4)
		bls, ds := make([]int, n), make([]int, n)
		var d []int64
		for i := range bls {
			bls[i], ds[i] = between(s, 0, 3), between(s, -20, 60)
			for j := 0; j < bls[i]; j++ {
				d = append(d, int64(ds[i])+int64(j)*ext)
			}
		}
		t, err := Hindexed(bls, ds, old)
		return must(t, err), refCopies(ro, d), fmt.Sprintf("Hindexed(%v, %v, %s)", bls, ds, desc)
	case 6:
		n, bl := between(s, 0, 4), between(s, 0, 3)
		ds := make([]int, n)
		var d []int64
		for i := range ds {
			ds[i] = between(s, -20, 60)
			for j := 0; j < bl; j++ {
				d = append(d, int64(ds[i])+int64(j)*ext)
			}
		}
		t, err := HindexedBlock(bl, ds, old)
		return must(t, err), refCopies(ro, d), fmt.Sprintf("HindexedBlock(%d, %v, %s)", bl, ds, desc)
	case 7:
		lb, e := int64(between(s, -16, 16)), int64(between(s, 0, 48))
		t, err := Resized(old, lb, e)
		r := &refType{basic: ro.basic, offs: ro.offs, lb: lb, ub: lb + e, markers: true}
		return must(t, err), r, fmt.Sprintf("Resized(%s, %d, %d)", desc, lb, e)
	default:
		nd := between(s, 1, 3)
		sizes, subs, starts := make([]int, nd), make([]int, nd), make([]int, nd)
		for i := range sizes {
			sizes[i] = between(s, 1, 4)
			subs[i] = between(s, 0, sizes[i])
			starts[i] = between(s, 0, sizes[i]-subs[i])
		}
		order := Order(s.intn(2))
		t, err := Subarray(sizes, subs, starts, order, old)
		// strides in elements of old, per dimension
		strides := make([]int64, nd)
		acc := int64(1)
		for k := 0; k < nd; k++ {
			dd := k
			if order == OrderC {
				dd = nd - 1 - k
			}
			strides[dd] = acc
			acc *= int64(sizes[dd])
		}
		var d []int64
		idx := make([]int, nd)
		var rec func(k int)
		rec = func(k int) { // k-th dimension in slowest-first order
			if k == nd {
				var lin int64
				for i := range idx {
					lin += int64(starts[i]+idx[i]) * strides[i]
				}
				d = append(d, lin*ext)
				return
			}
			dd := k
			if order == OrderFortran {
				dd = nd - 1 - k
			}
			for i := 0; i < subs[dd]; i++ {
				idx[dd] = i
				rec(k + 1)
			}
		}
		rec(0)
		r := refCopies(ro, d)
		r.markers, r.lb, r.ub = true, 0, acc*ext
		return must(t, err), r, fmt.Sprintf("Subarray(%v, %v, %v, %d, %s)", sizes, subs, starts, order, desc)
	}
}

func must(t Type, err error) Type {
	if err != nil {
		panic(err)
	}
	return t
}

// expand returns the element offsets of count instances of t, from
// ForEachBlock, and checks that adjacent blocks were merged.
func expand(tb testing.TB, t Type, count int) []int64 {
	tb.Helper()
	var offs []int64
	es := int64(t.Basic().Size())
	prevEnd, first := int64(0), true
	err := t.ForEachBlock(count, func(off int64, n int) bool {
		if n <= 0 {
			tb.Fatalf("block of %d elements", n)
		}
		if !first && off == prevEnd {
			tb.Fatalf("adjacent blocks not merged at %d", off)
		}
		first = false
		prevEnd = off + int64(n)*es
		for i := 0; i < n; i++ {
			offs = append(offs, off+int64(i)*es)
		}
		return true
	})
	if err != nil {
		tb.Fatal(err)
	}
	return offs
}

func compareRef(tb testing.TB, t Type, r *refType, desc string) {
	tb.Helper()
	if t.Basic() != r.basic {
		tb.Fatalf("%s: basic %v, want %v", desc, t.Basic(), r.basic)
	}
	got := expand(tb, t, 1)
	if !slices.Equal(got, r.offs) && !(len(got) == 0 && len(r.offs) == 0) {
		tb.Fatalf("%s: offsets %v, want %v (%v)", desc, got, r.offs, t)
	}
	tlo, thi := r.trueBounds()
	if t.Count() != len(r.offs) || t.Size() != int64(len(r.offs))*r.es() {
		tb.Fatalf("%s: count %d size %d, want %d", desc, t.Count(), t.Size(), len(r.offs))
	}
	if t.LB() != r.lb || t.UB() != r.ub || t.Extent() != r.ext() || t.TrueLB() != tlo || t.TrueUB() != thi || t.TrueExtent() != thi-tlo {
		tb.Fatalf("%s: lb %d ub %d true [%d,%d), want lb %d ub %d true [%d,%d) (%v)", desc,
			t.LB(), t.UB(), t.TrueLB(), t.TrueUB(), r.lb, r.ub, tlo, thi, t)
	}
	if got, want := t.Overlaps(), refOverlaps(r.offs, r.es()); got != want {
		tb.Fatalf("%s: Overlaps %v, want %v (%v)", desc, got, want, t)
	}
	bs := t.Blocks()
	n := 0
	for _, b := range bs {
		n += b.Len
	}
	if n != t.Count() {
		tb.Fatalf("%s: Blocks() total %d, want %d", desc, n, t.Count())
	}
	for _, count := range []int{0, 2, 3} {
		want := r.instances(count)
		got := expand(tb, t, count)
		if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			tb.Fatalf("%s: %d instances: offsets %v, want %v", desc, count, got, want)
		}
		if g, w := t.OverlapsN(count), refOverlaps(want, r.es()); g != w {
			tb.Fatalf("%s: OverlapsN(%d) %v, want %v (%v)", desc, count, g, w, t)
		}
		checkFits(tb, t, count, want, r.es(), desc)
		if !SameSignature(count, t, count*t.Count(), r.basic.Type()) {
			tb.Fatalf("%s: SameSignature with %d basic elements is false", desc, count*t.Count())
		}
	}
	enc, err := t.MarshalBinary()
	if err != nil {
		tb.Fatal(err)
	}
	u, err := Unmarshal(enc)
	if err != nil {
		tb.Fatalf("%s: Unmarshal(Marshal) = %v (% x)", desc, err, enc)
	}
	if !u.Equal(t) || !t.Equal(u) {
		tb.Fatalf("%s: round trip %v != %v", desc, u, t)
	}
	enc2, _ := u.MarshalBinary()
	if !slices.Equal(enc, enc2) {
		tb.Fatalf("%s: re-encoding differs", desc)
	}
	// Pack then unpack into a zeroed buffer gives back exactly the
	// bytes of the type map (when the elements do not overlap).
	if !t.Overlaps() && t.Count() > 0 {
		lo, hi, _ := t.Bounds(2)
		base := -min(lo, 0)
		src := make([]byte, base+hi+3)
		for i := range src {
			src[i] = byte(i*7 + 1)
		}
		// Pack works on offsets relative to the slice start: shift by base
		// with a Hindexed wrapper.
		sh, err := Hindexed([]int{1}, []int{int(base)}, t)
		if err != nil {
			tb.Fatal(err)
		}
		cnt := 1
		if !t.OverlapsN(2) {
			cnt = 2
		}
		p, err := AppendPack(nil, src, cnt, sh)
		if err != nil {
			tb.Fatalf("%s: pack: %v", desc, err)
		}
		if int64(len(p)) != int64(cnt)*t.Size() {
			tb.Fatalf("%s: packed %d bytes", desc, len(p))
		}
		dst := make([]byte, len(src))
		if err := Unpack(dst, p, cnt, sh); err != nil {
			tb.Fatalf("%s: unpack: %v", desc, err)
		}
		inMap := make([]bool, len(src))
		for _, o := range r.instances(cnt) {
			for k := int64(0); k < r.es(); k++ {
				inMap[base+o+k] = true
			}
		}
		for i := range src {
			want := byte(0)
			if inMap[i] {
				want = src[i]
			}
			if dst[i] != want {
				tb.Fatalf("%s: unpack byte %d = %d, want %d", desc, i, dst[i], want)
			}
		}
	}
}

func checkFits(tb testing.TB, t Type, count int, offs []int64, es int64, desc string) {
	tb.Helper()
	if len(offs) == 0 {
		if err := t.Fits(count, 0, 0); err != nil {
			tb.Fatalf("%s: empty Fits: %v", desc, err)
		}
		return
	}
	lo, hi := offs[0], offs[0]+es
	for _, o := range offs {
		lo, hi = min(lo, o), max(hi, o+es)
	}
	base := -lo + 5
	if err := t.Fits(count, base+hi, base); err != nil {
		tb.Fatalf("%s: Fits exact: %v", desc, err)
	}
	if err := t.Fits(count, base+hi-1, base); !errors.Is(err, ErrOutOfRange) {
		tb.Fatalf("%s: Fits one short: %v", desc, err)
	}
	if err := t.Fits(count, base+hi+100, -lo-1); !errors.Is(err, ErrOutOfRange) {
		tb.Fatalf("%s: Fits below 0: %v", desc, err)
	}
}

func TestRandomAgainstReference(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	n := 20000
	if testing.Short() {
		n = 2000
	}
	for i := 0; i < n; i++ {
		typ, ref, desc := gen(randSource{r}, 4)
		if len(ref.offs) > 4000 {
			continue
		}
		compareRef(t, typ, ref, desc)
	}
}

func FuzzBuild(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8})
	f.Add([]byte{3, 8, 2, 0, 4, 1, 2, 9, 1})
	f.Add([]byte{8, 8, 1, 3, 2, 2, 0, 1, 1, 5})
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &byteSource{b: data}
		typ, ref, desc := gen(s, 4)
		if len(ref.offs) > 4000 {
			return
		}
		compareRef(t, typ, ref, desc)
	})
}
