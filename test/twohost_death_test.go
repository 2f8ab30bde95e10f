//go:build integration

package test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/onesided/rma/coll"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/verbs"
	"github.com/onesided/rma/win"
)

// Death across hosts: rank 1, on host1, dies while rank 0, on host0, calls it on every path.
// In TestTwoHostProcessDeath rank 1's process kills itself (SIGKILL: its host stays up, so
// its kernel closes its connections); in TestTwoHostHostDeath the whole of host1 dies (the
// test on host1 writes rxevm's kill line and rxevm kills host1's guest: no FIN, no RST, no
// reply to anything). Either way every call of rank 0 to rank 1 must fail with ErrPeerLost
// within deathBound of the death, and the time each path took is printed. Run them with
//
//	.cache/rxevm -hosts 2 -timeout 10m -- .cache/it.test -test.v -test.run '^TestTwoHost(Process|Host)Death$'
const (
	deathAddr        = "10.77.0.1:17078"
	deathPeerTimeout = time.Second
	// deathBound: the transport retries a request to a dead host without end (rxe), so the
	// death is the liveness connection's: its keep-alive gives up on a dead host within
	// about three peer timeouts, and the RDMA probe that must confirm it goes unanswered for
	// one more; every call in flight then fails at once (its queue pair is put in the error
	// state): about four peer timeouts in all, and a second more for the emulated hosts.
	deathBound = 3*deathPeerTimeout + 2*time.Second
)

// deathKillLine is rxevm's kill line (test/rxevm: KillMarker).
const deathKillLine = "rxevm: kill this host"

func init() {
	workers["death-process"] = func(ctx context.Context, g *group.Group) error { return workDeath(ctx, g, "process") }
	workers["death-host"] = func(ctx context.Context, g *group.Group) error { return workDeath(ctx, g, "host") }
}

func TestTwoHostProcessDeath(t *testing.T) { testTwoHostDeath(t, "process") }
func TestTwoHostHostDeath(t *testing.T)    { testTwoHostDeath(t, "host") }

