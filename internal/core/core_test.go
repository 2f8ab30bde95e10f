package core

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/internal/errs"
	"github.com/onesided/rma/op"
)

// words is a NIC over local memory: its atomics are sync/atomic's, and it
// counts the calls.
type words struct {
	mem               []uint64
	reads, fadds, cas atomic.Int64
}

func (w *words) at(addr uint64) *uint64 {
	return (*uint64)(unsafe.Pointer(uintptr(unsafe.Pointer(&w.mem[0])) + uintptr(addr)))
}

func (w *words) Read8(ctx context.Context, addr uint64, rkey uint32) (uint64, error) {
	w.reads.Add(1)
	return atomic.LoadUint64(w.at(addr)), nil
}

func (w *words) FetchAdd(ctx context.Context, addr uint64, rkey uint32, add uint64) (uint64, error) {
	w.fadds.Add(1)
	return atomic.AddUint64(w.at(addr), add) - add, nil
}

func (w *words) CompareSwap(ctx context.Context, addr uint64, rkey uint32, compare, swap uint64) (uint64, error) {
	w.cas.Add(1)
	p := w.at(addr)
	for {
		old := atomic.LoadUint64(p)
		if old != compare || atomic.CompareAndSwapUint64(p, old, swap) {
			return old, nil
		}
	}
}

func f64(v float64) uint64 { return *(*uint64)(unsafe.Pointer(&v)) }

// Many goroutines applying one op to one word with compare-and-swap loops
// lose no update: the result is what applying them in any order gives.
func TestElementLoopUnderContention(t *testing.T) {
	const goroutines, each = 8, 200
	cases := []struct {
		name  string
		o     op.Op
		dt    datatype.Basic
		start uint64
		v     func(g, i int) uint64
		want  func(uint64) bool
	}{
		{"max int64", op.Max, datatype.Int64, 0, func(g, i int) uint64 { return uint64(g*each + i) },
			func(x uint64) bool { return x == goroutines*each-1 }},
		{"sum float64", op.Sum, datatype.Float64, f64(0), func(g, i int) uint64 { return f64(1) },
			func(x uint64) bool { return x == f64(goroutines*each) }},
		{"bxor uint64", op.Bxor, datatype.Uint64, 0, func(g, i int) uint64 { return 1 << (i % 64) },
			func(x uint64) bool { return x == 0 }}, // each bit flipped an even number of times
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := &words{mem: []uint64{c.start}}
			var wg sync.WaitGroup
			var failed atomic.Value
			for g := 0; g < goroutines; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var s Scratch
					for i := 0; i < each; i++ {
						if _, err := Element(context.Background(), n, atomics.NICCompareSwapLoop, c.o, c.dt, 0, 0, c.v(g, i), &s); err != nil {
							failed.Store(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			if err, _ := failed.Load().(error); err != nil {
				t.Fatal(err)
			}
			if got := n.mem[0]; !c.want(got) {
				t.Errorf("word = %#x after %d updates", got, goroutines*each)
			}
			t.Logf("%d reads, %d compare-and-swaps for %d updates", n.reads.Load(), n.cas.Load(), goroutines*each)
		})
	}
}

func TestElementRoutes(t *testing.T) {
	n := &words{mem: []uint64{5, 7}}
	var s Scratch
	ctx := context.Background()
	if old, err := Element(ctx, n, atomics.NICFetchAdd, op.Sum, datatype.Int64, 0, 0, 3, &s); err != nil || old != 5 || n.mem[0] != 8 {
		t.Errorf("fetch-and-add: old %d, %v; word %d (want 5, nil, 8)", old, err, n.mem[0])
	}
	if old, err := Element(ctx, n, atomics.NICRead, op.NoOp, datatype.Int64, 8, 0, 0, &s); err != nil || old != 7 || n.fadds.Load() != 1 {
		t.Errorf("read: old %d, %v (want 7, nil)", old, err)
	}
	// A MIN that changes nothing is one read, no swap.
	if old, err := Element(ctx, n, atomics.NICCompareSwapLoop, op.Min, datatype.Int64, 8, 0, 9, &s); err != nil || old != 7 || n.cas.Load() != 0 {
		t.Errorf("MIN 9 of 7: old %d, %v, %d swaps (want 7, nil, 0)", old, err, n.cas.Load())
	}
	if _, err := Element(ctx, n, atomics.NICCompareSwap, op.Replace, datatype.Int64, 0, 0, 1, &s); !errors.Is(err, errs.ErrInvalid) {
		t.Errorf("compare-and-swap as an accumulate route: %v, want ErrInvalid", err)
	}
	if _, err := Element(ctx, n, atomics.NICCompareSwapLoop, op.Band, datatype.Float64, 0, 0, 1, &s); !errors.Is(err, errs.ErrInvalid) {
		t.Errorf("BAND on float64: %v, want ErrInvalid", err)
	}
}
