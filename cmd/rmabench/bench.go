package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/win"
)

// Layout of rank 0's window: the words of the atomics, then the data of
// put, get and the accumulates.
const (
	dispCounter = 0  // int64, FetchAndOp SUM (NIC)
	dispCAS     = 8  // int64, CompareAndSwap (NIC)
	dispMax     = 16 // float64, FetchAndOp MAX (engine)
	dispData    = 4096
)

// serveWindow is rank 0's part: allocate the window rank 1 asks for, and
// keep it until rank 1 is done.
func serveWindow(ctx context.Context, g *group.Group) error {
	all, err := g.AllGather(ctx, nil)
	if err != nil {
		return err
	}
	if len(all) < 2 || len(all[1]) != 8 {
		return fmt.Errorf("rank 1 sent %d bytes, not a window size", len(all[1]))
	}
	size := binary.LittleEndian.Uint64(all[1])
	if size > dispData+maxSize {
		return fmt.Errorf("rank 1 asked for a %d-byte window", size)
	}
	w, err := win.Allocate(ctx, g, int(size), 1)
	if err != nil {
		return err
	}
	// Rank 1 runs its cases now; the barrier ends them (no time limit: a
	// long run is fine, and a dead rank 1 closes the connection).
	berr := g.Barrier(context.WithoutCancel(ctx))
	if err := w.Free(ctx); berr == nil {
		berr = err
	}
	return berr
}

// bench is rank 1's state.
type bench struct {
	g     *group.Group
	w     *win.Window
	c     *config
	out   io.Writer // the tables
	prog  *progress
	clock *clock
	svc   *svcBench // -compare -service: package service's server
	// mpichLib names the MPI library of -mpich's osclat, from its first
	// run that succeeded.
	mpichLib string
	// mpichHung, once a run of osclat was killed on its time limit, is
	// why the later rounds run none.
	mpichHung error

	results []result
	header  string // the table whose header was printed last
}

func newBench(ctx context.Context, g *group.Group, c *config) (*bench, error) {
	if g.Size() < 2 {
		return nil, fmt.Errorf("a group of %d: rmabench needs 2 ranks", g.Size())
	}
	size := dispData + 8
	for _, n := range c.sizes {
		size = max(size, dispData+n)
	}
	if c.compare {
		size = max(size, dispData+1<<20)
	}
	var msg [8]byte
	binary.LittleEndian.PutUint64(msg[:], uint64(size))
	if _, err := g.AllGather(ctx, msg[:]); err != nil {
		return nil, err
	}
	w, err := win.Allocate(ctx, g, 8, 1)
	if err != nil {
		return nil, err
	}
	first := c.clk == nil // across hosts, a bench is made for each perftest test
	clk := c.clk
	if first { // calibrated once per process
		if clk, err = newClock(c.clock); err != nil {
			w.Free(ctx)
			return nil, err
		}
		c.clk = clk
	}
	b := &bench{g: g, w: w, c: c, out: os.Stdout, clock: clk}
	if c.jsonOut == "-" {
		b.out = os.Stderr
	}
	if p := g.Path(); first {
		fmt.Fprintf(os.Stderr, "rmabench: rank 1 of %d on %s port %d, GID index %d, MTU %d; latency stamped by %v\n",
			g.Size(), g.Device(), p.Port, p.GIDIndex, p.MTU.Bytes(), clk)
	}
	b.prog = newProgress(c.progress)
	if err := w.LockAll(ctx); err != nil {
		w.Free(ctx)
		return nil, err
	}
	return b, nil
}

// close ends the epoch and releases the window with rank 0.
func (b *bench) close(ctx context.Context) error {
	b.prog.stop()
	err := b.w.UnlockAll(ctx)
	if berr := b.g.Barrier(ctx); err == nil {
		err = berr
	}
	if ferr := b.w.Free(ctx); err == nil {
		err = ferr
	}
	return err
}

// worker holds one goroutine's buffers.
type worker struct {
	origin, result []byte
	compare        [8]byte
	expect         int64 // CompareAndSwap: the value it expects
}

