package datatype

import (
	"encoding/binary"
	"math"
)

// The binary encoding of a Type (version 1), all integers as Go varints
// (encoding/binary: unsigned LEB128, signed ones zig-zag):
//
//	version   byte (1)
//	basic     byte
//	flags     byte (bit 0: explicit lb/extent follow)
//	nblocks   uvarint, then nblocks × (offset varint, length uvarint)
//	nlevels   uvarint, then nlevels × (repetitions uvarint, stride varint)
//	[lb varint, extent uvarint]   when flags bit 0 is set
//
// It describes the normalized flattened form: the base blocks, in type-map
// order, repeated by a nest of loops, innermost first. The decoder accepts
// only the canonical encoding of a valid type (minimal varints, normalized
// form, no unknown flags), so that a Type has exactly one encoding.
const (
	encVersion = 1
	flagBounds = 1

	// MaxDecodeBlocks bounds the number of base blocks [Unmarshal] accepts.
	MaxDecodeBlocks = 1 << 20
	maxLevels       = 63 // each loop at least doubles the element count
)

// AppendBinary appends the binary encoding of t to dst. It implements
// encoding.BinaryAppender. It fails only for the zero Type.
func (t Type) AppendBinary(dst []byte) ([]byte, error) {
	p := t.p
	if p == nil {
		return dst, errorf(ErrInvalid, "marshal: invalid type")
	}
	var flags byte
	if p.markers {
		flags |= flagBounds
	}
	dst = append(dst, encVersion, byte(p.basic), flags)
	dst = binary.AppendUvarint(dst, uint64(len(p.blocks)))
	for _, b := range p.blocks {
		dst = binary.AppendVarint(dst, b.Off)
		dst = binary.AppendUvarint(dst, uint64(b.Len))
	}
	dst = binary.AppendUvarint(dst, uint64(len(p.levels)))
	for _, l := range p.levels {
		dst = binary.AppendUvarint(dst, uint64(l.n))
		dst = binary.AppendVarint(dst, l.stride)
	}
	if p.markers {
		dst = binary.AppendVarint(dst, p.lb)
		dst = binary.AppendUvarint(dst, uint64(p.ub-p.lb))
	}
	return dst, nil
}

// MarshalBinary returns the binary encoding of t. It implements
// encoding.BinaryMarshaler.
func (t Type) MarshalBinary() ([]byte, error) { return t.AppendBinary(nil) }

// UnmarshalBinary sets *t to the Type encoded in data, which must hold
// exactly one encoding. It implements encoding.BinaryUnmarshaler.
func (t *Type) UnmarshalBinary(data []byte) error {
	u, err := Unmarshal(data)
	if err != nil {
		return err
	}
	*t = u
	return nil
}

// Unmarshal decodes a Type encoded by [Type.AppendBinary]; data must hold
// exactly one encoding. The decoder is strict and safe on untrusted input: it
// never panics, rejects anything but the canonical encoding of a valid type,
// and allocates at most in proportion to len(data). Errors wrap [ErrInvalid].
func Unmarshal(data []byte) (Type, error) {
	t, n, err := UnmarshalPrefix(data)
	if err != nil {
		return Type{}, err
	}
	if n != len(data) {
		return Type{}, errorf(ErrInvalid, "unmarshal: %d trailing bytes", len(data)-n)
	}
	return t, nil
}

type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail(msg string) {
	if r.err == nil {
		r.err = errorf(ErrInvalid, "unmarshal: %s at byte %d", msg, r.off)
	}
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if r.off >= len(r.b) {
		r.fail("truncated")
		return 0
	}
	c := r.b[r.off]
	r.off++
	return c
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		if n == 0 {
			r.fail("truncated")
		} else {
			r.fail("varint overflows 64 bits")
		}
		return 0
	}
	var tmp [binary.MaxVarintLen64]byte
	if binary.PutUvarint(tmp[:], v) != n {
		r.fail("non-minimal varint")
		return 0
	}
	r.off += n
	return v
}

