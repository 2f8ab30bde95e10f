// Command counter is a shared counter: every process adds 1 to an int64
// with FetchAndOp(SUM), which the NIC applies with no help from the
// target's CPU. The counting loop (count) is written once against
// rma.Window and runs unchanged on both front doors:
//
// A group (the launcher starts the ranks; the counter is in rank 0's
// window, and rank 0 prints the total and the latency of one FetchAndOp):
//
//	rmarun -n 4 counter [-iters N]
//
// A service (a server exposes the counter; clients come and go; the
// server prints the total once it reaches -clients x -iters):
//
//	RMA_SECRET=... counter -serve 10.0.0.1:7471 [-clients K] [-iters N]
//	RMA_SECRET=... counter -dial 10.0.0.1:7471 [-iters N]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/onesided/rma"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/service"
	"github.com/onesided/rma/verbs"
	"github.com/onesided/rma/win"
)

func main() {
	iters := flag.Int("iters", 10000, "FetchAndOp calls per process")
	serve := flag.String("serve", "", "run a service server on this `ip:port`")
	dial := flag.String("dial", "", "run a service client of the server at this `host:port`")
	clients := flag.Int("clients", 1, "server: the clients whose adds it waits for")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var err error
	switch {
	case *serve != "":
		err = server(ctx, *serve, *clients**iters)
	case *dial != "":
		err = client(ctx, *dial, *iters)
	default:
		err = ranks(ctx, *iters)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "counter:", err)
		os.Exit(1)
	}
}

// count adds 1 to the int64 at w's displacement 0, iters times, and
// returns the last old value and the latency of each call, sorted.
func count(ctx context.Context, w rma.Window, iters int) (last int64, lat []time.Duration, err error) {
	lat = make([]time.Duration, iters)
	for i := range lat {
		t := time.Now()
		if last, err = rma.FetchAndOp(ctx, w, int64(1), 0, op.Sum); err != nil {
			return 0, nil, err
		}
		lat[i] = time.Since(t)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return last, lat, nil
}

// ranks is the group: every rank counts at rank 0.
func ranks(ctx context.Context, iters int) error {
	g, err := group.JoinEnv(ctx) // RMA_RANK, RMA_SIZE, RMA_ADDR, RMA_SECRET (rmarun sets them)
	if err != nil {
		return err
	}
	defer g.Close()
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
	start := time.Now()
	last, lat, err := count(ctx, w.Target(0), iters)
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	fmt.Printf("rank %d on %s: %d adds in %v, last old value %d, FetchAndOp median %.1f us\n",
		g.Rank(), g.Device(), iters, elapsed.Round(time.Millisecond), last, us(lat[len(lat)/2]))
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if g.Rank() == 0 {
		if err := w.LockAll(ctx); err != nil {
			return err
		}
		total, err := win.FetchAndOp(ctx, w, int64(0), 0, 0, op.NoOp)
		if err != nil {
			return err
		}
		if err := w.UnlockAll(ctx); err != nil {
			return err
		}
		want := int64(iters * g.Size())
		fmt.Printf("total %d (expected %d): %s\n", total, want, map[bool]string{true: "correct", false: "WRONG"}[total == want])
		fmt.Printf("FetchAndOp(SUM, int64) latency: median %.1f us, min %.1f us, p99 %.1f us (rank 0, %d calls while %d ranks add at once)\n",
			us(lat[len(lat)/2]), us(lat[0]), us(lat[len(lat)*99/100]), iters, g.Size())
		if total != want {
			w.Free(ctx)
			return fmt.Errorf("total %d, want %d", total, want)
		}
	}
	return w.Free(ctx)
}

// server exposes the counter and waits until it reaches want.
func server(ctx context.Context, addr string, want int) error {
	srv, err := service.Listen(ctx, addr, service.ServerConfig{Secret: []byte(os.Getenv("RMA_SECRET"))})
	if err != nil {
		return err
	}
	defer srv.Close()
	mem, err := verbs.Alloc(8)
	if err != nil {
		return err
	}
	defer verbs.Free(mem)
	if err := srv.Expose("counter", mem); err != nil {
		return err
	}
	fmt.Printf("serving counter on %v\n", srv.Addr())
	for {
		// The clients' NIC atomics update mem; a local atomic load reads it.
		total := atomic.LoadInt64((*int64)(unsafe.Pointer(&mem[0])))
		if total == int64(want) {
			fmt.Printf("total %d (expected %d): correct\n", total, want)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("total %d, want %d: %w", total, want, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// client counts at the server's counter.
func client(ctx context.Context, addr string, iters int) error {
	cl, err := service.Dial(ctx, addr, service.ClientConfig{Secret: []byte(os.Getenv("RMA_SECRET"))})
	if err != nil {
		return err
	}
	defer cl.Close()
	w, err := cl.Open(ctx, "counter")
	if err != nil {
		return err
	}
	last, lat, err := count(ctx, w, iters)
	if err != nil {
		return err
	}
	fmt.Printf("client: %d adds, last old value %d, FetchAndOp median %.1f us, p99 %.1f us\n",
		iters, last, us(lat[len(lat)/2]), us(lat[len(lat)*99/100]))
	return nil
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
