package fallback

import (
	"bytes"
	"errors"
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
)

func pieces(tb testing.TB, disp int64, t datatype.Type, count, maxMsg int) []Piece {
	tb.Helper()
	var ps []Piece
	if err := Split(disp, t, count, maxMsg, func(p Piece) error { ps = append(ps, p); return nil }); err != nil {
		tb.Fatalf("Split(%d, %v, %d, %d): %v", disp, t, count, maxMsg, err)
	}
	return ps
}

// elemOffsets returns the byte offset of every element of count instances
// of t, the first at base, in type-map order.
func elemOffsets(t datatype.Type, count int, base int64) []int64 {
	var offs []int64
	es := int64(t.Basic().Size())
	t.ForEachBlock(count, func(off int64, n int) bool {
		for i := 0; i < n; i++ {
			offs = append(offs, base+off+int64(i)*es)
		}
		return true
	})
	return offs
}

// checkPieces checks the framing of the pieces of count instances of t at
// disp: consecutive element ranges covering the whole, each request within
// maxMsg, and (expand) the same element offsets in the same order.
func checkPieces(tb testing.TB, disp int64, t datatype.Type, count, maxMsg int, ps []Piece, expand bool) {
	tb.Helper()
	var next int64
	es := int64(t.Basic().Size())
	var got []int64
	for i, p := range ps {
		if p.Elem != next || p.Elems <= 0 || p.Elems != int64(p.Count)*int64(p.Type.Count()) || p.Type.Basic() != t.Basic() {
			tb.Fatalf("piece %d: %+v, want elements from %d", i, p, next)
		}
		next += p.Elems
		size := int64(RequestHeaderSize) + p.Elems*es
		if !isPredefined(p.Type) {
			size += int64(pad8(len(enc(p.Type))))
		}
		if size > int64(maxMsg) {
			tb.Fatalf("piece %d: request of %d bytes, max %d (%v)", i, size, maxMsg, p.Type)
		}
		if expand {
			got = append(got, elemOffsets(p.Type, p.Count, p.Disp)...)
		}
	}
	if total := int64(count) * int64(t.Count()); next != total {
		tb.Fatalf("pieces cover %d elements, want %d", next, total)
	}
	if expand {
		if want := elemOffsets(t, count, disp); !slices.Equal(got, want) {
			tb.Fatalf("pieces cover elements\n%v\nwant\n%v", got, want)
		}
	}
}

func TestSplitSmallContiguous(t *testing.T) {
	ps := pieces(t, 24, f64, 10, 64<<10)
	if len(ps) != 1 || ps[0] != (Piece{Disp: 24, Type: f64, Count: 10, Elem: 0, Elems: 10}) {
		t.Fatalf("%+v", ps)
	}
	// A contiguous derived type is sent as its predefined type.
	c := must(datatype.Contiguous(3, f64))
	ps = pieces(t, 0, c, 4, 64<<10)
	if len(ps) != 1 || ps[0].Type != f64 || ps[0].Count != 12 {
		t.Fatalf("%+v", ps)
	}
	// Nothing to do: no piece.
	if ps := pieces(t, 0, f64, 0, 64<<10); len(ps) != 0 {
		t.Fatal(ps)
	}
	if ps := pieces(t, 0, must(datatype.Contiguous(0, f64)), 5, 64<<10); len(ps) != 0 {
		t.Fatal(ps)
	}
}

