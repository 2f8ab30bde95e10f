//go:build integration

package test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/win"
)

// The hot-path calls that must not allocate, and others that are reported.
// Rank 1 measures each with testing.AllocsPerRun against rank 0's window
// and prints allocs_<name>=<n>; it also prints, for a call that allocates,
// where (the allocating call stacks, from the memory profile).
var allocCases = []struct {
	name   string
	assert bool // the list: FetchAndOp, CompareAndSwap, Put, Flush, Get, one-element Accumulate
}{
	{"fetch_and_op_sum_int64", true},
	{"fetch_and_op_sum_int64_generic", true},
	{"fetch_and_op_max_float64", true},
	{"compare_and_swap_int64", true},
	{"compare_and_swap_int64_generic", true},
	{"put_8B", true},
	{"put_4KiB", true},
	{"put_8B_flush", true},
	{"get_8B", true},
	{"get_4KiB", true},
	{"accumulate_sum_float64_1", true},
	{"accumulate_sum_float64_1_flush", true},
	{"accumulate_sum_int64_1", true},
	{"get_accumulate_sum_float64_1", false},
}

// TestZeroAllocs checks that the hot-path calls allocate nothing per call.
func TestZeroAllocs(t *testing.T) {
	l := newLaunch(t, "allocs", 2)
	outs := l.run(3 * time.Minute)
	for _, c := range allocCases {
		t.Run(c.name, func(t *testing.T) {
			v := value(t, outs[1], "allocs_"+c.name)
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("allocs_%s=%q", c.name, v)
			}
			exact := value(t, outs[1], "mallocs_"+c.name)
			t.Logf("%s: %v allocations per call (AllocsPerRun), %s (exact mean)", c.name, n, exact)
			if n != 0 && c.assert {
				t.Errorf("%s allocates %v times per call; where:\n%s", c.name, n, sites(outs[1], c.name))
			}
		})
	}
}

// sites collects the "site_<name>:" lines of a worker's output.
func sites(out, name string) string {
	var b strings.Builder
	for _, line := range strings.Split(out, "\n") {
		if s, ok := strings.CutPrefix(strings.TrimSpace(line), "site_"+name+": "); ok {
			b.WriteString("  " + s + "\n")
		}
	}
	return b.String()
}

func init() { workers["allocs"] = workAllocs }

const allocRuns = 500