func (r *reader) varint() int64 {
	u := r.uvarint()
	x := int64(u >> 1)
	if u&1 != 0 {
		x = ^x
	}
	return x
}

func (r *reader) remaining() int { return len(r.b) - r.off }

// UnmarshalPrefix decodes a Type from the start of data, as [Unmarshal], and
// returns the number of bytes it used.
func UnmarshalPrefix(data []byte) (Type, int, error) {
	r := &reader{b: data}
	if v := r.byte(); r.err == nil && v != encVersion {
		return Type{}, 0, errorf(ErrInvalid, "unmarshal: unknown version %d", v)
	}
	b := Basic(r.byte())
	if r.err == nil && !b.Valid() {
		return Type{}, 0, errorf(ErrInvalid, "unmarshal: invalid basic type %d", b)
	}
	flags := r.byte()
	if r.err == nil && flags&^flagBounds != 0 {
		return Type{}, 0, errorf(ErrInvalid, "unmarshal: unknown flags %#x", flags)
	}
	nb := r.uvarint()
	if r.err == nil && (nb > MaxDecodeBlocks || nb > uint64(r.remaining()/2)) {
		return Type{}, 0, errorf(ErrInvalid, "unmarshal: %d blocks", nb)
	}
	if r.err != nil {
		return Type{}, 0, r.err
	}
	es := int64(b.Size())
	var blocks []Block
	if nb > 0 {
		blocks = make([]Block, 0, nb)
	}
	for i := uint64(0); i < nb && r.err == nil; i++ {
		off := r.varint()
		n := r.uvarint()
		if r.err != nil {
			break
		}
		if n == 0 || n > uint64(maxInt) {
			r.fail("bad block length")
			break
		}
		if k := len(blocks); k > 0 {
			last := blocks[k-1]
			nbytes, ok1 := mul64(int64(last.Len), es)
			if end, ok := add64(last.Off, nbytes); ok1 && ok && end == off && int64(last.Len)+int64(n) <= maxInt {
				r.fail("adjacent blocks not merged")
				break
			}
		}
		blocks = append(blocks, Block{off, int(n)})
	}
	nl := r.uvarint()
	if r.err == nil && (nl > maxLevels || (nl > 0 && nb == 0) || nl > uint64(r.remaining()/2)) {
		r.fail("bad number of loops")
	}
	var levels []level
	if r.err == nil && nl > 0 {
		levels = make([]level, 0, nl)
	}
	for i := uint64(0); i < nl && r.err == nil; i++ {
		n := r.uvarint()
		s := r.varint()
		if r.err == nil && (n < 2 || n > math.MaxInt64) {
			r.fail("bad loop count")
		}
		levels = append(levels, level{int64(n), s})
	}
	var lb, ext int64
	if flags&flagBounds != 0 {
		lb = r.varint()
		e := r.uvarint()
		if r.err == nil && e > math.MaxInt64 {
			r.fail("bad extent")
		}
		ext = int64(e)
	}
	if r.err != nil {
		return Type{}, 0, r.err
	}
	if flags == 0 && nl == 0 && nb == 1 && blocks[0] == (Block{0, 1}) {
		return b.Type(), r.off, nil
	}
	t, err := newTyp(b, blocks, levels)
	if err != nil {
		return Type{}, 0, errorf(ErrInvalid, "unmarshal: %s", err.(*Error).Msg)
	}
	nbs, nls := normalize(blocks, levels, es)
	if len(nbs) != len(blocks) || len(nls) != len(levels) {
		return Type{}, 0, errorf(ErrInvalid, "unmarshal: form not normalized")
	}
	if flags&flagBounds != 0 {
		ub, ok := add64(lb, ext)
		if !ok {
			return Type{}, 0, errorf(ErrInvalid, "unmarshal: lb plus extent overflows int64")
		}
		t.markers, t.lb, t.ub = true, lb, ub
	}
	if t, err = t.finish(); err != nil {
		return Type{}, 0, errorf(ErrInvalid, "unmarshal: %s", err.(*Error).Msg)
	}
	return Type{t}, r.off, nil
}
