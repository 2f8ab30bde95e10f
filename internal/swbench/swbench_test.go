//go:build linux && cgo && standin

package swbench

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/onesided/rma"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/service"
	"github.com/onesided/rma/verbs"
	"github.com/onesided/rma/win"
)

// modes are the two front doors, each with a window of 4096 bytes at
// its target, locked for the whole run: a group of two ranks in this
// process (rank 0's window at rank 1), and a service Server and Client.
type modes struct {
	g    [2]*group.Group
	gw   [2]*win.Window
	srv  *service.Server
	cli  *service.Client
	sw   *service.Window
	mem  []byte // the service window's memory
	w    map[string]rma.Window
	err  error
	once sync.Once
}

var both modes

func (m *modes) setUp() error {
	m.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if m.err = m.group(ctx); m.err != nil {
			return
		}
		if m.err = m.service(ctx); m.err != nil {
			return
		}
		m.w = map[string]rma.Window{"group": m.gw[0].Target(1), "service": m.sw}
	})
	return m.err
}

func (m *modes) group(ctx context.Context) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := l.Addr().String()
	l.Close()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := group.Join(ctx, group.Options{Rank: r, Size: 2, Addr: addr, Secret: []byte("swbench")})
			if err != nil {
				errs[r] = err
				return
			}
			m.g[r] = g
			if m.gw[r], errs[r] = win.Allocate(ctx, g, 4096, 1); errs[r] != nil {
				return
			}
			errs[r] = g.Barrier(ctx)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return m.gw[0].LockAll(ctx)
}

func (m *modes) service(ctx context.Context) (err error) {
	secret := []byte("swbench-secret")
	if m.srv, err = service.ListenStandIn(service.ServerConfig{Secret: secret}); err != nil {
		return err
	}
	if m.mem, err = verbs.Alloc(4096); err != nil {
		return err
	}
	if err = m.srv.Expose("w", m.mem); err != nil {
		return err
	}
	if m.cli, err = service.DialStandIn(ctx, m.srv, service.ClientConfig{Secret: secret}); err != nil {
		return err
	}
	if m.sw, err = m.cli.Open(ctx, "w"); err != nil {
		return err
	}
	if err := m.cli.NICAtomics(); err != nil {
		return fmt.Errorf("the service client takes no NIC atomics on the stand-in: %w", err)
	}
	return m.sw.LockAll(ctx)
}

// path is one call timed: do runs it once, on w, with scratch buf.
type path struct {
	name string
	do   func(ctx context.Context, w rma.Window, buf []byte) error
}

// The paths, each with its own words of the target window.
var paths = []path{
	{"fetch_and_op/int64_sum", func(ctx context.Context, w rma.Window, b []byte) error {
		return w.FetchAndOp(ctx, b[0:8], b[8:16], datatype.Int64, 0, op.Sum)
	}},
	{"compare_and_swap/int64", func(ctx context.Context, w rma.Window, b []byte) error {
		return w.CompareAndSwap(ctx, b[0:8], b[16:24], b[8:16], datatype.Int64, 8)
	}},
	{"get/8", func(ctx context.Context, w rma.Window, b []byte) error {
		return w.Get(ctx, b[8:16], 16)
	}},
	{"put_flush/8", func(ctx context.Context, w rma.Window, b []byte) error {
		if err := w.Put(ctx, b[0:8], 24); err != nil {
			return err
		}
		return w.Flush(ctx)
	}},
	{"accumulate_flush/float64_sum", func(ctx context.Context, w rma.Window, b []byte) error {
		if err := w.Accumulate(ctx, b[32:40], datatype.Float64, 32, op.Sum); err != nil {
			return err
		}
		return w.Flush(ctx)
	}},
	{"get_accumulate/float64_sum", func(ctx context.Context, w rma.Window, b []byte) error {
		return w.GetAccumulate(ctx, b[32:40], b[8:16], datatype.Float64, 40, op.Sum)
	}},
	{"fetch_and_op/float64_max", func(ctx context.Context, w rma.Window, b []byte) error {
		return w.FetchAndOp(ctx, b[32:40], b[8:16], datatype.Float64, 48, op.Max)
	}},
}

// scratch is a path's buffer: origin 1 (int64) at 0, compare 0 at 16,
// origin 1.0 (float64) at 32.
func scratch() []byte {
	b := make([]byte, 64)
	binary.NativeEndian.PutUint64(b[0:], 1)
	binary.NativeEndian.PutUint64(b[32:], math.Float64bits(1))
	return b
}

