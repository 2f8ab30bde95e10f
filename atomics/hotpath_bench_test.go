package atomics

import (
	"testing"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
)

// The routing decisions every FetchAndOp, CompareAndSwap and Accumulate
// makes.
func BenchmarkHotPathRoute(b *testing.B) {
	pairs := []Pair{{Op: op.Sum, Basic: datatype.Int64}, {Op: op.Max, Basic: datatype.Int64}, {Op: op.Replace, Basic: datatype.Int64}}
	for _, c := range []struct {
		name string
		p    Policy
	}{
		{"default", DefaultPolicy(true)},
		{"declared", DeclaredPolicy(true, pairs)},
		{"anyop", AnyOpPolicy()},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			for i := 0; i < b.N; i++ {
				if c.p.Declared(op.Max, datatype.Int64) {
					n++
				}
				n += int(c.p.FetchAndOp(op.Sum, datatype.Int64))
				n += int(c.p.Accumulate(op.Sum, datatype.Float64))
				n += int(c.p.CompareAndSwap(datatype.Int64))
			}
			if n == 0 {
				b.Fatal("no routes")
			}
		})
	}
}
