//go:build integration

package test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// TestTwoHostSubset runs integration workers with their ranks spread over the two hosts of
// rxevm -hosts 2 (even ranks on host0, odd ranks on host1): the conformance checks of mixed
// ops on one word and of request completion, the accumulate of every (op, datatype) pair,
// the three kinds of epoch, and engines replying to each other with one receive buffer
// each (flood). Each worker checks its own results against MPI's semantics
// and exits non-zero when they are wrong; each host's test starts its own ranks, wants them
// all to exit 0, and checks the result lines of its ranks that the one-host test checks.
func TestTwoHostSubset(t *testing.T) {
	me := twoHostRank(t)
	seed := os.Getenv("RMA_CONF_SEED") // both hosts must run the same operations
	if seed == "" {
		seed = "20261123"
	}
	for i, tc := range []struct {
		role  string
		size  int
		env   []string
		check map[int][]string // rank -> keys its output must have
		exact map[string]string
	}{
		{"conf-mixed", 4, []string{"RMA_CONF_SEED=" + seed}, map[int][]string{0: {"mixed"}}, nil},
		{"reqepochs", 3, nil, nil, nil},
		{"accall", 4, nil, map[int][]string{0: {"pairs", "routes"}}, nil},
		{"fence", 4, nil, map[int][]string{3: {"fence"}}, nil},
		{"exclusive", 4, nil, map[int][]string{0: {"counter"}}, map[string]string{"counter": strconv.Itoa(4 * exclusiveIters)}},
		{"pscw", 3, nil, map[int][]string{0: {"pscw"}}, nil},
		{"flood", 4, []string{"RMA_RECV_BUFFERS=1"}, map[int][]string{0: {"flood", "flood_ms"}, 1: {"flood", "flood_ms"}}, nil},
	} {
		t.Run(tc.role, func(t *testing.T) {
			l := &launch{t: t, role: tc.role, size: tc.size, addr: fmt.Sprintf("10.77.0.1:%d", 17200+i),
				secret: twoHostSecret, dir: t.TempDir(), env: tc.env}
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			var procs []*proc
			for r := me; r < tc.size; r += 2 {
				procs = append(procs, l.start(ctx, r, l.secret))
			}
			start := time.Now()
			outs := l.wait(procs)
			t.Logf("%d ranks across two hosts, %d here: %v", tc.size, len(procs), time.Since(start).Round(time.Millisecond))
			for j, p := range procs {
				for _, key := range tc.check[p.rank] {
					v := value(t, outs[j], key)
					if want, ok := tc.exact[key]; ok && v != want {
						t.Errorf("rank %d: %s=%s, want %s", p.rank, key, v, want)
					}
				}
			}
		})
	}
}
