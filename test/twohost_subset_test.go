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
// the three kinds of epoch, and Put and Get of many small blocks (through
// the target's engine with PackSmallBlocks). Each worker checks its own results against MPI's semantics
// and exits non-zero when they are wrong; each host's test starts its own ranks, wants them
// all to exit 0, and checks the result lines of its ranks that the one-host test checks.
func TestTwoHostSubset(t *testing.T) {
	me := twoHostRank(t)
	seed := os.Getenv("RMA_CONF_SEED") // both hosts must run the same operations
	if seed == "" {
		seed = "20261123"
	}
	acrossHosts(t, me, 17200, []twoHostCase{
		{"conf-mixed", 4, []string{"RMA_CONF_SEED=" + seed}, map[int][]string{0: {"mixed"}}, nil},
		{"reqepochs", 3, nil, nil, nil},
		{"accall", 4, nil, map[int][]string{0: {"pairs", "routes"}}, nil},
		{"fence", 4, nil, map[int][]string{3: {"fence"}}, nil},
		{"exclusive", 4, nil, map[int][]string{0: {"counter"}}, map[string]string{"counter": strconv.Itoa(4 * exclusiveIters)}},
		{"pscw", 3, nil, map[int][]string{0: {"pscw"}}, nil},
		{"manyblocks", 3, nil, map[int][]string{0: {"manyblocks", "big_requests", "plain_requests"}, 1: {"manyblocks", "big_requests"}, 2: {"manyblocks", "big_requests"}},
			map[string]string{"manyblocks": "ok", "big_requests": "0", "plain_requests": "0"}},
	})
}

// TestTwoHostFlood: engines on two hosts reply to each other with long
// replies (64000-byte GetAccumulates from 8 goroutines of each of 4 ranks)
// with one receive buffer each, so that the peers' NICs retry (RNR): every
// call must succeed, slower. Not part of make test: on the emulated
// one-CPU guests the retries can starve the guests' network for seconds,
// so that TCP connections time out and live peers are reported lost (4
// runs of 7 did so, 4 to 24 s in).
func TestTwoHostFlood(t *testing.T) {
	me := twoHostRank(t)
	acrossHosts(t, me, 17300, []twoHostCase{
		{"flood", 4, []string{"RMA_RECV_BUFFERS=1"}, map[int][]string{0: {"flood", "flood_ms"}, 1: {"flood", "flood_ms"}}, nil},
	})
}

// twoHostCase is a worker run with its ranks on both hosts (even ranks on
// host0): its size, its ranks' environment, the keys the output of a rank
// must have, and values some keys must have.
type twoHostCase struct {
	role  string
	size  int
	env   []string
	check map[int][]string
	exact map[string]string
}

// acrossHosts runs each case, this host's ranks of it (me: 0 or 1), the
// i-th case's group listening on host0's port base+i.
func acrossHosts(t *testing.T, me, base int, cases []twoHostCase) {
	for i, tc := range cases {
		t.Run(tc.role, func(t *testing.T) {
			l := &launch{t: t, role: tc.role, size: tc.size, addr: fmt.Sprintf("10.77.0.1:%d", base+i),
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
