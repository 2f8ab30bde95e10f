//go:build integration

package test

// Conformance tests of the accumulate family's atomicity (MPI-4.1 §12.3.4,
// §12.7.1-§12.7.2): ops mixed on one 64-bit word, an MCS queue lock built as
// MPICH's RMA mutex tests build it, and NIC atomics on a window whose memory
// does not start on an 8-byte boundary. Every expected value is derived from
// the standard's rules, never from what the library returns.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/onesided/rma"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/verbs"
	"github.com/onesided/rma/win"
)

func init() {
	workers["conf-mixed"] = workConfMixed
	workers["conf-mcs"] = workConfMCS
	workers["conf-misaligned"] = workConfMisaligned
}

// confSeed returns the environment entry that gives the workers a seed:
// RMA_CONF_SEED if set (to repeat a run), else a fresh one. It logs it.
func confSeed(t *testing.T) string {
	t.Helper()
	s := os.Getenv("RMA_CONF_SEED")
	if s == "" {
		s = strconv.FormatUint(uint64(time.Now().UnixNano()), 10)
	}
	t.Logf("seed %s (RMA_CONF_SEED=%s repeats this run)", s, s)
	return "RMA_CONF_SEED=" + s
}

// confWorkerSeed is the seed a worker was given.
func confWorkerSeed() uint64 {
	s, _ := strconv.ParseUint(os.Getenv("RMA_CONF_SEED"), 10, 64)
	return s
}

// confNICAtomics reports whether this rank's device has remote atomics that
// passed the library's start-up probe (rxe does: ATOMIC_HCA).
func confNICAtomics(g *group.Group) bool {
	return g.DeviceAttr().AtomicCap != verbs.AtomicNone && g.NICAtomics() == nil
}

func confU64(v uint64) []byte { return binary.NativeEndian.AppendUint64(nil, v) }

// ---------------------------------------------------------------------------
// 1. Ops mixed on one int64 word.
//
// All ranks apply a random mix of CompareAndSwap, FetchAndOp (REPLACE, SUM,
// NO_OP), GetAccumulate (BXOR, MAX) and Accumulate (SUM, REPLACE) to one
// int64 word at rank 0, in rounds separated by Flush and a barrier. MPI
// makes each of these atomic on the element (§12.7.1: accumulate calls on one
// element are atomic with respect to each other, whatever their ops, and
// CompareAndSwap and FetchAndOp are accumulate calls), so the ops of a round
// are applied in some order, one at a time. Every fetching op returns the
// value it found, and its own effect then fixes the value it left. So each
// fetching op is an edge old -> new between values of the word, and a round is
// correct only if its edges (plus the Accumulates, whose old value is
// unknown) form one walk from the round's first value to its last: every
// value left by an op is found by exactly one later op (or is the last), and
// every old value returned was left by some op (or is the first). A lost
// update breaks this: a value is found twice, or a value is left and never
// found. The check does not depend on timing.
//
// Rounds alternate: in even rounds every rank issues one Accumulate(SUM), so
// the round's last value is exactly the first plus the effect of every op; in
// odd rounds one rank issues one Accumulate(REPLACE) with a fresh value, which
// the word must then have held.

const (
	confMixRounds   = 20
	confMixPerRound = 15 // fetching ops per rank per round: 300 in all
)

type confMixKind uint8

const (
	mixCAS        confMixKind = iota + 1 // CompareAndSwap(compare A, swap B)
	mixFopReplace                        // FetchAndOp(REPLACE, A)
	mixFopSum                            // FetchAndOp(SUM, A)
	mixFopNoOp                           // FetchAndOp(NO_OP)
	mixGaBxor                            // GetAccumulate(BXOR, A)
	mixGaMax                             // GetAccumulate(MAX, A)
	mixAccSum                            // Accumulate(SUM, A): old value unknown
	mixAccReplace                        // Accumulate(REPLACE, A): old value unknown
)

// confMixRec is one op of a rank and the old value it returned.
type confMixRec struct {
	Kind confMixKind
	A, B uint64
	Old  uint64
}

const confMixRecSize = 1 + 3*8

func (r confMixRec) blind() bool { return r.Kind == mixAccSum || r.Kind == mixAccReplace }

// next is the value a fetching op leaves, by MPI's definition of its op.
func (r confMixRec) next() uint64 {
	switch r.Kind {
	case mixCAS:
		if r.Old == r.A {
			return r.B
		}
		return r.Old
	case mixFopReplace:
		return r.A
	case mixFopSum:
		return r.Old + r.A
	case mixFopNoOp:
		return r.Old
	case mixGaBxor:
		return r.Old ^ r.A
	case mixGaMax:
		return uint64(max(int64(r.Old), int64(r.A)))
	}
	return r.Old
}

func (r confMixRec) String() string {
	switch r.Kind {
	case mixCAS:
		return fmt.Sprintf("CompareAndSwap(compare %#x, swap %#x) returned %#x", r.A, r.B, r.Old)
	case mixFopReplace:
		return fmt.Sprintf("FetchAndOp(REPLACE, %#x) returned %#x", r.A, r.Old)
	case mixFopSum:
		return fmt.Sprintf("FetchAndOp(SUM, %#x) returned %#x", r.A, r.Old)
	case mixFopNoOp:
		return fmt.Sprintf("FetchAndOp(NO_OP) returned %#x", r.Old)
	case mixGaBxor:
		return fmt.Sprintf("GetAccumulate(BXOR, %#x) returned %#x", r.A, r.Old)
	case mixGaMax:
		return fmt.Sprintf("GetAccumulate(MAX, %d) returned %#x", int64(r.A), r.Old)
	case mixAccSum:
		return fmt.Sprintf("Accumulate(SUM, %#x)", r.A)
	case mixAccReplace:
		return fmt.Sprintf("Accumulate(REPLACE, %#x)", r.A)
	}
	return fmt.Sprintf("op kind %d", r.Kind)
}