func testTwoHostDeath(t *testing.T, kind string) {
	rank := twoHostRank(t)
	l := &launch{t: t, role: "death-" + kind, size: 2, addr: deathAddr, secret: twoHostSecret, dir: t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := l.start(ctx, rank, twoHostSecret, "RMA_PEER_TIMEOUT="+deathPeerTimeout.String(), "RMA_DEATH_DIR="+l.dir)
	if rank == 1 {
		if kind == "host" {
			// The worker writes this file when host1 should die; rxevm kills the guest on
			// the line below, and nothing after it runs.
			for {
				if _, err := os.Stat(filepath.Join(l.dir, "die")); err == nil {
					fmt.Println(deathKillLine)
					time.Sleep(time.Minute)
					t.Fatal("host1 still alive a minute after asking rxevm to kill it")
				}
				if ctx.Err() != nil {
					t.Fatalf("rank 1 never asked to die: %s", p.out.String())
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		err := p.cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("rank 1 ended with %v, want killed by SIGKILL; output:\n%s", err, p.out.String())
		}
		return
	}
	out := l.wait([]*proc{p})[0]
	for _, path := range deathPaths {
		v := value(t, out, path)
		t.Logf("%s: %s", path, v)
		if v != "ok" {
			t.Errorf("rank 0, %s after rank 1's %s died: %s", path, kind, v)
		}
	}
}

// deathPaths are the calls rank 0 makes to rank 1 once it is dead, each in its own goroutine.
var deathPaths = []string{"fetch_and_op", "compare_and_swap", "get", "put_flush", "accumulate_flush",
	"get_accumulate", "raccumulate_wait", "lock", "flush_all", "allreduce", "barrier"}

// workDeath: both ranks set up a window with a LockAll epoch (NIC and engine routes) and a
// second window for exclusive locks, and check every path once; then rank 1 dies and rank 0
// runs every path until it fails, printing for each "path=ok" if the failure matched
// ErrPeerLost within deathBound, else what happened.
func workDeath(ctx context.Context, g *group.Group, kind string) error {
	if g.Size() != 2 {
		return fmt.Errorf("size %d, want 2", g.Size())
	}
	w, err := win.Allocate(ctx, g, 4096, 1)
	if err != nil {
		return err
	}
	lw, err := win.Allocate(ctx, g, 64, 1)
	if err != nil {
		return err
	}
	c, err := coll.New(ctx, g)
	if err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	peer := 1 - g.Rank()
	// Every path works while both live.
	if _, err := win.FetchAndOp(ctx, w, int64(1), peer, 0, op.Sum); err != nil {
		return err
	}
	if err := win.AccumulateSlice(ctx, w, []float64{1.5}, peer, 64, op.Sum); err != nil {
		return err
	}
	if err := w.Flush(ctx, peer); err != nil {
		return err
	}
	if err := lw.Lock(ctx, win.LockExclusive, peer, 0); err != nil {
		return err
	}
	if err := lw.Unlock(ctx, peer); err != nil {
		return err
	}
	sum := make([]byte, 8)
	if err := c.Allreduce(ctx, []byte{1, 0, 0, 0, 0, 0, 0, 0}, sum, datatype.Int64, op.Sum); err != nil {
		return err
	}
	if sum[0] != 2 {
		return fmt.Errorf("allreduce: %d, want 2", sum[0])
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if g.Rank() == 1 {
		switch kind {
		case "process":
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		case "host":
			if err := os.WriteFile(filepath.Join(os.Getenv("RMA_DEATH_DIR"), "die"), nil, 0o644); err != nil {
				return err
			}
		}
		time.Sleep(time.Minute)
		return errors.New("still alive a minute after dying")
	}

	start := time.Now()
	var mu sync.Mutex
	results := map[string]string{}
	var wg sync.WaitGroup
	for _, path := range deathPaths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			var err error
			calls := 0
			for err == nil && cctx.Err() == nil {
				calls++
				err = deathCall(cctx, path, g, w, lw, c, peer)
			}
			took := time.Since(start)
			res := "ok"
			switch {
			case err == nil:
				res = "no error in 30 s"
			case !errors.Is(err, verbs.ErrPeerLost):
				res = fmt.Sprintf("after %v: %v, want ErrPeerLost", took.Round(time.Millisecond), err)
			case took > deathBound:
				res = fmt.Sprintf("ErrPeerLost after %v, want within %v", took.Round(time.Millisecond), deathBound)
			}
			fmt.Printf("detect %s: %v after %d calls: %v\n", path, took.Round(time.Millisecond), calls, err)
			mu.Lock()
			results[path] = res
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, path := range deathPaths {
		fmt.Printf("%s=%s\n", path, results[path])
	}
	// Calls after the detection fail at once.
	t0 := time.Now()
	_, err = win.FetchAndOp(ctx, w, int64(1), peer, 0, op.Sum)
	fmt.Printf("after detection: FetchAndOp failed in %v: %v\n", time.Since(t0), err)
	// Freeing needs the dead rank too: it fails, and still releases this rank's part.
	fmt.Printf("free: %v; %v; %v\n", w.Free(ctx), lw.Free(ctx), c.Close(ctx))
	return nil
}

// deathCall makes one call of path to peer.
func deathCall(ctx context.Context, path string, g *group.Group, w, lw *win.Window, c *coll.Comm, peer int) error {
	switch path {
	case "fetch_and_op":
		_, err := win.FetchAndOp(ctx, w, int64(1), peer, 0, op.Sum)
		return err
	case "compare_and_swap":
		_, err := win.CompareAndSwap(ctx, w, int64(0), int64(1), peer, 8)
		return err
	case "get":
		return w.Get(ctx, make([]byte, 64), peer, 128)
	case "put_flush":
		if err := w.Put(ctx, make([]byte, 64), peer, 256); err != nil {
			return err
		}
		return w.Flush(ctx, peer)
	case "accumulate_flush":
		if err := win.AccumulateSlice(ctx, w, []float64{1}, peer, 64, op.Sum); err != nil {
			return err
		}
		return w.Flush(ctx, peer)
	case "get_accumulate":
		res := make([]float64, 1)
		return win.GetAccumulateSlice(ctx, w, []float64{1}, res, peer, 72, op.Sum)
	case "raccumulate_wait":
		r, err := w.RAccumulate(ctx, win.Contiguous(make([]byte, 8), datatype.Float64), win.Region{Rank: peer, Disp: 80, Type: datatype.Float64.Type(), Count: 1}, op.Sum)
		if err != nil {
			return err
		}
		return r.Wait(ctx)
	case "lock":
		if err := lw.Lock(ctx, win.LockExclusive, peer, 0); err != nil {
			return err
		}
		return lw.Unlock(ctx, peer)
	case "flush_all":
		if err := w.Put(ctx, make([]byte, 8), peer, 512); err != nil {
			return err
		}
		return w.FlushAll(ctx)
	case "allreduce":
		return c.Allreduce(ctx, make([]byte, 8), make([]byte, 8), datatype.Int64, op.Sum)
	case "barrier":
		return g.Barrier(ctx)
	}
	return fmt.Errorf("unknown path %q", path)
}