// workAllocs: rank 1 measures the allocations of each call on rank 0's
// window; rank 0 only serves.
func workAllocs(ctx context.Context, g *group.Group) error {
	size := 0
	if g.Rank() == 0 {
		size = 1 << 16
	}
	w, err := win.Allocate(ctx, g, max(size, 8), 1)
	if err != nil {
		return err
	}
	if g.Rank() == 1 {
		if err := measureAllocs(ctx, w); err != nil {
			return err
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	return w.Free(ctx)
}

func measureAllocs(ctx context.Context, w *win.Window) error {
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	var (
		one, res, cmp [8]byte
		fone          [8]byte
		big           = make([]byte, 4096)
		bigRes        = make([]byte, 4096)
		firstErr      error
	)
	binary.NativeEndian.PutUint64(one[:], 1)
	binary.NativeEndian.PutUint64(fone[:], math.Float64bits(1))
	check := func(err error) {
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	expect := int64(0)
	calls := map[string]func(){
		"fetch_and_op_sum_int64": func() {
			check(w.FetchAndOp(ctx, one[:], res[:], datatype.Int64, 0, 0, op.Sum))
		},
		"fetch_and_op_sum_int64_generic": func() {
			_, err := win.FetchAndOp(ctx, w, int64(1), 0, 0, op.Sum)
			check(err)
		},
		"fetch_and_op_max_float64": func() {
			check(w.FetchAndOp(ctx, fone[:], res[:], datatype.Float64, 0, 16, op.Max))
		},
		"compare_and_swap_int64": func() {
			binary.NativeEndian.PutUint64(cmp[:], uint64(expect))
			binary.NativeEndian.PutUint64(one[:], uint64(expect+1))
			check(w.CompareAndSwap(ctx, one[:], cmp[:], res[:], datatype.Int64, 0, 8))
			expect = int64(binary.NativeEndian.Uint64(res[:])) + 1
			binary.NativeEndian.PutUint64(one[:], 1)
		},
		"compare_and_swap_int64_generic": func() {
			old, err := win.CompareAndSwap(ctx, w, expect, expect+1, 0, 8)
			check(err)
			expect = old + 1
		},
		"put_8B":   func() { check(w.Put(ctx, one[:], 0, 64)) },
		"put_4KiB": func() { check(w.Put(ctx, big, 0, 4096)) },
		"put_8B_flush": func() {
			check(w.Put(ctx, one[:], 0, 64))
			check(w.Flush(ctx, 0))
		},
		"get_8B":   func() { check(w.Get(ctx, res[:], 0, 64)) },
		"get_4KiB": func() { check(w.Get(ctx, bigRes, 0, 4096)) },
		"accumulate_sum_float64_1": func() {
			check(w.Accumulate(ctx, fone[:], datatype.Float64, 0, 24, op.Sum))
		},
		"accumulate_sum_float64_1_flush": func() {
			check(w.Accumulate(ctx, fone[:], datatype.Float64, 0, 24, op.Sum))
			check(w.Flush(ctx, 0))
		},
		"accumulate_sum_int64_1": func() {
			check(w.Accumulate(ctx, one[:], datatype.Int64, 0, 32, op.Sum))
		},
		"get_accumulate_sum_float64_1": func() {
			check(w.GetAccumulate(ctx, fone[:], res[:], datatype.Float64, 0, 40, op.Sum))
		},
	}
	// Record every allocation, to say where the ones that happen come from.
	runtime.MemProfileRate = 1
	for _, c := range allocCases {
		f := calls[c.name]
		if f == nil {
			return fmt.Errorf("no call for %s", c.name)
		}
		// Warm up: lazily made state (per work-request slot, per credit)
		// is made once, not per call.
		for i := 0; i < 600; i++ {
			f()
		}
		if err := w.Flush(ctx, 0); err != nil {
			return err
		}
		before := allocProfile()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		n := testing.AllocsPerRun(allocRuns, f)
		runtime.ReadMemStats(&m1)
		after := allocProfile()
		if firstErr != nil {
			return fmt.Errorf("%s: %w", c.name, firstErr)
		}
		if err := w.Flush(ctx, 0); err != nil {
			return err
		}
		fmt.Printf("allocs_%s=%v\n", c.name, n)
		fmt.Printf("mallocs_%s=%.3f\n", c.name, float64(m1.Mallocs-m0.Mallocs)/float64(allocRuns+1))
		printSites(c.name, before, after, allocRuns+1)
	}
	return w.UnlockAll(ctx)
}

type allocStack = [32]uintptr

// allocProfile returns the allocation count of every call stack so far.
func allocProfile() map[allocStack]int64 {
	runtime.GC() // the profile is published at the end of a GC cycle
	runtime.GC()
	var recs []runtime.MemProfileRecord
	for {
		n, _ := runtime.MemProfile(nil, true)
		recs = make([]runtime.MemProfileRecord, n+64)
		if n, ok := runtime.MemProfile(recs, true); ok {
			recs = recs[:n]
			break
		}
	}
	m := make(map[allocStack]int64, len(recs))
	for _, r := range recs {
		m[r.Stack0] += r.AllocObjects
	}
	return m
}

// printSites prints the call stacks that allocated between two profiles,
// as site_<name>: <per call> <frames>.
func printSites(name string, before, after map[allocStack]int64, calls int) {
	type site struct {
		stk allocStack
		n   int64
	}
	var ss []site
	for stk, n := range after {
		if d := n - before[stk]; d >= int64(calls)/4 {
			ss = append(ss, site{stk, d})
		}
	}
	sort.Slice(ss, func(i, j int) bool { return ss[i].n > ss[j].n })
	for i, s := range ss {
		if i == 6 {
			break
		}
		var pcs []uintptr
		for _, pc := range s.stk {
			if pc == 0 {
				break
			}
			pcs = append(pcs, pc)
		}
		frames := runtime.CallersFrames(pcs)
		var parts []string
		for {
			fr, more := frames.Next()
			fn := fr.Function
			if !strings.HasPrefix(fn, "runtime.") && !strings.HasPrefix(fn, "testing.") {
				file := fr.File[strings.LastIndex(fr.File, "/")+1:]
				parts = append(parts, fmt.Sprintf("%s (%s:%d)", fn[strings.LastIndex(fn, "/")+1:], file, fr.Line))
			}
			if !more || len(parts) == 12 {
				break
			}
		}
		fmt.Printf("site_%s: %.2f per call: %s\n", name, float64(s.n)/float64(calls), strings.Join(parts, " <- "))
	}
}