// start resets b's timer and returns the function that reports the
// process's CPU time per call (both sides, every goroutine) at the end.
func start(b *testing.B) func() {
	b.ReportAllocs()
	b.ResetTimer()
	c0 := cpuTime()
	return func() {
		b.ReportMetric(float64((cpuTime()-c0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

func benchPath(b *testing.B, mode string, p path) {
	if err := both.setUp(); err != nil {
		b.Fatal(err)
	}
	ctx, buf, w := context.Background(), scratch(), both.w[mode]
	defer start(b)()
	for range b.N {
		if err := p.do(ctx, w, buf); err != nil {
			b.Fatal(err)
		}
	}
}

// goroutines is how many share one window in the rate rows.
const goroutines = 16

// benchRate is the fetch-and-add path called by 16 goroutines at once on
// one window (one connection, in service mode): its time per call is the
// inverse of the rate.
func benchRate(b *testing.B, mode string) {
	if err := both.setUp(); err != nil {
		b.Fatal(err)
	}
	w := both.w[mode]
	b.SetParallelism((goroutines + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	defer start(b)()
	b.RunParallel(func(pb *testing.PB) {
		ctx, buf := context.Background(), scratch()
		for pb.Next() {
			if err := paths[0].do(ctx, w, buf); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkGroup(b *testing.B) {
	for _, p := range paths {
		b.Run(p.name, func(b *testing.B) { benchPath(b, "group", p) })
	}
	b.Run(fmt.Sprintf("%s/%dg", paths[0].name, goroutines), func(b *testing.B) { benchRate(b, "group") })
}

func BenchmarkService(b *testing.B) {
	for _, p := range paths {
		b.Run(p.name, func(b *testing.B) { benchPath(b, "service", p) })
	}
	b.Run(fmt.Sprintf("%s/%dg", paths[0].name, goroutines), func(b *testing.B) { benchRate(b, "service") })
}

// TestPaths checks what the timed paths do, in both modes: after n calls
// of each, the words of the target hold what n calls make, and the last
// fetched value is the one before it.
func TestPaths(t *testing.T) {
	if err := both.setUp(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, mode := range []string{"group", "service"} {
		w := both.w[mode]
		zero := make([]byte, 64)
		if err := w.Put(ctx, zero, 0); err != nil {
			t.Fatal(err)
		}
		const n = 100
		for _, p := range paths {
			buf := scratch()
			for i := range n {
				if err := p.do(ctx, w, buf); err != nil {
					t.Fatalf("%s/%s call %d: %v", mode, p.name, i, err)
				}
			}
			old := binary.NativeEndian.Uint64(buf[8:])
			var want uint64
			switch p.name {
			case "fetch_and_op/int64_sum":
				want = n - 1
			case "compare_and_swap/int64":
				want = 1 // the first call swapped 0 for 1, the others found 1
			case "get_accumulate/float64_sum":
				want = math.Float64bits(n - 1)
			case "fetch_and_op/float64_max":
				want = math.Float64bits(1)
			default:
				continue
			}
			if old != want {
				t.Errorf("%s/%s: the last call fetched %#x, want %#x", mode, p.name, old, want)
			}
		}
		got := make([]byte, 64)
		if err := w.Get(ctx, got, 0); err != nil {
			t.Fatal(err)
		}
		word := func(i int) uint64 { return binary.NativeEndian.Uint64(got[8*i:]) }
		for i, want := range []uint64{n, 1, 0, 1, math.Float64bits(n), math.Float64bits(n), math.Float64bits(1)} {
			if word(i) != want {
				t.Errorf("%s: word %d is %#x after %d calls of its path, want %#x", mode, i, word(i), n, want)
			}
		}
	}
}

// nic is two connected QPs on the stand-in NIC, for the floors.
type nic struct {
	dev  *verbs.Context
	pd   *verbs.PD
	cq   *verbs.CQ
	a, b *verbs.QP
	mem  []byte
	mr   *verbs.MR
}

func newNIC(b *testing.B) *nic {
	n := &nic{}
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	var err error
	n.dev, err = verbs.Open("")
	must(err)
	n.pd, err = n.dev.AllocPD()
	must(err)
	n.cq, err = n.dev.CreateCQ(64, nil)
	must(err)
	cfg := verbs.QPConfig{SendCQ: n.cq, RecvCQ: n.cq, MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
	n.a, err = n.pd.CreateQP(cfg)
	must(err)
	n.b, err = n.pd.CreateQP(cfg)
	must(err)
	path := &verbs.Path{Port: 1, MTU: verbs.MTU4096, MaxRdAtomic: 16, Timeout: 14, RetryCount: 7, RNRRetry: 7,
		Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic}
	ea := verbs.Endpoint{QPN: n.a.Num(), LID: 1, MTU: verbs.MTU4096}
	eb := verbs.Endpoint{QPN: n.b.Num(), LID: 1, MTU: verbs.MTU4096}
	must(n.a.Connect(path, ea, eb))
	must(n.b.Connect(path, eb, ea))
	n.mem, err = verbs.Alloc(4096)
	must(err)
	n.mr, err = n.pd.RegisterMR(n.mem, path.Access)
	must(err)
	b.Cleanup(func() {
		n.mr.Close()
		verbs.Free(n.mem)
		n.a.Close()
		n.b.Close()
		n.cq.Close()
		n.pd.Close()
		n.dev.Close()
	})
	return n
}

// BenchmarkFloorC is the C loop: post a fetch-and-add, poll until its
// completion, in one call for all of b.N.
func BenchmarkFloorC(b *testing.B) {
	n := newNIC(b)
	defer start(b)()
	if err := verbs.StandInLoop(n.a, n.cq, n.mr.Local(8, 8), n.mr.Addr(), n.mr.RKey(), b.N); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkFloorGo is the same loop in Go through package verbs: a post,
// then polls until the completion.
func BenchmarkFloorGo(b *testing.B) {
	n := newNIC(b)
	var wcs [4]verbs.WC
	l, raddr, rkey := n.mr.Local(8, 8), n.mr.Addr(), n.mr.RKey()
	defer start(b)()
	for i := range b.N {
		if err := n.a.PostFetchAdd(uint64(i), l, raddr, rkey, 1, verbs.SendSignaled); err != nil {
			b.Fatal(err)
		}
		for {
			got, err := n.cq.Poll(wcs[:])
			if err != nil || got > 0 && wcs[0].Err() != nil {
				b.Fatal(err, wcs[0].Err())
			}
			if got > 0 {
				break
			}
		}
	}
}

// BenchmarkEmptyPoll is one poll of an empty CQ.
func BenchmarkEmptyPoll(b *testing.B) {
	n := newNIC(b)
	var wcs [4]verbs.WC
	defer start(b)()
	for range b.N {
		if got, err := n.cq.Poll(wcs[:]); got != 0 || err != nil {
			b.Fatal(got, err)
		}
	}
}

// row is one line of the table and of the JSON file.
type row struct {
	Name        string  `json:"name"`
	NsPerCall   float64 `json:"ns_per_call"`
	CPUPerCall  float64 `json:"cpu_ns_per_call"` // the process's user and system time
	AllocsPer   int64   `json:"allocs_per_call"`
	RatioFloorG float64 `json:"ratio_to_go_floor"`
	FloorC      float64 `json:"floor_c_ns"`
	FloorGo     float64 `json:"floor_go_ns"`
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestSoftware runs every benchmark of the package once (for -test.benchtime,
// 1 s each by default) and prints the table; RMA_BENCH_SW_JSON names a file
// to write the rows to. It asserts no timing: what fails it is a path that
// fails or a benchmark that does not run.
func TestSoftware(t *testing.T) {
	benches := []struct {
		name string
		f    func(*testing.B)
	}{
		{"floor/c_post_poll", BenchmarkFloorC},
		{"floor/go_post_poll", BenchmarkFloorGo},
		{"floor/empty_poll", BenchmarkEmptyPoll},
	}
	for _, mode := range []string{"group", "service"} {
		for _, p := range paths {
			benches = append(benches, struct {
				name string
				f    func(*testing.B)
			}{mode + "/" + p.name, func(b *testing.B) { benchPath(b, mode, p) }})
		}
		benches = append(benches, struct {
			name string
			f    func(*testing.B)
		}{fmt.Sprintf("%s/%s/%dg", mode, paths[0].name, goroutines), func(b *testing.B) { benchRate(b, mode) }})
	}
	var rows []row
	for _, bb := range benches {
		r := testing.Benchmark(bb.f)
		if r.N == 0 {
			t.Fatalf("%s did not run (a failure above says why)", bb.name)
		}
		rows = append(rows, row{Name: bb.name, NsPerCall: float64(r.T.Nanoseconds()) / float64(r.N),
			CPUPerCall: r.Extra["cpu-ns/op"], AllocsPer: r.AllocsPerOp()})
	}
	fc, fg := rows[0].NsPerCall, rows[1].NsPerCall
	var sb strings.Builder
	fmt.Fprintf(&sb, "%-36s %10s %10s %8s %8s\n", "path", "ns/call", "cpu ns", "allocs", "x go")
	for i := range rows {
		rows[i].FloorC, rows[i].FloorGo, rows[i].RatioFloorG = fc, fg, rows[i].NsPerCall/fg
		r := rows[i]
		fmt.Fprintf(&sb, "%-36s %10.1f %10.1f %8d %8.2f\n", r.Name, r.NsPerCall, r.CPUPerCall, r.AllocsPer, r.RatioFloorG)
	}
	t.Logf("software per call on the stand-in NIC (RMA_STANDIN_DELAY_NS=%s):\n%s", os.Getenv("RMA_STANDIN_DELAY_NS"), sb.String())
	if f := os.Getenv("RMA_BENCH_SW_JSON"); f != "" {
		b, err := json.MarshalIndent(rows, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
