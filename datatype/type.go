package datatype

import (
	"fmt"
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