func confMixEncode(end uint64, recs []confMixRec) []byte {
	b := binary.LittleEndian.AppendUint64(nil, end)
	for _, r := range recs {
		b = append(b, byte(r.Kind))
		b = binary.LittleEndian.AppendUint64(b, r.A)
		b = binary.LittleEndian.AppendUint64(b, r.B)
		b = binary.LittleEndian.AppendUint64(b, r.Old)
	}
	return b
}

func confMixDecode(b []byte) (uint64, []confMixRec, error) {
	if len(b) < 8 || (len(b)-8)%confMixRecSize != 0 {
		return 0, nil, fmt.Errorf("record of %d bytes", len(b))
	}
	end := binary.LittleEndian.Uint64(b)
	var recs []confMixRec
	for p := b[8:]; len(p) > 0; p = p[confMixRecSize:] {
		recs = append(recs, confMixRec{
			Kind: confMixKind(p[0]),
			A:    binary.LittleEndian.Uint64(p[1:]),
			B:    binary.LittleEndian.Uint64(p[9:]),
			Old:  binary.LittleEndian.Uint64(p[17:]),
		})
	}
	return end, recs, nil
}

// confMixHistory checks that the ops of one round (recs[rank]) can have been
// applied one at a time to a word that went from start to end.
func confMixHistory(start, end uint64, recs [][]confMixRec) error {
	// bal[v] = (ops finding v) - (ops leaving v) - [v == start] + [v == end]:
	// zero for every v exactly when the ops' edges can form one walk from
	// start to end (with connectivity, checked below).
	bal := map[uint64]int{}
	parent := map[uint64]uint64{}
	var find func(uint64) uint64
	find = func(v uint64) uint64 {
		p, ok := parent[v]
		if !ok || p == v {
			parent[v] = v
			return v
		}
		r := find(p)
		parent[v] = r
		return r
	}
	union := func(a, b uint64) { parent[find(a)] = find(b) }
	find(start)
	find(end)
	var sums, repls []uint64
	var delta uint64
	for _, rs := range recs {
		for _, r := range rs {
			switch r.Kind {
			case mixAccSum:
				sums = append(sums, r.A)
				delta += r.A
			case mixAccReplace:
				repls = append(repls, r.A)
			default:
				n := r.next()
				bal[r.Old]++
				bal[n]--
				union(r.Old, n)
				delta += n - r.Old
			}
		}
	}
	bal[start]--
	bal[end]++
	if len(sums) > 0 && len(repls) > 0 {
		return errors.New("test bug: a round mixes Accumulate(SUM) and Accumulate(REPLACE)")
	}
	var problems []string
	if len(repls) == 0 && end != start+delta {
		problems = append(problems, fmt.Sprintf(
			"the word ended at %#x, but its first value %#x plus the effect of every op (%#x) is %#x: an update was lost or applied twice",
			end, start, delta, start+delta))
	}
	switch {
	case len(repls) > 0:
		// An Accumulate(REPLACE, x) from an unknown old value u: an edge
		// u -> x. With x never returned by any op, the word must still
		// have held x: some op found it, or it is the last value.
		for _, x := range repls {
			bal[x]--
		}
		for v, b := range bal {
			if b > 0 {
				problems = append(problems, fmt.Sprintf("value %#x was found %d more time(s) than it was left", v, b))
			}
		}
		if len(problems) == 0 {
			var srcs []uint64
			for v, b := range bal {
				for ; b < 0; b++ {
					srcs = append(srcs, v)
				}
			}
			slices.Sort(srcs)
			for i, x := range repls {
				if i < len(srcs) {
					union(srcs[i], x)
				}
			}
		}
		for _, x := range repls {
			if find(x) != find(start) {
				problems = append(problems, fmt.Sprintf(
					"Accumulate(REPLACE, %#x) left a value no op ever found and the word did not end at: it was lost", x))
			}
		}
	default:
		var chains [][2]uint64
		if !confSolveSums(bal, sums, &chains) {
			for v, b := range bal {
				if b != 0 && len(problems) < 12 {
					problems = append(problems, confMixImbalance(v, b, recs))
				}
			}
		}
		for _, c := range chains {
			union(c[0], c[1])
		}
		// A chain of Accumulate(SUM)s passes through values that only
		// ops leaving the word unchanged can have found (NO_OP, a failed
		// CompareAndSwap, a losing MAX): the chain's start plus some of
		// its amounts.
		partial := map[uint64]bool{}
		for mask := 1; mask < 1<<len(sums); mask++ {
			var s uint64
			for i, a := range sums {
				if mask&(1<<i) != 0 {
					s += a
				}
			}
			partial[s] = true
		}
		for v := range parent {
			for _, c := range chains {
				if find(v) != find(start) && partial[v-c[0]] {
					union(v, c[0])
				}
			}
		}
	}
	for rank, rs := range recs {
		for i, r := range rs {
			if r.blind() {
				continue
			}
			if find(r.Old) != find(start) && len(problems) < 16 {
				problems = append(problems, fmt.Sprintf(
					"rank %d op %d: %v, a value outside the word's history", rank, i, r))
			}
		}
	}
	if find(end) != find(start) {
		problems = append(problems, fmt.Sprintf("the word ended at %#x, a value no op left", end))
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return errors.New(strings.Join(problems, "\n\t"))
	}
	return nil
}

