package fallback

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"sync"
	"testing"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
)

const testWin = 7

// raw builds a request without any check: the header fields as given, then
// the type encoding (padded) and the data.
func raw(kind Kind, o op.Op, b datatype.Basic, window, tag uint32, count uint32, disp int64, typ, data []byte) []byte {
	m := make([]byte, RequestHeaderSize)
	m[offVersion] = versionByte
	m[offKind] = byte(kind)
	m[offOp] = byte(o)
	m[offBasic] = byte(b)
	le.PutUint32(m[offWindow:], window)
	le.PutUint32(m[offTag:], tag)
	le.PutUint32(m[offCount:], count)
	le.PutUint64(m[offDisp:], uint64(disp))
	le.PutUint32(m[offTypeLen:], uint32(len(typ)))
	le.PutUint32(m[offDataLen:], uint32(len(data)))
	m = append(m, typ...)
	m = append(m, make([]byte, pad8(len(typ))-len(typ))...)
	return append(m, data...)
}

func enc(t datatype.Type) []byte {
	b, err := t.MarshalBinary()
	if err != nil {
		panic(err)
	}
	return b
}

func encode(tb testing.TB, r Request) []byte {
	tb.Helper()
	m, err := AppendRequest(nil, &r)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// newTestTarget returns a target with window testWin of n float64 1..n,
// and the window memory.
func newTestTarget(n int) (*Target, []float64) {
	w := make([]float64, n)
	for i := range w {
		w[i] = float64(i + 1)
	}
	tg := NewTarget()
	tg.AddWindow(testWin, datatype.AsBytes(w))
	return tg, w
}

func goodSum(tag uint32) []byte {
	return raw(KindAccumulate, op.Sum, datatype.Float64, testWin, tag, 1, 8, nil, f64s(100))
}

func TestHandleRejections(t *testing.T) {
	vec := must(datatype.Vector(2, 1, 2, f64))                    // 2 elements, true extent 24
	overlap := must(datatype.Resized(vec, 0, 16))                 // 2 instances overlap
	dup := must(datatype.Hindexed([]int{1, 1}, []int{0, 0}, f64)) // one instance overlaps
	wide := must(datatype.Resized(vec, 0, math.MaxInt64/2))
	i32vec := must(datatype.Vector(2, 1, 2, datatype.Int32.Type()))
	badEnc := enc(vec)
	badEnc[2] = 0x80 // unknown flags
	huge := uint32(math.MaxUint32)
	tooBig := make([]byte, MaxMessage+1)
	tooBig[0] = versionByte
	le.PutUint32(tooBig[offTag:], 42)
	withPad := func() []byte {
		e := enc(vec)
		m := raw(KindAccumulate, op.Sum, datatype.Float64, testWin, 42, 1, 0, e, f64s(1, 2))
		m[RequestHeaderSize+len(e)] = 1
		return m
	}()
	typLenHuge := raw(KindAccumulate, op.Sum, datatype.Float64, testWin, 42, 1, 0, nil, f64s(1))
	le.PutUint32(typLenHuge[offTypeLen:], huge)
	dataLenHuge := raw(KindAccumulate, op.Sum, datatype.Float64, testWin, 42, 1, 0, nil, f64s(1))
	le.PutUint32(dataLenHuge[offDataLen:], huge)
	good := goodSum(42)

	cases := []struct {
		name     string
		msg      []byte
		replyCap int
		want     Status
		noTag    bool
	}{
		{"empty", nil, 0, StatusMalformed, true},
		{"one byte", []byte{versionByte}, 0, StatusMalformed, true},
		{"version 2", append([]byte{2}, good[1:]...), 0, StatusBadVersion, false},
		{"version 0", append([]byte{0}, good[1:]...), 0, StatusBadVersion, false},
		{"byte order", append([]byte{versionByte ^ bigEndianFlag}, good[1:]...), 0, StatusBadVersion, false},
		{"truncated header", good[:RequestHeaderSize-1], 0, StatusMalformed, false},
		{"truncated data", good[:len(good)-1], 0, StatusMalformed, false},
		{"trailing byte", append(slices.Clone(good), 0), 0, StatusMalformed, false},
		{"too large", tooBig, 0, StatusTooLarge, false},
		{"kind 0", raw(0, op.Sum, datatype.Float64, testWin, 42, 1, 8, nil, f64s(1)), 0, StatusMalformed, false},
		{"kind 4", raw(4, op.Sum, datatype.Float64, testWin, 42, 1, 8, nil, f64s(1)), 0, StatusMalformed, false},
		{"cas with op", raw(KindCompareAndSwap, op.Sum, datatype.Int64, testWin, 42, 1, 8, nil, make([]byte, 16)), 0, StatusMalformed, false},
		{"count > MaxCount", raw(KindAccumulate, op.Sum, datatype.Float64, testWin, 42, huge, 8, nil, f64s(1)), 0, StatusMalformed, false},
		{"type length huge", typLenHuge, 0, StatusMalformed, false},
		{"data length huge", dataLenHuge, 0, StatusMalformed, false},
		{"non-zero padding", withPad, 0, StatusMalformed, false},
		{"unknown window", raw(KindAccumulate, op.Sum, datatype.Float64, 8, 42, 1, 8, nil, f64s(1)), 0, StatusUnknownWindow, false},
		{"basic 0", raw(KindAccumulate, op.Sum, 0, testWin, 42, 1, 8, nil, f64s(1)), 0, StatusBadLayout, false},
		{"basic 200", raw(KindAccumulate, op.Sum, 200, testWin, 42, 1, 8, nil, f64s(1)), 0, StatusBadLayout, false},
		{"op 0", raw(KindAccumulate, 0, datatype.Float64, testWin, 42, 1, 8, nil, f64s(1)), 0, StatusUnknownOp, false},
		{"op 99", raw(KindAccumulate, 99, datatype.Float64, testWin, 42, 1, 8, nil, f64s(1)), 0, StatusUnknownOp, false},
		{"user op", raw(KindGetAccumulate, op.FirstUser+2, datatype.Float64, testWin, 42, 1, 8, nil, f64s(1)), 0, StatusUnknownOp, false},
		{"MAXLOC on float64", raw(KindAccumulate, op.Maxloc, datatype.Float64, testWin, 42, 1, 8, nil, f64s(1)), 0, StatusOpDatatype, false},
		{"BAND on float64", raw(KindGetAccumulate, op.Band, datatype.Float64, testWin, 42, 1, 8, nil, f64s(1)), 0, StatusOpDatatype, false},
		{"SUM on bool", raw(KindAccumulate, op.Sum, datatype.Bool, testWin, 42, 1, 8, nil, []byte{1}), 0, StatusOpDatatype, false},
		{"NO_OP in Accumulate", raw(KindAccumulate, op.NoOp, datatype.Float64, testWin, 42, 1, 8, nil, f64s(1)), 0, StatusOpUse, false},
		{"CAS on float64", raw(KindCompareAndSwap, 0, datatype.Float64, testWin, 42, 1, 8, nil, f64s(1, 2)), 0, StatusOpDatatype, false},
		{"corrupt type", raw(KindAccumulate, op.Sum, datatype.Float64, testWin, 42, 1, 0, badEnc, f64s(1, 2)), 0, StatusBadLayout, false},
		{"type truncated", raw(KindAccumulate, op.Sum, datatype.Float64, testWin, 42, 1, 0, enc(vec)[:4], f64s(1, 2)), 0, StatusBadLayout, false},
		{"type of other basic", raw(KindAccumulate, op.Sum, datatype.Float64, testWin, 42, 1, 0, enc(i32vec), make([]byte, 8)), 0, StatusBadLayout, false},
		{"predefined encoded", raw(KindAccumulate, op.Sum, datatype.Float64, testWin, 42, 1, 0, enc(f64), f64s(1)), 0, StatusMalformed, false},
		{"CAS derived", raw(KindCompareAndSwap, 0, datatype.Int32, testWin, 42, 1, 0, enc(i32vec), make([]byte, 8)), 0, StatusBadLayout, false},
		{"CAS count 2", raw(KindCompareAndSwap, 0, datatype.Int64, testWin, 42, 2, 0, nil, make([]byte, 16)), 0, StatusBadLayout, false},
		{"CAS count 0", raw(KindCompareAndSwap, 0, datatype.Int64, testWin, 42, 0, 0, nil, make([]byte, 16)), 0, StatusBadLayout, false},
		{"CAS one element", raw(KindCompareAndSwap, 0, datatype.Int64, testWin, 42, 1, 0, nil, make([]byte, 8)), 0, StatusLength, false},
		{"short data", raw(KindAccumulate, op.Sum, datatype.Float64, testWin, 42, 3, 0, nil, f64s(1, 2)), 0, StatusLength, false},
		{"long data", raw(KindAccumulate, op.Sum, datatype.Float64, testWin, 42, 1, 0, nil, f64s(1, 2)), 0, StatusLength, false},
		{"no data", raw(KindAccumulate, op.Sum, datatype.Float64, testWin, 42, 1, 0, nil, nil), 0, StatusLength, false},
		{"derived short data", raw(KindAccumulate, op.Sum, datatype.Float64, testWin, 42, 2, 0, enc(vec), f64s(1, 2)), 0, StatusLength, false},
		{"huge count", raw(KindAccumulate, op.Sum, datatype.Float64, testWin, 42, MaxCount, 0, nil, f64s(1)), 0, StatusLength, false},
		{"NO_OP partial data", raw(KindGetAccumulate, op.NoOp, datatype.Float64, testWin, 42, 2, 0, nil, f64s(1)), 0, StatusLength, false},
		{"reply too small", raw(KindGetAccumulate, op.Sum, datatype.Float64, testWin, 42, 2, 0, nil, f64s(1, 2)), ReplyHeaderSize + 15, StatusTooLarge, false},
		{"NO_OP reply too small", raw(KindGetAccumulate, op.NoOp, datatype.Float64, testWin, 42, 3, 0, nil, nil), ReplyHeaderSize + 16, StatusTooLarge, false},
		{"NO_OP huge count", raw(KindGetAccumulate, op.NoOp, datatype.Float64, testWin, 42, MaxCount, 0, nil, nil), 0, StatusTooLarge, false},
		{"CAS reply too small", raw(KindCompareAndSwap, 0, datatype.Int64, testWin, 42, 1, 0, nil, make([]byte, 16)), ReplyHeaderSize + 4, StatusTooLarge, false},
		{"disp at end", raw(KindAccumulate, op.Sum, datatype.Float64, testWin, 42, 1, 64, nil, f64s(1)), 0, StatusOutOfWindow, false},
		{"disp straddles end", raw(KindAccumulate, op.Sum, datatype.Float64, testWin, 42, 1, 60, nil, f64s(1)), 0, StatusOutOfWindow, false},
		{"count past end", raw(KindAccumulate, op.Sum, datatype.Float64, testWin, 42, 2, 56, nil, f64s(1, 2)), 0, StatusOutOfWindow, false},
		{"negative disp", raw(KindAccumulate, op.Sum, datatype.Float64, testWin, 42, 1, -8, nil, f64s(1)), 0, StatusOutOfWindow, false},
		{"disp MaxInt64", raw(KindAccumulate, op.Sum, datatype.Float64, testWin, 42, 1, math.MaxInt64, nil, f64s(1)), 0, StatusOutOfWindow, false},
		{"disp MinInt64", raw(KindAccumulate, op.Sum, datatype.Float64, testWin, 42, 1, math.MinInt64, nil, f64s(1)), 0, StatusOutOfWindow, false},
		{"disp MaxInt64-4", raw(KindGetAccumulate, op.Sum, datatype.Float64, testWin, 42, 1, math.MaxInt64-4, nil, f64s(1)), 0, StatusOutOfWindow, false},
		{"CAS out of window", raw(KindCompareAndSwap, 0, datatype.Int64, testWin, 42, 1, 60, nil, make([]byte, 16)), 0, StatusOutOfWindow, false},
		{"CAS negative disp", raw(KindCompareAndSwap, 0, datatype.Int64, testWin, 42, 1, -1, nil, make([]byte, 16)), 0, StatusOutOfWindow, false},
		{"CAS disp MaxInt64", raw(KindCompareAndSwap, 0, datatype.Int64, testWin, 42, 1, math.MaxInt64, nil, make([]byte, 16)), 0, StatusOutOfWindow, false},
		{"derived past end", raw(KindAccumulate, op.Sum, datatype.Float64, testWin, 42, 1, 48, enc(vec), f64s(1, 2)), 0, StatusOutOfWindow, false},
		{"derived disp MaxInt64", raw(KindAccumulate, op.Sum, datatype.Float64, testWin, 42, 1, math.MaxInt64-8, enc(vec), f64s(1, 2)), 0, StatusOutOfWindow, false},
		{"derived extent overflow", raw(KindAccumulate, op.Sum, datatype.Float64, testWin, 42, 3, 0, enc(wide), make([]byte, 3*wide.Size())), 0, StatusOutOfWindow, false},
		{"overlapping instances", raw(KindAccumulate, op.Sum, datatype.Float64, testWin, 42, 2, 0, enc(overlap), make([]byte, 2*overlap.Size())), 0, StatusOverlap, false},
		{"overlapping type", raw(KindGetAccumulate, op.Replace, datatype.Float64, testWin, 42, 1, 0, enc(dup), make([]byte, dup.Size())), 0, StatusOverlap, false},
	}
	for _, c := range cases {
		tg, w := newTestTarget(8)
		before := slices.Clone(w)
		replyCap := c.replyCap
		if replyCap == 0 {
			replyCap = 1024
		}
		rep := tg.Handle(c.msg, make([]byte, 0, replyCap))
		var r Reply
		if err := DecodeReply(rep, &r); err != nil {
			t.Errorf("%s: bad reply: %v", c.name, err)
			continue
		}
		if r.Status != c.want {
			t.Errorf("%s: status %v (%v), want %v", c.name, r.Status, r.Err(), c.want)
			continue
		}
		if want := uint32(42); !c.noTag && r.Tag != want {
			t.Errorf("%s: tag %d", c.name, r.Tag)
		}
		err := r.Err()
		var e *Error
		if !errors.Is(err, ErrRemoteRejected) || !errors.Is(err, statusInfos[c.want].err) || !errors.As(err, &e) || e.Status != c.want {
			t.Errorf("%s: %v does not wrap the right sentinels", c.name, err)
		}
		if e != nil && e.Msg == "" {
			t.Errorf("%s: no explanation", c.name)
		}
		if len(rep) > replyCap {
			t.Errorf("%s: reply of %d bytes, buffer of %d", c.name, len(rep), replyCap)
		}
		if tg.Rejected() != 1 {
			t.Errorf("%s: Rejected() = %d", c.name, tg.Rejected())
		}
		if !slices.Equal(w, before) {
			t.Errorf("%s: window modified: %v", c.name, w)
		}
		// The target keeps serving.
		rep = tg.Handle(goodSum(43), make([]byte, 0, 64))
		if err := DecodeReply(rep, &r); err != nil || r.Status != StatusOK || r.Tag != 43 || w[1] != 102 {
			t.Errorf("%s: good request after: %v %v %v", c.name, err, r.Err(), w)
		}
		if tg.Rejected() != 1 {
			t.Errorf("%s: good request counted as rejected", c.name)
		}
	}
	if testing.Verbose() {
		tg, _ := newTestTarget(8)
		for _, c := range cases[len(cases)-12:] {
			var r Reply
			DecodeReply(tg.Handle(c.msg, make([]byte, 0, 1024)), &r)
			t.Logf("%s: %v", c.name, r.Err())
		}
	}
}

// Every truncation of valid messages is refused without touching memory.
func TestHandleTruncations(t *testing.T) {
	vec := must(datatype.Vector(2, 1, 2, f64))
	msgs := [][]byte{
		goodSum(42),
		raw(KindGetAccumulate, op.Sum, datatype.Float64, testWin, 42, 1, 0, enc(vec), f64s(1, 2)),
		raw(KindCompareAndSwap, 0, datatype.Int64, testWin, 42, 1, 0, nil, make([]byte, 16)),
	}
	for _, m := range msgs {
		for n := 0; n < len(m); n++ {
			tg, w := newTestTarget(8)
			before := slices.Clone(w)
			var r Reply
			if err := DecodeReply(tg.Handle(m[:n], make([]byte, 0, 512)), &r); err != nil || r.Status != StatusMalformed {
				t.Fatalf("truncated to %d: %v %v", n, err, r.Status)
			}
			if !slices.Equal(w, before) || tg.Rejected() != 1 {
				t.Fatalf("truncated to %d: window %v, rejected %d", n, w, tg.Rejected())
			}
		}
	}
}

// A hostile datatype cannot cost more than the message allows: a vector of
// 2^28 elements with count 1 is refused on its length at once.
func TestHandleHostileTypeIsCheap(t *testing.T) {
	huge := must(datatype.Vector(1<<14, 1<<14, 1<<15, datatype.Uint8.Type()))
	tg, _ := newTestTarget(8)
	m := raw(KindAccumulate, op.Sum, datatype.Uint8, testWin, 1, 1, 0, enc(huge), []byte{1})
	var r Reply
	DecodeReply(tg.Handle(m, make([]byte, 0, 512)), &r)
	if r.Status != StatusLength {
		t.Fatal(r.Err())
	}
	// With NO_OP, the reply size bounds it.
	m = raw(KindGetAccumulate, op.NoOp, datatype.Uint8, testWin, 1, 1, 0, enc(huge), nil)
	DecodeReply(tg.Handle(m, make([]byte, 0, 512)), &r)
	if r.Status != StatusTooLarge {
		t.Fatal(r.Err())
	}
	// count 0 of it is fine (and empty).
	m = raw(KindGetAccumulate, op.NoOp, datatype.Uint8, testWin, 1, 0, 1<<50, enc(huge), nil)
	DecodeReply(tg.Handle(m, make([]byte, 0, 512)), &r)
	if r.Status != StatusOK || len(r.Data) != 0 {
		t.Fatal(r.Err())
	}
}

// An error reply fits whatever buffer it is given beyond the header.
func TestHandleErrorReplyTruncated(t *testing.T) {
	tg, _ := newTestTarget(8)
	m := raw(KindAccumulate, op.Sum, datatype.Float64, testWin, 5, 1, 1000, nil, f64s(1))
	for _, c := range []int{0, 4, ReplyHeaderSize, ReplyHeaderSize + 10, 1 << 12} {
		rep := tg.Handle(m, make([]byte, 0, c))
		var r Reply
		if err := DecodeReply(rep, &r); err != nil || r.Status != StatusOutOfWindow || r.Tag != 5 {
			t.Fatalf("cap %d: %v %v", c, err, r.Status)
		}
		if want := min(max(c-ReplyHeaderSize, 0), MaxReason); len(r.Data) > want {
			t.Errorf("cap %d: reason of %d bytes", c, len(r.Data))
		}
	}
}

// ---- results against a plain-Go reference ----

// layout is a target layout with its element offsets computed by hand.
type layout struct {
	name  string
	t     datatype.Type
	count int
	offs  []int64 // element offsets of count instances, in type-map order (for 8-byte elements)
}

func refLayouts() []layout {
	var ls []layout
	// contiguous float64s: 5 elements from offset 16 (disp 16 added by caller)
	ls = append(ls, layout{"basic", f64, 5, []int64{0, 8, 16, 24, 32}})
	// vector(3, 2, 4): blocks of 2 every 4 elements, count 2 (extent = (2*4+2)*8 = 80)
	var v []int64
	for inst := 0; inst < 2; inst++ {
		for i := 0; i < 3; i++ {
			for j := 0; j < 2; j++ {
				v = append(v, int64(inst*80+(i*4+j)*8))
			}
		}
	}
	ls = append(ls, layout{"vector", must(datatype.Vector(3, 2, 4, f64)), 2, v})
	// negative stride vector: 3 blocks of 1, stride -2, count 1, at disp 64 added by caller
	ls = append(ls, layout{"negative stride", must(datatype.Vector(3, 1, -2, f64)), 1, []int64{0, -16, -32}})
	// indexed block (MAPVALS): displacements 7, 2, 3, 9 in elements
	ls = append(ls, layout{"indexed block", must(datatype.IndexedBlock(1, []int{7, 2, 3, 9}, f64)), 1, []int64{56, 16, 24, 72}})
	// indexed with blocks of 2
	ls = append(ls, layout{"indexed block 2", must(datatype.IndexedBlock(2, []int{10, 0, 4}, f64)), 1, []int64{80, 88, 0, 8, 32, 40}})
	// subarray 2x3 at (1,2) of 4x6, row major, count 2 (extent 4*6*8 = 192)
	var s []int64
	for inst := 0; inst < 2; inst++ {
		for i := 1; i < 3; i++ {
			for j := 2; j < 5; j++ {
				s = append(s, int64(inst*192+(i*6+j)*8))
			}
		}
	}
	ls = append(ls, layout{"subarray", must(datatype.Subarray([]int{4, 6}, []int{2, 3}, []int{1, 2}, datatype.OrderC, f64)), 2, s})
	// subarray, Fortran order: 2x2 at (1,1) of 3x4 (column major)
	var sf []int64
	for j := 1; j < 3; j++ {
		for i := 1; i < 3; i++ {
			sf = append(sf, int64((j*3+i)*8))
		}
	}
	ls = append(ls, layout{"subarray fortran", must(datatype.Subarray([]int{3, 4}, []int{2, 2}, []int{1, 1}, datatype.OrderFortran, f64)), 1, sf})
	// resized: one element every 3, count 4 (lb 0, extent 24)
	ls = append(ls, layout{"resized", must(datatype.Resized(f64, 0, 24)), 4, []int64{0, 24, 48, 72}})
	return ls
}

type refOp struct {
	o  op.Op
	fn func(a, b float64) float64
}

var refOps = []refOp{
	{op.Sum, func(a, b float64) float64 { return a + b }},
	{op.Prod, func(a, b float64) float64 { return a * b }},
	{op.Max, func(a, b float64) float64 {
		if b > a {
			return b
		}
		return a
	}},
	{op.Min, func(a, b float64) float64 {
		if b < a {
			return b
		}
		return a
	}},
	{op.Replace, func(a, b float64) float64 { return b }},
	{op.NoOp, func(a, b float64) float64 { return a }},
}

func TestHandleAgainstReference(t *testing.T) {
	const n = 64
	for _, l := range refLayouts() {
		disp := int64(40)
		if l.name == "negative stride" {
			disp = 400
		}
		for _, ro := range refOps {
			for _, kind := range []Kind{KindAccumulate, KindGetAccumulate} {
				if ro.o == op.NoOp && kind == KindAccumulate {
					continue
				}
				tg, w := newTestTarget(n)
				for i := range w {
					w[i] = float64(i%7) - 2.5
				}
				want := slices.Clone(w)
				origin := make([]float64, len(l.offs))
				var old []float64
				for i, off := range l.offs {
					origin[i] = float64(i) * 1.25
					k := (disp + off) / 8
					old = append(old, want[k])
					want[k] = ro.fn(want[k], origin[i])
				}
				r := Request{Kind: kind, Op: ro.o, Window: testWin, Tag: 3, Disp: disp, Type: l.t, Count: l.count, Data: f64s(origin...)}
				rep := tg.Handle(encode(t, r), make([]byte, 0, 4096))
				var d Reply
				if err := DecodeReply(rep, &d); err != nil || d.Status != StatusOK || d.Tag != 3 {
					t.Fatalf("%s %v %v: %v %v", l.name, ro.o, kind, err, d.Err())
				}
				if !slices.Equal(w, want) {
					t.Errorf("%s %v %v: window\n%v, want\n%v", l.name, ro.o, kind, w, want)
				}
				if kind == KindGetAccumulate {
					got := make([]float64, len(d.Data)/8)
					copy(datatype.AsBytes(got), d.Data)
					if !slices.Equal(got, old) {
						t.Errorf("%s %v: old values %v, want %v", l.name, ro.o, got, old)
					}
				} else if len(d.Data) != 0 {
					t.Errorf("%s %v: accumulate reply with data", l.name, ro.o)
				}
			}
		}
	}
}

// Other element types: integer BXOR, bool LOR, MAXLOC on pairs, complex
// PROD, unaligned int32 elements.
func TestHandleOtherTypes(t *testing.T) {
	tg := NewTarget()
	mem := make([]byte, 256)
	tg.AddWindow(1, mem)
	do := func(r Request) Reply {
		t.Helper()
		r.Window = 1
		var d Reply
		if err := DecodeReply(tg.Handle(encode(t, r), make([]byte, 0, 512)), &d); err != nil || d.Status != StatusOK {
			t.Fatalf("%v %v: %v %v", r.Op, r.Type, err, d.Err())
		}
		return d
	}
	// int32 BXOR at an odd offset (unaligned).
	i32 := []int32{0x0f0f, -1, 7}
	copy(mem[1:], datatype.AsBytes(i32))
	d := do(Request{Kind: KindGetAccumulate, Op: op.Bxor, Disp: 1, Type: datatype.Int32.Type(), Count: 3, Data: datatype.AsBytes([]int32{0xff, 1, 7})})
	got := make([]int32, 3)
	copy(datatype.AsBytes(got), mem[1:13])
	if want := []int32{0x0f0f ^ 0xff, -1 ^ 1, 0}; !slices.Equal(got, want) || !bytes.Equal(d.Data, datatype.AsBytes(i32)) {
		t.Errorf("BXOR: %v, old %v", got, d.Data)
	}
	// bool LOR through a vector.
	clear(mem)
	mem[100], mem[102] = 1, 0
	bv := must(datatype.Vector(3, 1, 2, datatype.Bool.Type()))
	do(Request{Kind: KindAccumulate, Op: op.Lor, Disp: 100, Type: bv, Count: 1, Data: []byte{0, 5, 0}})
	if mem[100] != 1 || mem[102] != 1 || mem[104] != 0 || mem[101] != 0 {
		t.Errorf("LOR: %v", mem[100:105])
	}
	// MAXLOC on float64-int pairs.
	clear(mem)
	pairs := []datatype.PairFloat64Int{{V: 1, I: 5}, {V: 3, I: 1}}
	copy(mem[32:], datatype.AsBytes(pairs))
	do(Request{Kind: KindAccumulate, Op: op.Maxloc, Disp: 32, Type: datatype.Float64Int.Type(), Count: 2,
		Data: datatype.AsBytes([]datatype.PairFloat64Int{{V: 2, I: 9}, {V: 3, I: 0}})})
	gp := make([]datatype.PairFloat64Int, 2)
	copy(datatype.AsBytes(gp), mem[32:64])
	if gp[0] != (datatype.PairFloat64Int{V: 2, I: 9}) || gp[1] != (datatype.PairFloat64Int{V: 3, I: 0}) {
		t.Errorf("MAXLOC: %v", gp)
	}
	// complex128 PROD.
	clear(mem)
	copy(mem[16:], datatype.AsBytes([]complex128{1 + 2i}))
	do(Request{Kind: KindAccumulate, Op: op.Prod, Disp: 16, Type: datatype.Complex128.Type(), Count: 1, Data: datatype.AsBytes([]complex128{3 - 1i})})
	gc := make([]complex128, 1)
	copy(datatype.AsBytes(gc), mem[16:32])
	if gc[0] != (1+2i)*(3-1i) {
		t.Errorf("PROD: %v", gc)
	}
}

func TestHandleCompareAndSwap(t *testing.T) {
	tg := NewTarget()
	mem := make([]int64, 4)
	mem[2] = 10
	tg.AddWindow(1, datatype.AsBytes(mem))
	cas := func(cmp, new int64) (int64, Status) {
		r := Request{Kind: KindCompareAndSwap, Window: 1, Tag: 9, Disp: 16, Type: datatype.Int64.Type(), Count: 1, Data: datatype.AsBytes([]int64{cmp, new})}
		var d Reply
		if err := DecodeReply(tg.Handle(encode(t, r), make([]byte, 0, 64)), &d); err != nil {
			t.Fatal(err)
		}
		if d.Status != StatusOK {
			return 0, d.Status
		}
		if len(d.Data) != 8 || d.Tag != 9 {
			t.Fatalf("reply %+v", d)
		}
		return int64(le.Uint64(d.Data)), d.Status
	}
	if old, s := cas(3, 4); old != 10 || s != StatusOK || mem[2] != 10 {
		t.Errorf("no swap: %d %v %v", old, s, mem)
	}
	if old, s := cas(10, 4); old != 10 || s != StatusOK || mem[2] != 4 {
		t.Errorf("swap: %d %v %v", old, s, mem)
	}
	// bool and byte are allowed too.
	for _, b := range []datatype.Basic{datatype.Bool, datatype.Byte, datatype.Uint8, datatype.Int16} {
		es := b.Size()
		r := Request{Kind: KindCompareAndSwap, Window: 1, Disp: 3, Type: b.Type(), Count: 1, Data: make([]byte, 2*es)}
		r.Data[es] = 1
		var d Reply
		DecodeReply(tg.Handle(encode(t, r), make([]byte, 0, 64)), &d)
		if d.Status != StatusOK || len(d.Data) != es {
			t.Errorf("%v: %v", b, d.Err())
		}
	}
}

func TestHandleNoOpWithData(t *testing.T) {
	tg, w := newTestTarget(8)
	before := slices.Clone(w)
	for _, data := range [][]byte{nil, f64s(9, 9)} {
		r := Request{Kind: KindGetAccumulate, Op: op.NoOp, Window: testWin, Disp: 8, Type: f64, Count: 2, Data: data}
		var d Reply
		DecodeReply(tg.Handle(encode(t, r), make([]byte, 0, 64)), &d)
		if d.Status != StatusOK || !bytes.Equal(d.Data, f64s(2, 3)) || !slices.Equal(w, before) {
			t.Errorf("NO_OP: %v %v %v", d.Err(), d.Data, w)
		}
	}
	// NO_OP may read an overlapping layout.
	dup := must(datatype.Hindexed([]int{1, 1}, []int{8, 8}, f64))
	r := Request{Kind: KindGetAccumulate, Op: op.NoOp, Window: testWin, Type: dup, Count: 1}
	var d Reply
	DecodeReply(tg.Handle(encode(t, r), make([]byte, 0, 64)), &d)
	if d.Status != StatusOK || !bytes.Equal(d.Data, f64s(2, 2)) {
		t.Errorf("NO_OP overlapping: %v %v", d.Err(), d.Data)
	}
}

func TestWindows(t *testing.T) {
	tg, w := newTestTarget(8)
	var d Reply
	tg.RemoveWindow(testWin)
	DecodeReply(tg.Handle(goodSum(1), make([]byte, 0, 512)), &d)
	if d.Status != StatusUnknownWindow || w[1] != 2 {
		t.Fatal(d.Err())
	}
	// An id in use is refused; once removed, it may be used again.
	w2 := make([]float64, 2)
	if err := tg.AddWindow(testWin, datatype.AsBytes(w2)); err != nil {
		t.Fatal(err)
	}
	if err := tg.AddWindow(testWin, datatype.AsBytes(w)); !errors.Is(err, ErrWindowExists) {
		t.Fatalf("AddWindow of an id in use: %v, want ErrWindowExists", err)
	}
	DecodeReply(tg.Handle(goodSum(1), make([]byte, 0, 512)), &d)
	if d.Status != StatusOK || w2[1] != 100 {
		t.Fatal(d.Err(), w2)
	}
	// An empty window.
	tg.RemoveWindow(testWin)
	tg.AddWindow(testWin, nil)
	DecodeReply(tg.Handle(goodSum(1), make([]byte, 0, 512)), &d)
	if d.Status != StatusOutOfWindow {
		t.Fatal(d.Err())
	}
}

// Handle from several goroutines, with windows added and removed meanwhile:
// every SUM is applied exactly once (run with -race).
func TestConcurrent(t *testing.T) {
	tg := NewTarget()
	w := make([]int64, 4)
	tg.AddWindow(1, datatype.AsBytes(w))
	const G, N = 4, 2000
	var wg sync.WaitGroup
	for g := 0; g < G; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := encode(t, Request{Kind: KindAccumulate, Op: op.Sum, Window: 1, Disp: 8, Type: datatype.Int64.Type(), Count: 1, Data: datatype.AsBytes([]int64{1})})
			buf := make([]byte, 0, 64)
			for i := 0; i < N; i++ {
				var d Reply
				if err := DecodeReply(tg.Handle(msg, buf), &d); err != nil || d.Status != StatusOK {
					t.Error(err, d.Err())
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 500; i++ {
			tg.AddWindow(uint32(100+i%5), make([]byte, 8))
			tg.RemoveWindow(uint32(100 + (i+2)%5))
			_ = tg.Rejected()
		}
	}()
	wg.Wait()
	if w[1] != G*N {
		t.Fatalf("sum %d, want %d", w[1], G*N)
	}
}

func TestCheck(t *testing.T) {
	vec := must(datatype.Vector(2, 1, 2, f64))
	overlap := must(datatype.Resized(vec, 0, 16))
	cases := []struct {
		kind  Kind
		o     op.Op
		t     datatype.Type
		count int
		disp  int64
		want  Status
	}{
		{KindAccumulate, op.Sum, vec, 2, 0, StatusOK},
		{KindGetAccumulate, op.NoOp, overlap, 2, 0, StatusOK},
		{KindCompareAndSwap, 0, datatype.Int64.Type(), 1, 56, StatusOK},
		{0, op.Sum, vec, 1, 0, StatusMalformed},
		{KindAccumulate, op.Sum, datatype.Type{}, 1, 0, StatusBadLayout},
		{KindAccumulate, op.NoOp, vec, 1, 0, StatusOpUse},
		{KindAccumulate, op.Band, vec, 1, 0, StatusOpDatatype},
		{KindAccumulate, 77, vec, 1, 0, StatusUnknownOp},
		{KindCompareAndSwap, 0, f64, 1, 0, StatusOpDatatype},
		{KindCompareAndSwap, 0, datatype.Int64.Type(), 2, 0, StatusBadLayout},
		{KindAccumulate, op.Sum, vec, -1, 0, StatusBadLayout},
		{KindAccumulate, op.Sum, vec, 3, 0, StatusOutOfWindow},
		{KindAccumulate, op.Sum, vec, 1, -8, StatusOutOfWindow},
		{KindAccumulate, op.Sum, vec, 1, math.MaxInt64, StatusOutOfWindow},
		{KindAccumulate, op.Sum, overlap, 2, 0, StatusOverlap},
	}
	for i, c := range cases {
		err := Check(c.kind, c.o, c.t, c.count, c.disp, 64)
		var e *Error
		if c.want == StatusOK && err != nil || c.want != StatusOK && (!errors.As(err, &e) || e.Status != c.want) {
			t.Errorf("%d: %v, want %v", i, err, c.want)
		}
	}
}

// Random requests on random layouts: the target agrees with op.ApplyType
// on a copy of the window, or refuses and leaves it untouched.
func TestHandleRandomAgainstApplyType(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	ops := []op.Op{op.Sum, op.Max, op.Replace, op.NoOp, op.Prod}
	for it := 0; it < 2000; it++ {
		typ, count := randomLayout(rng, f64)
		o := ops[rng.Intn(len(ops))]
		kind := KindGetAccumulate
		if o != op.NoOp && rng.Intn(2) == 0 {
			kind = KindAccumulate
		}
		mem := make([]byte, 1024)
		rng.Read(mem)
		for i := 0; i < len(mem); i += 8 {
			mem[i+7] = 0x40 // finite floats
		}
		disp := int64(rng.Intn(1100)) - 50
		data := make([]byte, int64(count)*typ.Size())
		for i := 0; i < len(data); i += 8 {
			le.PutUint64(data[i:], math.Float64bits(float64(rng.Intn(100))))
		}
		r := Request{Kind: kind, Op: o, Window: 1, Tag: uint32(it), Disp: disp, Type: typ, Count: count, Data: data}
		msg, err := AppendRequest(nil, &r)
		if err != nil {
			t.Fatal(err)
		}
		ref := slices.Clone(mem)
		var res []byte
		if kind == KindGetAccumulate {
			res = make([]byte, len(data))
		}
		refErr := op.ApplyType(o, typ, count, ref, disp, data, res)
		tg := NewTarget()
		tg.AddWindow(1, mem)
		var d Reply
		if err := DecodeReply(tg.Handle(msg, make([]byte, 0, 8192)), &d); err != nil {
			t.Fatal(err)
		}
		if refErr != nil {
			if d.Status != statusOf(refErr) {
				t.Fatalf("%d: %v, reference %v", it, d.Err(), refErr)
			}
			continue
		}
		if d.Status != StatusOK || !bytes.Equal(mem, ref) || kind == KindGetAccumulate && !bytes.Equal(d.Data, res) {
			t.Fatalf("%d: %v %v count %d disp %d: %v", it, o, typ, count, disp, d.Err())
		}
	}
}

// randomLayout returns a random small datatype built from b and a count.
func randomLayout(rng *rand.Rand, b datatype.Type) (datatype.Type, int) {
	var t datatype.Type
	var err error
	switch rng.Intn(7) {
	case 0:
		t = b
	case 1:
		t, err = datatype.Vector(1+rng.Intn(5), 1+rng.Intn(3), rng.Intn(9)-4, b)
	case 2:
		n := 1 + rng.Intn(6)
		d := make([]int, n)
		for i := range d {
			d[i] = rng.Intn(30)
		}
		t, err = datatype.IndexedBlock(1+rng.Intn(2), d, b)
	case 3:
		sz := []int{1 + rng.Intn(4), 1 + rng.Intn(5)}
		sub := []int{rng.Intn(sz[0] + 1), rng.Intn(sz[1] + 1)}
		st := []int{rng.Intn(sz[0] - sub[0] + 1), rng.Intn(sz[1] - sub[1] + 1)}
		t, err = datatype.Subarray(sz, sub, st, datatype.Order(rng.Intn(2)), b)
	case 4:
		var v datatype.Type
		v, err = datatype.Vector(1+rng.Intn(3), 1, 2, b)
		if err == nil {
			t, err = datatype.Resized(v, int64(rng.Intn(5)-2)*8, int64(rng.Intn(6))*8)
		}
	case 5:
		n := 1 + rng.Intn(5)
		l, d := make([]int, n), make([]int, n)
		for i := range d {
			l[i], d[i] = rng.Intn(3), rng.Intn(200)-40
		}
		t, err = datatype.Hindexed(l, d, b)
	case 6:
		t, err = datatype.Contiguous(rng.Intn(5), b)
	}
	if err != nil {
		panic(fmt.Sprint(err))
	}
	return t, rng.Intn(4)
}

// Repeated derived layouts are decoded once; the cache stays bounded and
// never lets a request through that would be refused.
func TestHandleTypeCache(t *testing.T) {
	tg, w := newTestTarget(64)
	vec := must(datatype.Vector(4, 1, 2, f64))
	msg := encode(t, Request{Kind: KindAccumulate, Op: op.Sum, Window: testWin, Disp: 0, Type: vec, Count: 1, Data: f64s(1, 1, 1, 1)})
	buf := make([]byte, 0, 512)
	tg.Handle(msg, buf)
	if n := testing.AllocsPerRun(50, func() { tg.Handle(msg, buf) }); n != 0 {
		t.Errorf("%v allocations for a cached layout", n)
	}
	if calls := w[0] - 1; calls < 51 || w[2] != 3+calls || w[4] != 5+calls || w[6] != 7+calls || w[1] != 2 || w[8] != 9 {
		t.Fatalf("window %v", w[:8])
	}
	// The same encoding under another basic datatype in the header.
	bad := slices.Clone(msg)
	bad[offBasic] = byte(datatype.Int64)
	before := slices.Clone(w)
	var d Reply
	DecodeReply(tg.Handle(bad, buf), &d)
	if d.Status != StatusBadLayout || !slices.Equal(w, before) {
		t.Fatalf("%v", d.Err())
	}
	// Many distinct layouts: bounded, still right.
	for i := 1; i <= 3*typeCacheEntries; i++ {
		v := must(datatype.Vector(2, 1, 1+i%500, f64))
		r := Request{Kind: KindAccumulate, Op: op.Sum, Window: testWin, Disp: int64(i % 8 * 8), Type: v, Count: 1, Data: f64s(0, 0)}
		if i%500 > 50 {
			r.Disp = 0
			r.Count = 0
			r.Data = nil
		}
		DecodeReply(tg.Handle(encode(t, r), buf), &d)
		if d.Status != StatusOK {
			t.Fatalf("%d: %v", i, d.Err())
		}
		if len(tg.types) > typeCacheEntries || tg.typesBytes > typeCacheBytes {
			t.Fatalf("cache of %d entries, %d bytes", len(tg.types), tg.typesBytes)
		}
	}
	if !slices.Equal(w, before) {
		t.Fatal("zero additions changed the window")
	}
}

// A user-defined op that panics at the target is refused with StatusOpFailed,
// whose error wraps op.ErrInvalid (as op's doc says of a panic), and the
// target keeps serving.
func TestHandleUserOpPanic(t *testing.T) {
	boom, err := op.Register("fallback-test-boom", func(in, inout []float64) { panic("boom") }, true)
	if err != nil {
		t.Fatal(err)
	}
	defer op.Free(boom)
	tg, w := newTestTarget(4)
	var r Reply
	if err := DecodeReply(tg.Handle(raw(KindAccumulate, boom, datatype.Float64, testWin, 42, 1, 8, nil, f64s(1)), make([]byte, 0, 1024)), &r); err != nil {
		t.Fatal(err)
	}
	if err := r.Err(); r.Status != StatusOpFailed || !errors.Is(err, op.ErrInvalid) || !errors.Is(err, ErrOpFailed) || !errors.Is(err, ErrRemoteRejected) {
		t.Fatalf("panicking op: status %v, %v; want OpFailed wrapping op.ErrInvalid", r.Status, err)
	}
	if err := DecodeReply(tg.Handle(goodSum(43), make([]byte, 0, 64)), &r); err != nil || r.Status != StatusOK || w[1] != 102 {
		t.Fatalf("after the panic: %v, %v, window %v", err, r.Status, w)
	}
}
