//go:build integration

package test

import (
	"encoding/binary"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
)

func TestAccumulateEveryPair(t *testing.T) {
	l := newLaunch(t, "accall", 4)
	outs := l.run(5 * time.Minute)
	t.Logf("checked: %s", value(t, outs[0], "pairs"))
	t.Logf("routes (rank 0): %s", value(t, outs[0], "routes"))
}

// permutation checks that files name.0 .. name.N-1 hold, together, exactly
// the values 0..total-1.
func permutation(t *testing.T, l *launch, name string, total int) {
	t.Helper()
	var all []int
	for r := 0; r < l.size; r++ {
		b, err := os.ReadFile(l.file(name + "." + strconv.Itoa(r)))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+8 <= len(b); i += 8 {
			all = append(all, int(int64(binary.LittleEndian.Uint64(b[i:]))))
		}
	}
	slices.Sort(all)
	if len(all) != total {
		t.Fatalf("%s: %d old values, want %d", name, len(all), total)
	}
	for i, v := range all {
		if v != i {
			t.Fatalf("%s: sorted old values [%d] = %d: not a permutation of 0..%d", name, i, v, total-1)
		}
	}
}

func TestFetchThroughEngine(t *testing.T) {
	l := newLaunch(t, "fetchengine", 4)
	outs := l.run(5 * time.Minute)
	if got := value(t, outs[0], "i32"); got != strconv.Itoa(4*fetchIters) {
		t.Errorf("int32 counter %s, want %d", got, 4*fetchIters)
	}
	if got := value(t, outs[0], "f64"); got != strconv.Itoa(4*fetchIters) {
		t.Errorf("float64 counter %s, want %d", got, 4*fetchIters)
	}
	permutation(t, l, "i32", 4*fetchIters)
	permutation(t, l, "f64", 4*fetchIters)
	t.Logf("engine FetchAndOp/GetAccumulate: %s us each (rank 0, 4 ranks at once)", value(t, outs[0], "engine_fetch_us"))
}

func TestMixedOpsRouting(t *testing.T) {
	l := newLaunch(t, "anyop", 4)
	outs := l.run(5 * time.Minute)
	if got := value(t, outs[0], "anyop"); got != strconv.Itoa(4*mixIters) {
		t.Errorf("any-op window: SUM and MAX on one location gave %s, want %d", got, 4*mixIters)
	}
	if got := value(t, outs[0], "nicsum"); got != strconv.Itoa(4*mixIters) {
		t.Errorf("default window NIC SUM: %s, want %d", got, 4*mixIters)
	}
	if got := value(t, outs[0], "enginemax"); got != strconv.Itoa(3*1000+mixIters-1) {
		t.Errorf("default window engine MAX: %s, want %d", got, 3*1000+mixIters-1)
	}
}

func TestDerivedLayouts(t *testing.T) {
	l := newLaunch(t, "layouts", 4)
	outs := l.run(5 * time.Minute)
	value(t, outs[0], "layouts")
}

func TestAccumulate64MiB(t *testing.T) {
	l := newLaunch(t, "big", 2)
	outs := l.run(10 * time.Minute)
	value(t, outs[0], "big")
}

func TestAccumulateOrdering(t *testing.T) {
	l := newLaunch(t, "order", 2)
	outs := l.run(5 * time.Minute)
	value(t, outs[1], "order")
}

// TestLatency reports one-element latencies (no assertion on time: the
// benchmark tool compares them with perftest); it checks the calls work
// one at a time between two idle processes.
func TestLatency(t *testing.T) {
	l := newLaunch(t, "latency", 2)
	outs := l.run(5 * time.Minute)
	for _, k := range []string{"fetch_and_op_nic_us", "get_accumulate_engine_us", "accumulate_flush_engine_us"} {
		t.Logf("%s = %s", k, value(t, outs[1], k))
	}
}

// TestPutGetManyBlocks: with PackSmallBlocks, Put, Get and Rget whose
// target layout has 3000 blocks of 12 bytes go to the target's engine
// packed (a few requests, not one RDMA operation per block), and land
// where the layout says in passive, fence and PSCW epochs and in a dynamic
// window; a layout of 4 KiB blocks goes by RDMA (no engine request), and
// so does the small-block one on a window without the option.
func TestPutGetManyBlocks(t *testing.T) {
	l := newLaunch(t, "manyblocks", 3)
	outs := l.run(5 * time.Minute)
	finished(t, outs, "manyblocks")
	for r, out := range outs {
		s, err := strconv.Atoi(value(t, out, "small_requests"))
		if err != nil || s < 3 || s > 100 {
			t.Errorf("rank %d: its engine applied %s requests for a PutTo, a GetTo and an RGetTo of 3000 blocks each, want 3 to 100", r, value(t, out, "small_requests"))
		}
		if b := value(t, out, "big_requests"); b != "0" {
			t.Errorf("rank %d: its engine applied %s requests for a PutTo and a GetTo of 4 KiB blocks, want 0 (RDMA)", r, b)
		}
		if p := value(t, out, "plain_requests"); p != "0" {
			t.Errorf("rank %d: its engine applied %s requests for a PutTo and a GetTo of 3000 blocks without PackSmallBlocks, want 0 (RDMA)", r, p)
		}
	}
}
