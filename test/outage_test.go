//go:build integration

package test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/onesided/rma/group"
	"github.com/onesided/rma/internal/fabric"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/win"
)

func init() { workers["tcpoutage"] = workTCPOutage }

// tcpOutage is how long TestTCPOutage cuts TCP: longer than the liveness
// connections' keep-alive timeout (3 s for the 1 s peer timeout).
const tcpOutage = 3500 * time.Millisecond

// workTCPOutage (2 ranks): each adds 1 to a counter at the other with
// FetchAndOp every 10 ms, before, during and after an outage of every TCP
// connection (the test drops all traffic on lo; on one host, rxe's traffic
// does not cross lo, so RDMA goes on). No call may fail, no rank may be
// lost, and each counter must equal the other rank's successful calls.
func workTCPOutage(ctx context.Context, g *group.Group) error {
	dir, me := os.Getenv("RMA_TEST_DIR"), g.Rank()
	other := 1 - me
	w, err := win.Allocate(ctx, g, 8, 8)
	if err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if me == 0 {
		os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644)
	}
	n, during := 0, 0
	var restored time.Time
	for {
		if restored.IsZero() {
			if _, err := os.Stat(filepath.Join(dir, "restored")); err == nil {
				restored = time.Now()
			}
		} else if time.Since(restored) > 4*time.Second {
			break
		}
		if _, err := os.Stat(filepath.Join(dir, "cut")); err == nil && restored.IsZero() {
			during++
		}
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, err := win.FetchAndOp(c, w, int64(1), other, 0, op.Sum)
		cancel()
		if err != nil {
			return fmt.Errorf("FetchAndOp %d to rank %d: %w", n+1, other, err)
		}
		n++
		time.Sleep(10 * time.Millisecond)
	}
	if err := fabric.OfGroup(g).PeerErr(other); err != nil {
		return fmt.Errorf("rank %d lost after the outage: %w", other, err)
	}
	fmt.Printf("rank %d: %d FetchAndOps, %d of them during the outage\n", me, n, during)
	fmt.Printf("sent=%d\n", n)
	if err := g.Barrier(ctx); err != nil {
		return fmt.Errorf("barrier after the outage: %w", err)
	}
	var mine [8]byte
	if err := w.Get(ctx, mine[:], me, 0); err != nil {
		return err
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	fmt.Printf("received=%d\n", binary.NativeEndian.Uint64(mine[:]))
	if during == 0 {
		return fmt.Errorf("no FetchAndOp during the outage")
	}
	return w.Free(ctx)
}

// TestTCPOutage: see workTCPOutage. On the previous code the liveness
// connections' keep-alive timeout marked the peer lost.
func TestTCPOutage(t *testing.T) {
	l := newLaunch(t, "tcpoutage", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	procs := l.startAll(ctx)
	if err := waitFile(ctx, l.file("ready")); err != nil {
		t.Fatal(err)
	}
	tc := func(args ...string) {
		if out, err := exec.Command("tc", args...).CombinedOutput(); err != nil {
			t.Fatalf("tc %v: %v\n%s", args, err, out)
		}
	}
	tc("qdisc", "add", "dev", "lo", "root", "netem", "loss", "100%")
	os.WriteFile(l.file("cut"), nil, 0o644)
	time.Sleep(tcpOutage)
	tc("qdisc", "del", "dev", "lo", "root")
	os.WriteFile(l.file("restored"), nil, 0o644)
	t.Logf("TCP on lo cut for %v", tcpOutage)
	outs := l.wait(procs)
	for r := range 2 {
		sent, got := value(t, outs[1-r], "sent"), value(t, outs[r], "received")
		if sent != got {
			t.Errorf("rank %d received %s FetchAndOps, rank %d made %s", r, got, 1-r, sent)
		}
		if _, err := strconv.Atoi(got); err != nil {
			t.Error(err)
		}
	}
}
