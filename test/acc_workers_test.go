//go:build integration

package test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/internal/grouphooks"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/win"
)

func init() {
	workers["accall"] = workAccAll
	workers["fetchengine"] = workFetchEngine
	workers["anyop"] = workAnyOp
	workers["layouts"] = workLayouts
	workers["big"] = workBig
	workers["order"] = workOrder
}

const accElems = 3

type pair struct {
	o op.Op
	b datatype.Basic
}

func accPairs() (allowed, forbidden []pair) {
	for _, o := range op.Ops() {
		for _, b := range datatype.Basics() {
			if op.Check(o, b, op.Accumulate) == nil {
				allowed = append(allowed, pair{o, b})
			} else {
				forbidden = append(forbidden, pair{o, b})
			}
		}
	}
	return allowed, forbidden
}

// workAccAll: every rank accumulates into rank 0's window with every
// (op, datatype) pair MPI allows; rank 0 checks each region against the
// reference fold of the initial value and the 4 ranks' contributions.
func workAccAll(ctx context.Context, g *group.Group) error {
	allowed, forbidden := accPairs()
	const slot = accElems * 16
	w, err := win.Allocate(ctx, g, len(allowed)*slot, 1)
	if err != nil {
		return err
	}
	if g.Rank() == 0 {
		for k, p := range allowed {
			for e := 0; e < accElems; e++ {
				copy(w.Bytes()[k*slot+e*p.b.Size():], encode(p.b, contribution(p.o, p.b, -1, e)))
			}
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	// Forbidden pairs are refused before anything is sent.
	for _, p := range forbidden {
		buf := make([]byte, p.b.Size())
		err := w.Accumulate(ctx, buf, p.b, 0, 0, p.o)
		if !errors.Is(err, op.ErrOpDatatype) && !errors.Is(err, op.ErrOpUse) {
			return fmt.Errorf("Accumulate(%v, %v) = %v, want an op error", p.o, p.b, err)
		}
	}
	routes := map[atomics.Route]int{}
	for k, p := range allowed {
		var origin []byte
		for e := 0; e < accElems; e++ {
			origin = append(origin, encode(p.b, contribution(p.o, p.b, g.Rank(), e))...)
		}
		if err := w.Accumulate(ctx, origin, p.b, 0, k*slot, p.o); err != nil {
			return fmt.Errorf("Accumulate(%v, %v): %w", p.o, p.b, err)
		}
		routes[w.Route(p.o, p.b)]++
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	fmt.Printf("routes=%v\n", routes)
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if g.Rank() == 0 {
		target, _ := grouphooks.Engine(g)
		if n := target.Rejected(); n != 0 {
			return fmt.Errorf("the target rejected %d messages", n)
		}
		for k, p := range allowed {
			for e := 0; e < accElems; e++ {
				got := w.Bytes()[k*slot+e*p.b.Size():][:p.b.Size()]
				if p.o == op.Replace {
					ok := false
					for r := 0; r < g.Size(); r++ {
						ok = ok || bytes.Equal(significant(p.b, got), significant(p.b, encode(p.b, contribution(p.o, p.b, r, e))))
					}
					if !ok {
						return fmt.Errorf("REPLACE %v element %d = %x: none of the ranks' values", p.b, e, got)
					}
					continue
				}
				want := contribution(p.o, p.b, -1, e)
				for r := 0; r < g.Size(); r++ {
					want = refApply(p.o, p.b, want, contribution(p.o, p.b, r, e))
				}
				if wb := significant(p.b, encode(p.b, want)); !bytes.Equal(significant(p.b, got), wb) {
					return fmt.Errorf("%v on %v element %d = %x, want %x", p.o, p.b, e, got, wb)
				}
			}
		}
		fmt.Printf("pairs=%d forbidden=%d\n", len(allowed), len(forbidden))
	}
	return w.Free(ctx)
}

const fetchIters = 300

// workFetchEngine: FetchAndOp(SUM, int32) and GetAccumulate(SUM, float64)
// through the engine; every rank records the old values it got.
func workFetchEngine(ctx context.Context, g *group.Group) error {
	w, err := win.Allocate(ctx, g, 64, 1)
	if err != nil {
		return err
	}
	if r := w.Route(op.Sum, datatype.Int32); r != atomics.Engine {
		return fmt.Errorf("SUM int32 routed to %v", r)
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	var olds, folds []byte
	start := time.Now()
	for i := 0; i < fetchIters; i++ {
		old, err := win.FetchAndOp(ctx, w, int32(1), 0, 0, op.Sum)
		if err != nil {
			return err
		}
		olds = binary.LittleEndian.AppendUint64(olds, uint64(old))
		var res [8]byte
		one := binary.NativeEndian.AppendUint64(nil, math.Float64bits(1))
		if err := w.GetAccumulate(ctx, one, res[:], datatype.Float64, 0, 8, op.Sum); err != nil {
			return err
		}
		folds = binary.LittleEndian.AppendUint64(folds, uint64(math.Float64frombits(binary.NativeEndian.Uint64(res[:]))))
	}
	fmt.Printf("engine_fetch_us=%.1f\n", float64(time.Since(start).Microseconds())/(2*fetchIters))
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	dir := os.Getenv("RMA_TEST_DIR")
	if err := os.WriteFile(filepath.Join(dir, "i32."+strconv.Itoa(g.Rank())), olds, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "f64."+strconv.Itoa(g.Rank())), folds, 0o644); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if g.Rank() == 0 {
		fmt.Printf("i32=%d\n", int32(binary.NativeEndian.Uint32(w.Bytes())))
		fmt.Printf("f64=%g\n", math.Float64frombits(binary.NativeEndian.Uint64(w.Bytes()[8:])))
	}
	return w.Free(ctx)
}

const mixIters = 300

// workAnyOp: on an any-op window SUM and MAX on int64 hit one location at
// once; on a default window NIC SUM int64 and engine MAX float64 hit two.
func workAnyOp(ctx context.Context, g *group.Group) error {
	any, err := win.Allocate(ctx, g, 8, 8, win.AnyOp())
	if err != nil {
		return err
	}
	def, err := win.Allocate(ctx, g, 16, 8)
	if err != nil {
		return err
	}
	if r := any.Route(op.Sum, datatype.Int64); r != atomics.Engine {
		return fmt.Errorf("any-op window routes SUM int64 to %v", r)
	}
	if r := def.Route(op.Sum, datatype.Int64); r != atomics.NICFetchAdd {
		return fmt.Errorf("default window routes SUM int64 to %v", r)
	}
	if r := def.Route(op.Max, datatype.Float64); r != atomics.Engine {
		return fmt.Errorf("default window routes MAX float64 to %v", r)
	}
	for _, w := range []*win.Window{any, def} {
		if err := w.LockAll(ctx); err != nil {
			return err
		}
	}
	one := binary.NativeEndian.AppendUint64(nil, 1)
	zero := make([]byte, 8)
	for i := 0; i < mixIters; i++ {
		if err := any.Accumulate(ctx, one, datatype.Int64, 0, 0, op.Sum); err != nil {
			return err
		}
		if err := any.Accumulate(ctx, zero, datatype.Int64, 0, 0, op.Max); err != nil {
			return err
		}
		if err := def.Accumulate(ctx, one, datatype.Int64, 0, 0, op.Sum); err != nil {
			return err
		}
		v := binary.NativeEndian.AppendUint64(nil, math.Float64bits(float64(g.Rank()*1000+i)))
		if err := def.Accumulate(ctx, v, datatype.Float64, 0, 1, op.Max); err != nil {
			return err
		}
	}
	for _, w := range []*win.Window{any, def} {
		if err := w.UnlockAll(ctx); err != nil {
			return err
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if g.Rank() == 0 {
		fmt.Printf("anyop=%d\n", binary.NativeEndian.Uint64(any.Bytes()))
		fmt.Printf("nicsum=%d\n", binary.NativeEndian.Uint64(def.Bytes()))
		fmt.Printf("enginemax=%g\n", math.Float64frombits(binary.NativeEndian.Uint64(def.Bytes()[8:])))
	}
	if err := def.Free(ctx); err != nil {
		return err
	}
	return any.Free(ctx)
}

// layout sizes for workLayouts
const (
	lyBlocks = 50
	lyWin    = 4 * lyBlocks * 3
)

// workLayouts: SUM float64 with a vector at the origin and an indexed
// block at the target, and the reverse, from every rank into rank 0.
func workLayouts(ctx context.Context, g *group.Group) error {
	w, err := win.Allocate(ctx, g, lyWin*8, 8)
	if err != nil {
		return err
	}
	f64 := datatype.Float64.Type()
	vec, err := datatype.Vector(lyBlocks, 2, 3, f64)
	if err != nil {
		return err
	}
	displs := make([]int, lyBlocks)
	for j := range displs {
		displs[j] = 4*(lyBlocks-1-j) + 1 // decreasing: type map order is not address order
	}
	iblk, err := datatype.IndexedBlock(2, displs, f64)
	if err != nil {
		return err
	}
	origin := make([]byte, lyWin*8)
	for i := 0; i < lyWin; i++ {
		binary.NativeEndian.PutUint64(origin[8*i:], math.Float64bits(float64(i*(g.Rank()+1))))
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	// vector origin -> indexed-block target at displacement 0
	if err := w.AccumulateTo(ctx, win.Buffer{Data: origin, Type: vec, Count: 1},
		win.Region{Rank: 0, Disp: 0, Type: iblk, Count: 1}, op.Sum); err != nil {
		return err
	}
	// indexed-block origin -> vector target at displacement lyWin/2
	if err := w.AccumulateTo(ctx, win.Buffer{Data: origin, Type: iblk, Count: 1},
		win.Region{Rank: 0, Disp: lyWin / 2, Type: vec, Count: 1}, op.Sum); err != nil {
		return err
	}
	// An overlapping target layout is refused.
	over, _ := datatype.IndexedBlock(2, []int{0, 1}, f64)
	if err := w.AccumulateTo(ctx, win.Buffer{Data: origin[:32], Type: f64, Count: 4},
		win.Region{Rank: 0, Disp: 0, Type: over, Count: 1}, op.Sum); !errors.Is(err, win.ErrInvalid) {
		return fmt.Errorf("overlapping target: %v", err)
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if g.Rank() == 0 {
		// Plain-Go reference: the k-th element of the origin layout goes to
		// the k-th element of the target layout.
		vecOff := func(k int) int { return (k/2)*3 + k%2 }
		iblkOff := func(k int) int { return displs[k/2] + k%2 }
		want := make([]float64, lyWin)
		for r := 0; r < g.Size(); r++ {
			for k := 0; k < 2*lyBlocks; k++ {
				want[iblkOff(k)] += float64(vecOff(k) * (r + 1))
				want[lyWin/2+vecOff(k)] += float64(iblkOff(k) * (r + 1))
			}
		}
		for i, v := range want {
			if got := math.Float64frombits(binary.NativeEndian.Uint64(w.Bytes()[8*i:])); got != v {
				return fmt.Errorf("element %d = %g, want %g", i, got, v)
			}
		}
		fmt.Println("layouts=ok")
	}
	return w.Free(ctx)
}

const bigBytes = 64 << 20

// workBig: rank 1 adds 1.0 to each of the 8 Mi float64 of rank 0's 64 MiB window.
func workBig(ctx context.Context, g *group.Group) error {
	size := 8
	if g.Rank() == 0 {
		size = bigBytes
	}
	w, err := win.Allocate(ctx, g, size, 8)
	if err != nil {
		return err
	}
	if g.Rank() == 0 {
		for i := 0; i < bigBytes/8; i++ {
			binary.NativeEndian.PutUint64(w.Bytes()[8*i:], math.Float64bits(float64(i)))
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if g.Rank() == 1 {
		ones := make([]byte, bigBytes)
		for i := 0; i < bigBytes/8; i++ {
			binary.NativeEndian.PutUint64(ones[8*i:], math.Float64bits(1))
		}
		if err := w.LockAll(ctx); err != nil {
			return err
		}
		start := time.Now()
		if err := w.Accumulate(ctx, ones, datatype.Float64, 0, 0, op.Sum); err != nil {
			return err
		}
		if err := w.Flush(ctx, 0); err != nil {
			return err
		}
		d := time.Since(start)
		fmt.Printf("accumulate 64 MiB: %v (%.1f MB/s)\n", d.Round(time.Millisecond), bigBytes/d.Seconds()/1e6)
		if err := w.UnlockAll(ctx); err != nil {
			return err
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if g.Rank() == 0 {
		for i := 0; i < bigBytes/8; i++ {
			if got := math.Float64frombits(binary.NativeEndian.Uint64(w.Bytes()[8*i:])); got != float64(i+1) {
				return fmt.Errorf("element %d = %g, want %d", i, got, i+1)
			}
		}
		fmt.Println("big=ok")
	}
	return w.Free(ctx)
}

const orderIters = 300

// workOrder: rank 1 replaces rank 0's word with 1, 2, 3, ... and reads it
// back after each without a flush, with Get and with a NIC read.
func workOrder(ctx context.Context, g *group.Group) error {
	w, err := win.Allocate(ctx, g, 16, 8)
	if err != nil {
		return err
	}
	if g.Rank() == 1 {
		if err := w.LockAll(ctx); err != nil {
			return err
		}
		var got [8]byte
		for i := int64(1); i <= orderIters; i++ {
			v := binary.NativeEndian.AppendUint64(nil, uint64(i))
			if err := w.Accumulate(ctx, v, datatype.Int64, 0, 0, op.Replace); err != nil {
				return err
			}
			if err := w.Accumulate(ctx, v, datatype.Int64, 0, 1, op.Replace); err != nil {
				return err
			}
			if err := w.Get(ctx, got[:], 0, 0); err != nil {
				return err
			}
			if g := int64(binary.NativeEndian.Uint64(got[:])); g != i {
				return fmt.Errorf("get after REPLACE %d saw %d", i, g)
			}
			old, err := win.FetchAndOp(ctx, w, int64(0), 0, 1, op.NoOp)
			if err != nil {
				return err
			}
			if old != i {
				return fmt.Errorf("NO_OP fetch after REPLACE %d saw %d", i, old)
			}
		}
		if err := w.UnlockAll(ctx); err != nil {
			return err
		}
		fmt.Println("order=ok")
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	return w.Free(ctx)
}

// significant returns a copy of element bytes with a pair's padding zeroed:
// MPI leaves padding unspecified.
func significant(b datatype.Basic, elem []byte) []byte {
	out := bytes.Clone(elem)
	switch b {
	case datatype.Float64Int, datatype.Int64Int:
		clear(out[12:16])
	case datatype.Int16Int:
		clear(out[2:4])
	}
	return out
}

func init() { workers["latency"] = workLatency }

// workLatency: rank 1 times, against rank 0, one-element operations one
// at a time: FetchAndOp on the NIC, GetAccumulate through the engine, and
// Accumulate followed by Flush through the engine.
func workLatency(ctx context.Context, g *group.Group) error {
	w, err := win.Allocate(ctx, g, 64, 8)
	if err != nil {
		return err
	}
	if g.Rank() == 1 {
		if err := w.LockAll(ctx); err != nil {
			return err
		}
		const n = 300
		one := binary.NativeEndian.AppendUint64(nil, math.Float64bits(1))
		var res [8]byte
		cases := []struct {
			name string
			do   func() error
		}{
			{"fetch_and_op_nic", func() error { _, err := win.FetchAndOp(ctx, w, int64(1), 0, 0, op.Sum); return err }},
			{"get_accumulate_engine", func() error { return w.GetAccumulate(ctx, one, res[:], datatype.Float64, 0, 1, op.Sum) }},
			{"accumulate_flush_engine", func() error {
				if err := w.Accumulate(ctx, one, datatype.Float64, 0, 2, op.Sum); err != nil {
					return err
				}
				return w.Flush(ctx, 0)
			}},
		}
		for _, c := range cases {
			lat := make([]time.Duration, n)
			for i := range lat {
				t := time.Now()
				if err := c.do(); err != nil {
					return fmt.Errorf("%s: %w", c.name, err)
				}
				lat[i] = time.Since(t)
			}
			slices.Sort(lat)
			fmt.Printf("%s_us=%.1f (min %.1f, p90 %.1f)\n", c.name, float64(lat[n/2].Nanoseconds())/1e3,
				float64(lat[0].Nanoseconds())/1e3, float64(lat[n*9/10].Nanoseconds())/1e3)
		}
		if err := w.UnlockAll(ctx); err != nil {
			return err
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	return w.Free(ctx)
}
