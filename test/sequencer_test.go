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

	"github.com/onesided/rma/service"
)

// TestSequencer runs examples/sequencer as a service would be run: a
// server handing out 4,096 ids, and clients that come and go. Clients 1
// to 3 start (client 1 without a limit, 2 and 3 for 600 ids each); once
// client 1 has taken 100 ids it is SIGKILLed. Client 5 starts and is
// made to hold the record's exclusive lock; client 4 (600 ids) starts and
// comes to wait for that lock; client 5 is SIGKILLed there, and the
// server must free its lock. Clients 2 to 4 must end with exactly their
// 600 ids; then clients 6 and 7 take the rest until the ids run out. The
// server's and client 1's expvar pages must show their counters during
// the run. The server's final check must pass with at most one hole per
// killed client (every id recorded exactly once, no duplicate, the record
// consistent), all 4,096 ids handed out, and each living client's slots
// exactly the ids it says it took.
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
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("RMA_EXAMPLES_DIR=%s: %v", dir, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	began := time.Now()
	tmp := t.TempDir()
	env := append(os.Environ(), "RMA_SEQ_SECRET="+secret())
	run := func(name string, args ...string) *cmProc {
		t.Helper()
		p := &cmProc{name: name, done: make(chan error, 1)}
		p.cmd = exec.CommandContext(ctx, bin, append(args, "-secret-env", "RMA_SEQ_SECRET")...)
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
	// running fails the test, with p's output, if p has ended.
	running := func(p *cmProc) {
		t.Helper()
		select {
		case err := <-p.done:
			p.done <- err
			p.wait(t, false)
			t.Fatalf("%s ended before its time", p.name)
		default:
		}
	}
	kill := func(p *cmProc) {
		t.Helper()
		running(p)
		if err := p.cmd.Process.Kill(); err != nil {
			t.Fatalf("kill %s: %v", p.name, err)
		}
		p.wait(t, true)
		if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("%s: %v, want killed by SIGKILL", p.name, p.cmd.ProcessState)
		}
	}
	// poll waits until cond holds, checking every 20 ms for at most limit.
	poll := func(what string, limit time.Duration, cond func() bool) {
		t.Helper()
		for end := time.Now().Add(limit); !cond(); {
			if time.Now().After(end) || ctx.Err() != nil {
				t.Fatalf("%s: not within %v", what, limit)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// vars decodes the expvar page of p at addr into v.
	vars := func(p *cmProc, addr string, v any) {
		t.Helper()
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		defer rcancel()
		req, err := http.NewRequestWithContext(rctx, "GET", "http://"+addr+"/debug/vars", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			running(p)
			t.Fatalf("expvar of %s: %v", p.name, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil {
			err = json.Unmarshal(b, v)
		}
		if err != nil {
			t.Fatalf("expvar of %s: %v:\n%s", p.name, err, b)
		}
	}
	type serverVars struct {
		Next    int64                `json:"sequencer_next_id"`
		Service *service.ServerStats `json:"rma_service"`
	}
	serverStats := func(p *cmProc, addr string) (int64, *service.ServerStats) {
		t.Helper()
		var v serverVars
		vars(p, addr, &v)
		if v.Service == nil {
			t.Fatalf("expvar of %s: no rma_service: %+v", p.name, v)
		}
		if _, ok := v.Service.Windows["seq"]; !ok {
			t.Fatalf("expvar of %s: no rma_service with window seq: %+v", p.name, v)
		}
		return v.Next, v.Service
	}

	const ids, killed, per = 4096, 2, 600
	addrFile, stopFile := filepath.Join(tmp, "server.addr"), filepath.Join(tmp, "stop")
	srv := run("server", "-serve", cmIPv4(t).String()+":0", "-ids", strconv.Itoa(ids), "-http", "127.0.0.1:0",
		"-addr-file", addrFile, "-stop-file", stopFile, "-max-holes", strconv.Itoa(killed))
	af := string(waitCMFile(ctx, t, addrFile, srv))
	addr, srvHTTP := value(t, af, "addr"), value(t, af, "http")
	client := func(tag int, args ...string) *cmProc {
		return run(fmt.Sprintf("client %d", tag), append([]string{"-dial", addr, "-tag", strconv.Itoa(tag)}, args...)...)
	}
	limited := []string{"-n", strconv.Itoa(per), "-work", "1ms"}

	// Clients 1 to 3; client 1 is killed once it has 100 ids.
	c1File := filepath.Join(tmp, "client1.addr")
	c1 := client(1, "-work", "1ms", "-http", "127.0.0.1:0", "-addr-file", c1File)
	live := []*cmProc{client(2, limited...), client(3, limited...)}
	c1HTTP := value(t, string(waitCMFile(ctx, t, c1File, c1)), "http")
	var cv struct {
		Client *service.ClientStats  `json:"rma_client"`
		Seq    struct{ Taken int64 } `json:"sequencer"`
	}
	poll("client 1 to take 100 ids", 30*time.Second, func() bool {
		vars(c1, c1HTTP, &cv)
		return cv.Seq.Taken >= 100
	})
	t.Logf("client 1's expvar: sequencer %+v, rma_client %+v", cv.Seq, cv.Client)
	if cv.Client == nil || cv.Client.NICAtomics < uint64(cv.Seq.Taken) {
		t.Errorf("client 1's expvar: rma_client %+v, want at least %d NIC atomics (a fetch-and-add and a CAS per id)", cv.Client, cv.Seq.Taken)
	}
	kill(c1)

	// Client 5 holds the exclusive lock; client 4 comes to wait for it.
	holdFile := filepath.Join(tmp, "holding")
	holder := client(5, "-record-every", "1", "-hold", "1m", "-hold-file", holdFile)
	waitCMFile(ctx, t, holdFile, holder)
	var next int64
	var st *service.ServerStats
	poll("the server's expvar to show clients 1, 2, 3 and 5", 30*time.Second, func() bool {
		next, st = serverStats(srv, srvHTTP)
		return st.Connects >= 4 && st.Windows["seq"].Opens >= 4
	})
	held := 0
	for _, c := range st.Connections {
		held += c.LocksHeld
	}
	t.Logf("server's expvar while client 5 holds the lock: next id %d, %+v", next, *st)
	if held != 1 {
		t.Errorf("server's expvar: %d locks held, want client 5's alone: %+v", held, st.Connections)
	}
	waits, recoveries := st.Windows["seq"].LockWaits, st.LockRecoveries
	live = append(live, client(4, limited...))
	poll("a client to wait for client 5's lock", 30*time.Second, func() bool {
		_, st = serverStats(srv, srvHTTP)
		return st.Windows["seq"].LockWaits > waits
	})
	kill(holder)
	killedAt := time.Now()
	poll("the server to free client 5's lock", 10*time.Second, func() bool {
		_, st = serverStats(srv, srvHTTP)
		return st.LockRecoveries > recoveries
	})
	t.Logf("the server freed the killed holder's lock within %v", time.Since(killedAt).Round(time.Millisecond))

	// Clients 2 to 4 end with their ids; 6 and 7 take the rest.
	taken := map[int]int{}
	records := 0
	result := func(tag int, p *cmProc) {
		t.Helper()
		r := svcStats(t, "taken="+value(t, p.wait(t, false), "taken"))
		taken[tag] = r["taken"]
		records += r["records"]
	}
	for i, p := range live {
		result(i+2, p)
		if taken[i+2] != per {
			t.Errorf("%s took %d ids, want %d", p.name, taken[i+2], per)
		}
	}
	drainers := []*cmProc{client(6), client(7)}
	for i, p := range drainers {
		result(i+6, p)
	}

	if err := os.WriteFile(stopFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out := srv.wait(t, false)
	if !strings.Contains(out, "sequencer: every id handed out exactly once") {
		t.Fatalf("the server's check did not pass:\n%s", out)
	}
	sum := svcStats(t, "ids="+value(t, out, "ids"))
	if sum["ids"] != ids || sum["duplicates"] != 0 || sum["stray"] != 0 || sum["holes"] > killed ||
		sum["connects"] != 7 || sum["lock_recoveries"] < 1 || sum["record_updates"] < records {
		t.Errorf("server: %v; want ids=%d, no duplicates or stray slots, at most %d holes, 7 connects, a lock recovery, at least the %d record updates of the clients that lived",
			sum, ids, killed, records)
	}
	slots := map[int]int{}
	total := sum["holes"]
	for _, f := range strings.Split(value(t, out, "slots_by_tag"), ",") {
		tag, n, _ := strings.Cut(f, ":")
		tg, err1 := strconv.Atoi(tag)
		c, err2 := strconv.Atoi(n)
		if err1 != nil || err2 != nil || tg < 1 || tg > 7 {
			t.Fatalf("slots_by_tag: bad entry %q", f)
		}
		slots[tg] = c
		total += c
	}
	for tag, n := range taken {
		if slots[tag] != n {
			t.Errorf("client %d took %d ids, and %d slots hold its tag", tag, n, slots[tag])
		}
	}
	if slots[5] != 1 || slots[1] < 100 || total != ids {
		t.Errorf("slots by tag %v with %d holes: want 1 for client 5, at least 100 for client 1, %d in all", slots, sum["holes"], ids)
	}
	fmt.Printf("sequencer: %s; slots by tag %v; %v\n", strings.TrimSpace(out[strings.Index(out, "ids="):strings.Index(out, "\n"+"slots_by_tag")]),
		slots, time.Since(began).Round(time.Millisecond))
}
