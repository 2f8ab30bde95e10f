package datatype

// The normal form of a datatype: checked arithmetic, construction of a
// type's blocks and levels, and their normalisation.

import (
	"math"
	"slices"
)

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
