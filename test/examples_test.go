//go:build integration

package test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestExamples runs the programs of examples/ as a user would, with the
// launcher, 4 ranks each. They are built outside the test (the test VM
// may have no Go toolchain): RMA_EXAMPLES_DIR names the directory that holds
// rmarun and the example binaries (make integration sets it). Each program
// checks its own result and exits non-zero when it is wrong; the test also
// wants rank 0's line that says the check passed.
func TestExamples(t *testing.T) {
	requireDevice(t)
	dir := os.Getenv("RMA_EXAMPLES_DIR")
	if dir == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("RMA_EXAMPLES_DIR is not set: in CI the examples must run (make integration builds them)")
		}
		t.Skip("RMA_EXAMPLES_DIR is not set; run through make integration")
	}
	for _, tc := range []struct {
		name string
		prog string
		args []string
		want []string // regexps that rank 0's output must match, one line each
	}{
		{"accumulate", "accumulate", nil,
			[]string{`accumulate: B\(j\) = sum .*: correct`}},
		{"mapvals", "mapvals", []string{"-variant", "both"},
			[]string{`mapvals variant 1 .*: correct`, `mapvals variant 2 .*: correct`}},
		{"counter", "counter", []string{"-iters", "500"},
			[]string{`total \d+ \(expected \d+\): correct`}},
		{"mutex", "mutex", []string{"-k", "200"},
			[]string{`mutex \(cas lock\): .*: correct`}},
		{"mutex-ticket", "mutex", []string{"-k", "100", "-lock", "ticket"},
			[]string{`mutex \(ticket lock\): .*: correct`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := runExample(t, dir, tc.prog, tc.args...)
			for _, re := range tc.want {
				if !regexp.MustCompile(`(?m)^\[0\] ` + re).MatchString(out) {
					t.Errorf("%s: no line from rank 0 matching %q", tc.prog, re)
				}
			}
			if strings.Contains(out, "WRONG") {
				t.Errorf("%s reported a wrong result", tc.prog)
			}
		})
	}
}

// TestCounterService runs examples/counter, whose counting loop is written
// once against rma.Window (TestExamples runs it as a group), as a service:
// a server and two clients of 300 adds each; the server checks the total.
func TestCounterService(t *testing.T) {
	requireDevice(t)
	dir := os.Getenv("RMA_EXAMPLES_DIR")
	if dir == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("RMA_EXAMPLES_DIR is not set: in CI the examples must run (make integration builds them)")
		}
		t.Skip("RMA_EXAMPLES_DIR is not set; run through make integration")
	}
	ip := cmIPv4(t)
	l, err := net.Listen("tcp", netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String() // a port free now, for the server's rdma_cm listener
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := append(os.Environ(), "RMA_SECRET="+secret())
	start := func(args ...string) (*exec.Cmd, *lockedBuf) {
		cmd := exec.CommandContext(ctx, filepath.Join(dir, "counter"), args...)
		cmd.Env = env
		out := new(lockedBuf)
		cmd.Stdout, cmd.Stderr, cmd.WaitDelay = out, out, time.Second
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, out
	}
	srv, sout := start("-serve", addr, "-clients", "2", "-iters", "300")
	for !strings.Contains(sout.String(), "serving counter on") {
		if ctx.Err() != nil {
			t.Fatalf("the server did not start listening:\n%s", sout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var clients []*exec.Cmd
	var couts []*lockedBuf
	for range 2 {
		c, out := start("-dial", addr, "-iters", "300")
		clients, couts = append(clients, c), append(couts, out)
	}
	for i, c := range clients {
		err := c.Wait()
		t.Logf("client %d: %v\n%s", i, err, couts[i])
		if err != nil {
			t.Errorf("client %d: %v", i, err)
		}
	}
	err = srv.Wait()
	t.Logf("server: %v\n%s", err, sout)
	if err != nil || !regexp.MustCompile(`(?m)^total 600 \(expected 600\): correct`).MatchString(sout.String()) {
		t.Errorf("server: %v; want its line \"total 600 (expected 600): correct\"", err)
	}
}

// lockedBuf is a bytes.Buffer that a command writes while the test reads.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// runExample runs dir/rmarun -n 4 dir/prog args... and returns its combined
// output; the test fails if it does not exit with 0.
func runExample(t *testing.T, dir, prog string, args ...string) string {
	t.Helper()
	for _, f := range []string{"rmarun", prog} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatalf("RMA_EXAMPLES_DIR=%s: %v", dir, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	argv := append([]string{"-n", "4", "-timeout", "4m", filepath.Join(dir, prog)}, args...)
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "rmarun"), argv...)
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	b, err := cmd.CombinedOutput()
	out := string(b)
	t.Logf("rmarun %s (%v):\n%s", strings.Join(argv, " "), time.Since(start).Round(time.Millisecond), out)
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		t.Fatalf("%s exited with code %d", prog, ee.ExitCode())
	case err != nil:
		t.Fatalf("%s: %v", prog, err)
	}
	return out
}