// kase is one benchmark case.
type kase struct {
	name  string // e.g. put_8B
	op    string // put, get, ...
	size  int    // bytes per operation
	route string
	// async: the operation returns before it completes (put, accumulate);
	// a Flush completes it.
	async bool
	do    func(ctx context.Context, wk *worker) error
}

func f64bytes(n int, v float64) []byte {
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		binary.NativeEndian.PutUint64(b[i:], math.Float64bits(v))
	}
	return b
}

// cases builds the cases of op at size (some ops have several, or none at
// that size).
func (b *bench) cases(name string, size int) []kase {
	w := b.w
	switch name {
	case "put":
		return []kase{{name: "put_" + sizeName(size), op: name, size: size, route: "rdma-write", async: true,
			do: func(ctx context.Context, wk *worker) error { return w.Put(ctx, wk.origin[:size], 0, dispData) }}}
	case "get":
		return []kase{{name: "get_" + sizeName(size), op: name, size: size, route: "rdma-read",
			do: func(ctx context.Context, wk *worker) error { return w.Get(ctx, wk.result[:size], 0, dispData) }}}
	case "fetch_and_op":
		return []kase{
			{name: "fetch_and_op_sum_int64", op: name, size: 8, route: w.RouteFetchAndOp(op.Sum, datatype.Int64).String(),
				do: func(ctx context.Context, wk *worker) error {
					return w.FetchAndOp(ctx, wk.origin[:8], wk.result[:8], datatype.Int64, 0, dispCounter, op.Sum)
				}},
			{name: "fetch_and_op_max_float64", op: name, size: 8, route: w.RouteFetchAndOp(op.Max, datatype.Float64).String(),
				do: func(ctx context.Context, wk *worker) error {
					return w.FetchAndOp(ctx, wk.origin[:8], wk.result[:8], datatype.Float64, 0, dispMax, op.Max)
				}},
		}
	case "compare_and_swap":
		return []kase{{name: "compare_and_swap_int64", op: name, size: 8, route: w.RouteCompareAndSwap(datatype.Int64).String(),
			do: func(ctx context.Context, wk *worker) error {
				binary.NativeEndian.PutUint64(wk.compare[:], uint64(wk.expect))
				binary.NativeEndian.PutUint64(wk.origin[:8], uint64(wk.expect+1))
				if err := w.CompareAndSwap(ctx, wk.origin[:8], wk.compare[:], wk.result[:8], datatype.Int64, 0, dispCAS); err != nil {
					return err
				}
				if old := int64(binary.NativeEndian.Uint64(wk.result[:8])); old == wk.expect {
					wk.expect++
				} else {
					wk.expect = old
				}
				return nil
			}}}
	case "accumulate":
		if size%8 != 0 {
			return nil
		}
		return []kase{{name: "accumulate_sum_float64_" + sizeName(size), op: name, size: size, async: true,
			route: w.Route(op.Sum, datatype.Float64).String(),
			do: func(ctx context.Context, wk *worker) error {
				return w.Accumulate(ctx, wk.origin[:size], datatype.Float64, 0, dispData, op.Sum)
			}}}
	case "get_accumulate":
		if size%8 != 0 {
			return nil
		}
		return []kase{{name: "get_accumulate_sum_float64_" + sizeName(size), op: name, size: size,
			route: w.Route(op.Sum, datatype.Float64).String(),
			do: func(ctx context.Context, wk *worker) error {
				return w.GetAccumulate(ctx, wk.origin[:size], wk.result[:size], datatype.Float64, 0, dispData, op.Sum)
			}}}
	}
	return nil
}

func (b *bench) newWorker(size int, o string) *worker {
	wk := &worker{origin: make([]byte, max(size, 8)), result: make([]byte, max(size, 8))}
	switch o {
	case "fetch_and_op":
		binary.NativeEndian.PutUint64(wk.origin, 1)
	case "accumulate", "get_accumulate":
		copy(wk.origin, f64bytes(len(wk.origin), 1))
	default:
		for i := range wk.origin {
			wk.origin[i] = byte(i)
		}
	}
	return wk
}

