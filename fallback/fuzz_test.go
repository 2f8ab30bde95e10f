package fallback

import (
	"bytes"
	"testing"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
)

// seeds returns valid requests of every kind and a few layouts, on window
// testWin of 64 bytes.
func seeds() [][]byte {
	vec := must(datatype.Vector(2, 1, 2, f64))
	ib := must(datatype.IndexedBlock(1, []int{3, 0, 5}, datatype.Int32.Type()))
	sub := must(datatype.Subarray([]int{4, 4}, []int{2, 2}, []int{1, 1}, datatype.OrderC, datatype.Uint8.Type()))
	rs := []Request{
		{Kind: KindAccumulate, Op: op.Sum, Window: testWin, Tag: 1, Disp: 8, Type: f64, Count: 1, Data: f64s(1)},
		{Kind: KindAccumulate, Op: op.Max, Window: testWin, Tag: 2, Disp: 0, Type: f64, Count: 3, Data: f64s(1, 2, 3)},
		{Kind: KindGetAccumulate, Op: op.Sum, Window: testWin, Tag: 3, Disp: 8, Type: vec, Count: 2, Data: f64s(1, 2, 3, 4)},
		{Kind: KindGetAccumulate, Op: op.NoOp, Window: testWin, Tag: 4, Disp: 4, Type: ib, Count: 1},
		{Kind: KindAccumulate, Op: op.Bxor, Window: testWin, Tag: 5, Disp: 3, Type: sub, Count: 2, Data: make([]byte, 8)},
		{Kind: KindCompareAndSwap, Window: testWin, Tag: 6, Disp: 16, Type: datatype.Int64.Type(), Count: 1, Data: make([]byte, 16)},
		{Kind: KindAccumulate, Op: op.Replace, Window: testWin, Tag: 7, Disp: 60, Type: datatype.Int32.Type(), Count: 1, Data: make([]byte, 4)},
	}
	var out [][]byte
	for _, r := range rs {
		m, err := AppendRequest(nil, &r)
		if err != nil {
			panic(err)
		}
		out = append(out, m)
	}
	return out
}

func FuzzDecodeRequest(f *testing.F) {
	for _, s := range seeds() {
		f.Add(s)
	}
	f.Add([]byte{})
	f.Add(make([]byte, RequestHeaderSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Request
		if err := DecodeRequest(b, &r); err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error of type %T", err)
			}
			return
		}
		// Canonical: what decodes re-encodes to the same bytes.
		again, err := AppendRequest(nil, &r)
		if err != nil {
			// The encoder also checks the data length and the shape of a
			// compare-and-swap, which the decoder leaves to the target: the
			// target must refuse what the encoder refuses.
			tg := NewTarget()
			tg.AddWindow(r.Window, make([]byte, 64))
			var rep Reply
			if DecodeReply(tg.Handle(b, make([]byte, 0, 1024)), &rep); rep.Status == StatusOK {
				t.Fatalf("decoded %+v does not encode (%v) but is accepted", r, err)
			}
			return
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n%x\n%x", b, again)
		}
	})
}

func FuzzHandle(f *testing.F) {
	for _, s := range seeds() {
		f.Add(s, uint16(1024))
	}
	f.Add([]byte{versionByte}, uint16(0))
	const guard, winLen = 64, 64
	f.Fuzz(func(t *testing.T, msg []byte, replyCap uint16) {
		mem := make([]byte, guard+winLen+guard)
		for i := range mem {
			mem[i] = byte(i*7 + 1)
		}
		orig := bytes.Clone(mem)
		win := mem[guard : guard+winLen : guard+winLen]
		tg := NewTarget()
		tg.AddWindow(testWin, win)
		buf := make([]byte, 0, int(replyCap))
		rep := tg.Handle(msg, buf)
		if !bytes.Equal(mem[:guard], orig[:guard]) || !bytes.Equal(mem[guard+winLen:], orig[guard+winLen:]) {
			t.Fatal("memory outside the window modified")
		}
		var r Reply
		if err := DecodeReply(rep, &r); err != nil {
			t.Fatalf("bad reply %x: %v", rep, err)
		}
		if cap(buf) >= ReplyHeaderSize && (len(rep) > cap(buf) || &rep[0] != &buf[:1][0]) {
			t.Fatalf("reply of %d bytes outside the buffer of %d", len(rep), cap(buf))
		}
		if r.Status != StatusOK {
			if tg.Rejected() != 1 {
				t.Fatal("refusal not counted")
			}
			if !bytes.Equal(mem, orig) {
				t.Fatal("refused request modified the window")
			}
			return
		}
		if tg.Rejected() != 0 {
			t.Fatal("success counted as refusal")
		}
		var q Request
		if err := DecodeRequest(msg, &q); err != nil {
			t.Fatalf("applied an undecodable request: %v", err)
		}
		if r.Tag != q.Tag || int64(len(rep)) != q.ReplyLen() {
			t.Fatalf("reply %+v to %+v", r, q)
		}
	})
}

func FuzzDecodeReply(f *testing.F) {
	f.Add(AppendReply(nil, &Reply{Tag: 1, Status: StatusOK, Data: f64s(1, 2)}))
	f.Add(AppendReply(nil, &Reply{Tag: 1, Status: StatusOutOfWindow, Data: []byte("no")}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Reply
		if err := DecodeReply(b, &r); err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error of type %T", err)
			}
			return
		}
		if again := AppendReply(nil, &r); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n%x\n%x", b, again)
		}
		if err := r.Err(); (err == nil) != (r.Status == StatusOK) {
			t.Fatalf("Err %v for %v", err, r.Status)
		}
		_ = r.Status.String()
	})
}
