package fallback

import (
	"testing"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
)

// The origin side of the engine path, per call: Split (one piece for a
// small contiguous accumulate), building the request, and handling the
// reply into the caller's result. Together with BenchmarkHandle* (the
// target side) this is everything but the network.

func BenchmarkHotPathSplit(b *testing.B) {
	for _, c := range []struct {
		name  string
		count int
	}{
		{"float64/1", 1},
		{"float64/128KiB", 16 << 10},
	} {
		b.Run(c.name, func(b *testing.B) {
			t := datatype.Float64.Type()
			b.ReportAllocs()
			pieces := 0
			for i := 0; i < b.N; i++ {
				Split(24, t, c.count, 64<<10, func(Piece) error { pieces++; return nil })
			}
			if pieces == 0 {
				b.Fatal("no pieces")
			}
		})
	}
}

// BenchmarkHotPathOrigin is what the origin does for a one-element
// GetAccumulate besides Split: build the request into the send buffer,
// then, when the reply comes, decode it and unpack the old value into the
// result through the Op the caller waits on.
func BenchmarkHotPathOrigin(b *testing.B) {
	t := datatype.Float64.Type()
	data := make([]byte, 8)
	result := make([]byte, 8)
	buf := make([]byte, 0, 256)
	reply := AppendReply(nil, &Reply{Tag: 3, Data: make([]byte, 8)})
	cl := NewClient(2, 8)
	var fop Op
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		req := Request{Kind: KindGetAccumulate, Op: op.Sum, Window: 1, Tag: 3, Disp: 24, Type: t, Count: 1, Data: data}
		if _, err := AppendRequest(buf[:0], &req); err != nil {
			b.Fatal(err)
		}
		fop.Result, fop.ResultType, fop.ResultCount = result, t, 1
		call := cl.Slot(1, 3)
		call.Op, call.Elem = &fop, 0
		fop.Start(1)
		cl.OnReply(1, 3, reply)
		if !fop.Done() || fop.Err() != nil {
			b.Fatal("reply not handled")
		}
		fop.Reset()
	}
}

func BenchmarkHotPathUnpackRange(b *testing.B) {
	t := datatype.Float64.Type()
	dst := make([]byte, 64<<10)
	packed := make([]byte, 8)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := UnpackRange(dst, t, 8192, 17, packed); err != nil {
			b.Fatal(err)
		}
	}
}
