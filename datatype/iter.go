package datatype

import (
	"cmp"
	"math/bits"
	"slices"
)

func mulU(a, b uint64) (hi, lo uint64) { return bits.Mul64(a, b) }

// walk calls fn for the blocks of count instances of t, the first instance at
// byte base, in type-map order. Adjacent blocks are not necessarily merged.
// It returns false if fn stopped the walk. The caller has checked that every
// offset fits in an int64 and that count*t.count fits in an int.
func (t *typ) walk(count, base int64, fn func(off, n int64) bool) bool {
	if count <= 0 || t.count == 0 {
		return true
	}
	ext := t.ub - t.lb
	nl := len(t.levels)
	if nl == 0 {
		if len(t.blocks) == 1 {
			b := t.blocks[0]
			if ext == int64(b.Len)*t.esize {
				return fn(base+b.Off, int64(b.Len)*count)
			}
			for i := int64(0); i < count; i++ {
				if !fn(base+i*ext+b.Off, int64(b.Len)) {
					return false
				}
			}
			return true
		}
		for i := int64(0); i < count; i++ {
			o := base + i*ext
			for _, b := range t.blocks {
				if !fn(o+b.Off, int64(b.Len)) {
					return false
				}
			}
		}
		return true
	}
	top := t.levels[nl-1]
	if count > 1 {
		if span, ok := mul64(top.n, top.stride); ok && span == ext {
			// The instances continue the outermost loop.
			return t.walkLevel(nl-1, top.n*count, base, fn)
		}
	}
	for i := int64(0); i < count; i++ {
		if !t.walkLevel(nl-1, top.n, base+i*ext, fn) {
			return false
		}
	}
	return true
}

func (t *typ) walkLevel(l int, n, base int64, fn func(off, n int64) bool) bool {
	s := t.levels[l].stride
	if l == 0 {
		if len(t.blocks) == 1 {
			b := t.blocks[0]
			for i := int64(0); i < n; i++ {
				if !fn(base+i*s+b.Off, int64(b.Len)) {
					return false
				}
			}
			return true
		}
		for i := int64(0); i < n; i++ {
			o := base + i*s
			for _, b := range t.blocks {
				if !fn(o+b.Off, int64(b.Len)) {
					return false
				}
			}
		}
		return true
	}
	inner := t.levels[l-1].n
	for i := int64(0); i < n; i++ {
		if !t.walkLevel(l-1, inner, base+i*s, fn) {
			return false
		}
	}
	return true
}

// merger merges adjacent blocks before handing them to fn.
type merger struct {
	es   int64
	off  int64
	n    int64
	fn   func(off int64, n int) bool
	stop bool
}

func (m *merger) add(off, n int64) bool {
	if m.n > 0 {
		if m.off+m.n*m.es == off && m.n+n <= maxInt {
			m.n += n
			return true
		}
		if !m.fn(m.off, int(m.n)) {
			m.stop = true
			return false
		}
	}
	m.off, m.n = off, n
	return true
}

func (m *merger) flush() {
	if m.n > 0 && !m.stop {
		m.fn(m.off, int(m.n))
	}
}

// check validates count instances of t: count >= 0, the element count fits
// in an int and every offset in an int64. It returns the true bounds.
func (t Type) check(count int) (lo, hi int64, err error) {
	p := t.p
	if p == nil {
		return 0, 0, errorf(ErrInvalid, "invalid type")
	}
	if count < 0 {
		return 0, 0, errorf(ErrInvalid, "negative count %d", count)
	}
	if count == 0 || p.count == 0 {
		return 0, 0, nil
	}
	c, ok := mul64(int64(count), p.count)
	if !ok || c > maxInt {
		return 0, 0, errorf(ErrInvalid, "%d instances of %d elements overflow int", count, p.count)
	}
	if _, ok := mul64(c, p.esize); !ok {
		return 0, 0, errorf(ErrInvalid, "%d instances of %d elements: size overflows int64", count, p.count)
	}
	span, ok1 := mul64(int64(count-1), p.ub-p.lb)
	hi, ok2 := add64(span, p.tub)
	if !ok1 || !ok2 {
		return 0, 0, errorf(ErrInvalid, "%d instances of extent %d overflow int64", count, p.ub-p.lb)
	}
	return p.tlb, hi, nil
}

