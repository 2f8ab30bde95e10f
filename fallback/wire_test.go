package fallback

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
)

var f64 = datatype.Float64.Type()

func must(t datatype.Type, err error) datatype.Type {
	if err != nil {
		panic(err)
	}
	return t
}

func f64s(v ...float64) []byte { return datatype.AsBytes(v) }

// sampleRequests covers every field with non-trivial values.
func sampleRequests() []Request {
	vec := must(datatype.Vector(3, 2, 4, f64))
	ib := must(datatype.IndexedBlock(1, []int{7, 2, 3, 9}, datatype.Int32.Type()))
	sub := must(datatype.Subarray([]int{4, 6}, []int{2, 3}, []int{1, 2}, datatype.OrderC, datatype.Uint8.Type()))
	res := must(datatype.Resized(vec, -16, 200))
	return []Request{
		{Kind: KindAccumulate, Op: op.Sum, Window: 1, Tag: 2, Disp: 8, Type: f64, Count: 1, Data: f64s(1.5)},
		{Kind: KindAccumulate, Op: op.Max, Window: math.MaxUint32, Tag: math.MaxUint32, Disp: math.MaxInt64, Type: f64, Count: 3, Data: f64s(1, 2, 3)},
		{Kind: KindAccumulate, Op: op.Replace, Window: 0, Tag: 0, Disp: math.MinInt64, Type: vec, Count: 2, Data: make([]byte, 2*vec.Size())},
		{Kind: KindGetAccumulate, Op: op.Bxor, Window: 7, Tag: 99, Disp: -4, Type: ib, Count: 1, Data: make([]byte, ib.Size())},
		{Kind: KindGetAccumulate, Op: op.NoOp, Window: 7, Tag: 100, Disp: 0, Type: sub, Count: 5},
		{Kind: KindGetAccumulate, Op: op.NoOp, Window: 7, Tag: 101, Disp: 0, Type: sub, Count: 1, Data: make([]byte, sub.Size())},
		{Kind: KindGetAccumulate, Op: op.Prod, Window: 3, Tag: 5, Disp: 1 << 40, Type: res, Count: 3, Data: make([]byte, 3*res.Size())},
		{Kind: KindAccumulate, Op: op.Sum, Window: 3, Tag: 5, Disp: 0, Type: f64, Count: 0},
		{Kind: KindCompareAndSwap, Window: 4, Tag: 8, Disp: 16, Type: datatype.Int64.Type(), Count: 1, Data: datatype.AsBytes([]int64{1, 2})},
		{Kind: KindAccumulate, Op: op.Maxloc, Window: 4, Tag: 8, Disp: 16, Type: datatype.Float64Int.Type(), Count: 2,
			Data: datatype.AsBytes([]datatype.PairFloat64Int{{V: 1, I: 2}, {V: 3, I: 4}})},
	}
}

func sameRequest(a, b *Request) bool {
	return a.Kind == b.Kind && a.Op == b.Op && a.Window == b.Window && a.Tag == b.Tag && a.Disp == b.Disp &&
		a.Type.Equal(b.Type) && a.Count == b.Count && bytes.Equal(a.Data, b.Data)
}

