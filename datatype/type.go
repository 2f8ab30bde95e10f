package datatype

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
)

const (
	maxInt = int64(^uint(0) >> 1)
	// maxPack bounds a packed buffer: larger slices cannot be allocated
	// (Go's heap spans at most 2^48 bytes on 64-bit platforms).
	maxPack = min(maxInt, 1<<47)
	// maxBlocks bounds the flattened form built by the indexed constructors
	// (the only ones that expand their old type).
	maxBlocks = 1 << 24
)

// Block is a run of consecutive basic elements in a buffer.
type Block struct {
	// Off is the byte offset of the first element from the start of the
	// buffer (relative to the buffer address given to the MPI call); it may be
	// negative, as MPI displacements may.
	Off int64
	// Len is the number of basic elements in the run (at least 1).
	Len int
}

// level repeats everything inside it n times, stride bytes apart.
type level struct {
	n      int64 // at least 2
	stride int64 // bytes, any sign
}

// typ is the immutable representation of a datatype: a list of base blocks
// in type-map order, repeated by a nest of loops (levels[0] innermost). All
// constructors keep it in a normal form (see normalize), so that contiguous
// and strided types stay small whatever their element count.
type typ struct {
	basic  Basic
	esize  int64
	blocks []Block
	levels []level

	count    int64 // basic elements in one instance
	tlb, tub int64 // true lower and upper bound (data only)
	lb, ub   int64 // lower and upper bound (extent = ub - lb)
	markers  bool  // lb/ub set explicitly (Resized, Subarray), sticky as in MPI

	ovOnce sync.Once
	ov     bool
}

// Type is a datatype: a predefined [Basic] or a derived datatype built from
// exactly one predefined type by the constructors of this package. A Type is
// an immutable value, cheap to copy and safe for concurrent use. The zero Type
// is invalid.
type Type struct {
	p *typ
}

var predefined [numBasic]typ

func init() {
	for b := Basic(1); b < numBasic; b++ {
		s := int64(b.Size())
		t := &predefined[b]
		t.basic, t.esize = b, s
		t.blocks = []Block{{0, 1}}
		t.count, t.tub, t.ub = 1, s, s
	}
}

// Type returns the predefined datatype b as a Type (the zero Type if b is
// invalid).
func (b Basic) Type() Type {
	if !b.Valid() {
		return Type{}
	}
	return Type{&predefined[b]}
}

// Valid reports whether t is a datatype (not the zero Type).
func (t Type) Valid() bool { return t.p != nil }

// Basic returns the predefined datatype that t is built from (0 if t is
// invalid).
func (t Type) Basic() Basic {
	if t.p == nil {
		return 0
	}
	return t.p.basic
}

// Count returns the number of basic elements in one instance of t, that is
// the length of its type signature. A value-index pair counts as one element.
func (t Type) Count() int {
	if t.p == nil {
		return 0
	}
	return int(t.p.count)
}

// Size returns the number of bytes of data in one instance of t:
// Count() * Basic().Size(). It is the size of t packed.
func (t Type) Size() int64 {
	if t.p == nil {
		return 0
	}
	return t.p.count * t.p.esize
}

// LB returns the lower bound of t, as MPI_Type_get_extent.
func (t Type) LB() int64 {
	if t.p == nil {
		return 0
	}
	return t.p.lb
}

// UB returns the upper bound of t: LB() + Extent().
func (t Type) UB() int64 {
	if t.p == nil {
		return 0
	}
	return t.p.ub
}

// Extent returns the extent of t, as MPI_Type_get_extent: the distance
// between successive instances of t in a buffer. Unless set explicitly (by
// [Resized] or [Subarray]) it is the span of the data rounded up to the
// alignment of the basic type, as MPI's epsilon rule.
func (t Type) Extent() int64 {
	if t.p == nil {
		return 0
	}
	return t.p.ub - t.p.lb
}