// Bounds returns the byte range [lo, hi) that holds the data of count
// consecutive instances of t, relative to the start of the buffer (lo is
// TrueLB(), hi is (count-1)*Extent() + TrueUB()). It returns 0, 0 when there
// is no data. Errors wrap [ErrInvalid].
func (t Type) Bounds(count int) (lo, hi int64, err error) {
	return t.check(count)
}

// Fits checks that the data of count consecutive instances of t, the first
// one at byte base of a buffer of bufLen bytes, lies inside [0, bufLen). It
// returns nil when there is no data at all. Errors wrap [ErrOutOfRange] (or
// [ErrInvalid] for an invalid argument).
func (t Type) Fits(count int, bufLen int64, base int64) error {
	lo, hi, err := t.check(count)
	if err != nil {
		return err
	}
	if lo == hi {
		return nil
	}
	if bufLen < 0 {
		return errorf(ErrInvalid, "negative buffer length %d", bufLen)
	}
	l, ok1 := add64(base, lo)
	h, ok2 := add64(base, hi)
	if !ok1 || !ok2 {
		return errorf(ErrOutOfRange, "%d instances of %s at offset %d: offset overflows int64", count, t.p.basic, base)
	}
	if l < 0 || h > bufLen {
		return errorf(ErrOutOfRange, "%d instances of %s at offset %d span bytes [%d, %d), not within [0, %d)",
			count, t.p.basic, base, l, h, bufLen)
	}
	return nil
}

// ForEachBlock calls fn for each run of consecutive elements of count
// consecutive instances of t, in type-map order, with its byte offset from
// the start of the buffer (the first instance at offset 0) and its length in
// basic elements. Adjacent runs are merged, also across instances. The
// iteration stops early if fn returns false. It needs no memory proportional
// to count or to the number of runs. Errors (wrapping [ErrInvalid]) are
// reported before fn is called.
func (t Type) ForEachBlock(count int, fn func(off int64, n int) bool) error {
	if _, _, err := t.check(count); err != nil {
		return err
	}
	m := merger{es: t.p.esize, fn: fn}
	if t.p.walk(int64(count), 0, m.add) {
		m.flush()
	}
	return nil
}

// Blocks returns the runs of consecutive elements of one instance of t, in
// type-map order, adjacent runs merged. The slice is freshly allocated; for
// large types prefer [Type.ForEachBlock].
func (t Type) Blocks() []Block {
	var bs []Block
	if t.p == nil {
		return nil
	}
	t.ForEachBlock(1, func(off int64, n int) bool {
		bs = append(bs, Block{off, n})
		return true
	})
	return bs
}

// Overlaps reports whether two elements of the type map of t occupy a
// common byte. MPI requires the target datatype of an accumulate not to
// overlap. The answer is computed once per Type and cached. It is found
// analytically for the usual types; for interleaved loops (a stride smaller
// than what it repeats) it takes time and memory proportional to the number
// of runs, so on an untrusted Type check the payload length against Size
// first.
func (t Type) Overlaps() bool {
	p := t.p
	if p == nil {
		return false
	}
	p.ovOnce.Do(func() { p.ov = p.overlaps() })
	return p.ov
}

// OverlapsN reports whether two elements of count consecutive instances of
// t occupy a common byte. With an extent smaller than the true extent (set by
// [Resized]) this may cost time and memory proportional to the number of
// runs.
func (t Type) OverlapsN(count int) bool {
	p := t.p
	if p == nil || count <= 0 {
		return false
	}
	if t.Overlaps() {
		return true
	}
	if count == 1 || p.count == 0 || p.ub-p.lb >= p.tub-p.tlb {
		return false
	}
	if p.ub == p.lb {
		return true
	}
	if _, _, err := t.check(count); err != nil {
		return true // cannot even be addressed
	}
	return p.overlapsSlow(int64(count))
}

