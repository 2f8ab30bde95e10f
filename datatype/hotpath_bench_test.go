package datatype

import "testing"

// The checks every RMA call makes on its datatypes (win.check, win.resolve):
// with a predefined type they run once per FetchAndOp, Accumulate, Put with
// datatypes, ... and must cost little and allocate nothing.

func BenchmarkHotPathPredefinedChecks(b *testing.B) {
	t := Float64.Type()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if !t.Valid() || t.Basic() != Float64 || !SameSignature(1, t, 1, t) {
			b.Fatal("signature")
		}
		if err := t.Fits(1, 4096, 24); err != nil {
			b.Fatal(err)
		}
		if t.OverlapsN(1) || !t.IsContiguous() || t.LB() != 0 {
			b.Fatal("layout")
		}
	}
}

func BenchmarkHotPathForEachBlock(b *testing.B) {
	vec := mustBench(Vector(1024, 2, 4, Float64.Type()))
	for _, c := range []struct {
		name  string
		t     Type
		count int
	}{
		{"predefined/1", Float64.Type(), 1},
		{"contiguous/1M", Float64.Type(), 1 << 20},
		{"vector/1024x2", vec, 1},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			for i := 0; i < b.N; i++ {
				c.t.ForEachBlock(c.count, func(off int64, k int) bool { n += k; return true })
			}
			if n == 0 {
				b.Fatal("no blocks")
			}
		})
	}
}

func BenchmarkHotPathPackUnpack(b *testing.B) {
	vec := mustBench(Vector(1024, 2, 4, Float64.Type()))
	src := make([]byte, vec.Extent())
	packed := make([]byte, 0, vec.Size())
	b.SetBytes(vec.Size())
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		var err error
		if packed, err = AppendPack(packed[:0], src, 1, vec); err != nil {
			b.Fatal(err)
		}
		if err := Unpack(src, packed, 1, vec); err != nil {
			b.Fatal(err)
		}
	}
}

func mustBench(t Type, err error) Type {
	if err != nil {
		panic(err)
	}
	return t
}