// TrueLB returns the true lower bound of t, as MPI_Type_get_true_extent: the
// offset of the first byte of data.
func (t Type) TrueLB() int64 {
	if t.p == nil {
		return 0
	}
	return t.p.tlb
}

// TrueUB returns the offset just past the last byte of data of t.
func (t Type) TrueUB() int64 {
	if t.p == nil {
		return 0
	}
	return t.p.tub
}

// TrueExtent returns the true extent of t: TrueUB() - TrueLB().
func (t Type) TrueExtent() int64 {
	if t.p == nil {
		return 0
	}
	return t.p.tub - t.p.tlb
}

// IsContiguous reports whether any number of consecutive instances of t
// form one contiguous run of elements in type-map order (for example a
// predefined type or a Contiguous of one).
func (t Type) IsContiguous() bool {
	p := t.p
	return p != nil && p.count > 0 && len(p.levels) == 0 && len(p.blocks) == 1 &&
		p.ub-p.lb == p.count*p.esize
}

func (p *typ) extent() int64 { return p.ub - p.lb }

// String returns a short description of t for debugging.
func (t Type) String() string {
	p := t.p
	if p == nil {
		return "datatype.Type(invalid)"
	}
	if p == &predefined[p.basic] {
		return p.basic.String()
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s{count=%d lb=%d extent=%d true=[%d,%d) blocks=[", p.basic, p.count, p.lb, p.ub-p.lb, p.tlb, p.tub)
	for i, b := range p.blocks {
		if i == 8 {
			fmt.Fprintf(&sb, " ...%d more", len(p.blocks)-i)
			break
		}
		if i > 0 {
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "%d:%d", b.Off, b.Len)
	}
	sb.WriteByte(']')
	for _, l := range p.levels {
		fmt.Fprintf(&sb, " x%d@%d", l.n, l.stride)
	}
	sb.WriteByte('}')
	return sb.String()
}

// Equal reports whether t and u are the same datatype: the same basic type,
// the same type map (element offsets in order) and the same bounds.
func (t Type) Equal(u Type) bool {
	a, b := t.p, u.p
	if a == b {
		return true
	}
	if a == nil || b == nil {
		return false
	}
	if a.basic != b.basic || a.count != b.count || a.lb != b.lb || a.ub != b.ub ||
		a.tlb != b.tlb || a.tub != b.tub || a.markers != b.markers {
		return false
	}
	if slices.Equal(a.blocks, b.blocks) && slices.Equal(a.levels, b.levels) {
		return true
	}
	return sameRuns(t, u)
}

// sameRuns compares the runs of one instance of t and of u in order, in
// memory bounded whatever their number (a type of a few levels can have
// billions): u's runs come from a goroutine, a few at a time.
func sameRuns(t, u Type) bool {
	done := make(chan struct{})
	defer close(done)
	runs := make(chan Block, 64)
	go func() {
		defer close(runs)
		u.ForEachBlock(1, func(off int64, n int) bool {
			select {
			case runs <- Block{off, n}:
				return true
			case <-done:
				return false
			}
		})
	}()
	same := true
	t.ForEachBlock(1, func(off int64, n int) bool {
		r, ok := <-runs
		same = ok && r == Block{off, n}
		return same
	})
	if same {
		_, more := <-runs
		same = !more
	}
	return same
}

// ---- checked arithmetic ----

func add64(a, b int64) (int64, bool) {
	if (b > 0 && a > math.MaxInt64-b) || (b < 0 && a < math.MinInt64-b) {
		return 0, false
	}
	return a + b, true
}

func sub64(a, b int64) (int64, bool) {
	if (b < 0 && a > math.MaxInt64+b) || (b > 0 && a < math.MinInt64+b) {
		return 0, false
	}
	return a - b, true
}

func mul64(a, b int64) (int64, bool) {
	if a == 0 || b == 0 {
		return 0, true
	}
	if (a == -1 && b == math.MinInt64) || (b == -1 && a == math.MinInt64) {
		return 0, false
	}
	c := a * b
	if c/b != a {
		return 0, false
	}
	return c, true
}

var errOverflow = "extent or displacement overflows int64"

// ---- construction ----

// newTyp computes count and true bounds of a (normalized) flattened form and
// checks that nothing overflows. lb/ub are left to finish.
func newTyp(b Basic, blocks []Block, levels []level) (*typ, error) {
	es := int64(b.Size())
	t := &typ{basic: b, esize: es}
	if len(blocks) == 0 {
		return t, nil
	}
	t.blocks, t.levels = blocks, levels
	var cnt int64
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	var ok bool
	for _, bl := range blocks {
		if bl.Len <= 0 {
			return nil, errorf(ErrInvalid, "block of %d elements", bl.Len)
		}
		cnt += int64(bl.Len)
		if cnt > maxInt || cnt < 0 {
			return nil, errorf(ErrInvalid, "element count overflows int")
		}
		nb, ok1 := mul64(int64(bl.Len), es)
		end, ok2 := add64(bl.Off, nb)
		if !ok1 || !ok2 {
			return nil, errorf(ErrInvalid, errOverflow)
		}
		lo, hi = min(lo, bl.Off), max(hi, end)
	}
	for _, l := range levels {
		if l.n < 2 {
			return nil, errorf(ErrInvalid, "loop of %d repetitions", l.n)
		}
		if cnt, ok = mul64(cnt, l.n); !ok || cnt > maxInt {
			return nil, errorf(ErrInvalid, "element count overflows int")
		}
		span, ok := mul64(l.n-1, l.stride)
		if !ok {
			return nil, errorf(ErrInvalid, errOverflow)
		}
		if span < 0 {
			lo, ok = add64(lo, span)
		} else {
			hi, ok = add64(hi, span)
		}
		if !ok {
			return nil, errorf(ErrInvalid, errOverflow)
		}
	}
	if _, ok := sub64(hi, lo); !ok {
		return nil, errorf(ErrInvalid, errOverflow)
	}
	if _, ok := mul64(cnt, es); !ok {
		return nil, errorf(ErrInvalid, "size in bytes overflows int64")
	}
	t.count, t.tlb, t.tub = cnt, lo, hi
	return t, nil
}

// finish sets lb/ub of a type without explicit markers (MPI's rule: the span
// of the data, extended to a multiple of the alignment), or checks the
// explicit ones.
func (t *typ) finish() (*typ, error) {
	if t.markers {
		if t.ub < t.lb {
			return nil, errorf(ErrInvalid, "negative extent")
		}
		if _, ok := sub64(t.ub, t.lb); !ok {
			return nil, errorf(ErrInvalid, errOverflow)
		}
		return t, nil
	}
	if t.count == 0 {
		t.lb, t.ub = 0, 0
		return t, nil
	}
	ext := t.tub - t.tlb
	a := int64(t.basic.Align())
	ub := t.tub
	if r := ext % a; r != 0 {
		var ok bool
		if ub, ok = add64(ub, a-r); !ok {
			return nil, errorf(ErrInvalid, errOverflow)
		}
	}
	t.lb, t.ub = t.tlb, ub
	return t, nil
}

func empty(b Basic) *typ {
	return &typ{basic: b, esize: int64(b.Size())}
}

// mergeBlocks appends b to blocks, merging it with the last block when they
// are adjacent in memory.
func mergeBlock(blocks []Block, b Block, es int64) []Block {
	if n := len(blocks); n > 0 {
		last := &blocks[n-1]
		if last.Off+int64(last.Len)*es == b.Off && int64(last.Len)+int64(b.Len) <= maxInt {
			last.Len += b.Len
			return blocks
		}
	}
	return append(blocks, b)
}

// normalize merges a single base block with the innermost loop when the loop
// just continues it, and adjacent loops that form one arithmetic
// progression. It never modifies its arguments.
func normalize(blocks []Block, levels []level, es int64) ([]Block, []level) {
	for {
		if len(blocks) == 1 && len(levels) > 0 {
			bb, ok := mul64(int64(blocks[0].Len), es)
			if ok && levels[0].stride == bb {
				if n, ok := mul64(int64(blocks[0].Len), levels[0].n); ok && n <= maxInt {
					blocks = []Block{{blocks[0].Off, int(n)}}
					levels = levels[1:]
					continue
				}
			}
		}
		merged := false
		for i := 0; i+1 < len(levels); i++ {
			span, ok := mul64(levels[i].n, levels[i].stride)
			if !ok || levels[i+1].stride != span {
				continue
			}
			n, ok := mul64(levels[i].n, levels[i+1].n)
			if !ok {
				continue
			}
			nl := make([]level, 0, len(levels)-1)
			nl = append(nl, levels[:i]...)
			nl = append(nl, level{n, levels[i].stride})
			levels = append(nl, levels[i+2:]...)
			merged = true
			break
		}
		if !merged {
			break
		}
	}
	if len(levels) == 0 {
		levels = nil
	}
	return blocks, levels
}

// repeat returns n copies of x, the i-th shifted by i*stride bytes.
func repeat(x *typ, n, stride int64) (*typ, error) {
	switch {
	case n < 0:
		return nil, errorf(ErrInvalid, "negative count %d", n)
	case n == 0:
		return empty(x.basic), nil
	case n == 1:
		return x, nil
	}
	span, ok := mul64(n-1, stride)
	if !ok {
		return nil, errorf(ErrInvalid, errOverflow)
	}
	var t *typ
	var err error
	if x.count > 0 {
		if c, ok := mul64(x.count, n); !ok || c > maxInt {
			return nil, errorf(ErrInvalid, "element count overflows int")
		}
		levels := make([]level, len(x.levels), len(x.levels)+1)
		copy(levels, x.levels)
		levels = append(levels, level{n, stride})
		blocks, levels := normalize(x.blocks, levels, x.esize)
		t, err = newTyp(x.basic, blocks, levels)
		if err != nil {
			return nil, err
		}
	} else {
		t = empty(x.basic)
	}
	if x.markers {
		t.markers = true
		var ok1, ok2 bool
		t.lb, ok1 = add64(x.lb, min(span, 0))
		t.ub, ok2 = add64(x.ub, max(span, 0))
		if !ok1 || !ok2 {
			return nil, errorf(ErrInvalid, errOverflow)
		}
	}
	return t.finish()
}

// shift returns x displaced by d bytes.
func shift(x *typ, d int64) (*typ, error) {
	if d == 0 {
		return x, nil
	}
	t := empty(x.basic)
	if x.count > 0 {
		blocks := make([]Block, len(x.blocks))
		for i, b := range x.blocks {
			off, ok := add64(b.Off, d)
			if !ok {
				return nil, errorf(ErrInvalid, errOverflow)
			}
			blocks[i] = Block{off, b.Len}
		}
		var err error
		if t, err = newTyp(x.basic, blocks, x.levels); err != nil {
			return nil, err
		}
	}
	if x.markers {
		var ok1, ok2 bool
		t.markers = true
		t.lb, ok1 = add64(x.lb, d)
		t.ub, ok2 = add64(x.ub, d)
		if !ok1 || !ok2 {
			return nil, errorf(ErrInvalid, errOverflow)
		}
	}
	return t.finish()
}

// indexed returns, for each i, lens[i] copies of x (extent apart) displaced
// by disps[i] bytes.
func indexed(x *typ, lens, disps []int64) (*typ, error) {
	var keep []int
	for i, n := range lens {
		if n < 0 {
			return nil, errorf(ErrInvalid, "negative block length %d at %d", n, i)
		}
		if n > 0 {
			keep = append(keep, i)
		}
	}
	switch len(keep) {
	case 0:
		return empty(x.basic), nil
	case 1:
		i := keep[0]
		t, err := repeat(x, lens[i], x.extent())
		if err != nil {
			return nil, err
		}
		return shift(t, disps[i])
	}
	ext := x.extent()
	t := empty(x.basic)
	var total int64
	lb, ub := int64(math.MaxInt64), int64(math.MinInt64)
	// Check every bound first, so that the expansion below cannot overflow.
	for _, i := range keep {
		span, ok := mul64(lens[i]-1, ext)
		if !ok {
			return nil, errorf(ErrInvalid, errOverflow)
		}
		if x.count > 0 {
			c, ok := mul64(lens[i], x.count)
			if !ok || c > maxInt-total {
				return nil, errorf(ErrInvalid, "element count overflows int")
			}
			total += c
			_, ok1 := add64(disps[i], x.tlb)
			e, ok2 := add64(disps[i], span)
			_, ok3 := add64(e, x.tub)
			if !ok1 || !ok2 || !ok3 {
				return nil, errorf(ErrInvalid, errOverflow)
			}
		}
		if x.markers {
			l, ok1 := add64(disps[i], x.lb)
			e, ok2 := add64(disps[i], span)
			u, ok3 := add64(e, x.ub)
			if !ok1 || !ok2 || !ok3 {
				return nil, errorf(ErrInvalid, errOverflow)
			}
			lb, ub = min(lb, l), max(ub, u)
		}
	}
	if x.count > 0 {
		var blocks []Block
		tooMany := false
		for _, i := range keep {
			x.walk(lens[i], disps[i], func(off, n int64) bool {
				blocks = mergeBlock(blocks, Block{off, int(n)}, x.esize)
				if len(blocks) > maxBlocks {
					tooMany = true
					return false
				}
				return true
			})
			if tooMany {
				return nil, errorf(ErrInvalid, "flattened type would have more than %d blocks", maxBlocks)
			}
		}
		var err error
		if t, err = newTyp(x.basic, slices.Clip(blocks), nil); err != nil {
			return nil, err
		}
	}
	if x.markers {
		t.markers, t.lb, t.ub = true, lb, ub
	}
	return t.finish()
}

func checkOld(fn string, old Type) error {
	if old.p == nil {
		return errorf(ErrInvalid, "%s: invalid old type", fn)
	}
	return nil
}

func wrapCtor(fn string, t *typ, err error) (Type, error) {
	if err != nil {
		if e, ok := err.(*Error); ok {
			return Type{}, &Error{Err: e.Err, Msg: fn + ": " + e.Msg}
		}
		return Type{}, err
	}
	return Type{t}, nil
}

// Contiguous returns count copies of old, each old.Extent() bytes after the
// previous (MPI_Type_contiguous).
func Contiguous(count int, old Type) (Type, error) {
	if err := checkOld("contiguous", old); err != nil {
		return Type{}, err
	}
	if count < 0 {
		return Type{}, errorf(ErrInvalid, "contiguous: negative count %d", count)
	}
	t, err := repeat(old.p, int64(count), old.p.extent())
	return wrapCtor("contiguous", t, err)
}

// Vector returns count blocks of blocklen copies of old, the blocks stride
// extents of old apart (MPI_Type_vector). The stride may be negative.
func Vector(count, blocklen, stride int, old Type) (Type, error) {
	if err := checkOld("vector", old); err != nil {
		return Type{}, err
	}
	s, ok := mul64(int64(stride), old.p.extent())
	if !ok {
		return Type{}, errorf(ErrInvalid, "vector: stride %d times extent %d overflows int64", stride, old.p.extent())
	}
	return hvector("vector", count, blocklen, s, old)
}

// Hvector is [Vector] with the stride in bytes (MPI_Type_create_hvector).
func Hvector(count, blocklen int, strideBytes int, old Type) (Type, error) {
	if err := checkOld("hvector", old); err != nil {
		return Type{}, err
	}
	return hvector("hvector", count, blocklen, int64(strideBytes), old)
}

func hvector(fn string, count, blocklen int, stride int64, old Type) (Type, error) {
	if count < 0 || blocklen < 0 {
		return Type{}, errorf(ErrInvalid, "%s: negative count %d or block length %d", fn, count, blocklen)
	}
	t, err := repeat(old.p, int64(blocklen), old.p.extent())
	if err == nil {
		t, err = repeat(t, int64(count), stride)
	}
	return wrapCtor(fn, t, err)
}

// Indexed returns, for each i, blocklens[i] copies of old starting displs[i]
// extents of old from the start (MPI_Type_indexed). Displacements may be
// negative and in any order; blocks of length 0 contribute nothing.
func Indexed(blocklens, displs []int, old Type) (Type, error) {
	if err := checkOld("indexed", old); err != nil {
		return Type{}, err
	}
	if len(blocklens) != len(displs) {
		return Type{}, errorf(ErrInvalid, "indexed: %d block lengths but %d displacements", len(blocklens), len(displs))
	}
	return indexedElems("indexed", blocklens, displs, old)
}

// IndexedBlock is [Indexed] with every block of blocklen copies
// (MPI_Type_create_indexed_block).
func IndexedBlock(blocklen int, displs []int, old Type) (Type, error) {
	if err := checkOld("indexed block", old); err != nil {
		return Type{}, err
	}
	if blocklen < 0 {
		return Type{}, errorf(ErrInvalid, "indexed block: negative block length %d", blocklen)
	}
	lens := make([]int, len(displs))
	for i := range lens {
		lens[i] = blocklen
	}
	return indexedElems("indexed block", lens, displs, old)
}

func indexedElems(fn string, blocklens, displs []int, old Type) (Type, error) {
	ext := old.p.extent()
	lens := make([]int64, len(blocklens))
	ds := make([]int64, len(displs))
	for i := range displs {
		d, ok := mul64(int64(displs[i]), ext)
		if !ok {
			return Type{}, errorf(ErrInvalid, "%s: displacement %d times extent %d overflows int64", fn, displs[i], ext)
		}
		lens[i], ds[i] = int64(blocklens[i]), d
	}
	t, err := indexed(old.p, lens, ds)
	return wrapCtor(fn, t, err)
}

// Hindexed is [Indexed] with displacements in bytes
// (MPI_Type_create_hindexed).
func Hindexed(blocklens, displsBytes []int, old Type) (Type, error) {
	if err := checkOld("hindexed", old); err != nil {
		return Type{}, err
	}
	if len(blocklens) != len(displsBytes) {
		return Type{}, errorf(ErrInvalid, "hindexed: %d block lengths but %d displacements", len(blocklens), len(displsBytes))
	}
	lens := make([]int64, len(blocklens))
	ds := make([]int64, len(displsBytes))
	for i := range lens {
		lens[i], ds[i] = int64(blocklens[i]), int64(displsBytes[i])
	}
	t, err := indexed(old.p, lens, ds)
	return wrapCtor("hindexed", t, err)
}

// HindexedBlock is [IndexedBlock] with displacements in bytes
// (MPI_Type_create_hindexed_block).
func HindexedBlock(blocklen int, displsBytes []int, old Type) (Type, error) {
	if err := checkOld("hindexed block", old); err != nil {
		return Type{}, err
	}
	if blocklen < 0 {
		return Type{}, errorf(ErrInvalid, "hindexed block: negative block length %d", blocklen)
	}
	lens := make([]int64, len(displsBytes))
	ds := make([]int64, len(displsBytes))
	for i := range lens {
		lens[i], ds[i] = int64(blocklen), int64(displsBytes[i])
	}
	t, err := indexed(old.p, lens, ds)
	return wrapCtor("hindexed block", t, err)
}

// Resized returns old with its lower bound set to lb and its extent to extent
// bytes (MPI_Type_create_resized). The extent must not be negative. The
// explicit bounds carry over to types built from the result, as in MPI.
func Resized(old Type, lb, extent int64) (Type, error) {
	if err := checkOld("resized", old); err != nil {
		return Type{}, err
	}
	if extent < 0 {
		return Type{}, errorf(ErrInvalid, "resized: negative extent %d", extent)
	}
	ub, ok := add64(lb, extent)
	if !ok {
		return Type{}, errorf(ErrInvalid, "resized: lb %d plus extent %d overflows int64", lb, extent)
	}
	x := old.p
	t := &typ{basic: x.basic, esize: x.esize, blocks: x.blocks, levels: x.levels,
		count: x.count, tlb: x.tlb, tub: x.tub, lb: lb, ub: ub, markers: true}
	return Type{t}, nil
}

// Order is the storage order of a multidimensional array.
type Order uint8

const (
	// OrderC is row-major order (MPI_ORDER_C): the last dimension varies
	// fastest.
	OrderC Order = iota
	// OrderFortran is column-major order (MPI_ORDER_FORTRAN): the first
	// dimension varies fastest.
	OrderFortran
)

// Subarray returns the subarray of subsizes elements starting at starts of an
// array of sizes elements of old, stored in the given order
// (MPI_Type_create_subarray). Its lower bound is 0 and its extent is that of
// the whole array, so that consecutive instances describe consecutive arrays.
// It requires len(sizes) == len(subsizes) == len(starts) >= 1, sizes[i] >= 1,
// subsizes[i] >= 0 and 0 <= starts[i] <= sizes[i]-subsizes[i].
func Subarray(sizes, subsizes, starts []int, order Order, old Type) (Type, error) {
	if err := checkOld("subarray", old); err != nil {
		return Type{}, err
	}
	nd := len(sizes)
	if nd == 0 || len(subsizes) != nd || len(starts) != nd {
		return Type{}, errorf(ErrInvalid, "subarray: %d sizes, %d subsizes, %d starts", nd, len(subsizes), len(starts))
	}
	if order != OrderC && order != OrderFortran {
		return Type{}, errorf(ErrInvalid, "subarray: invalid order %d", order)
	}
	for i := 0; i < nd; i++ {
		if sizes[i] < 1 || subsizes[i] < 0 || subsizes[i] > sizes[i] || starts[i] < 0 || starts[i] > sizes[i]-subsizes[i] {
			return Type{}, errorf(ErrInvalid, "subarray: dimension %d: size %d, subsize %d, start %d out of range", i, sizes[i], subsizes[i], starts[i])
		}
	}
	dim := func(k int) int { // k-th fastest dimension
		if order == OrderC {
			return nd - 1 - k
		}
		return k
	}
	x := old.p
	stride := x.extent() // bytes between consecutive elements of dimension dim(k)
	var off int64
	t := x
	var err error
	for k := 0; k < nd; k++ {
		d := dim(k)
		o, ok1 := mul64(int64(starts[d]), stride)
		var ok2 bool
		off, ok2 = add64(off, o)
		if !ok1 || !ok2 {
			return Type{}, errorf(ErrInvalid, "subarray: %s", errOverflow)
		}
		if t, err = repeat(t, int64(subsizes[d]), stride); err != nil {
			return wrapCtor("subarray", nil, err)
		}
		var ok bool
		if stride, ok = mul64(stride, int64(sizes[d])); !ok {
			return Type{}, errorf(ErrInvalid, "subarray: %s", errOverflow)
		}
	}
	if t, err = shift(t, off); err != nil {
		return wrapCtor("subarray", nil, err)
	}
	r, err := Resized(Type{t}, 0, stride)
	if err != nil {
		return wrapCtor("subarray", nil, err)
	}
	return r, nil
}

// SameSignature reports whether aCount instances of a and bCount instances
// of b have the same type signature: the same basic type and the same total
// number of elements. As in MPI, empty signatures match whatever the types.
// It returns false if a count is negative or a type is invalid.
func SameSignature(aCount int, a Type, bCount int, b Type) bool {
	if a.p == nil || b.p == nil || aCount < 0 || bCount < 0 {
		return false
	}
	ah, al := mulU(uint64(aCount), uint64(a.p.count))
	bh, bl := mulU(uint64(bCount), uint64(b.p.count))
	if ah != bh || al != bl {
		return false
	}
	return (ah == 0 && al == 0) || a.p.basic == b.p.basic
}
