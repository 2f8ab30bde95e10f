package op

import (
	"testing"

	"github.com/onesided/rma/datatype"
)

// Per-call costs of the op layer on the hot paths: the MPI validity check
// every accumulate-family call makes, and the target engine's kernels for
// one element (FetchAndOp MAX, GetAccumulate SUM, CompareAndSwap).

func BenchmarkHotPathCheck(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if Check(Sum, datatype.Int64, GetAccumulate) != nil || Check(Max, datatype.Float64, Accumulate) != nil ||
			CheckCompareAndSwap(datatype.Int64) != nil {
			b.Fatal("refused")
		}
	}
}

func BenchmarkHotPathApplyFetch1(b *testing.B) {
	tgt := make([]byte, 8)
	org := make([]byte, 8)
	res := make([]byte, 8)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := ApplyFetch(Max, datatype.Float64, tgt, org, res); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkHotPathCompareAndSwap1(b *testing.B) {
	tgt := make([]byte, 8)
	cmp := make([]byte, 8)
	org := make([]byte, 8)
	res := make([]byte, 8)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := CompareAndSwap(datatype.Int64, tgt, cmp, org, res); err != nil {
			b.Fatal(err)
		}
	}
}