// plan lists the cases of the flags, in order: latency first.
func (b *bench) plan() (lat, bw []kase) {
	seen := map[string]bool{}
	var all []kase
	for _, o := range b.c.ops {
		sizes := b.c.sizes
		if o == "fetch_and_op" || o == "compare_and_swap" {
			sizes = []int{8}
		}
		for _, n := range sizes {
			for _, k := range b.cases(o, n) {
				if !seen[k.name] && b.c.run.MatchString(k.name) {
					seen[k.name] = true
					all = append(all, k)
				}
			}
		}
	}
	for _, m := range b.c.modes {
		switch m {
		case "lat":
			lat = all
		case "bw":
			bw = all
		}
	}
	return lat, bw
}

// runAll runs the cases of the flags and reports them.
func (b *bench) runAll(ctx context.Context) error {
	lat, bw := b.plan()
	total := len(lat) + len(bw)
	b.prog.cases = total
	for _, k := range lat {
		r, err := b.latency(ctx, k, b.c.iters)
		if err != nil {
			return fmt.Errorf("%s latency: %w", k.name, err)
		}
		b.report(r)
	}
	for _, k := range bw {
		r, err := b.bandwidth(ctx, k, b.bwIters(k.size), b.c.inflight)
		if err != nil {
			return fmt.Errorf("%s bandwidth: %w", k.name, err)
		}
		b.report(r)
	}
	b.prog.stop()
	if b.c.jsonOut != "" {
		return b.writeJSON()
	}
	return nil
}

// bwIters is the number of operations of a bandwidth case of size bytes.
func (b *bench) bwIters(size int) int { return b.c.bwIters(size) }

// bwIters is the number of operations of a bandwidth case of size bytes:
// -nbw, fewer if they would move more than -bw-bytes.
func (c *config) bwIters(size int) int {
	n := c.itersBW
	if limit := c.bwBytes / int64(size); int64(n) > limit {
		n = int(max(limit, 1))
	}
	return n
}

// result is one case's measurement.
type result struct {
	Name       string `json:"name"`
	Op         string `json:"op"`
	Mode       string `json:"mode"` // latency, bandwidth
	Route      string `json:"route"`
	Bytes      int    `json:"bytes"`
	Iterations int    `json:"iterations"`
	InFlight   int    `json:"in_flight,omitempty"`
	Flush      bool   `json:"flush,omitempty"` // latency of put, accumulate: each followed by Flush

	MinUS     float64 `json:"min_us,omitempty"`
	TypicalUS float64 `json:"typical_us,omitempty"`
	AvgUS     float64 `json:"avg_us,omitempty"`
	StdevUS   float64 `json:"stdev_us,omitempty"`
	P99US     float64 `json:"p99_us,omitempty"`
	P999US    float64 `json:"p99_9_us,omitempty"`
	MaxUS     float64 `json:"max_us,omitempty"`

	BandwidthMBps float64 `json:"bandwidth_MBps,omitempty"` // MB = 2^20 bytes, as perftest
	RateMops      float64 `json:"rate_Mops,omitempty"`
	Seconds       float64 `json:"seconds,omitempty"`

	AllocsPerOp float64 `json:"allocs_per_op"`
}

func mallocs() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.Mallocs
}

// latency times n operations, one at a time (each followed by a Flush if
// the operation is asynchronous).
func (b *bench) latency(ctx context.Context, k kase, n int) (result, error) {
	wk := b.newWorker(k.size, k.op)
	one := func() error {
		if err := k.do(ctx, wk); err != nil {
			return err
		}
		if k.async {
			return b.w.Flush(ctx, 0)
		}
		return nil
	}
	name := k.name
	if k.async {
		name += "_flush"
	}
	b.prog.start(name+" latency", int64(n))
	r := result{Name: name, Op: k.op, Mode: "latency", Route: k.route, Bytes: k.size, Flush: k.async}
	if err := b.timeLatency(one, n, &r); err != nil {
		return result{}, err
	}
	return r, nil
}

