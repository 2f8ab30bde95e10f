//go:build integration

package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSequencer runs examples/sequencer as a service would be run: a
// server handing out 60,000 ids, clients that come and go. Three clients
// start; once 5,000 ids are out, one is SIGKILLed and two more start, one
// of which holds the record's exclusive lock and is SIGKILLed there; the
// others (which then wait for that lock) must go on until the ids run
// out. The server's expvar page must show its counters during the run,
// and its final check must pass with at most one unrecorded id per killed
// client: every id recorded exactly once, the record consistent.
func TestSequencer(t *testing.T) {
	requireDevice(t)
	dir := os.Getenv("RMA_EXAMPLES_DIR")
	if dir == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("RMA_EXAMPLES_DIR is not set: in CI the examples must run (make integration builds them)")
		}
		t.Skip("RMA_EXAMPLES_DIR is not set; run through make integration")
	}
	bin := filepath.Join(dir, "sequencer")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tmp := t.TempDir()
	ip := cmIPv4(t)
	env := append(os.Environ(), "RMA_SECRET="+secret())
	type proc struct {
		name string
		cmd  *exec.Cmd
		out  strings.Builder
		done chan error
	}
	start := func(name string, args ...string) *proc {
		p := &proc{name: name, done: make(chan error, 1)}
		p.cmd = exec.CommandContext(ctx, bin, args...)
		p.cmd.Env = env
		p.cmd.Stdout = &p.out
		p.cmd.Stderr = &p.out
		p.cmd.WaitDelay = time.Second
		if err := p.cmd.Start(); err != nil {
			t.Fatalf("start %s: %v", name, err)
		}
		go func() { p.done <- p.cmd.Wait() }()
		return p
	}
	// wait waits for p; it must have failed exactly when killed says so.
	wait := func(p *proc, killed bool) string {
		t.Helper()
		err := <-p.done
		out := p.out.String()
		t.Logf("%s (%v):\n%s", p.name, err, out)
		if killed {
			if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("%s: %v, want killed by SIGKILL", p.name, err)
			}
		} else if err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		return out
	}
	waitFile := func(name string, p *proc) string {
		t.Helper()
		for {
			if b, err := os.ReadFile(name); err == nil {
				return string(b)
			}
			select {
			case err := <-p.done:
				p.done <- err
				wait(p, false)
				t.Fatalf("%s ended before writing %s", p.name, name)
			case <-ctx.Done():
				t.Fatalf("no %s: %v", name, ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}

	const ids, killed = 60000, 2
	addrFile, stopFile := filepath.Join(tmp, "addr"), filepath.Join(tmp, "stop")
	srv := start("server", "-serve", ip.String()+":0", "-ids", strconv.Itoa(ids), "-http", "127.0.0.1:0",
		"-addr-file", addrFile, "-stop-file", stopFile, "-max-holes", strconv.Itoa(killed))
	var addr, httpAddr string
	for _, line := range strings.Split(waitFile(addrFile, srv), "\n") {
		if v, ok := strings.CutPrefix(line, "addr="); ok {
			addr = v
		} else if v, ok := strings.CutPrefix(line, "http="); ok {
			httpAddr = v
		}
	}
	// vars reads the server's expvar page.
	vars := func() (next int64, stats map[string]any) {
		t.Helper()
		resp, err := http.Get("http://" + httpAddr + "/debug/vars")
		if err != nil {
			t.Fatalf("expvar: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var v struct {
			Next    int64          `json:"sequencer_next_id"`
			Service map[string]any `json:"rma_service"`
		}
		if err := json.Unmarshal(b, &v); err != nil || v.Service == nil {
			t.Fatalf("expvar page without the service's counters (%v):\n%s", err, b)
		}
		return v.Next, v.Service
	}
	client := func(name string, tag int, args ...string) *proc {
		return start(name, append([]string{"-dial", addr, "-tag", strconv.Itoa(tag)}, args...)...)
	}
	var live []*proc
	for i := 1; i <= 3; i++ {
		live = append(live, client(fmt.Sprintf("client %d", i), i))
	}
	for {
		if next, _ := vars(); next >= 5000 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("5,000 ids were not handed out in time")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := live[0].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	wait(live[0], true)
	live = append(live[1:], client("client 4", 4))
	holdFile := filepath.Join(tmp, "holding")
	holder := client("client 5 (holds the lock)", 5, "-record-every", "1", "-hold", "1m", "-hold-file", holdFile)
	waitFile(holdFile, holder)
	next, stats := vars()
	t.Logf("expvar while client 5 holds the lock: next id %d, rma_service %v", next, stats)
	if c, _ := stats["Connects"].(float64); c < 4 {
		t.Errorf("expvar: Connects=%v, want at least 4", stats["Connects"])
	}
	if w, _ := stats["Windows"].(map[string]any); w["seq"] == nil {
		t.Errorf("expvar: no window seq in %v", stats["Windows"])
	}
	time.Sleep(200 * time.Millisecond) // the others now wait for the lock
	if err := holder.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	wait(holder, true)
	taken := 0
	for _, p := range live {
		n, err := strconv.Atoi(strings.Fields(value(t, wait(p, false), "taken"))[0])
		if err != nil {
			t.Fatal(err)
		}
		taken += n
	}
	if taken == 0 {
		t.Fatal("the clients that lived took no ids")
	}
	if err := os.WriteFile(stopFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out := wait(srv, false)
	if !strings.Contains(out, "sequencer: every id handed out exactly once") {
		t.Fatalf("the server's check did not pass:\n%s", out)
	}
	if got := value(t, out, "ids"); !strings.HasPrefix(got, strconv.Itoa(ids)+" ") {
		t.Errorf("ids=%s, want %d handed out", got, ids)
	}
	if r := out[strings.Index(out, "lock_recoveries="):]; strings.HasPrefix(r, "lock_recoveries=0") {
		t.Errorf("the server recovered no lock, want the killed holder's: %s", r)
	}
	fmt.Printf("sequencer: %s (the live clients took %d)\n", strings.TrimSpace(out[strings.Index(out, "ids="):strings.Index(out, "sequencer: every")]), taken)
}
