//go:build integration

package test

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/onesided/rma"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/service"
	"github.com/onesided/rma/verbs"
	"github.com/onesided/rma/win"
)

// idleFor is how long the idle tests let a process sit after its calls;
// idleMaxCPU is the CPU time (user and system) it may use meanwhile: a
// poller that does not back off and sleep takes a whole core.
const (
	idleFor    = 10 * time.Second
	idleMaxCPU = time.Second
)

func init() { workers["idle"] = workIdle }

// processCPU returns the CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestIdleCPU: two ranks make calls of every route (NIC atomics, Put and
// Get, engine accumulates) to each other, then sit idle for idleFor; each
// process may use at most idleMaxCPU of CPU meanwhile (its pollers and
// its engine sleep on their completion channels).
func TestIdleCPU(t *testing.T) {
	outs := newLaunch(t, "idle", 2).run(2 * time.Minute)
	for r, out := range outs {
		ms, err := strconv.Atoi(value(t, out, "idle_cpu_ms"))
		if err != nil {
			t.Fatalf("rank %d: idle_cpu_ms: %v", r, err)
		}
		t.Logf("rank %d: %d ms of CPU in %v idle", r, ms, idleFor)
		fmt.Printf("idle rank %d: %d ms of CPU in %v\n", r, ms, idleFor)
		if time.Duration(ms)*time.Millisecond > idleMaxCPU {
			t.Errorf("rank %d used %d ms of CPU in %v idle, want at most %v", r, ms, idleFor, idleMaxCPU)
		}
	}
}

func workIdle(ctx context.Context, g *group.Group) error {
	w, err := win.Allocate(ctx, g, 64, 1)
	if err != nil {
		return err
	}
	defer w.Free(ctx)
	peer := 1 - g.Rank()
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	for i := 0; i < 100; i++ {
		t := w.Target(peer)
		if _, err := rma.FetchAndOp(ctx, t, int64(1), 0, op.Sum); err != nil {
			return err
		}
		if err := rma.AccumulateSlice(ctx, t, []float64{1}, 8, op.Sum); err != nil {
			return err
		}
		if err := rma.PutSlice(ctx, t, []int64{int64(i)}, 16); err != nil {
			return err
		}
		if err := w.Flush(ctx, peer); err != nil {
			return err
		}
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	c0 := processCPU()
	time.Sleep(idleFor)
	fmt.Printf("idle_cpu_ms=%d\n", (processCPU() - c0).Milliseconds())
	return g.Barrier(ctx)
}

// TestIdleCPUService: a service server and a client in this process make
// calls of every route, then sit idle for idleFor; the process may use at
// most idleMaxCPU of CPU meanwhile.
func TestIdleCPUService(t *testing.T) {
	requireDevice(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mem, err := verbs.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer verbs.Free(mem)
	secret := []byte(secret())
	srv, err := service.Listen(ctx, netip.AddrPortFrom(cmIPv4(t), 0).String(), service.ServerConfig{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := srv.Expose("w", mem); err != nil {
		t.Fatal(err)
	}
	cl, err := service.Dial(ctx, srv.Addr().String(), service.ClientConfig{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	w, err := cl.Open(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		if _, err := rma.FetchAndOp(ctx, w, int64(1), 0, op.Sum); err != nil {
			t.Fatal(err)
		}
		if err := rma.AccumulateSlice(ctx, w, []float64{1}, 8, op.Sum); err != nil {
			t.Fatal(err)
		}
		if err := rma.PutSlice(ctx, w, []int64{int64(i)}, 16); err != nil {
			t.Fatal(err)
		}
	}
	c0 := processCPU()
	time.Sleep(idleFor)
	used := processCPU() - c0
	t.Logf("server and client: %v of CPU in %v idle", used.Round(time.Millisecond), idleFor)
	fmt.Printf("idle service server and client: %d ms of CPU in %v\n", used.Milliseconds(), idleFor)
	if used > idleMaxCPU {
		t.Errorf("the server and the client used %v of CPU in %v idle, want at most %v", used, idleFor, idleMaxCPU)
	}
}
