//go:build integration

package test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/coll"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/fallback"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/win"
)

func init() {
	workers["coll"] = workColl
	workers["colltime"] = workCollTime
	workers["useracc"] = workUserAcc
	workers["userunknown"] = workUserUnknown
}

// collCounts are the vector lengths every collective is checked with: up
// to 1<<20, or 1<<16 under the race detector (8 ranks on 2 CPUs then
// outlast the workers' deadline with 1<<20; the plain pass checks it).
var collCounts = []int{0, 1, 7, collLong}

var collLong = func() int {
	if raceDetector {
		return 1 << 16
	}
	return 1 << 20
}()

// mix64 is a deterministic hash of (rank, i): the inputs of the ranks.
func mix64(rank, i int) uint64 {
	h := uint64(rank+1)*0x9E3779B97F4A7C15 ^ uint64(i)*0xBF58476D1CE4E5B9
	h ^= h >> 31
	h *= 0x94D049BB133111EB
	return h ^ h>>29
}

// 2x2 matrices of integers mod 2^16, packed in a uint64 (a, b; c, d from
// the low bits): their product is associative and not commutative.
func mat2Of(a, b, c, d uint16) uint64 {
	return uint64(a) | uint64(b)<<16 | uint64(c)<<32 | uint64(d)<<48
}

func mat2Product(x, y uint64) uint64 {
	a, b, c, d := uint16(x), uint16(x>>16), uint16(x>>32), uint16(x>>48)
	e, f, g, h := uint16(y), uint16(y>>16), uint16(y>>32), uint16(y>>48)
	return mat2Of(a*e+b*g, a*f+b*h, c*e+d*g, c*f+d*h)
}

// collCase is an op, its definition in plain Go (f(left, right)) and the
// ranks' inputs.
type collCase[T datatype.Element] struct {
	name string
	o    op.Op
	f    func(a, b T) T
	gen  func(rank, i int) T
}