func (p *typ) overlaps() bool {
	if p.count <= 1 {
		return false
	}
	if !disjoint(p.blocks, p.esize) {
		return true
	}
	lo, hi := int64(1<<63-1), int64(-1<<63)
	for _, b := range p.blocks {
		lo, hi = min(lo, b.Off), max(hi, b.Off+int64(b.Len)*p.esize)
	}
	span := hi - lo
	for _, l := range p.levels {
		s := l.stride
		if s < 0 {
			s = -s
		}
		if s < span {
			return p.overlapsSlow(1)
		}
		span += (l.n - 1) * s
	}
	return false
}

type interval struct{ lo, hi int64 }

func disjoint(blocks []Block, es int64) bool {
	if len(blocks) <= 1 {
		return true
	}
	iv := make([]interval, len(blocks))
	for i, b := range blocks {
		iv[i] = interval{b.Off, b.Off + int64(b.Len)*es}
	}
	return disjointIntervals(iv)
}

func disjointIntervals(iv []interval) bool {
	slices.SortFunc(iv, func(a, b interval) int { return cmp.Compare(a.lo, b.lo) })
	for i := 1; i < len(iv); i++ {
		if iv[i].lo < iv[i-1].hi {
			return false
		}
	}
	return true
}

func (p *typ) overlapsSlow(count int64) bool {
	// More bytes of elements than bytes spanned: some must overlap.
	if span, ok := mul64(count-1, p.ub-p.lb); ok {
		if span, ok = add64(span, p.tub-p.tlb); ok {
			if size, ok := mul64(count*p.count, p.esize); !ok || size > span {
				return true
			}
		}
	}
	var iv []interval
	m := merger{es: p.esize, fn: func(off int64, n int) bool {
		iv = append(iv, interval{off, off + int64(n)*p.esize})
		return true
	}}
	if p.walk(count, 0, m.add) {
		m.flush()
	}
	return !disjointIntervals(iv)
}

// AppendPack appends to dst the data of count consecutive instances of t
// laid out in src (the first instance at offset 0), packed contiguously in
// type-map order (MPI_Pack), and returns the extended slice. The data must lie
// inside src (errors wrap [ErrOutOfRange]). dst grows by the packed size,
// count*t.Size(), at once: with a type whose instances overlap (an extent
// smaller than its size, down to zero) that can be far more than len(src);
// above 2^47 bytes (128 TiB), which no allocation reaches, the error wraps
// [ErrInvalid].
func AppendPack(dst, src []byte, count int, t Type) ([]byte, error) {
	if err := t.Fits(count, int64(len(src)), 0); err != nil {
		return dst, err
	}
	// count*Size may overflow when the extent is zero (Fits passed); and
	// no slice of more than maxPack bytes can be allocated.
	if sz := t.Size(); sz > 0 && int64(count) > (maxPack-int64(len(dst)))/sz {
		return dst, errorf(ErrInvalid, "pack: %d instances of %d bytes do not fit in a slice", count, sz)
	}
	n := int64(count) * t.Size()
	dst = slices.Grow(dst, int(n))
	t.ForEachBlock(count, func(off int64, k int) bool {
		dst = append(dst, src[off:off+int64(k)*t.p.esize]...)
		return true
	})
	return dst, nil
}

// Unpack copies packed data (count instances of t packed in type-map order,
// as made by [AppendPack]) into dst laid out as count consecutive instances
// of t (MPI_Unpack). len(packed) must be count*t.Size() (else the error wraps
// [ErrInvalid]) and the layout must lie inside dst ([ErrOutOfRange]).
func Unpack(dst, packed []byte, count int, t Type) error {
	if err := t.Fits(count, int64(len(dst)), 0); err != nil {
		return err
	}
	if want := int64(count) * t.Size(); int64(len(packed)) != want {
		return errorf(ErrInvalid, "unpack: %d packed bytes for %d instances of %d bytes", len(packed), count, t.Size())
	}
	es := t.p.esize
	t.ForEachBlock(count, func(off int64, k int) bool {
		nb := int64(k) * es
		copy(dst[off:off+nb], packed[:nb])
		packed = packed[nb:]
		return true
	})
	return nil
}