// timeLatency calls one b.c.warmup times, then n times, and sets r's
// iterations, latency figures and allocations per call. As perftest does,
// it reads the clock once per call: call i takes from stamp i to stamp
// i+1.
func (b *bench) timeLatency(one func() error, n int, r *result) error {
	for i := 0; i < b.c.warmup; i++ {
		if err := one(); err != nil {
			return err
		}
	}
	stamps := make([]uint64, n+1)
	m0 := mallocs()
	stamps[0] = b.clock.stamp()
	for i := 1; i <= n; i++ {
		if err := one(); err != nil {
			return err
		}
		stamps[i] = b.clock.stamp()
		b.prog.add(1)
	}
	m1 := mallocs()
	lat := make([]time.Duration, n)
	for i := range lat {
		lat[i] = b.clock.duration(stamps[i+1] - stamps[i])
	}
	r.Iterations, r.AllocsPerOp = n, float64(m1-m0)/float64(n)
	s := latencyStats(lat)
	r.MinUS, r.TypicalUS, r.AvgUS, r.StdevUS, r.P99US, r.P999US, r.MaxUS = s.min, s.typical, s.avg, s.stdev, s.p99, s.p999, s.max
	return nil
}

// stats are perftest's latency figures, in microseconds.
type stats struct{ min, typical, avg, stdev, p99, p999, max float64 }

// latencyStats computes them as perftest does: sorted samples, the median
// as the typical value, percentiles by index.
func latencyStats(lat []time.Duration) stats {
	s := slices.Clone(lat)
	slices.Sort(s)
	n := len(s)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	var sum float64
	for _, d := range s {
		sum += us(d)
	}
	avg := sum / float64(n)
	var v float64
	for _, d := range s {
		v += (us(d) - avg) * (us(d) - avg)
	}
	return stats{
		min: us(s[0]), typical: us(s[n/2]), avg: avg, stdev: math.Sqrt(v / float64(n)),
		p99: us(s[min(n-1, int(float64(n)*0.99))]), p999: us(s[min(n-1, int(float64(n)*0.999))]), max: us(s[n-1]),
	}
}

// bandwidth runs n operations with q in flight: q goroutines share them.
func (b *bench) bandwidth(ctx context.Context, k kase, n, q int) (result, error) {
	q = min(q, n)
	b.prog.start(fmt.Sprintf("%s bandwidth, %d in flight", k.name, q), int64(n))
	wks := make([]*worker, q)
	for i := range wks {
		wks[i] = b.newWorker(k.size, k.op)
	}
	for i := 0; i < b.c.warmup; i++ {
		if err := k.do(ctx, wks[0]); err != nil {
			return result{}, err
		}
	}
	if err := b.w.Flush(ctx, 0); err != nil {
		return result{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var firstErr error
	begin := make(chan struct{})
	for i, wk := range wks {
		count := n / q
		if i < n%q {
			count++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-begin
			for j := 0; j < count; j++ {
				if err := k.do(ctx, wk); err != nil {
					errMu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					errMu.Unlock()
					cancel()
					return
				}
				b.prog.add(1)
			}
		}()
	}
	m0 := mallocs()
	t := time.Now()
	close(begin)
	wg.Wait()
	err := firstErr
	if err == nil && k.async {
		err = b.w.Flush(ctx, 0)
	}
	dt := time.Since(t)
	m1 := mallocs()
	if err != nil {
		return result{}, err
	}
	sec := dt.Seconds()
	return result{Name: k.name, Op: k.op, Mode: "bandwidth", Route: k.route, Bytes: k.size, Iterations: n, InFlight: q,
		BandwidthMBps: float64(n) * float64(k.size) / sec / (1 << 20), RateMops: float64(n) / sec / 1e6, Seconds: sec,
		AllocsPerOp: float64(m1-m0) / float64(n)}, nil
}