func TestRequestRoundTrip(t *testing.T) {
	for i, r := range sampleRequests() {
		for j := range r.Data {
			r.Data[j] = byte(i + j)
		}
		prefix := []byte("xyz")
		enc, err := AppendRequest(prefix, &r)
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if string(enc[:3]) != "xyz" {
			t.Fatalf("%d: prefix clobbered", i)
		}
		msg := enc[3:]
		if (len(msg)-len(r.Data))%8 != 0 {
			t.Errorf("%d: data at offset %d, not 8-aligned", i, len(msg)-len(r.Data))
		}
		if isPredefined(r.Type) && len(msg) != RequestHeaderSize+len(r.Data) {
			t.Errorf("%d: predefined request of %d bytes", i, len(msg))
		}
		var d Request
		if err := DecodeRequest(msg, &d); err != nil {
			t.Fatalf("%d: decode: %v", i, err)
		}
		if !sameRequest(&r, &d) {
			t.Fatalf("%d: decoded %+v, want %+v", i, d, r)
		}
		if isPredefined(r.Type) && d.Type != r.Type {
			t.Errorf("%d: predefined type not restored as such", i)
		}
		if len(d.Data) > 0 && &d.Data[0] != &msg[len(msg)-len(d.Data)] {
			t.Errorf("%d: Data does not alias the message", i)
		}
		again, err := AppendRequest(nil, &d)
		if err != nil || !bytes.Equal(again, msg) {
			t.Errorf("%d: re-encoding differs (%v)", i, err)
		}
		if want := r.ReplyLen(); r.Kind == KindAccumulate && want != ReplyHeaderSize ||
			r.Kind == KindGetAccumulate && want != ReplyHeaderSize+int64(r.Count)*r.Type.Size() ||
			r.Kind == KindCompareAndSwap && want != ReplyHeaderSize+8 {
			t.Errorf("%d: ReplyLen %d", i, want)
		}
	}
}

// The op is not sent for compare-and-swap.
func TestCompareAndSwapOpNotSent(t *testing.T) {
	r := Request{Kind: KindCompareAndSwap, Op: op.Sum, Type: datatype.Int32.Type(), Count: 1, Data: make([]byte, 8)}
	msg, err := AppendRequest(nil, &r)
	if err != nil {
		t.Fatal(err)
	}
	var d Request
	if err := DecodeRequest(msg, &d); err != nil || d.Op != 0 || msg[offOp] != 0 {
		t.Fatalf("op %v, byte %d, %v", d.Op, msg[offOp], err)
	}
}

func TestAppendRequestErrors(t *testing.T) {
	vec := must(datatype.Vector(3, 2, 4, f64))
	big := must(datatype.Contiguous(1<<22, f64))
	cases := []struct {
		name string
		r    Request
		want Status
	}{
		{"unknown kind", Request{Kind: 9, Op: op.Sum, Type: f64, Count: 1, Data: f64s(1)}, StatusMalformed},
		{"zero kind", Request{Op: op.Sum, Type: f64, Count: 1, Data: f64s(1)}, StatusMalformed},
		{"invalid type", Request{Kind: KindAccumulate, Op: op.Sum, Count: 1, Data: f64s(1)}, StatusBadLayout},
		{"negative count", Request{Kind: KindAccumulate, Op: op.Sum, Type: f64, Count: -1}, StatusBadLayout},
		{"count too big", Request{Kind: KindAccumulate, Op: op.Sum, Type: f64}, StatusBadLayout},
		{"short data", Request{Kind: KindAccumulate, Op: op.Sum, Type: f64, Count: 2, Data: f64s(1)}, StatusLength},
		{"long data", Request{Kind: KindAccumulate, Op: op.Sum, Type: vec, Count: 1, Data: make([]byte, vec.Size()+1)}, StatusLength},
		{"no data for SUM", Request{Kind: KindGetAccumulate, Op: op.Sum, Type: f64, Count: 2}, StatusLength},
		{"no data for Accumulate", Request{Kind: KindAccumulate, Op: op.NoOp, Type: f64, Count: 2}, StatusLength},
		{"cas derived", Request{Kind: KindCompareAndSwap, Type: vec, Count: 1, Data: make([]byte, 16)}, StatusBadLayout},
		{"cas count", Request{Kind: KindCompareAndSwap, Type: f64, Count: 2, Data: make([]byte, 16)}, StatusBadLayout},
		{"cas data", Request{Kind: KindCompareAndSwap, Type: f64, Count: 1, Data: make([]byte, 8)}, StatusLength},
		{"too large", Request{Kind: KindAccumulate, Op: op.Sum, Type: big, Count: 1, Data: make([]byte, big.Size())}, StatusTooLarge},
		{"too many", Request{Kind: KindAccumulate, Op: op.Sum, Type: big, Count: 1 << 20}, StatusTooLarge},
	}
	for _, c := range cases {
		if c.name == "count too big" {
			tooBig := int64(MaxCount) + 1
			c.r.Count = int(tooBig) // negative where int is 32 bits: refused too
		}
		dst := []byte("abc")
		out, err := AppendRequest(dst, &c.r)
		var e *Error
		if !errors.As(err, &e) || e.Status != c.want || e.Remote {
			t.Errorf("%s: %v, want status %v", c.name, err, c.want)
		}
		if string(out) != "abc" {
			t.Errorf("%s: dst modified: %q", c.name, out)
		}
		if !errors.Is(err, statusInfos[c.want].err) || errors.Is(err, ErrRemoteRejected) {
			t.Errorf("%s: %v does not wrap the right sentinels", c.name, err)
		}
	}
}

