package fallback

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
)

// Piece is one message's share of an accumulate cut by [Split]: Count
// instances of Type at byte displacement Disp of the target window, holding
// the elements [Elem, Elem+Elems) of the whole accumulate's type map.
type Piece struct {
	// Disp is where instance 0 of Type starts in the target window.
	Disp int64
	// Type is the piece's target layout: the accumulate's datatype (whole
	// instances), its predefined datatype (a contiguous run), or a
	// datatype.Hvector or datatype.Hindexed of it (part of an instance).
	Type datatype.Type
	// Count is the number of instances of Type.
	Count int
	// Elem is the index of the piece's first element in the type map of
	// the whole accumulate (count instances of its datatype).
	Elem int64
	// Elems is the number of elements of the piece: Count*Type.Count().
	Elems int64
}

// Split cuts an accumulate of count instances of t at byte displacement
// disp of the target window into pieces whose encoded requests (header,
// datatype encoding and data) each fit in maxMsg bytes (at most
// MaxMessage), and calls fn with each piece in type-map order, stopping at
// the first error fn returns (and returning it). The replies fit in maxMsg
// bytes too, old values included. An accumulate of no element has no piece.
//
// The pieces are, in order of preference:
//   - whole instances of t, as many as fit, when an instance fits in a
//     message (and not just one or two per message);
//   - otherwise runs of t's type map: a single run (or part of one) is sent
//     as a predefined datatype with an adjusted Disp, so a contiguous
//     accumulate of any size becomes ceil(size/room) pieces in O(pieces)
//     time; several runs of one length and stride become a
//     datatype.Hvector, and irregular runs a datatype.Hindexed.
//
// Split costs O(pieces) for contiguous layouts and O(runs) otherwise, and
// memory proportional to one message. It does not check the op or the
// window: call [Check] first (in particular the target can only check each
// piece for overlapping elements, not the whole). Errors are *[Error].
func Split(disp int64, t datatype.Type, count int, maxMsg int, fn func(Piece) error) error {
	if !t.Valid() {
		return newError(StatusBadLayout, "split: invalid datatype")
	}
	if count < 0 {
		return newError(StatusBadLayout, fmt.Sprintf("split: negative count %d", count))
	}
	lo, hi, err := t.Bounds(count)
	if err != nil {
		return newError(StatusBadLayout, "split: "+err.Error())
	}
	if lo == hi {
		return nil
	}
	_, ok1 := add64(disp, lo)
	_, ok2 := add64(disp, hi)
	if !ok1 || !ok2 {
		return newError(StatusOutOfWindow, fmt.Sprintf("split: %d instances of %v at displacement %d overflow int64", count, t, disp))
	}
	maxMsg = min(maxMsg, MaxMessage)
	b := t.Basic()
	es := int64(b.Size())
	maxData := int64(maxMsg) - RequestHeaderSize
	if maxData < es {
		return newError(StatusTooLarge, fmt.Sprintf("split: a message of %d bytes cannot hold one %v element", maxMsg, b))
	}
	var s splitter
	s.scratch = make([]byte, 0, 64)

	// Whole instances.
	if !t.IsContiguous() {
		enc, err := t.AppendBinary(s.scratch[:0])
		if err == nil && encodedBlocks(enc) <= datatype.MaxDecodeBlocks {
			s.scratch = enc
			isz := t.Size()
			if room := maxData - int64(pad8(len(enc))); room >= isz {
				n := min(room/isz, MaxCount)
				if int64(count) <= n || n >= 4 {
					ext, c := t.Extent(), int64(t.Count())
					for i := int64(0); i < int64(count); i += n {
						k := min(n, int64(count)-i)
						if err := fn(Piece{Disp: disp + i*ext, Type: t, Count: int(k), Elem: i * c, Elems: k * c}); err != nil {
							return err
						}
					}
					return nil
				}
			}
		}
	}

	// Runs of the type map.
	s.disp, s.es, s.basic, s.fn = disp, es, b, fn
	s.maxData, s.capElems = maxData, maxData/es
	s.maxMsg = int64(maxMsg)
	t.ForEachBlock(count, func(off int64, n int) bool {
		s.run(off, int64(n))
		return s.err == nil
	})
	if s.err == nil {
		s.flush()
	}
	return s.err
}

