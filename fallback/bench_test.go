package fallback

import (
	"testing"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
)

func sum1() Request {
	return Request{Kind: KindAccumulate, Op: op.Sum, Window: 1, Tag: 2, Disp: 8, Type: f64, Count: 1, Data: f64s(1.5)}
}

func BenchmarkAppendRequestSum1Float64(b *testing.B) {
	r := sum1()
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf, _ = AppendRequest(buf[:0], &r)
	}
}

func BenchmarkDecodeRequestSum1Float64(b *testing.B) {
	r := sum1()
	msg, _ := AppendRequest(nil, &r)
	var d Request
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := DecodeRequest(msg, &d); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeReply(b *testing.B) {
	rep := AppendReply(nil, &Reply{Tag: 1, Data: f64s(1)})
	var d Reply
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := DecodeReply(rep, &d); err != nil {
			b.Fatal(err)
		}
	}
}

func benchHandle(b *testing.B, r Request, winLen int) {
	tg := NewTarget()
	tg.AddWindow(r.Window, make([]byte, winLen))
	msg, err := AppendRequest(nil, &r)
	if err != nil {
		b.Fatal(err)
	}
	reply := make([]byte, 0, r.ReplyLen()+MaxReason)
	b.SetBytes(int64(len(r.Data)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		reply = tg.Handle(msg, reply)
	}
	b.StopTimer()
	var d Reply
	if err := DecodeReply(reply, &d); err != nil || d.Status != StatusOK {
		b.Fatal(err, d.Err())
	}
}

// The whole target-side path of the latency-critical case: decode,
// validate, apply, encode the reply.
func BenchmarkHandleSum1Float64(b *testing.B) { benchHandle(b, sum1(), 4096) }

func BenchmarkHandleGetSum1Float64(b *testing.B) {
	r := sum1()
	r.Kind = KindGetAccumulate
	benchHandle(b, r, 4096)
}

// Encode + decode + Handle + decode the reply: both ends of the protocol.
func BenchmarkRoundTripSum1Float64(b *testing.B) {
	r := sum1()
	tg := NewTarget()
	tg.AddWindow(1, make([]byte, 4096))
	msg := make([]byte, 0, 256)
	reply := make([]byte, 0, 256)
	var d Reply
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		msg, _ = AppendRequest(msg[:0], &r)
		reply = tg.Handle(msg, reply)
		if err := DecodeReply(reply, &d); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkHandleSum64KiBFloat64(b *testing.B) {
	r := Request{Kind: KindAccumulate, Op: op.Sum, Window: 1, Disp: 0, Type: f64, Count: 8192, Data: make([]byte, 64<<10)}
	benchHandle(b, r, 64<<10)
}

func BenchmarkHandleGetSum64KiBFloat64(b *testing.B) {
	r := Request{Kind: KindGetAccumulate, Op: op.Sum, Window: 1, Disp: 0, Type: f64, Count: 8192, Data: make([]byte, 64<<10)}
	benchHandle(b, r, 64<<10)
}

// A derived layout: every other float64, 32 KiB of data.
func BenchmarkHandleSumVector32KiBFloat64(b *testing.B) {
	vec := must(datatype.Vector(4096, 1, 2, f64))
	r := Request{Kind: KindAccumulate, Op: op.Sum, Window: 1, Disp: 0, Type: vec, Count: 1, Data: make([]byte, vec.Size())}
	benchHandle(b, r, 64<<10)
}

func BenchmarkSplit64MiBContiguous(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		Split(0, f64, 8<<20, 64<<10, func(Piece) error { return nil })
	}
}