func TestReplyRoundTrip(t *testing.T) {
	cases := []Reply{
		{Tag: 1, Status: StatusOK},
		{Tag: math.MaxUint32, Status: StatusOK, Data: f64s(1, 2, 3)},
		{Tag: 5, Status: StatusOutOfWindow, Data: []byte("bytes [8, 16) not within [0, 8)")},
	}
	for i, r := range cases {
		enc := AppendReply([]byte("p"), &r)
		var d Reply
		if err := DecodeReply(enc[1:], &d); err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if d.Tag != r.Tag || d.Status != r.Status || !bytes.Equal(d.Data, r.Data) {
			t.Errorf("%d: %+v, want %+v", i, d, r)
		}
		if (d.Err() == nil) != (r.Status == StatusOK) {
			t.Errorf("%d: Err %v", i, d.Err())
		}
	}
	// A long reason is truncated to MaxReason.
	r := Reply{Tag: 1, Status: StatusMalformed, Data: bytes.Repeat([]byte("x"), 1000)}
	enc := AppendReply(nil, &r)
	var d Reply
	if err := DecodeReply(enc, &d); err != nil || len(d.Data) != MaxReason {
		t.Errorf("long reason: %d bytes, %v", len(d.Data), err)
	}
	// The reason is sanitised.
	d = Reply{Status: StatusMalformed, Data: []byte("a\x00b\xffc\n")}
	if msg := d.Err().Error(); !strings.HasSuffix(msg, ": a?b?c?") {
		t.Errorf("sanitised reason: %q", msg)
	}
}