// collCheck runs every reduction collective with cc on count elements and
// compares each rank's result with a reference folded in plain Go, in rank
// order, from every rank's inputs.
func collCheck[T datatype.Element](ctx context.Context, c *coll.Comm, cc collCase[T], count int) error {
	n, me := c.Size(), c.Rank()
	block := (count + n - 1) / n // ReduceScatterBlock: n blocks of ceil(count/n)
	total := max(count, n*block)
	// The reference: the fold of all ranks, and of ranks 0..me-1 and 0..me.
	full := make([]T, total)
	var exRef, scanRef []T
	for r := 0; r < n; r++ {
		for i := range full {
			if r == 0 {
				full[i] = cc.gen(0, i)
			} else {
				full[i] = cc.f(full[i], cc.gen(r, i))
			}
		}
		if r == me-1 {
			exRef = slices.Clone(full[:count])
		}
		if r == me {
			scanRef = slices.Clone(full[:count])
		}
	}
	input := make([]T, total)
	for i := range input {
		input[i] = cc.gen(me, i)
	}
	send := input[:count]
	compare := func(what string, got, want []T, off int) error {
		for i := range want {
			if got[i] != want[i] {
				return fmt.Errorf("%s with %s on %d x %v, rank %d of %d: element %d is %v, want %v",
					what, cc.name, count, datatype.Of[T](), me, n, off+i, got[i], want[i])
			}
		}
		if len(got) != len(want) {
			return fmt.Errorf("%s: %d elements, want %d", what, len(got), len(want))
		}
		return nil
	}
	recv := make([]T, count)
	var times []string
	last := time.Now()
	lap := func(what string) {
		times = append(times, fmt.Sprintf("%s %v", what, time.Since(last).Round(time.Millisecond)))
		last = time.Now()
	}
	defer func() {
		if count >= collLong && me == 0 {
			fmt.Printf("times of %s on %d elements: %s\n", cc.name, count, strings.Join(times, ", "))
		}
	}()

	root := (n - 1) / 2
	if err := coll.ReduceOf(ctx, c, send, recv, cc.o, root); err != nil {
		return fmt.Errorf("Reduce %s: %w", cc.name, err)
	}
	lap("Reduce")
	if me == root {
		if err := compare("Reduce", recv, full[:count], 0); err != nil {
			return err
		}
	}
	clear(recv)
	last = time.Now()
	if err := coll.AllreduceOf(ctx, c, send, recv, cc.o); err != nil {
		return fmt.Errorf("Allreduce %s: %w", cc.name, err)
	}
	lap("Allreduce")
	if err := compare("Allreduce", recv, full[:count], 0); err != nil {
		return err
	}

	counts := make([]int, n) // uneven blocks, the first ones often empty
	lo, rest := 0, count
	for i := range counts {
		counts[i] = min(rest, count*(i+1)/(n*(n+1)/2))
		if i == n-1 {
			counts[i] = rest
		}
		rest -= counts[i]
		if i < me {
			lo += counts[i]
		}
	}
	part := make([]T, counts[me])
	last = time.Now()
	if err := coll.ReduceScatterOf(ctx, c, send, part, counts, cc.o); err != nil {
		return fmt.Errorf("ReduceScatter %s: %w", cc.name, err)
	}
	lap("ReduceScatter")
	if err := compare("ReduceScatter", part, full[lo:lo+counts[me]], lo); err != nil {
		return err
	}
	part = make([]T, block)
	last = time.Now()
	if err := coll.ReduceScatterBlockOf(ctx, c, input[:n*block], part, cc.o); err != nil {
		return fmt.Errorf("ReduceScatterBlock %s: %w", cc.name, err)
	}
	lap("ReduceScatterBlock")
	if err := compare("ReduceScatterBlock", part, full[me*block:(me+1)*block], me*block); err != nil {
		return err
	}

	clear(recv)
	last = time.Now()
	if err := coll.ScanOf(ctx, c, send, recv, cc.o); err != nil {
		return fmt.Errorf("Scan %s: %w", cc.name, err)
	}
	lap("Scan")
	if err := compare("Scan", recv, scanRef, 0); err != nil {
		return err
	}
	clear(recv)
	last = time.Now()
	if err := coll.ExscanOf(ctx, c, send, recv, cc.o); err != nil {
		return fmt.Errorf("Exscan %s: %w", cc.name, err)
	}
	lap("Exscan")
	if me == 0 {
		if err := compare("Exscan (rank 0 unchanged)", recv, make([]T, count), 0); err != nil {
			return err
		}
	} else if err := compare("Exscan", recv, exRef, 0); err != nil {
		return err
	}
	return nil
}

// The cases: predefined ops, a commutative user op and the non-commutative
// matrix product. Floating-point inputs are small integers, so that every
// order of summation gives the same exact result.
func collCases() (sum collCase[float64], fsum collCase[float64], mat collCase[uint64], err error) {
	fsumOp, err := op.Create(func(in, inout []float64) {
		for i, x := range in {
			inout[i] += x
		}
	}, true)
	if err != nil {
		return
	}
	matOp, err := op.Create(func(in, inout []uint64) {
		for i, x := range in {
			inout[i] = mat2Product(x, inout[i])
		}
	}, false)
	if err != nil {
		return
	}
	small := func(rank, i int) float64 { return float64(mix64(rank, i) % 1024) }
	add := func(a, b float64) float64 { return a + b }
	sum = collCase[float64]{"SUM", op.Sum, add, small}
	fsum = collCase[float64]{"user-sum (commutative)", fsumOp, add, small}
	mat = collCase[uint64]{"user matrix product (non-commutative)", matOp, mat2Product, mix64}
	return
}

