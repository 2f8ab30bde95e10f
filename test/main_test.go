//go:build integration

// Package test holds the integration tests: they run real processes that
// form groups over a real RDMA device (rxe in the test VM, or the host's
// own device). Each test starts its ranks as separate OS processes of this
// same test binary, with RMA_TEST_ROLE naming the part each one plays.
package test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/onesided/rma/verbs"
)

func TestMain(m *testing.M) {
	if role := os.Getenv("RMA_TEST_ROLE"); role != "" {
		os.Exit(runWorker(role))
	}
	devs, err := verbs.Devices()
	switch {
	case err != nil:
		fmt.Println("integration: listing RDMA devices:", err)
	case len(devs) == 0:
		fmt.Println("integration: no RDMA device on this host")
	default:
		for _, d := range devs {
			fmt.Printf("integration: RDMA device %s (netdevs %s)\n", d.Name, strings.Join(d.Netdevs, ","))
		}
	}
	verbs.TrackObjects(true)
	code := m.Run()
	if open := verbs.OpenObjects(); len(open) > 0 {
		fmt.Printf("integration: %d verbs objects left open:\n%s\n", len(open), strings.Join(open, "\n"))
		code = 1
	}
	os.Exit(code)
}

// requireDevice fails (in CI) or skips (elsewhere) when there is no RDMA device.
func requireDevice(t *testing.T) {
	t.Helper()
	devs, err := verbs.Devices()
	if err == nil && len(devs) > 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("no RDMA device (err %v): integration tests must run on one in CI", err)
	}
	t.Skip("no RDMA device; run through the test VM (make test)")
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func secret() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// proc is one started rank.
type proc struct {
	rank int
	cmd  *exec.Cmd
	out  bytes.Buffer
}

// group describes the processes of one test.
type launch struct {
	t      *testing.T
	role   string
	size   int
	addr   string
	secret string
	dir    string // RMA_TEST_DIR: where workers write results
	env    []string
}

func newLaunch(t *testing.T, role string, size int, env ...string) *launch {
	requireDevice(t)
	return &launch{t: t, role: role, size: size, addr: freeAddr(t), secret: secret(), dir: t.TempDir(), env: env}
}

// start starts one process with the given rank and secret.
func (l *launch) start(ctx context.Context, rank int, secret string, extra ...string) *proc {
	p := &proc{rank: rank}
	p.cmd = exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	p.cmd.Cancel = quitProcess(p.cmd)
	p.cmd.Env = append(os.Environ(),
		"RMA_TEST_ROLE="+l.role,
		"RMA_RANK="+strconv.Itoa(rank),
		"RMA_SIZE="+strconv.Itoa(l.size),
		"RMA_ADDR="+l.addr,
		"RMA_SECRET="+secret,
		"RMA_TEST_DIR="+l.dir,
	)
	p.cmd.Env = append(p.cmd.Env, l.env...)
	p.cmd.Env = append(p.cmd.Env, extra...)
	p.cmd.Stdout = &p.out
	p.cmd.Stderr = &p.out
	p.cmd.WaitDelay = time.Second
	if err := p.cmd.Start(); err != nil {
		l.t.Fatalf("start rank %d: %v", rank, err)
	}
	return p
}

// run starts every rank, waits for all of them and fails the test if any
// failed. It returns each rank's output.
func (l *launch) run(timeout time.Duration) []string {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return l.wait(l.startAll(ctx))
}

// startAll starts every rank.
func (l *launch) startAll(ctx context.Context) []*proc {
	procs := make([]*proc, l.size)
	for r := range procs {
		procs[r] = l.start(ctx, r, l.secret)
	}
	return procs
}

func (l *launch) wait(procs []*proc) []string {
	l.t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(procs))
	for i, p := range procs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = p.cmd.Wait() }()
	}
	wg.Wait()
	outs := make([]string, len(procs))
	for i, p := range procs {
		outs[i] = p.out.String()
		l.t.Logf("rank %d output:\n%s", p.rank, outs[i])
		if errs[i] != nil {
			l.t.Errorf("rank %d: %v", p.rank, errs[i])
		}
	}
	if l.t.Failed() {
		l.t.FailNow()
	}
	return outs
}

func (l *launch) file(name string) string { return filepath.Join(l.dir, name) }

// finished checks that every rank's output says key=ok (its worker
// finished).
func finished(t *testing.T, outs []string, key string) {
	t.Helper()
	for r, out := range outs {
		if value(t, out, key) != "ok" {
			t.Errorf("rank %d did not finish", r)
		}
	}
}

// value finds "key=value" in a worker's output.
func value(t *testing.T, out, key string) string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+"="); ok {
			return v
		}
	}
	t.Fatalf("no %s= in output:\n%s", key, out)
	return ""
}

// quitProcess is the Cancel of a test's child process whose context ended:
// SIGQUIT, so that the Go runtime prints every goroutine's stack into the
// output the test shows (the process is killed WaitDelay later if it is
// still there).
func quitProcess(cmd *exec.Cmd) func() error {
	return func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
}