// encodedBlocks returns the number of base blocks of a datatype encoding
// (a uvarint after three bytes).
func encodedBlocks(enc []byte) uint64 {
	if len(enc) < 4 {
		return 0
	}
	n, k := binary.Uvarint(enc[3:])
	if k <= 0 {
		return math.MaxUint64
	}
	return n
}

func uvarintLen(x uint64) int64 {
	n := int64(1)
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

func varintLen(x int64) int64 {
	ux := uint64(x) << 1
	if x < 0 {
		ux = ^ux
	}
	return uvarintLen(ux)
}

func add64(a, b int64) (int64, bool) {
	c := a + b
	if (c > a) != (b > 0) {
		return c, false
	}
	return c, true
}

// hvectorEncBound bounds the encoding of a datatype.Hvector of a predefined
// type: 3 bytes, 1 block (count 1 byte, offset 0 1 byte, length <= 10), 1
// loop (count 1 byte, repetitions <= 10, stride <= 10), padded to 8.
const hvectorEncBound = 40

// splitter builds pieces from the runs of a type map.
type splitter struct {
	disp     int64
	es       int64
	basic    datatype.Basic
	maxMsg   int64
	maxData  int64 // bytes for the datatype encoding (padded) and the data
	capElems int64 // elements that fit with no datatype encoding
	fn       func(Piece) error
	err      error
	scratch  []byte

	elem    int64 // index of the current piece's first element
	first   int64 // offset of its first run, relative to disp
	rels    []int // offsets of its runs relative to first
	lens    []int // lengths of its runs in elements
	elems   int64 // elements in it
	uniform bool  // its runs have one length and one stride
	henc    int64 // bytes of its runs in a Hindexed encoding
}

// encoding returns the (padded) size of the datatype encoding of the
// current piece with nb runs, uniform or not, whose runs take henc bytes in
// a Hindexed encoding: nothing for one run (sent as a predefined type),
// else the smaller of a Hvector's and a Hindexed's.
func encoding(nb int, uniform bool, henc int64) int64 {
	if nb <= 1 {
		return 0
	}
	h := int64(pad8(int(3 + uvarintLen(uint64(nb)) + henc + 1)))
	if uniform && hvectorEncBound < h {
		return hvectorEncBound
	}
	return h
}

// rel returns the offset of a run at off relative to the current piece's
// first run, and whether a datatype displacement (an int) can hold it.
func (s *splitter) rel(off int64) (int, bool) {
	r := off - s.first
	if (off >= s.first) != (r >= 0) || int64(int(r)) != r {
		return 0, false
	}
	return int(r), true
}

// continues reports whether a run of n elements at off keeps the current
// piece (of at least one run) uniform.
func (s *splitter) continues(rel int, n int64) bool {
	nb := len(s.lens)
	switch {
	case int64(s.lens[0]) != n:
		return false
	case nb == 1:
		return rel != 0
	}
	d := int64(rel) - int64(s.rels[nb-1])
	return s.uniform && (int64(rel) >= int64(s.rels[nb-1])) == (d >= 0) && d == int64(s.rels[1])
}

// fits reports whether a run of n elements at off can be added whole to the
// current (non-empty) piece.
func (s *splitter) fits(off, n int64) bool {
	r, ok := s.rel(off)
	if !ok || len(s.lens) >= datatype.MaxDecodeBlocks {
		return false
	}
	u := s.continues(r, n)
	h := s.henc + varintLen(int64(r)) + uvarintLen(uint64(n))
	return (s.elems+n)*s.es+encoding(len(s.lens)+1, u, h) <= s.maxData
}

// room returns how many elements (fewer than n) of a run of n at off fit in
// the current (non-empty) piece.
func (s *splitter) room(off, n int64) int64 {
	r, ok := s.rel(off)
	if !ok || len(s.lens) >= datatype.MaxDecodeBlocks {
		return 0
	}
	h := s.henc + varintLen(int64(r)) + uvarintLen(uint64(n))
	enc := int64(pad8(int(3 + uvarintLen(uint64(len(s.lens)+1)) + h + 1))) // a Hindexed: an upper bound
	m := (s.maxData-enc)/s.es - s.elems
	return max(0, min(m, n-1))
}

// add adds a run of n elements at off to the current piece; the caller has
// checked that it fits.
func (s *splitter) add(off, n int64) {
	if len(s.lens) == 0 {
		s.first = off
		s.rels = append(s.rels, 0)
		s.lens = append(s.lens, int(n))
		s.elems, s.uniform, s.henc = n, true, 1+uvarintLen(uint64(n))
		return
	}
	r, _ := s.rel(off)
	s.uniform = s.continues(r, n)
	s.henc += varintLen(int64(r)) + uvarintLen(uint64(n))
	s.rels = append(s.rels, r)
	s.lens = append(s.lens, int(n))
	s.elems += n
}

// run adds a run of n elements at byte offset off, flushing pieces as they
// fill up.
func (s *splitter) run(off, n int64) {
	for n > 0 && s.err == nil {
		if len(s.lens) > 0 {
			if r, ok := s.rel(off); ok && len(s.lens) >= 2 && s.uniform && !s.continues(r, n) && s.elems*s.es >= s.maxData/2 {
				// Rather send a big uniform piece as a Hvector than turn it
				// into a Hindexed.
				s.flush()
				continue
			}
			if s.fits(off, n) {
				s.add(off, n)
				return
			}
			// Fill the piece with part of the run unless little room is
			// left (which keeps uniform runs whole).
			if m := s.room(off, n); m > 0 && m >= s.capElems/16 {
				s.add(off, m)
				s.flush()
				off += m * s.es
				n -= m
				continue
			}
			s.flush()
			continue
		}
		m := min(n, s.capElems)
		s.add(off, m)
		off += m * s.es
		n -= m
		if n > 0 {
			s.flush()
		}
	}
}

// flush sends the current piece, if any, to fn.
func (s *splitter) flush() {
	nb := len(s.lens)
	if nb == 0 || s.err != nil {
		return
	}
	p := Piece{Disp: s.disp + s.first, Count: 1, Elem: s.elem, Elems: s.elems}
	var err error
	switch {
	case nb == 1:
		p.Type, p.Count = s.basic.Type(), s.lens[0]
	case s.uniform && encoding(nb, true, s.henc) == hvectorEncBound:
		p.Type, err = datatype.Hvector(nb, s.lens[0], s.rels[1], s.basic.Type())
	default:
		p.Type, err = datatype.Hindexed(s.lens, s.rels, s.basic.Type())
	}
	if err == nil && nb > 1 {
		// Make sure the piece fits (the estimates are upper bounds).
		s.scratch, err = p.Type.AppendBinary(s.scratch[:0])
		if err == nil && RequestHeaderSize+int64(pad8(len(s.scratch)))+s.elems*s.es > s.maxMsg {
			err = fmt.Errorf("piece of %d elements and a datatype of %d bytes exceeds %d bytes", s.elems, len(s.scratch), s.maxMsg)
		}
	}
	if err != nil {
		s.err = newError(StatusBadLayout, "split: internal error: "+err.Error())
		return
	}
	s.elem += s.elems
	s.rels, s.lens, s.elems = s.rels[:0], s.lens[:0], 0
	s.err = s.fn(p)
}

// AppendPiece appends to dst the request for piece p of an accumulate
// described by r (Kind, Op, Window and Tag are taken from r; Disp, Type,
// Count from p; r.Data is ignored), with the origin elements [p.Elem,
// p.Elem+p.Elems) packed straight from origin, a buffer holding originCount
// instances of originType (which must have the accumulate's type
// signature). For NO_OP no data is sent. It does not allocate when
// cap(dst) suffices. On error dst is returned unchanged.
func AppendPiece(dst []byte, r *Request, p Piece, origin []byte, originType datatype.Type, originCount int) ([]byte, error) {
	q := Request{Kind: r.Kind, Op: r.Op, Window: r.Window, Tag: r.Tag, Disp: p.Disp, Type: p.Type, Count: p.Count}
	if r.Kind == KindCompareAndSwap {
		return dst, newError(StatusBadLayout, "compare-and-swap is never split")
	}
	if q.Kind != KindAccumulate && q.Kind != KindGetAccumulate {
		return dst, newError(StatusMalformed, "unknown kind "+q.Kind.String())
	}
	if !p.Type.Valid() || p.Count < 0 || p.Count > MaxCount {
		return dst, newError(StatusBadLayout, "invalid piece")
	}
	if int64(p.Count)*int64(p.Type.Count()) != p.Elems || originType.Basic() != p.Type.Basic() {
		return dst, newError(StatusLength, fmt.Sprintf("piece of %d elements of %v, %d instances of %v", p.Elems, p.Type.Basic(), p.Count, p.Type))
	}
	n := p.Elems * int64(p.Type.Basic().Size())
	if r.Op == op.NoOp {
		n = 0
	}
	if n > MaxMessage {
		return dst, newError(StatusTooLarge, fmt.Sprintf("piece of %d bytes", n))
	}
	start := len(dst)
	dst, e := appendHeader(dst, &q, int(n))
	if e != nil {
		return dst[:start], e
	}
	if n == 0 {
		return dst, nil
	}
	dst, err := AppendPackRange(dst, origin, originType, originCount, p.Elem, p.Elems)
	if err != nil {
		return dst[:start], err
	}
	return dst, nil
}

// walkRange calls fn with the runs (byte offset, elements) holding the
// elements [elem, elem+elems) of count instances of t, after checking the
// range. It skips whole instances arithmetically, so it costs O(elems +
// runs of one instance of t).
func walkRange(t datatype.Type, count int, elem, elems int64, fn func(off, n int64)) error {
	c := int64(t.Count())
	total := int64(count) * c
	if elem < 0 || elems < 0 || elem > total || elems > total-elem {
		return newError(StatusLength, fmt.Sprintf("elements [%d, +%d) of a layout of %d", elem, elems, total))
	}
	if elems == 0 {
		return nil
	}
	es := int64(t.Basic().Size())
	if t.IsContiguous() {
		fn(t.TrueLB()+elem*es, elems)
		return nil
	}
	i0, skip := elem/c, elem%c
	base := i0 * t.Extent()
	ninst := (skip + elems + c - 1) / c
	left := elems
	t.ForEachBlock(int(ninst), func(off int64, n int) bool {
		k := int64(n)
		if skip >= k {
			skip -= k
			return true
		}
		off += skip * es
		k -= skip
		skip = 0
		k = min(k, left)
		fn(base+off, k)
		left -= k
		return left > 0
	})
	return nil
}

// AppendPackRange appends to dst the elements [elem, elem+elems) of the
// type map of count instances of t laid out in src (the first at offset 0),
// packed in type-map order: the origin data of a [Piece]. It costs
// O(elems + runs of one instance of t); for a non-contiguous t with huge
// instances, rather pack the whole origin once with datatype.AppendPack
// and slice it (element i at byte i*t.Basic().Size()).
func AppendPackRange(dst, src []byte, t datatype.Type, count int, elem, elems int64) ([]byte, error) {
	if err := t.Fits(count, int64(len(src)), 0); err != nil {
		return dst, err
	}
	es := int64(t.Basic().Size())
	if elems > 0 && elems <= MaxMessage/es {
		dst = slices.Grow(dst, int(elems*es))
	}
	err := walkRange(t, count, elem, elems, func(off, n int64) {
		dst = append(dst, src[off:off+n*es]...)
	})
	return dst, err
}

// UnpackRange copies packed elements (old values from a reply, in type-map
// order) into the elements [elem, elem+len(packed)/size) of the type map of
// count instances of t laid out in dst (the first at offset 0): the result
// of a [Piece] of a GetAccumulate into the result buffer. len(packed) must
// be a multiple of the element size. Cost as [AppendPackRange].
func UnpackRange(dst []byte, t datatype.Type, count int, elem int64, packed []byte) error {
	if err := t.Fits(count, int64(len(dst)), 0); err != nil {
		return err
	}
	es := int64(t.Basic().Size())
	if int64(len(packed))%es != 0 {
		return newError(StatusLength, fmt.Sprintf("%d packed bytes, not a multiple of %d", len(packed), es))
	}
	return walkRange(t, count, elem, int64(len(packed))/es, func(off, n int64) {
		copy(dst[off:off+n*es], packed)
		packed = packed[n*es:]
	})
}