// workColl: every collective, with predefined and user-defined ops, on every
// length of collCounts, checked against the plain-Go reference.
func workColl(ctx context.Context, g *group.Group) error {
	c, err := coll.New(ctx, g)
	if err != nil {
		return err
	}
	ring, err := coll.New(ctx, g, coll.Threshold(0)) // ring algorithms at every length
	if err != nil {
		return err
	}
	sum, fsum, mat, err := collCases()
	if err != nil {
		return err
	}
	maxI32 := collCase[int32]{"MAX", op.Max, func(a, b int32) int32 { return max(a, b) },
		func(r, i int) int32 { return int32(mix64(r, i)) }}
	bxor := collCase[uint8]{"BXOR", op.Bxor, func(a, b uint8) uint8 { return a ^ b },
		func(r, i int) uint8 { return uint8(mix64(r, i)) }}
	land := collCase[bool]{"LAND", op.Land, func(a, b bool) bool { return a && b },
		func(r, i int) bool { return mix64(r, i)%8 != 0 }}
	maxloc := collCase[datatype.PairFloat64Int]{"MAXLOC", op.Maxloc,
		func(a, b datatype.PairFloat64Int) datatype.PairFloat64Int {
			if b.V > a.V || b.V == a.V && b.I < a.I {
				return b
			}
			return a
		},
		func(r, i int) datatype.PairFloat64Int {
			return datatype.PairFloat64Int{V: float64(mix64(r, i) % 4), I: int32(r)}
		}}
	for _, count := range collCounts {
		start := time.Now()
		for _, cm := range []*coll.Comm{c, ring} {
			if cm == ring && count > 7 {
				continue // the default already takes the ring on long vectors
			}
			if err := errors.Join(
				collCheck(ctx, cm, sum, count),
				collCheck(ctx, cm, fsum, count),
				collCheck(ctx, cm, mat, count),
			); err != nil {
				return err
			}
			if count <= 7 {
				if err := errors.Join(
					collCheck(ctx, cm, maxI32, count),
					collCheck(ctx, cm, bxor, count),
					collCheck(ctx, cm, land, count),
					collCheck(ctx, cm, maxloc, count),
				); err != nil {
					return err
				}
			}
		}
		fmt.Printf("count %d: every collective checked in %v\n", count, time.Since(start).Round(time.Millisecond))
	}
	// The matrix product proves the order: the rank-order reference, which
	// every result above matched, differs from the reverse order.
	if n := g.Size(); n > 1 {
		differs := 0
		for i := 0; i < 1000; i++ {
			fwd, rev := mat.gen(0, i), mat.gen(n-1, i)
			for r := 1; r < n; r++ {
				fwd = mat2Product(fwd, mat.gen(r, i))
				rev = mat2Product(rev, mat.gen(n-1-r, i))
			}
			if fwd != rev {
				differs++
			}
		}
		fmt.Printf("noncommutative_differs=%d/1000\n", differs)
	}
	// REPLACE and NO_OP are refused before anything is sent.
	b := make([]byte, 8)
	for _, o := range []op.Op{op.Replace, op.NoOp} {
		if err := c.Allreduce(ctx, b, b, datatype.Int64, o); !errors.Is(err, op.ErrOpUse) {
			return fmt.Errorf("Allreduce with %v: %v, want op.ErrOpUse", o, err)
		}
	}
	if err := errors.Join(ring.Close(ctx), c.Close(ctx)); err != nil {
		return err
	}
	fmt.Println("coll=ok")
	return nil
}

const timingReps = 3