func TestSplit64MiBContiguous(t *testing.T) {
	const total, maxMsg, disp = 64 << 20, 64 << 10, 4096
	n := total / 8
	per := (maxMsg - RequestHeaderSize) / 8
	ps := pieces(t, disp, f64, n, maxMsg)
	if want := (n + per - 1) / per; len(ps) != want {
		t.Fatalf("%d pieces, want %d", len(ps), want)
	}
	var elem int64
	for i, p := range ps {
		if p.Type != f64 || p.Elem != elem || p.Disp != disp+elem*8 || p.Elems != int64(p.Count) ||
			(i < len(ps)-1 && p.Count != per) || RequestHeaderSize+p.Elems*8 > maxMsg {
			t.Fatalf("piece %d: %+v", i, p)
		}
		elem += p.Elems
	}
	if elem != int64(n) {
		t.Fatalf("%d elements", elem)
	}
	// Also as a contiguous derived type with count 1.
	c := must(datatype.Contiguous(n, f64))
	if ps2 := pieces(t, disp, c, 1, maxMsg); !slices.Equal(ps, ps2) {
		t.Fatal("contiguous type split differently")
	}
	allocs := testing.AllocsPerRun(5, func() { Split(disp, f64, n, maxMsg, func(Piece) error { return nil }) })
	if allocs > 5 {
		t.Errorf("%v allocations for a contiguous split", allocs)
	}
}

func TestSplitVectorWholeInstances(t *testing.T) {
	vec := must(datatype.Vector(100, 3, 5, f64)) // 300 elements, 2400 bytes
	ps := pieces(t, 8, vec, 1000, 64<<10)
	perPiece := (64<<10 - RequestHeaderSize - pad8(len(enc(vec)))) / 2400
	for i, p := range ps {
		if !p.Type.Equal(vec) || p.Disp != 8+int64(i*perPiece)*vec.Extent() || (i < len(ps)-1 && p.Count != perPiece) {
			t.Fatalf("piece %d: %+v", i, p)
		}
	}
	checkPieces(t, 8, vec, 1000, 64<<10, ps, true)
}

func TestSplitHugeInstance(t *testing.T) {
	// One instance of 2^19 float64, in runs of 2 every 3: Hvector pieces.
	vec := must(datatype.Vector(1<<18, 2, 3, f64))
	ps := pieces(t, 0, vec, 1, 64<<10)
	for i, p := range ps {
		if p.Count != 1 || len(p.Type.Blocks()) > 1 && len(enc(p.Type)) > hvectorEncBound {
			t.Fatalf("piece %d: %v", i, p.Type)
		}
	}
	if want := (1<<19 + 8181) / 8182; len(ps) != want {
		t.Errorf("%d pieces, want %d", len(ps), want)
	}
	checkPieces(t, 0, vec, 1, 64<<10, ps, true)

	// Count 3 of a huge instance with long runs (cut across pieces).
	v2 := must(datatype.Vector(40, 1000, 1500, f64))
	ps = pieces(t, 16, v2, 3, 4096)
	checkPieces(t, 16, v2, 3, 4096, ps, true)

	// Irregular: an indexed block of 20000 random displacements.
	rng := rand.New(rand.NewSource(2))
	d := rng.Perm(50000)[:20000]
	ib := must(datatype.IndexedBlock(1, d, f64))
	ps = pieces(t, 0, ib, 1, 64<<10)
	checkPieces(t, 0, ib, 1, 64<<10, ps, true)
	if len(ps) > 4 {
		t.Errorf("%d pieces for 160 KB of data and indexed overhead", len(ps))
	}
}

func TestSplitRandom(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	basics := []datatype.Type{f64, datatype.Uint8.Type(), datatype.Complex128.Type(), datatype.Int16.Type()}
	for it := 0; it < 3000; it++ {
		b := basics[rng.Intn(len(basics))]
		typ, count := randomLayout(rng, b)
		if rng.Intn(4) == 0 {
			big, err := datatype.Contiguous(1+rng.Intn(40), typ)
			if err != nil {
				t.Fatal(err)
			}
			typ = big
		}
		maxMsg := RequestHeaderSize + int(b.Size())*(1+rng.Intn(20))
		if rng.Intn(3) == 0 {
			maxMsg = 64 + rng.Intn(2000)
		}
		disp := int64(rng.Intn(1000))
		ps := pieces(t, disp, typ, count, maxMsg)
		checkPieces(t, disp, typ, count, maxMsg, ps, true)
	}
}