func TestDecodeReplyErrors(t *testing.T) {
	good := AppendReply(nil, &Reply{Tag: 3, Status: StatusOK, Data: f64s(1)})
	mod := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrMalformed},
		{"short", good[:ReplyHeaderSize-1], ErrMalformed},
		{"truncated data", good[:len(good)-1], ErrMalformed},
		{"trailing", append(append([]byte(nil), good...), 0), ErrMalformed},
		{"version", mod(func(b []byte) []byte { b[0] = 2; return b }), ErrVersion},
		{"byte order", mod(func(b []byte) []byte { b[0] ^= bigEndianFlag; return b }), ErrVersion},
		{"status", mod(func(b []byte) []byte { b[roffStatus] = byte(numStatus); return b }), ErrMalformed},
		{"reserved", mod(func(b []byte) []byte { b[roffRsv] = 1; return b }), ErrMalformed},
		{"reserved2", mod(func(b []byte) []byte { b[roffRsv2+3] = 1; return b }), ErrMalformed},
		{"huge length", mod(func(b []byte) []byte { le.PutUint32(b[roffDataLen:], math.MaxUint32); return b }), ErrMalformed},
		{"long reason", AppendReply(nil, &Reply{Status: StatusOK, Data: make([]byte, MaxReason+1)}), nil},
	}
	bad := AppendReply(nil, &Reply{Status: StatusOK, Data: make([]byte, MaxReason+1)})
	bad[roffStatus] = byte(StatusLength)
	cases = append(cases, struct {
		name string
		b    []byte
		want error
	}{"long reason in error", bad, ErrMalformed})
	for _, c := range cases {
		var r Reply
		err := DecodeReply(c.b, &r)
		if c.want == nil {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func TestStatusErrors(t *testing.T) {
	if StatusOK.Err() != nil {
		t.Fatal("OK has an error")
	}
	extra := map[Status]error{
		StatusOverlap:     datatype.ErrOverlap,
		StatusOutOfWindow: datatype.ErrOutOfRange,
	}
	seen := map[string]bool{}
	for s := Status(1); s < numStatus; s++ {
		err := s.Err()
		if !errors.Is(err, ErrRemoteRejected) || !errors.Is(err, statusInfos[s].err) {
			t.Errorf("%v: %v does not wrap its sentinels", s, err)
		}
		if x := extra[s]; x != nil && !errors.Is(err, x) {
			t.Errorf("%v: %v does not wrap %v", s, err, x)
		}
		if !strings.HasPrefix(err.Error(), "fallback: target refused the request: ") {
			t.Errorf("%v: %q", s, err)
		}
		if seen[s.String()] || strings.HasPrefix(s.String(), "Status(") {
			t.Errorf("%v: bad name", s)
		}
		seen[s.String()] = true
		var e *Error
		if !errors.As(err, &e) || e.Status != s || !e.Remote {
			t.Errorf("%v: %#v", s, err)
		}
	}
	if !errors.Is(StatusOpDatatype.Err(), op.ErrOpDatatype) || !errors.Is(StatusOpUse.Err(), op.ErrOpUse) || !errors.Is(StatusOpFailed.Err(), op.ErrInvalid) {
		t.Error("op sentinels")
	}
	if numStatus.String() != "Status(13)" || numStatus.Valid() {
		t.Error("invalid status")
	}
	local := newError(StatusLength, "3 bytes")
	if local.Error() != "fallback: data length mismatch: 3 bytes" || errors.Is(local, ErrRemoteRejected) {
		t.Errorf("local error %q", local)
	}
}

func TestKindString(t *testing.T) {
	if KindAccumulate.String() != "Accumulate" || KindGetAccumulate.String() != "GetAccumulate" ||
		KindCompareAndSwap.String() != "CompareAndSwap" || Kind(0).String() != "Kind(0)" || Kind(4).Valid() {
		t.Error("kind names")
	}
}

func TestNoAllocs(t *testing.T) {
	r := Request{Kind: KindAccumulate, Op: op.Sum, Window: 1, Tag: 2, Disp: 8, Type: f64, Count: 1, Data: f64s(1.5)}
	buf := make([]byte, 0, 256)
	msg, _ := AppendRequest(nil, &r)
	var d Request
	rep := AppendReply(nil, &Reply{Tag: 1, Data: f64s(1)})
	var dr Reply
	tg := NewTarget()
	tg.AddWindow(1, make([]byte, 64))
	get := r
	get.Kind = KindGetAccumulate
	getMsg, _ := AppendRequest(nil, &get)
	cas := Request{Kind: KindCompareAndSwap, Window: 1, Type: datatype.Int64.Type(), Count: 1, Data: make([]byte, 16)}
	casMsg, _ := AppendRequest(nil, &cas)
	for name, f := range map[string]func(){
		"AppendRequest": func() { AppendRequest(buf[:0], &r) },
		"DecodeRequest": func() { DecodeRequest(msg, &d) },
		"AppendReply":   func() { AppendReply(buf[:0], &dr) },
		"DecodeReply":   func() { DecodeReply(rep, &dr) },
		"HandleSum":     func() { tg.Handle(msg, buf) },
		"HandleGetSum":  func() { tg.Handle(getMsg, buf) },
		"HandleCAS":     func() { tg.Handle(casMsg, buf) },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocations", name, n)
		}
	}
	if tg.Rejected() != 0 {
		t.Errorf("%d rejected", tg.Rejected())
	}
}