// workCollTime: Allreduce of 1<<20 float64 with the predefined SUM and with
// a commutative user-defined sum, timed alternately.
func workCollTime(ctx context.Context, g *group.Group) error {
	c, err := coll.New(ctx, g)
	if err != nil {
		return err
	}
	sum, fsum, _, err := collCases()
	if err != nil {
		return err
	}
	const count = 1 << 20
	send := make([]float64, count)
	for i := range send {
		send[i] = sum.gen(g.Rank(), i)
	}
	recv := make([]float64, count)
	sync1 := []int64{1}
	var best, total [2]time.Duration
	for rep := -1; rep < timingReps; rep++ { // rep -1 warms up
		for k, o := range []op.Op{sum.o, fsum.o} {
			if err := coll.AllreduceOf(ctx, c, sync1, sync1, op.Sum); err != nil { // line the ranks up
				return err
			}
			start := time.Now()
			if err := coll.AllreduceOf(ctx, c, send, recv, o); err != nil {
				return err
			}
			d := time.Since(start)
			if rep >= 0 {
				total[k] += d
				if best[k] == 0 || d < best[k] {
					best[k] = d
				}
			}
			for i := 0; i < count; i += 4099 {
				want := 0.0
				for r := 0; r < g.Size(); r++ {
					want += sum.gen(r, i)
				}
				if recv[i] != want {
					return fmt.Errorf("Allreduce %v: element %d = %v, want %v", o, i, recv[i], want)
				}
			}
		}
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	fmt.Printf("allreduce_sum_ms=%.1f\nallreduce_user_ms=%.1f\n", ms(total[0]/timingReps), ms(total[1]/timingReps))
	fmt.Printf("allreduce_sum_best_ms=%.1f\nallreduce_user_best_ms=%.1f\n", ms(best[0]), ms(best[1]))
	return c.Close(ctx)
}

// userAdd is the named op of the accumulate tests: integer addition, so
// that a lost update shows in the total, that takes a few microseconds an
// element, so that an update applied apart from another would be lost.
func registerUserAdd() (op.Op, error) {
	return op.Register("test-user-add", func(in, inout []int64) {
		for i, x := range in {
			v := inout[i]
			for t := time.Now(); time.Since(t) < 3*time.Microsecond; {
			}
			inout[i] = v + x
		}
	}, true)
}

const userAccIters = 300

// workUserAcc: every rank applies the registered user op to one location of
// rank 0's window, userAccIters times with Accumulate and userAccIters
// times with GetAccumulate (recording the old values), at once; the
// Accumulates alternate with SUM, the NIC's fetch-and-add on the default
// window (the user op is a compare-and-swap loop there); and on an any-op
// window it is mixed with SUM as well, both through the engine.
func workUserAcc(ctx context.Context, g *group.Group) error {
	add, err := registerUserAdd()
	if err != nil {
		return err
	}
	// Every rank registered the same ops in the same order.
	all, err := g.AllGather(ctx, binary.LittleEndian.AppendUint64(nil, op.RegistryDigest()))
	if err != nil {
		return err
	}
	for r, d := range all {
		if !slices.Equal(d, all[0]) {
			return fmt.Errorf("rank %d has another op registry", r)
		}
	}
	w, err := win.Allocate(ctx, g, 64, 8)
	if err != nil {
		return err
	}
	anyop, err := win.Allocate(ctx, g, 64, 8, win.AnyOp())
	if err != nil {
		return err
	}
	if r := w.Route(add, datatype.Int64); r != atomics.NICCompareSwapLoop && w.Route(op.Sum, datatype.Int64) != atomics.Engine {
		return fmt.Errorf("user op on int64 routed to %v on a window whose SUM goes to the NIC", r)
	}
	if r := anyop.Route(add, datatype.Int64); r != atomics.Engine {
		return fmt.Errorf("user op on an any-op window routed to %v", r)
	}
	if err := errors.Join(w.LockAll(ctx), anyop.LockAll(ctx)); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	one := datatype.AsBytes([]int64{1})
	old := make([]byte, 8)
	olds := make([]byte, 0, 8*userAccIters)
	for i := 0; i < userAccIters; i++ {
		o := add
		if i%2 == 1 {
			o = op.Sum
		}
		if err := w.Accumulate(ctx, one, datatype.Int64, 0, 0, o); err != nil {
			return fmt.Errorf("Accumulate %d (%v): %w", i, o, err)
		}
		if err := w.GetAccumulate(ctx, one, old, datatype.Int64, 0, 1, add); err != nil {
			return fmt.Errorf("GetAccumulate %d: %w", i, err)
		}
		olds = append(olds, old...)
		if err := anyop.Accumulate(ctx, one, datatype.Int64, 0, 0, o); err != nil {
			return fmt.Errorf("any-op Accumulate %d: %w", i, err)
		}
	}
	if err := errors.Join(w.UnlockAll(ctx), anyop.UnlockAll(ctx)); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(os.Getenv("RMA_TEST_DIR"), "userolds."+strconv.Itoa(g.Rank())), olds, 0o644); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if g.Rank() == 0 {
		mem, _ := datatype.View[int64](w.Bytes())
		mixed, _ := datatype.View[int64](anyop.Bytes())
		fmt.Printf("op=%v\naccumulate_total=%d\ngetaccumulate_total=%d\nmixed_total=%d\n", add, mem[0], mem[1], mixed[0])
	}
	return errors.Join(anyop.Free(ctx), w.Free(ctx))
}

