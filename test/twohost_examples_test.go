//go:build integration

package test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestTwoHostExamples runs the programs of examples/ with 4 ranks across the two hosts of
// rxevm -hosts 2: ranks 0 and 2 on host0, ranks 1 and 3 on host1, so that every rank has a
// peer on each host (NIC atomics and the engine over the wire and over the local rxe0 in
// the same run). Each host's test starts its own two ranks as a launcher would (RMA_RANK,
// RMA_SIZE, RMA_ADDR of rank 0 on host0, RMA_SECRET); every rank must exit 0, and host0's
// test wants rank 0's line that says the result is correct. RMA_EXAMPLES_DIR names the
// directory of the example binaries, as for TestExamples.
func TestTwoHostExamples(t *testing.T) {
	me := twoHostRank(t)
	dir := os.Getenv("RMA_EXAMPLES_DIR")
	if dir == "" {
		t.Fatal("RMA_EXAMPLES_DIR is not set: it names the directory of the example binaries")
	}
	for i, tc := range []struct {
		prog string
		args []string
		want string // a regexp rank 0's output must match
	}{
		{"accumulate", nil, `accumulate: B\(j\) = sum .*: correct`},
		{"counter", []string{"-iters", "200"}, `total \d+ \(expected \d+\): correct`},
		{"mutex", []string{"-k", "50"}, `mutex \(cas lock\): .*: correct`},
		{"mapvals", []string{"-variant", "both"}, `mapvals variant 2 .*: correct`},
	} {
		t.Run(tc.prog, func(t *testing.T) {
			addr := fmt.Sprintf("10.77.0.1:%d", 17100+i)
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			outs := make([]bytes.Buffer, 2)
			errs := make([]error, 2)
			var wg sync.WaitGroup
			start := time.Now()
			for j := range 2 {
				rank := me + 2*j
				cmd := exec.CommandContext(ctx, filepath.Join(dir, tc.prog), tc.args...)
				cmd.Env = append(os.Environ(), "RMA_RANK="+strconv.Itoa(rank), "RMA_SIZE=4",
					"RMA_ADDR="+addr, "RMA_SECRET="+twoHostSecret)
				cmd.Stdout, cmd.Stderr = &outs[j], &outs[j]
				cmd.WaitDelay = 10 * time.Second
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[j] = cmd.Run()
				}()
			}
			wg.Wait()
			took := time.Since(start).Round(time.Millisecond)
			for j := range 2 {
				rank := me + 2*j
				out := outs[j].String()
				t.Logf("rank %d on host%d (%v):\n%s", rank, me, took, out)
				if errs[j] != nil {
					t.Errorf("rank %d: %v", rank, errs[j])
				}
				if strings.Contains(out, "WRONG") {
					t.Errorf("rank %d reported a wrong result", rank)
				}
				if rank == 0 && !regexp.MustCompile(`(?m)^`+tc.want).MatchString(out) {
					t.Errorf("rank 0: no line matching %q", tc.want)
				}
			}
		})
	}
}
