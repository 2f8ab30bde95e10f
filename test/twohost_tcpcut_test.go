//go:build integration

package test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/onesided/rma/group"
	"github.com/onesided/rma/internal/fabric"
	"github.com/onesided/rma/win"
)

// TestTwoHostTCPCut's wire: 5% loss throughout, and every TCP frame dropped for tcpCutFor
// from when both ranks have joined (RDMA's UDP goes on). The cut is longer than the
// liveness connections' keep-alive timeout (3 s for the 1 s peer timeout), so they fail,
// and each rank's liveness probes the other over RDMA, on the queue pair that carries its
// 1 MiB Puts.
const (
	tcpCutWire   = "loss=5%,seed=21"
	tcpCutCut    = "loss=5%,cut=tcp,seed=22"
	tcpCutFor    = 6 * time.Second
	tcpCutRun    = 14 * time.Second // each rank's Puts, from the barrier
	tcpCutSecret = "rma-two-host-tcpcut"
)

func init() { workers["tcpcut"] = workTCPCut }

// TestTwoHostTCPCut: one rank per host; each Puts 1 MiB to the other and flushes, again and
// again for tcpCutRun, while the wire loses 5% of its frames and, for tcpCutFor, every TCP
// frame. No call may fail and no rank may be reported lost: a probe that waits behind a
// long WRITE the transport is retrying is no evidence of death while the WRITE's pieces
// complete. (Before that rule, a probe unanswered for the 1 s peer timeout, with the
// liveness connection failed, declared the live peer lost.) It needs rxevm -hosts 2 with
// -wire.
func TestTwoHostTCPCut(t *testing.T) {
	rank := twoHostRank(t)
	if os.Getenv("RMA_WIRE") == "" {
		t.Fatal("no relay on the wire: run it under rxevm -hosts 2 -wire none")
	}
	if rank == 0 {
		fmt.Println(rxevmWire + tcpCutWire)
		t.Cleanup(func() { fmt.Println(rxevmWire + "none") })
	}
	l := &launch{t: t, role: "tcpcut", size: 2, addr: "10.77.0.1:17200", secret: tcpCutSecret, dir: t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	p := l.start(ctx, rank, tcpCutSecret)
	if rank == 0 {
		// Rank 0 writes "ready" once both have joined; if it fails first,
		// its output (from wait) says why.
		rctx, rcancel := context.WithTimeout(ctx, time.Minute)
		if err := waitFile(rctx, l.file("ready")); err != nil {
			t.Errorf("rank 0 not ready after a minute (%v): TCP not cut", err)
		} else {
			fmt.Println(rxevmWire + tcpCutCut)
			time.Sleep(tcpCutFor)
			fmt.Println(rxevmWire + tcpCutWire)
			t.Logf("TCP cut for %v", tcpCutFor)
		}
		rcancel()
	}
	out := l.wait([]*proc{p})[0]
	if got := value(t, out, "tcpcut"); got != "ok" {
		t.Errorf("rank %d: tcpcut=%s, want ok", rank, got)
	}
}

func workTCPCut(ctx context.Context, g *group.Group) error {
	me, peer := g.Rank(), 1-g.Rank()
	const size = 1 << 20
	w, err := win.Allocate(ctx, g, 2*size, 1)
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
		os.WriteFile(os.Getenv("RMA_TEST_DIR")+"/ready", nil, 0o644)
	}
	block := make([]byte, size)
	start := time.Now()
	n := 0
	var slowest time.Duration
	for time.Since(start) < tcpCutRun {
		for i := range block {
			block[i] = byte(i*7 + n*13 + 41*me)
		}
		t0 := time.Now()
		if err := w.Put(ctx, block, peer, me*size); err != nil {
			return fmt.Errorf("Put %d at %v: %w", n, time.Since(start).Round(time.Millisecond), err)
		}
		if err := w.Flush(ctx, peer); err != nil {
			return fmt.Errorf("Flush after Put %d at %v: %w", n, time.Since(start).Round(time.Millisecond), err)
		}
		slowest = max(slowest, time.Since(t0))
		n++
	}
	if err := fabric.OfGroup(g).PeerErr(peer); err != nil {
		return fmt.Errorf("rank %d reported lost: %w", peer, err)
	}
	back := make([]byte, size)
	if err := w.Get(ctx, back, peer, me*size); err != nil {
		return err
	}
	if err := w.Flush(ctx, peer); err != nil {
		return err
	}
	if !bytes.Equal(back, block) {
		return fmt.Errorf("the last Put read back differs")
	}
	fmt.Printf("rank %d: %d Puts of 1 MiB + Flush in %v, the slowest %v\n", me, n, time.Since(start).Round(time.Millisecond), slowest.Round(time.Millisecond))
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	fmt.Println("tcpcut=ok")
	return w.Free(ctx)
}