// workUserUnknown: rank 0 registers the op, rank 1 does not; rank 1
// refuses rank 0's accumulates with it, with an error reply. The window is
// any-op, so that the op is applied by the target's engine (on a default
// window the origin applies an op on int64 itself).
func workUserUnknown(ctx context.Context, g *group.Group) error {
	var add op.Op
	if g.Rank() == 0 {
		var err error
		if add, err = registerUserAdd(); err != nil {
			return err
		}
	}
	w, err := win.Allocate(ctx, g, 64, 8, win.AnyOp())
	if err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	one := datatype.AsBytes([]int64{1})
	if g.Rank() == 0 {
		// Known here: applied to this rank's own window.
		if err := w.Accumulate(ctx, one, datatype.Int64, 0, 0, add); err != nil {
			return err
		}
		if err := w.Flush(ctx, 0); err != nil {
			return err
		}
		// Unknown at rank 1: refused, whether the error comes with the call
		// or at the flush that completes it.
		err := w.Accumulate(ctx, one, datatype.Int64, 1, 0, add)
		if err == nil {
			err = w.Flush(ctx, 1)
		}
		if !errors.Is(err, fallback.ErrUnknownOp) || !errors.Is(err, fallback.ErrRemoteRejected) {
			return fmt.Errorf("Accumulate with an op rank 1 does not know: %v, want fallback.ErrUnknownOp", err)
		}
		fmt.Printf("accumulate_refused=%v\n", err)
		old := make([]byte, 8)
		err = w.GetAccumulate(ctx, one, old, datatype.Int64, 1, 1, add)
		if !errors.Is(err, fallback.ErrUnknownOp) {
			return fmt.Errorf("GetAccumulate with an op rank 1 does not know: %v, want fallback.ErrUnknownOp", err)
		}
		fmt.Printf("getaccumulate_refused=%v\n", err)
		// The window still works.
		if err := w.Accumulate(ctx, one, datatype.Int64, 1, 2, op.Sum); err != nil {
			return err
		}
	} else {
		// Rank 1 cannot even send it: the op is not defined here.
		if err := w.Accumulate(ctx, one, datatype.Int64, 0, 0, op.FirstUser); !errors.Is(err, op.ErrInvalid) {
			return fmt.Errorf("Accumulate with an undefined op: %v", err)
		}
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	mem, _ := datatype.View[int64](w.Bytes())
	want := []int64{1, 0, 0, 0}
	if g.Rank() == 1 {
		want = []int64{0, 0, 1, 0}
	}
	if !slices.Equal(mem[:4], want) {
		return fmt.Errorf("window of rank %d: %v, want %v", g.Rank(), mem[:4], want)
	}
	fmt.Println("unknown=ok")
	return w.Free(ctx)
}
