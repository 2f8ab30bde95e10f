//go:build integration

package test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Every reduction collective (Reduce, Allreduce, ReduceScatter,
// ReduceScatterBlock, Scan, Exscan), with predefined ops, a commutative
// user op and a non-commutative one, on 0, 1, 7 and 1<<20 elements, equals
// the plain-Go reference on 1, 2, 3, 4 and 8 processes.
func TestColl1(t *testing.T) { testColl(t, 1) }
func TestColl2(t *testing.T) { testColl(t, 2) }
func TestColl3(t *testing.T) { testColl(t, 3) }
func TestColl4(t *testing.T) { testColl(t, 4) }
func TestColl8(t *testing.T) { testColl(t, 8) }

func testColl(t *testing.T, n int) {
	l := newLaunch(t, "coll", n)
	outs := l.run(6 * time.Minute)
	finished(t, outs, "coll")
	for _, line := range strings.Split(outs[0], "\n") {
		if strings.HasPrefix(line, "count ") || strings.HasPrefix(line, "times ") {
			t.Logf("rank 0: %s", line)
		}
	}
	if n > 1 {
		// The non-commutative op's rank-order result, which every
		// collective matched, differs from the reverse order.
		d := value(t, outs[0], "noncommutative_differs")
		k, _ := strconv.Atoi(strings.Split(d, "/")[0])
		if k == 0 {
			t.Errorf("the matrix product in reverse rank order gives the same result (%s): the test proves no order", d)
		}
		t.Logf("matrix product: reverse rank order differs from rank order on %s elements", d)
	}
}

// A commutative user-defined op in Allreduce on 1<<20 float64, timed next
// to the predefined SUM.
func TestCollAllreduceUserOpTiming(t *testing.T) {
	const n = 4
	l := newLaunch(t, "colltime", n)
	outs := l.run(4 * time.Minute)
	line := fmt.Sprintf("Allreduce of 1<<20 float64 on %d ranks (rxe): predefined SUM %s ms, user-defined commutative sum %s ms (mean of %d; best %s / %s ms)",
		n, value(t, outs[0], "allreduce_sum_ms"), value(t, outs[0], "allreduce_user_ms"), timingReps,
		value(t, outs[0], "allreduce_sum_best_ms"), value(t, outs[0], "allreduce_user_best_ms"))
	t.Log(line)
	fmt.Println(line)
}

// A registered user op in Accumulate and GetAccumulate from 4 processes at
// once on one location loses no update.
func TestUserOpAccumulate(t *testing.T) {
	const n = 4
	l := newLaunch(t, "useracc", n)
	outs := l.run(4 * time.Minute)
	want := strconv.Itoa(n * userAccIters)
	for _, key := range []string{"accumulate_total", "getaccumulate_total", "mixed_total"} {
		if got := value(t, outs[0], key); got != want {
			t.Errorf("%s = %s, want %s", key, got, want)
		}
	}
	permutation(t, l, "userolds", n*userAccIters)
	if t.Failed() {
		return
	}
	t.Logf("op %s: %s updates each by Accumulate (mixed with the NIC's SUM) and GetAccumulate, and mixed with SUM on an any-op window, none lost",
		value(t, outs[0], "op"), want)
}

// A rank that has not registered the op refuses it with an error reply.
func TestUserOpUnknownAtTarget(t *testing.T) {
	l := newLaunch(t, "userunknown", 2)
	outs := l.run(2 * time.Minute)
	t.Logf("Accumulate: %s", value(t, outs[0], "accumulate_refused"))
	t.Logf("GetAccumulate: %s", value(t, outs[0], "getaccumulate_refused"))
}
