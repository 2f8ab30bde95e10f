//go:build integration

package test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/verbs"
	"github.com/onesided/rma/win"
)

// procStart is about when the process started (its package
// initialisation), for a rank's join time.
var procStart = time.Now()

func init() { workers["scale"] = workScale }

// workScale prints what the rank pins and how many threads it has once
// joined, and how long it took from its start to the end of Join; then,
// in one fence epoch, it adds rank+1 (float64 SUM: through the engine) to
// word 0 of every rank's window, itself included, checks that its own word
// ends as the sum over the ranks, and prints the same figures again.
func workScale(ctx context.Context, g *group.Group) error {
	joined := time.Since(procStart)
	pinJoin, thrJoin, qpJoin := procStatus("VmPin"), procStatus("Threads"), openQPs()
	w, err := win.Allocate(ctx, g, 4096, 1)
	if err != nil {
		return err
	}
	if err := w.Fence(ctx, win.NoPrecede); err != nil {
		return err
	}
	var v [8]byte
	binary.NativeEndian.PutUint64(v[:], math.Float64bits(float64(g.Rank()+1)))
	for r := 0; r < g.Size(); r++ {
		if err := w.Accumulate(ctx, v[:], datatype.Float64, r, 0, op.Sum); err != nil {
			return fmt.Errorf("accumulate to rank %d: %w", r, err)
		}
	}
	if err := w.Fence(ctx, win.NoSucceed); err != nil {
		return err
	}
	n := g.Size()
	got := math.Float64frombits(binary.NativeEndian.Uint64(w.Bytes()))
	if want := float64(n * (n + 1) / 2); got != want {
		return fmt.Errorf("word 0 holds %v after every rank's accumulate, want %v", got, want)
	}
	fmt.Printf("joined=%.3f\nvmpin_join=%d\nthreads_join=%d\nqps_join=%d\nvmpin_used=%d\nthreads_used=%d\nqps_used=%d\n",
		joined.Seconds(), pinJoin, thrJoin, qpJoin, procStatus("VmPin"), procStatus("Threads"), openQPs())
	return w.Free(ctx)
}

// openQPs counts the process's queue pairs.
func openQPs() int {
	n := 0
	for _, o := range verbs.OpenObjects() {
		if strings.HasPrefix(o, "QP ") {
			n++
		}
	}
	return n
}

// TestGroupScale forms groups of 2, 4, 8 and 16 ranks and reports, per
// size, the longest join (from a rank's start to the end of Join), and the
// most any rank pins (VmPin) and the most threads it has, once joined and
// after an all-to-all accumulate through the engine. The active-message
// receive memory is one shared receive queue, the same for every group of
// 4 ranks or more: what a rank pins must not grow from 4 ranks to 16.
// Connections are made on first use: once joined, a rank has its loopback
// pair alone (2 QPs); after the accumulates, two more per other rank (its
// connection and the liveness probe's, see internal/fabric's conn).
func TestGroupScale(t *testing.T) {
	type row struct {
		n                                  int
		join                               float64
		pinJoin, thrJoin, pinUsed, thrUsed int
	}
	var rows []row
	for _, n := range []int{2, 4, 8, 16} {
		l := newLaunch(t, "scale", n)
		outs := l.run(4 * time.Minute)
		if t.Failed() {
			t.FailNow()
		}
		r := row{n: n}
		for _, out := range outs {
			num := func(key string) int {
				v, err := strconv.Atoi(value(t, out, key))
				if err != nil {
					t.Fatalf("%d ranks: %s: %v", n, key, err)
				}
				return v
			}
			j, err := strconv.ParseFloat(value(t, out, "joined"), 64)
			if err != nil {
				t.Fatalf("%d ranks: joined: %v", n, err)
			}
			r.join = max(r.join, j)
			r.pinJoin, r.thrJoin = max(r.pinJoin, num("vmpin_join")), max(r.thrJoin, num("threads_join"))
			r.pinUsed, r.thrUsed = max(r.pinUsed, num("vmpin_used")), max(r.thrUsed, num("threads_used"))
			if q, u := num("qps_join"), num("qps_used"); q != 2 || u != 2*n {
				t.Errorf("%d ranks: a rank has %d QPs once joined and %d after talking to every rank; want 2 (its loopback pair) and %d", n, q, u, 2*n)
			}
		}
		rows = append(rows, r)
	}
	fmt.Printf("group scale: ranks, longest join (s), most VmPin joined / after the accumulates (kB), most threads joined / after\n")
	for _, r := range rows {
		fmt.Printf("group scale: %2d ranks  join %.2f s  VmPin %d / %d kB  threads %d / %d\n",
			r.n, r.join, r.pinJoin, r.pinUsed, r.thrJoin, r.thrUsed)
	}
	for _, r := range rows[2:] {
		if r.pinJoin != rows[1].pinJoin || r.pinUsed != rows[1].pinUsed {
			t.Errorf("%d ranks pin %d kB joined and %d kB after the accumulates; 4 ranks pin %d and %d: the pinned memory grows with the group",
				r.n, r.pinJoin, r.pinUsed, rows[1].pinJoin, rows[1].pinUsed)
		}
	}
	if rows[0].pinJoin > rows[1].pinJoin {
		t.Errorf("2 ranks pin %d kB, more than 4 ranks' %d kB", rows[0].pinJoin, rows[1].pinJoin)
	}
}