// confSolveSums accounts for Accumulate(SUM) edges u -> u+a whose u is
// unknown: consecutive ones form a chain u -> u+s; each chain starts where
// bal is negative and ends where it is positive. It reports whether the
// amounts can account for bal exactly (bal is restored on failure).
func confSolveSums(bal map[uint64]int, sums []uint64, chains *[][2]uint64) bool {
	var neg []uint64
	for v, b := range bal {
		if b < 0 {
			neg = append(neg, v)
		}
	}
	if len(sums) == 0 {
		for _, b := range bal {
			if b != 0 {
				return false
			}
		}
		return true
	}
	if len(neg) == 0 {
		return false
	}
	src := slices.Min(neg)
	for mask := 1; mask < 1<<len(sums); mask++ {
		var s uint64
		var rest []uint64
		for i, a := range sums {
			if mask&(1<<i) != 0 {
				s += a
			} else {
				rest = append(rest, a)
			}
		}
		t := src + s
		if bal[t] <= 0 {
			continue
		}
		bal[src]++
		bal[t]--
		if confSolveSums(bal, rest, chains) {
			*chains = append(*chains, [2]uint64{src, t})
			return true
		}
		bal[src]--
		bal[t]++
	}
	return false
}

func confMixImbalance(v uint64, b int, recs [][]confMixRec) string {
	var left, found []string
	for rank, rs := range recs {
		for i, r := range rs {
			if r.blind() {
				continue
			}
			if r.next() == v && r.Old != v {
				left = append(left, fmt.Sprintf("rank %d op %d %v", rank, i, r))
			}
			if r.Old == v && r.next() != v {
				found = append(found, fmt.Sprintf("rank %d op %d %v", rank, i, r))
			}
		}
	}
	return fmt.Sprintf("value %#x: found %d time(s) more than left; left by [%s]; found by [%s]",
		v, b, strings.Join(left, "; "), strings.Join(found, "; "))
}