func TestSplitErrors(t *testing.T) {
	nop := func(Piece) error { return nil }
	cases := []struct {
		name string
		err  error
		want Status
	}{
		{"invalid type", Split(0, datatype.Type{}, 1, 4096, nop), StatusBadLayout},
		{"negative count", Split(0, f64, -1, 4096, nop), StatusBadLayout},
		{"message too small", Split(0, f64, 1, RequestHeaderSize+7, nop), StatusTooLarge},
		{"displacement overflow", Split(math.MaxInt64-8, f64, 2, 4096, nop), StatusOutOfWindow},
		{"count overflow", Split(0, must(datatype.Resized(f64, 0, math.MaxInt64/2)), 3, 4096, nop), StatusBadLayout},
	}
	for _, c := range cases {
		var e *Error
		if !errors.As(c.err, &e) || e.Status != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	stop := errors.New("stop")
	n := 0
	err := Split(0, f64, 1<<20, 4096, func(Piece) error {
		n++
		if n == 3 {
			return stop
		}
		return nil
	})
	if err != stop || n != 3 {
		t.Errorf("fn error: %v after %d pieces", err, n)
	}
	if err := Split(0, f64, 1, RequestHeaderSize+8, nop); err != nil {
		t.Errorf("smallest message: %v", err)
	}
	// maxMsg beyond MaxMessage is clamped.
	ps := pieces(t, 0, datatype.Uint8.Type(), MaxMessage, 1<<30)
	if len(ps) != 2 || ps[0].Elems != MaxMessage-RequestHeaderSize {
		t.Errorf("clamp: %+v", ps)
	}
}

func TestPackUnpackRange(t *testing.T) {
	rng := rand.New(rand.NewSource(4))
	for it := 0; it < 2000; it++ {
		typ, count := randomLayout(rng, f64)
		lo, hi, _ := typ.Bounds(count)
		shift := max(0, -lo)
		src := make([]byte, shift+max(hi, 0)+8)
		rng.Read(src)
		base := src[shift:]
		if lo < 0 {
			// Buffers start at the first instance: shift the layout
			// instead.
			var err error
			if typ, err = datatype.Resized(must(datatype.Hindexed([]int{1}, []int{int(shift)}, typ)), 0, typ.Extent()); err != nil {
				t.Fatal(err)
			}
			base = src
		}
		whole, err := datatype.AppendPack(nil, base, count, typ)
		if err != nil {
			t.Fatal(err)
		}
		total := int64(len(whole) / 8)
		elem := rng.Int63n(total + 1)
		elems := rng.Int63n(total - elem + 1)
		got, err := AppendPackRange([]byte("x"), base, typ, count, elem, elems)
		if err != nil || !bytes.Equal(got[1:], whole[elem*8:(elem+elems)*8]) || got[0] != 'x' {
			t.Fatalf("%v x%d [%d,+%d): %v", typ, count, elem, elems, err)
		}
		if typ.OverlapsN(count) {
			continue
		}
		// Unpack the range into a zeroed copy: exactly those elements change.
		dst := make([]byte, len(base))
		if err := UnpackRange(dst, typ, count, elem, got[1:]); err != nil {
			t.Fatal(err)
		}
		repacked, _ := datatype.AppendPack(nil, dst, count, typ)
		want := make([]byte, len(whole))
		copy(want[elem*8:], whole[elem*8:(elem+elems)*8])
		if !bytes.Equal(repacked, want) {
			t.Fatalf("%v x%d [%d,+%d): unpacked %v", typ, count, elem, elems, repacked)
		}
	}
	// Errors.
	vec := must(datatype.Vector(2, 1, 2, f64))
	buf := make([]byte, 64)
	if _, err := AppendPackRange(nil, buf, vec, 2, 3, 2); !errors.Is(err, ErrLength) {
		t.Error(err)
	}
	if _, err := AppendPackRange(nil, buf, vec, 2, -1, 1); !errors.Is(err, ErrLength) {
		t.Error(err)
	}
	if _, err := AppendPackRange(nil, buf[:20], vec, 2, 0, 1); !errors.Is(err, datatype.ErrOutOfRange) {
		t.Error(err)
	}
	if err := UnpackRange(buf, vec, 2, 0, make([]byte, 7)); !errors.Is(err, ErrLength) {
		t.Error(err)
	}
	if err := UnpackRange(buf, vec, 2, 2, make([]byte, 24)); !errors.Is(err, ErrLength) {
		t.Error(err)
	}
}

// Applying an accumulate piece by piece through a Target gives the same
// window and the same old values as applying it whole.
func TestSplitApplyEquivalence(t *testing.T) {
	type tc struct {
		name   string
		t      datatype.Type
		count  int
		disp   int64
		maxMsg int
		origin datatype.Type // of the origin and result buffers (same signature)
	}
	var cases []tc
	add := func(name string, t datatype.Type, count int, disp int64, maxMsg int, origin datatype.Type) {
		cases = append(cases, tc{name, t, count, disp, maxMsg, origin})
	}
	n := 1 << 16
	add("contiguous", f64, n, 8, 4096, f64)
	add("contiguous from strided origin", f64, n, 8, 4096, must(datatype.Resized(f64, 0, 16)))
	add("vector count>1", must(datatype.Vector(50, 3, 5, f64)), 40, 0, 2048, f64)
	add("huge vector instance", must(datatype.Vector(20000, 2, 3, f64)), 1, 16, 4096, f64)
	add("huge vector, vector origin", must(datatype.Vector(20000, 2, 3, f64)), 1, 16, 4096, must(datatype.Vector(40000, 1, 2, f64)))
	add("negative stride", must(datatype.Vector(3000, 1, -2, f64)), 2, 8*7000, 1024, f64)
	add("subarray", must(datatype.Subarray([]int{64, 80}, []int{60, 70}, []int{2, 5}, datatype.OrderC, f64)), 2, 0, 4096, f64)
	displs := rand.New(rand.NewSource(5)).Perm(20000)[:5000]
	for i := range displs {
		displs[i] *= 2
	}
	add("indexed", must(datatype.IndexedBlock(2, displs, f64)), 1, 0, 4096, f64)
	add("tiny messages", must(datatype.Vector(100, 3, 4, f64)), 3, 0, RequestHeaderSize+8, f64)

	for _, c := range cases {
		for _, kind := range []Kind{KindAccumulate, KindGetAccumulate} {
			for _, o := range []op.Op{op.Sum, op.NoOp} {
				if kind == KindAccumulate && o == op.NoOp {
					continue
				}
				_, hi, _ := c.t.Bounds(c.count)
				winLen := (c.disp + hi + 64) &^ 7
				win := make([]float64, winLen/8)
				for i := range win {
					win[i] = float64(i % 1000)
				}
				ref := slices.Clone(win)
				total := c.count * c.t.Count()
				ocount := total / c.origin.Count()
				_, ohi, _ := c.origin.Bounds(ocount)
				origin := make([]float64, ohi/8)
				for i := range origin {
					origin[i] = float64(i%97) + 0.5
				}
				packedOrigin, err := datatype.AppendPack(nil, datatype.AsBytes(origin), ocount, c.origin)
				if err != nil {
					t.Fatal(err)
				}
				var refOld []byte
				if kind == KindGetAccumulate {
					refOld = make([]byte, total*8)
				}
				data := packedOrigin
				if o == op.NoOp {
					data = nil
				}
				if err := op.ApplyType(o, c.t, c.count, datatype.AsBytes(ref), c.disp, data, refOld); err != nil {
					t.Fatal(err)
				}
				if err := Check(kind, o, c.t, c.count, c.disp, int64(len(ref)*8)); err != nil {
					t.Fatal(err)
				}

				tg := NewTarget()
				tg.AddWindow(2, datatype.AsBytes(win))
				result := make([]float64, len(origin))
				sendBuf := make([]byte, 0, c.maxMsg)
				replyBuf := make([]byte, 0, c.maxMsg)
				req := Request{Kind: kind, Op: o, Window: 2}
				np := 0
				err = Split(c.disp, c.t, c.count, c.maxMsg, func(p Piece) error {
					req.Tag = uint32(np)
					np++
					msg, err := AppendPiece(sendBuf[:0], &req, p, datatype.AsBytes(origin), c.origin, ocount)
					if err != nil {
						return err
					}
					if len(msg) > c.maxMsg || cap(msg) != c.maxMsg {
						t.Fatalf("%s: message of %d bytes (buffer %d)", c.name, len(msg), c.maxMsg)
					}
					rep := tg.Handle(msg, replyBuf)
					if len(rep) > c.maxMsg {
						t.Fatalf("%s: reply of %d bytes", c.name, len(rep))
					}
					var d Reply
					if err := DecodeReply(rep, &d); err != nil {
						return err
					}
					if err := d.Err(); err != nil {
						return err
					}
					if d.Tag != req.Tag {
						t.Fatalf("tag %d, want %d", d.Tag, req.Tag)
					}
					if kind == KindGetAccumulate {
						if int64(len(d.Data)) != p.Elems*8 {
							t.Fatalf("%s: %d bytes of old values for %d elements", c.name, len(d.Data), p.Elems)
						}
						return UnpackRange(datatype.AsBytes(result), c.origin, ocount, p.Elem, d.Data)
					}
					return nil
				})
				if err != nil {
					t.Fatalf("%s %v %v: %v", c.name, kind, o, err)
				}
				if !slices.Equal(win, ref) {
					t.Errorf("%s %v %v: windows differ", c.name, kind, o)
				}
				if kind == KindGetAccumulate {
					want := make([]float64, len(origin))
					if err := datatype.Unpack(datatype.AsBytes(want), refOld, ocount, c.origin); err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(result, want) {
						t.Errorf("%s %v: results differ", c.name, o)
					}
				}
				if testing.Verbose() && kind == KindAccumulate {
					t.Logf("%s: %d elements, %d pieces of at most %d bytes", c.name, total, np, c.maxMsg)
				}
			}
		}
	}
}

func TestAppendPieceErrors(t *testing.T) {
	origin := make([]byte, 80)
	r := Request{Kind: KindAccumulate, Op: op.Sum, Window: 1}
	p := Piece{Disp: 0, Type: f64, Count: 10, Elem: 0, Elems: 10}
	if _, err := AppendPiece(nil, &r, p, origin, f64, 10); err != nil {
		t.Fatal(err)
	}
	bad := []struct {
		name string
		r    Request
		p    Piece
		ot   datatype.Type
		oc   int
		want error
	}{
		{"cas", Request{Kind: KindCompareAndSwap}, p, f64, 10, ErrBadLayout},
		{"kind", Request{Kind: 0, Op: op.Sum}, p, f64, 10, ErrMalformed},
		{"elems", r, Piece{Type: f64, Count: 10, Elems: 9}, f64, 10, ErrLength},
		{"basic", r, p, datatype.Int64.Type(), 10, ErrLength},
		{"range", r, Piece{Type: f64, Count: 10, Elem: 1, Elems: 10}, f64, 10, ErrLength},
		{"origin too short", r, p, f64, 11, datatype.ErrOutOfRange},
		{"invalid type", r, Piece{Count: 1, Elems: 0}, f64, 10, ErrBadLayout},
	}
	for _, c := range bad {
		out, err := AppendPiece([]byte("ab"), &c.r, c.p, origin, c.ot, c.oc)
		if !errors.Is(err, c.want) || string(out) != "ab" {
			t.Errorf("%s: %v %q", c.name, err, out)
		}
	}
	// NO_OP sends no data.
	r.Kind, r.Op = KindGetAccumulate, op.NoOp
	msg, err := AppendPiece(nil, &r, p, nil, f64, 10)
	if err != nil || len(msg) != RequestHeaderSize {
		t.Errorf("NO_OP piece: %d bytes, %v", len(msg), err)
	}
}