func workConfMixed(ctx context.Context, g *group.Group) error {
	seed := confWorkerSeed()
	fmt.Printf("seed=%d\n", seed)
	rng := rand.New(rand.NewPCG(seed, uint64(g.Rank())+1))
	n, me := g.Size(), g.Rank()
	w, err := win.Allocate(ctx, g, 64, 8)
	if err != nil {
		return err
	}
	var failures []string
	// The corrected routing rule (DESIGN.md, semantics 4): on a default
	// window of a device with NIC atomics every accumulate-family call on
	// a 64-bit integer is a NIC operation, so that mixing them on one word
	// stays atomic.
	if confNICAtomics(g) {
		for _, o := range []op.Op{op.Sum, op.Replace, op.NoOp, op.Max, op.Bxor} {
			if r := w.RouteFetchAndOp(o, datatype.Int64); !r.NIC() {
				failures = append(failures, fmt.Sprintf("RouteFetchAndOp(%v, int64) = %v on a default window with NIC atomics, want a NIC route", o, r))
			}
			if o == op.NoOp {
				continue
			}
			if r := w.Route(o, datatype.Int64); !r.NIC() {
				failures = append(failures, fmt.Sprintf("Route(%v, int64) = %v on a default window with NIC atomics, want a NIC route", o, r))
			}
		}
		if r := w.RouteCompareAndSwap(datatype.Int64); !r.NIC() {
			failures = append(failures, fmt.Sprintf("RouteCompareAndSwap(int64) = %v, want a NIC route", r))
		}
		for _, f := range failures {
			fmt.Println("route:", f)
		}
	} else {
		fmt.Println("route check skipped: no usable NIC atomics on", g.Device())
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	start := uint64(0) // Allocate zeroes the window
	cur := start       // the value this rank last saw, for CompareAndSwap
	badRounds := 0
	t0 := time.Now()
	for round := 0; round < confMixRounds; round++ {
		if err := g.Barrier(ctx); err != nil {
			return err
		}
		sumRound := round%2 == 0
		blindAt := -1
		if sumRound || round/2%n == me {
			blindAt = rng.IntN(confMixPerRound + 1)
		}
		recs, err := confMixRound(ctx, w.Target(0), rng, round, sumRound, blindAt, &cur)
		if err != nil {
			return err
		}
		if err := w.Flush(ctx, 0); err != nil {
			return fmt.Errorf("round %d: flush: %w", round, err)
		}
		if err := g.Barrier(ctx); err != nil {
			return err
		}
		end, err := win.FetchAndOp(ctx, w, int64(0), 0, 0, op.NoOp)
		if err != nil {
			return fmt.Errorf("round %d: reading the word: %w", round, err)
		}
		cur = uint64(end)
		all, err := g.AllGather(ctx, confMixEncode(uint64(end), recs))
		if err != nil {
			return err
		}
		if me != 0 {
			start = uint64(end)
			continue
		}
		byRank := make([][]confMixRec, n)
		var problems []string
		for r, b := range all {
			e, rs, err := confMixDecode(b)
			if err != nil {
				return fmt.Errorf("rank %d's records: %w", r, err)
			}
			if e != uint64(end) {
				problems = append(problems, fmt.Sprintf("rank %d read the word as %#x after the round, rank 0 as %#x", r, e, end))
			}
			byRank[r] = rs
		}
		if err := confMixHistory(start, uint64(end), byRank); err != nil {
			problems = append(problems, err.Error())
		}
		if len(problems) > 0 {
			badRounds++
			if badRounds <= 3 {
				kind := "Accumulate(SUM) round"
				if !sumRound {
					kind = "Accumulate(REPLACE) round"
				}
				msg := fmt.Sprintf("round %d (%s, seed %d, from %#x to %#x): no order of the ops explains what they returned:\n\t%s",
					round, kind, seed, start, end, strings.Join(problems, "\n\t"))
				fmt.Println("history:", msg)
				failures = append(failures, msg)
			}
		}
		start = uint64(end)
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	fmt.Printf("mixed_rounds=%d bad_rounds=%d ops_per_rank=%d elapsed=%v\n",
		confMixRounds, badRounds, confMixRounds*confMixPerRound, time.Since(t0).Round(time.Millisecond))
	if err := w.Free(ctx); err != nil {
		return err
	}
	if badRounds > 3 {
		failures = append(failures, fmt.Sprintf("(%d rounds failed in all)", badRounds))
	}
	if len(failures) > 0 {
		return errors.New(strings.Join(failures, "\n"))
	}
	fmt.Println("mixed=ok")
	return nil
}

// confMixRound issues one rank's ops of a round on word 0 of w (a group
// window's view of rank 0, or a service window): confMixPerRound fetching
// ops of random kinds, and at blindAt (if not -1) the round's Accumulate.
// cur is the value this rank last saw, for CompareAndSwap.
func confMixRound(ctx context.Context, w rma.Window, rng *rand.Rand, round int, sumRound bool, blindAt int, cur *uint64) ([]confMixRec, error) {
	var origin, result [8]byte
	recs := make([]confMixRec, 0, confMixPerRound+1)
	for i := 0; i <= confMixPerRound; i++ {
		if i == blindAt {
			r := confMixRec{Kind: mixAccSum, A: 1 + rng.Uint64N(1<<20)}
			o := op.Sum
			if !sumRound {
				r = confMixRec{Kind: mixAccReplace, A: rng.Uint64() >> 2}
				o = op.Replace
			}
			binary.NativeEndian.PutUint64(origin[:], r.A)
			if err := w.Accumulate(ctx, origin[:], datatype.Int64, 0, o); err != nil {
				return nil, fmt.Errorf("round %d: %v: %w", round, r, err)
			}
			recs = append(recs, r)
		}
		if i == confMixPerRound {
			break
		}
		var r confMixRec
		var old int64
		var err error
		switch k := rng.IntN(100); {
		case k < 22:
			r = confMixRec{Kind: mixCAS, A: *cur, B: rng.Uint64() >> 2}
			old, err = rma.CompareAndSwap(ctx, w, int64(r.A), int64(r.B), 0)
		case k < 40:
			r = confMixRec{Kind: mixFopReplace, A: rng.Uint64() >> 2}
			old, err = rma.FetchAndOp(ctx, w, int64(r.A), 0, op.Replace)
		case k < 60:
			r = confMixRec{Kind: mixFopSum, A: 1 + rng.Uint64N(1<<20)}
			old, err = rma.FetchAndOp(ctx, w, int64(r.A), 0, op.Sum)
		case k < 70:
			r = confMixRec{Kind: mixFopNoOp}
			old, err = rma.FetchAndOp(ctx, w, int64(0), 0, op.NoOp)
		case k < 85:
			r = confMixRec{Kind: mixGaBxor, A: 1 + rng.Uint64N(1<<40)}
			binary.NativeEndian.PutUint64(origin[:], r.A)
			err = w.GetAccumulate(ctx, origin[:], result[:], datatype.Int64, 0, op.Bxor)
			old = int64(binary.NativeEndian.Uint64(result[:]))
		default:
			r = confMixRec{Kind: mixGaMax, A: rng.Uint64() >> 2}
			binary.NativeEndian.PutUint64(origin[:], r.A)
			err = w.GetAccumulate(ctx, origin[:], result[:], datatype.Int64, 0, op.Max)
			old = int64(binary.NativeEndian.Uint64(result[:]))
		}
		if err != nil {
			return nil, fmt.Errorf("round %d op %d: %v: %w", round, i, r, err)
		}
		r.Old = uint64(old)
		*cur = r.next()
		recs = append(recs, r)
	}
	return recs, nil
}

// TestConfMixedOpsOneWord: 4 ranks hammer one int64 word with every kind of
// accumulate-family call; every round's returned values must fit one
// sequential history of the word, and on a device with NIC atomics every
// one of these calls must report a NIC route.
func TestConfMixedOpsOneWord(t *testing.T) {
	outs := newLaunch(t, "conf-mixed", 4, confSeed(t)).run(4 * time.Minute)
	value(t, outs[0], "mixed")
}

// TestConfMixHistoryChecker checks the history checker itself on
// hand-made rounds, so that a pass of TestConfMixedOpsOneWord means something.
func TestConfMixHistoryChecker(t *testing.T) {
	fop := func(k confMixKind, a, old uint64) confMixRec { return confMixRec{Kind: k, A: a, Old: old} }
	cases := []struct {
		name       string
		start, end uint64
		recs       [][]confMixRec
		ok         bool
	}{
		{"two adds", 0, 3, [][]confMixRec{{fop(mixFopSum, 1, 0)}, {fop(mixFopSum, 2, 1)}}, true},
		{"lost add", 0, 2, [][]confMixRec{{fop(mixFopSum, 1, 0)}, {fop(mixFopSum, 2, 0)}}, false},
		{"replace overwrote an add", 0, 9, [][]confMixRec{{fop(mixFopSum, 1, 0)}, {fop(mixFopReplace, 9, 0)}}, false},
		{"replace after add", 0, 9, [][]confMixRec{{fop(mixFopSum, 1, 0)}, {fop(mixFopReplace, 9, 1)}}, true},
		{"read of a value never held", 5, 5, [][]confMixRec{{fop(mixFopNoOp, 0, 6)}}, false},
		{"blind add", 0, 13, [][]confMixRec{{fop(mixFopSum, 1, 0)}, {{Kind: mixAccSum, A: 10}, fop(mixFopSum, 2, 11)}}, true},
		{"blind add lost", 0, 3, [][]confMixRec{{fop(mixFopSum, 1, 0)}, {{Kind: mixAccSum, A: 10}, fop(mixFopSum, 2, 1)}}, false},
		{"a value inside a chain of blind adds", 0, 33, [][]confMixRec{{{Kind: mixAccSum, A: 10}}, {{Kind: mixAccSum, A: 20}},
			{fop(mixFopNoOp, 0, 10), {Kind: mixCAS, A: 5, B: 6, Old: 10}}, {fop(mixFopSum, 3, 30)}}, true},
		{"a value no chain of blind adds passes", 0, 33, [][]confMixRec{{{Kind: mixAccSum, A: 10}}, {{Kind: mixAccSum, A: 20}},
			{fop(mixFopNoOp, 0, 11)}, {fop(mixFopSum, 3, 30)}}, false},
		{"chained blind adds", 0, 33, [][]confMixRec{{{Kind: mixAccSum, A: 10}}, {{Kind: mixAccSum, A: 20}}, {fop(mixFopSum, 3, 30)}}, true},
		{"blind replace", 1, 8, [][]confMixRec{{{Kind: mixAccReplace, A: 7}}, {fop(mixFopSum, 1, 7)}}, true},
		{"blind replace last", 1, 7, [][]confMixRec{{{Kind: mixAccReplace, A: 7}}, {fop(mixFopNoOp, 0, 1)}}, true},
		{"blind replace lost", 1, 2, [][]confMixRec{{{Kind: mixAccReplace, A: 7}}, {fop(mixFopSum, 1, 1)}}, false},
		{"cas ok and failed", 0, 5, [][]confMixRec{{{Kind: mixCAS, A: 0, B: 5, Old: 0}}, {{Kind: mixCAS, A: 0, B: 6, Old: 5}}}, true},
		{"two cas winners", 0, 6, [][]confMixRec{{{Kind: mixCAS, A: 0, B: 5, Old: 0}}, {{Kind: mixCAS, A: 0, B: 6, Old: 0}}}, false},
		{"max and xor", 2, 9 ^ 4, [][]confMixRec{{fop(mixGaMax, 9, 2), fop(mixGaMax, 3, 9)}, {fop(mixGaBxor, 4, 9)}}, true},
	}
	for _, c := range cases {
		err := confMixHistory(c.start, c.end, c.recs)
		if (err == nil) != c.ok {
			t.Errorf("%s: checker said %v, want ok=%v", c.name, err, c.ok)
		}
	}
}

// ---------------------------------------------------------------------------
// 2. An MCS queue lock, as MPICH's test/mpi/rma/mcs-mutex.c builds it.
//
// The tail of the queue is a word at rank 0, swapped with
// FetchAndOp(REPLACE) and released with CompareAndSwap; each rank has a
// "next" word, which its successor sets with Accumulate(REPLACE) and it reads
// with FetchAndOp(NO_OP) / GetAccumulate(NO_OP), and a "blocked" word, which
// its predecessor clears with Accumulate(REPLACE) and it spins on with
// FetchAndOp(NO_OP). MPICH waits for the predecessor's message where this test
// spins on "blocked". Everything runs in one LockAll epoch with Flush, on a
// default window. Inside the critical section a rank increments a counter at
// rank 0 with Get, +1, Put, Flush, and marks an owner word: mutual exclusion
// makes the final counter exactly ranks * iterations.

const (
	confMCSIters   = 300
	confMCSNil     = -1 // MPI_PROC_NULL in MPICH's test
	confMCSTimeout = 30 * time.Second

	mcsNext    = 0 // displacements, in words
	mcsBlocked = 1
	mcsTail    = 2 // at rank 0
	mcsCounter = 3 // at rank 0
	mcsOwner   = 4 // at rank 0
)

// confWords reads and writes words of one integer type through a window.
type confWords struct {
	w  *win.Window
	dt datatype.Basic
}

func (c confWords) enc(v int64) []byte {
	b := make([]byte, c.dt.Size())
	if len(b) == 8 {
		binary.NativeEndian.PutUint64(b, uint64(v))
	} else {
		binary.NativeEndian.PutUint32(b, uint32(int32(v)))
	}
	return b
}

func (c confWords) dec(b []byte) int64 {
	if len(b) == 8 {
		return int64(binary.NativeEndian.Uint64(b))
	}
	return int64(int32(binary.NativeEndian.Uint32(b)))
}

func (c confWords) fop(ctx context.Context, v int64, target, disp int, o op.Op) (int64, error) {
	res := make([]byte, c.dt.Size())
	var origin []byte
	if o != op.NoOp {
		origin = c.enc(v)
	}
	err := c.w.FetchAndOp(ctx, origin, res, c.dt, target, disp, o)
	return c.dec(res), err
}

func (c confWords) getAccNoOp(ctx context.Context, target, disp int) (int64, error) {
	res := make([]byte, c.dt.Size())
	err := c.w.GetAccumulate(ctx, nil, res, c.dt, target, disp, op.NoOp)
	return c.dec(res), err
}

func (c confWords) cas(ctx context.Context, compare, swap int64, target, disp int) (int64, error) {
	res := make([]byte, c.dt.Size())
	err := c.w.CompareAndSwap(ctx, c.enc(swap), c.enc(compare), res, c.dt, target, disp)
	return c.dec(res), err
}

func (c confWords) replace(ctx context.Context, v int64, target, disp int) error {
	if err := c.w.Accumulate(ctx, c.enc(v), c.dt, target, disp, op.Replace); err != nil {
		return err
	}
	return c.w.Flush(ctx, target)
}

func (c confWords) store(disp int, v int64) {
	copy(c.w.Bytes()[disp*c.dt.Size():], c.enc(v))
}

func (c confWords) load(disp int) int64 {
	return c.dec(c.w.Bytes()[disp*c.dt.Size():][:c.dt.Size()])
}

// confPause backs off a spinning rank a little more each time, so that
// spinners leave the emulated machine's two cores to the ranks they wait for.
func confPause(spin int) {
	if spin > 0 {
		time.Sleep(time.Duration(min(spin, 20)) * 10 * time.Microsecond)
	}
}

func workConfMCS(ctx context.Context, g *group.Group) error {
	dt := datatype.Int64
	if os.Getenv("RMA_CONF_MCS_TYPE") == "int32" {
		dt = datatype.Int32
	}
	n, me := g.Size(), g.Rank()
	w, err := win.Allocate(ctx, g, 8*dt.Size(), dt.Size())
	if err != nil {
		return err
	}
	c := confWords{w, dt}
	fmt.Printf("type=%v route_replace=%v route_cas=%v route_noop=%v\n", dt,
		w.RouteFetchAndOp(op.Replace, dt), w.RouteCompareAndSwap(dt), w.RouteFetchAndOp(op.NoOp, dt))
	c.store(mcsNext, confMCSNil)
	if me == 0 {
		c.store(mcsTail, confMCSNil)
		c.store(mcsOwner, confMCSNil)
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	flush := func(ctx context.Context, r int) error { return w.Flush(ctx, r) }
	lock := func(ctx context.Context, it int) error {
		// Nobody writes these two words of ours until we are in the queue.
		c.store(mcsNext, confMCSNil)
		c.store(mcsBlocked, 1)
		if err := w.Sync(); err != nil {
			return err
		}
		prev, err := c.fop(ctx, int64(me), 0, mcsTail, op.Replace)
		if err != nil {
			return fmt.Errorf("swapping the tail: %w", err)
		}
		if err := flush(ctx, 0); err != nil {
			return err
		}
		if prev == confMCSNil {
			return nil
		}
		if prev < 0 || prev >= int64(n) || prev == int64(me) {
			return fmt.Errorf("the tail held %d: not a rank that can be queued before rank %d (a lost update on the tail)", prev, me)
		}
		if err := c.replace(ctx, int64(me), int(prev), mcsNext); err != nil {
			return fmt.Errorf("linking behind rank %d: %w", prev, err)
		}
		for spin := 0; ; spin++ {
			confPause(spin)
			b, err := c.fop(ctx, 0, me, mcsBlocked, op.NoOp)
			if err != nil {
				if ctx.Err() != nil {
					return fmt.Errorf("deadlock: rank %d waited %v for rank %d to hand over the lock at iteration %d (blocked word still %d)",
						me, confMCSTimeout, prev, it, b)
				}
				return err
			}
			if err := flush(ctx, me); err != nil {
				return err
			}
			if b == 0 {
				return nil
			}
		}
	}
	unlock := func(ctx context.Context, it int) error {
		if err := w.Sync(); err != nil {
			return err
		}
		next, err := c.fop(ctx, 0, me, mcsNext, op.NoOp)
		if err != nil {
			return err
		}
		if err := flush(ctx, me); err != nil {
			return err
		}
		if next == confMCSNil {
			tail, err := c.cas(ctx, int64(me), confMCSNil, 0, mcsTail)
			if err != nil {
				return fmt.Errorf("releasing the tail: %w", err)
			}
			if err := flush(ctx, 0); err != nil {
				return err
			}
			if tail == int64(me) {
				return nil
			}
			if tail < 0 || tail >= int64(n) {
				return fmt.Errorf("the tail held %d while rank %d held the lock (a lost update on the tail)", tail, me)
			}
			for spin := 0; next == confMCSNil; spin++ {
				confPause(spin)
				if next, err = c.getAccNoOp(ctx, me, mcsNext); err != nil {
					if ctx.Err() != nil {
						return fmt.Errorf("deadlock: rank %d waited %v at iteration %d for its successor (the tail says %d) to link in",
							me, confMCSTimeout, it, tail)
					}
					return err
				}
				if err := flush(ctx, me); err != nil {
					return err
				}
			}
		}
		if next < 0 || next >= int64(n) || next == int64(me) {
			return fmt.Errorf("rank %d's next word held %d", me, next)
		}
		return c.replace(ctx, 0, int(next), mcsBlocked)
	}
	var buf = make([]byte, dt.Size())
	t0 := time.Now()
	for it := 0; it < confMCSIters; it++ {
		lctx, cancel := context.WithTimeout(ctx, confMCSTimeout)
		err := lock(lctx, it)
		if err == nil {
			err = func() error {
				if o, err := c.fop(lctx, int64(me), 0, mcsOwner, op.Replace); err != nil || o != confMCSNil {
					return fmt.Errorf("mutual exclusion: rank %d entered the critical section while the owner word held %d (%v)", me, o, err)
				}
				if err := w.Get(lctx, buf, 0, mcsCounter); err != nil {
					return err
				}
				if err := w.Put(lctx, c.enc(c.dec(buf)+1), 0, mcsCounter); err != nil {
					return err
				}
				if err := w.Flush(lctx, 0); err != nil {
					return err
				}
				if o, err := c.fop(lctx, confMCSNil, 0, mcsOwner, op.Replace); err != nil || o != int64(me) {
					return fmt.Errorf("mutual exclusion: the owner word held %d when rank %d left the critical section (%v)", o, me, err)
				}
				return nil
			}()
		}
		if err == nil {
			err = unlock(lctx, it)
		}
		if err != nil && lctx.Err() != nil && !strings.Contains(err.Error(), "deadlock") {
			err = fmt.Errorf("deadlock: rank %d stuck for %v at iteration %d: %w", me, confMCSTimeout, it, err)
		}
		cancel()
		if err != nil {
			return fmt.Errorf("iteration %d: %w", it, err)
		}
	}
	fmt.Printf("rank %d: %d lock/unlock in %v\n", me, confMCSIters, time.Since(t0).Round(time.Millisecond))
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if me == 0 {
		fmt.Printf("counter=%d\ntail=%d\n", c.load(mcsCounter), c.load(mcsTail))
	}
	return w.Free(ctx)
}

// TestConfMCSMutex runs the MCS lock with 2 and 3 ranks on int64 words (the
// tail mixes FetchAndOp(REPLACE) and CompareAndSwap on a 64-bit integer, so
// both must go one way) and with 3 ranks on int32 words, MPICH's MPI_INT.
func TestConfMCSMutex(t *testing.T) {
	for _, c := range []struct {
		ranks int
		typ   string
	}{{2, "int64"}, {3, "int64"}, {3, "int32"}} {
		t.Run(fmt.Sprintf("%dranks-%s", c.ranks, c.typ), func(t *testing.T) {
			outs := newLaunch(t, "conf-mcs", c.ranks, "RMA_CONF_MCS_TYPE="+c.typ).run(4 * time.Minute)
			want := strconv.Itoa(c.ranks * confMCSIters)
			if got := value(t, outs[0], "counter"); got != want {
				t.Errorf("counter %s, want %s: the lock let two ranks into the critical section", got, want)
			}
			if got := value(t, outs[0], "tail"); got != strconv.Itoa(confMCSNil) {
				t.Errorf("tail %s after every rank unlocked, want %d", got, confMCSNil)
			}
		})
	}
}

// ---------------------------------------------------------------------------
// 6. NIC atomics on a window whose memory is not 8-byte aligned.
//
// win.Create over raw[k:k+64], with &raw[k] 4 bytes past an 8-byte
// boundary: displacement 0 is a misaligned address. NIC atomics need
// aligned targets (DESIGN.md, semantics 8), so a SUM or CompareAndSwap on an
// int64 there must fail with ErrAlignment before anything is posted (a
// misaligned atomic posted on rxe completes in error and breaks the
// connection); displacement 4 is aligned and must work, with exact results.

func workConfMisaligned(ctx context.Context, g *group.Group) error {
	n, me := g.Size(), g.Rank()
	peer := (me + 1) % n
	raw := make([]byte, 128)
	k := (4 - int(uintptr(unsafe.Pointer(&raw[0]))%8) + 8) % 8
	mem := raw[k : k+64]
	if a := uintptr(unsafe.Pointer(&mem[0])); a%8 != 4 {
		return fmt.Errorf("test setup: window memory at %#x is not 4 bytes past an 8-byte boundary", a)
	}
	for i := range mem {
		mem[i] = byte(0x51 + 3*i)
	}
	pattern := slices.Clone(mem)
	w, err := win.Create(ctx, g, mem, 1)
	if err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	var l confLog
	expect := func(name string, err error) {
		if !errors.Is(err, win.ErrAlignment) {
			l.failf("%s: got %v, want ErrAlignment", name, err)
			return
		}
		fmt.Printf("misaligned %s: %v\n", name, err)
	}
	two, err := datatype.Hvector(2, 1, 12, datatype.Int64.Type()) // 2nd element 12 bytes after the 1st
	if err != nil {
		return err
	}
	one := confU64(5)
	res := make([]byte, 8)
	for _, t := range []int{peer, me} {
		who := fmt.Sprintf("to rank %d", t)
		expect("Accumulate(SUM, int64) at displacement 0 "+who, w.Accumulate(ctx, one, datatype.Int64, t, 0, op.Sum))
		expect("Accumulate(SUM, 2 x int64) at displacement 0 "+who, w.Accumulate(ctx, append(confU64(1), one...), datatype.Int64, t, 0, op.Sum))
		expect("AccumulateTo(SUM) whose 2nd element is misaligned "+who,
			w.AccumulateTo(ctx, win.Buffer{Data: append(confU64(1), one...), Type: datatype.Int64.Type(), Count: 2},
				win.Region{Rank: t, Disp: 4, Type: two, Count: 1}, op.Sum))
		expect("GetAccumulate(SUM, int64) at displacement 0 "+who, w.GetAccumulate(ctx, one, res, datatype.Int64, t, 0, op.Sum))
		expect("FetchAndOp(SUM, int64) at displacement 0 "+who, w.FetchAndOp(ctx, one, res, datatype.Int64, t, 0, op.Sum))
		expect("FetchAndOp(SUM, uint64) at displacement 16 "+who, w.FetchAndOp(ctx, one, res, datatype.Uint64, t, 16, op.Sum))
		expect("CompareAndSwap(int64) at displacement 0 "+who, w.CompareAndSwap(ctx, one, confU64(0), res, datatype.Int64, t, 0))
		expect("CompareAndSwap(uint64) at displacement 24 "+who, w.CompareAndSwap(ctx, one, confU64(0), res, datatype.Uint64, t, 24))
	}
	for _, t := range []int{peer, me} {
		if err := w.Flush(ctx, t); err != nil {
			l.failf("Flush(%d) after the misaligned calls: %v (something was posted)", t, err)
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if !slices.Equal(w.Bytes(), pattern) {
		l.failf("the misaligned calls changed rank %d's window:\n got %x\nwant %x", me, w.Bytes(), pattern)
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	// Aligned displacements (4, 12, 20, 28 are 8-byte aligned addresses)
	// still work on every connection, with exact results.
	word := func(b []byte, d int) uint64 { return binary.NativeEndian.Uint64(b[d:]) }
	var casOld [8]uint64
	broken := false
	for _, t := range []int{peer, me} {
		old, err := win.FetchAndOp(ctx, w, int64(me+1), t, 4, op.Sum)
		if err != nil {
			l.failf("aligned FetchAndOp(SUM) to rank %d after the misaligned calls: %v", t, err)
			broken = true
			continue
		}
		// Two ranks add 1 and 2: this rank finds the initial word or the
		// initial word plus the other rank's addend.
		if base, other := word(pattern, 4), uint64(3-(me+1)); uint64(old) != base && uint64(old) != base+other {
			l.failf("aligned FetchAndOp(SUM) to rank %d returned %#x; the word only held %#x and %#x before it", t, old, base, base+other)
		}
		if err := w.Accumulate(ctx, confU64(uint64(10*(me+1))), datatype.Int64, t, 12, op.Sum); err != nil {
			l.failf("aligned Accumulate(SUM) to rank %d: %v", t, err)
			broken = true
		}
		o, err := win.CompareAndSwap(ctx, w, int64(word(pattern, 20)), int64(100+me), t, 20)
		if err != nil {
			l.failf("aligned CompareAndSwap to rank %d: %v", t, err)
			broken = true
		}
		casOld[t] = uint64(o)
	}
	l.ok("UnlockAll", w.UnlockAll(ctx))
	// Who won each rank's CompareAndSwap: exactly one of the two ranks
	// found the initial value.
	var mine []byte
	for t := 0; t < n; t++ {
		mine = binary.LittleEndian.AppendUint64(mine, casOld[t])
	}
	if broken {
		mine = append(mine, 1)
	} else {
		mine = append(mine, 0)
	}
	all, err := g.AllGather(ctx, mine)
	if err != nil {
		return err
	}
	b := w.Bytes()
	for r := 0; r < n; r++ {
		if all[r][len(all[r])-1] != 0 {
			broken = true
		}
	}
	if broken {
		if err := w.Free(ctx); err != nil {
			l.failf("Free: %v", err)
		}
		return l.err()
	}
	if got, want := word(b, 4), word(pattern, 4)+3; got != want {
		l.failf("rank %d displacement 4 = %#x after FetchAndOp(SUM) of 1 and 2, want %#x", me, got, want)
	}
	if got, want := word(b, 12), word(pattern, 12)+30; got != want {
		l.failf("rank %d displacement 12 = %#x after Accumulate(SUM) of 10 and 20, want %#x", me, got, want)
	}
	winner := -1
	for r := 0; r < n; r++ {
		if binary.LittleEndian.Uint64(all[r][8*me:]) == word(pattern, 20) {
			if winner >= 0 {
				l.failf("ranks %d and %d both found rank %d's word at displacement 20 unchanged", winner, r, me)
			}
			winner = r
		}
	}
	switch {
	case winner < 0:
		l.failf("no rank's CompareAndSwap found rank %d's initial word", me)
	case word(b, 20) != uint64(100+winner):
		l.failf("rank %d displacement 20 = %d, want %d (rank %d's swap)", me, word(b, 20), 100+winner, winner)
	default:
		for r := 0; r < n; r++ {
			if got := binary.LittleEndian.Uint64(all[r][8*me:]); r != winner && got != uint64(100+winner) {
				l.failf("rank %d's losing CompareAndSwap on rank %d returned %#x, want %d", r, me, got, 100+winner)
			}
		}
	}
	if !slices.Equal(b[:4], pattern[:4]) || !slices.Equal(b[28:], pattern[28:]) {
		l.failf("bytes outside the words used changed on rank %d: %x", me, b)
	}
	if err := w.Free(ctx); err != nil {
		return err
	}
	if err := l.err(); err != nil {
		return err
	}
	fmt.Println("misaligned=ok")
	return nil
}

func TestConfMisalignedAccumulate(t *testing.T) {
	outs := newLaunch(t, "conf-misaligned", 2).run(2 * time.Minute)
	for _, o := range outs {
		value(t, o, "misaligned")
	}
}

func init() { svcModes["mixed"] = svcConfMixed }

// svcConfMixed is workConfMixed on service windows: four workers,
// goroutines of one process, apply the same random mix to word 0 of
// window "counter", in rounds separated by Flush; workers 0 and 1 share
// one Client (their NIC atomics in flight at once on one connection),
// the others have a Client each. Every round's returned values must fit
// one sequential history of the word.
func svcConfMixed(ctx context.Context, addr string) error {
	const n = 4
	seed := confWorkerSeed()
	fmt.Printf("seed=%d\n", seed)
	ws, closeAll, err := svcWorkerWindows(ctx, addr, n)
	if err != nil {
		return err
	}
	defer closeAll()
	rngs, curs := make([]*rand.Rand, n), make([]uint64, n)
	for r := range n {
		rngs[r] = rand.New(rand.NewPCG(seed, uint64(r)+1))
	}
	start, badRounds := uint64(0), 0
	var failures []string
	for round := 0; round < confMixRounds; round++ {
		sumRound := round%2 == 0
		recs, errs := make([][]confMixRec, n), make([]error, n)
		var wg sync.WaitGroup
		for r := range n {
			blindAt := -1
			if sumRound || round/2%n == r {
				blindAt = rngs[r].IntN(confMixPerRound + 1)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if recs[r], errs[r] = confMixRound(ctx, ws[r], rngs[r], round, sumRound, blindAt, &curs[r]); errs[r] == nil {
					errs[r] = ws[r].Flush(ctx)
				}
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		end, err := rma.FetchAndOp(ctx, ws[0], int64(0), 0, op.NoOp)
		if err != nil {
			return fmt.Errorf("round %d: reading the word: %w", round, err)
		}
		for r := range curs {
			curs[r] = uint64(end)
		}
		if err := confMixHistory(start, uint64(end), recs); err != nil {
			if badRounds++; badRounds <= 3 {
				msg := fmt.Sprintf("round %d (seed %d, from %#x to %#x): no order of the ops explains what they returned:\n\t%v",
					round, seed, start, end, err)
				fmt.Println("history:", msg)
				failures = append(failures, msg)
			}
		}
		start = uint64(end)
	}
	fmt.Printf("mixed_rounds=%d bad_rounds=%d ops_per_worker=%d\n", confMixRounds, badRounds, confMixRounds*confMixPerRound)
	if len(failures) > 0 {
		return errors.New(strings.Join(failures, "\n"))
	}
	fmt.Println("mixed=ok")
	return nil
}

// TestConfMixedOpsOneWordService is TestConfMixedOpsOneWord on service
// windows (svcConfMixed).
func TestConfMixedOpsOneWordService(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := newSvcTest(t, ctx)
	srv, addr := s.server("server", 0)
	out := s.client("client", addr, "mixed", confSeed(t)).wait(t, false)
	s.stop(srv)
	if v := value(t, out, "mixed"); v != "ok" {
		t.Errorf("mixed=%s", v)
	}
}
