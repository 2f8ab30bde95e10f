package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/onesided/rma"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/service"
	"github.com/onesided/rma/verbs"
)

// -compare on one host also measures package service (-service): a server
// process of its own (this program run again with -service-server),
// listening on the IPv4 address of the device's network interface, and
// clients in this process, each with its own connection (service.Dial).
// Its latency rows follow the perftest test they are compared with, as the
// group's cases do; the rate rows follow ib_atomic_bw, and the
// connect-to-first-op row ends each round.

// opService marks the targets measured through package service.
const opService = "service"

// The cases of package service.
const (
	svcFetchAndOp     = "service_fetch_and_op_sum_int64"
	svcCompareAndSwap = "service_compare_and_swap_int64"
	svcConnect        = "service_connect_first_op"
)

// Layout of the server's window: a word per case.
const (
	svcWindow      = "rmabench"
	svcWindowSize  = 4096
	svcDispCounter = 0  // FetchAndOp SUM: latency and rate
	svcDispCAS     = 8  // CompareAndSwap
	svcDispConnect = 16 // the first FetchAndOp of each connect case
)

// svcDials is the number of connections the connect-to-first-op case
// makes, one after the other.
const svcDials = 20

// svcConns are the client connection counts of the rate rows.
var svcConns = []int{1, 4, 16}

// svcRateName names the rate row of conns connections.
func svcRateName(conns int) string {
	return "service/fetch_and_op/rate/" + strconv.Itoa(conns) + "conn"
}

// svcRateKase names the case of that row.
func svcRateKase(conns int) string {
	return svcFetchAndOp + "_" + strconv.Itoa(conns) + "conn"
}

// svcTargets are the rows of package service with a target: its latency
// against perftest's, at most 1.2 x.
var svcTargets = []target{
	{name: "service/fetch_and_op/lat", metric: metricLatency, op: opService, kase: svcFetchAndOp, size: 8, pt: ptFetchAdd, column: "t_typical[usec]", max: 1.20},
	{name: "service/compare_and_swap/lat", metric: metricLatency, op: opService, kase: svcCompareAndSwap, size: 8, pt: ptCmpSwap, column: "t_typical[usec]", max: 1.20},
}

// svcGoroutines is the goroutines sharing one connection in the rate row
// of many calls in flight on one Client.
const svcGoroutines = 16

// svcExtras are its informational rows: the message rate of FetchAndOp
// with svcConns connections, and with svcGoroutines goroutines on one
// (beside ib_atomic_bw's, which keeps many operations in flight on one
// QP), and the time from Dial to the first FetchAndOp's return (no
// perftest test).
func svcExtras() []target {
	var ts []target
	for _, n := range svcConns {
		ts = append(ts, target{name: svcRateName(n), metric: metricRate, op: opService, kase: svcRateKase(n), size: 8, conns: n,
			pt: ptAtomicBW, column: "MsgRate[Mpps]"})
	}
	g := strconv.Itoa(svcGoroutines)
	ts = append(ts, target{name: svcRateName(1) + g + "g", metric: metricRate, op: opService, kase: svcRateKase(1) + g + "g", size: 8, conns: 1,
		goroutines: svcGoroutines, pt: ptAtomicBW, column: "MsgRate[Mpps]"})
	return append(ts, target{name: "service/connect_first_op", metric: metricLatency, op: opService, kase: svcConnect, size: 8})
}

// compareTargets are the rows of a one-host comparison: those with a
// target first (the first of the returned count), then the informational
// ones; with service, package service's rows too.
func compareTargets(service bool) ([]target, int) {
	all := append([]target{}, targets...)
	if service {
		all = append(all, svcTargets...)
	}
	n := len(all)
	all = append(all, extras...)
	if service {
		all = append(all, svcExtras()...)
	}
	return all, n
}

// svcBench is the client side of the service rows: the server process and
// how to reach it.
type svcBench struct {
	addr   string // the server's host:port
	secret []byte
	cmd    *exec.Cmd
	stdin  io.WriteCloser // closing it ends the server
	err    error          // why there is no server: each service case fails with it
}

// svcListenIP is the IPv4 address of a network interface of the RDMA
// device dev (the connection manager binds a specific address to its
// device; it does not listen on 0.0.0.0).
func svcListenIP(dev string) (netip.Addr, error) {
	devs, err := verbs.Devices()
	if err != nil {
		return netip.Addr{}, err
	}
	for _, d := range devs {
		if d.Name != dev {
			continue
		}
		for _, nd := range d.Netdevs {
			ifc, err := net.InterfaceByName(nd)
			if err != nil {
				continue
			}
			addrs, _ := ifc.Addrs()
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
					ip, _ := netip.AddrFromSlice(n.IP.To4())
					return ip, nil
				}
			}
		}
		return netip.Addr{}, fmt.Errorf("no IPv4 address on the network interfaces %v of %s (-service-addr names one)", d.Netdevs, dev)
	}
	return netip.Addr{}, fmt.Errorf("no device %s among %v", dev, devs)
}

// startService starts the service server process on ip (the device's
// address if not valid) and returns when it listens. On failure the
// returned svcBench holds the error, for the service rows to report.
func startService(ctx context.Context, dev string, ip netip.Addr) *svcBench {
	s := &svcBench{}
	if s.err = s.start(ctx, dev, ip); s.err != nil {
		s.err = fmt.Errorf("service server: %w", s.err)
	}
	return s
}

func (s *svcBench) start(ctx context.Context, dev string, ip netip.Addr) error {
	if !ip.IsValid() {
		var err error
		if ip, err = svcListenIP(dev); err != nil {
			return err
		}
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	s.secret = []byte(hex.EncodeToString(key))
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, "-service-server", "-addr", netip.AddrPortFrom(ip, 0).String())
	cmd.Env = append(os.Environ(), "RMA_SECRET="+string(s.secret), "RMABENCH_CHILD=1")
	cmd.Stderr = os.Stderr
	if s.stdin, err = cmd.StdinPipe(); err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd = cmd
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- l
	}()
	var reply string
	select {
	case reply = <-line:
	case <-time.After(time.Minute):
		reply = "error \"did not listen within a minute\""
	case <-ctx.Done():
		reply = "error \"interrupted\""
	}
	port, err := readyPort(strings.TrimRight(reply, "\r\n"))
	if err != nil {
		s.stop()
		return err
	}
	s.addr = netip.AddrPortFrom(ip, uint16(port)).String()
	return nil
}

// joinInts writes v as a list: "1, 4 or 16".
func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// stop ends the server process: it closes its server when its standard
// input ends.
func (s *svcBench) stop() error {
	if s.cmd == nil {
		return nil
	}
	s.stdin.Close()
	err := waitChild(s.cmd, s.err != nil)
	s.cmd = nil
	if err != nil {
		return fmt.Errorf("service server: %w", err)
	}
	return nil
}

// serveService is the server process (-service-server): it listens on
// addr with RMA_SECRET, exposes a window of svcWindowSize bytes named
// svcWindow, prints "ready PORT" on stdout, and serves until its standard
// input ends or it is interrupted.
func serveService(ctx context.Context, addr string) int {
	fail := func(err error) int {
		fmt.Printf("error %q\n", err.Error()) // -compare reports it
		return 1
	}
	secret := os.Getenv("RMA_SECRET")
	if secret == "" {
		return fail(errors.New("set RMA_SECRET"))
	}
	mem, err := verbs.Alloc(svcWindowSize)
	if err != nil {
		return fail(err)
	}
	defer verbs.Free(mem)
	// At most 17 clients at once; 64 leaves room for connections whose
	// disconnect the server has not seen yet.
	srv, err := service.Listen(ctx, addr, service.ServerConfig{Secret: []byte(secret), MaxConns: 64})
	if err != nil {
		return fail(err)
	}
	if err := srv.Expose(svcWindow, mem); err != nil {
		srv.Close()
		return fail(err)
	}
	fmt.Printf("ready %d\n", srv.Addr().Port())
	eof := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()
	select {
	case <-eof:
	case <-ctx.Done():
	}
	if err := srv.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "rmabench: service server: close: %v\n", err)
		return 1
	}
	return 0
}

// dial connects a client and opens the window.
func (s *svcBench) dial(ctx context.Context) (*service.Client, *service.Window, error) {
	if s.err != nil {
		return nil, nil, s.err
	}
	cl, err := service.Dial(ctx, s.addr, service.ClientConfig{Secret: s.secret})
	if err != nil {
		return nil, nil, err
	}
	w, err := cl.Open(ctx, svcWindow)
	if err != nil {
		cl.Close()
		return nil, nil, err
	}
	return cl, w, nil
}

// measure runs the case of service target t with iters operations.
func (s *svcBench) measure(ctx context.Context, b *bench, t target, iters int) (result, error) {
	if s == nil {
		return result{}, errors.New("no service server (-service)")
	}
	switch {
	case t.kase == svcFetchAndOp || t.kase == svcCompareAndSwap:
		return s.latency(ctx, b, t.kase, iters)
	case t.kase == svcConnect:
		return s.connect(ctx, b, svcDials)
	case t.conns > 0:
		return s.rate(ctx, b, t.kase, iters, t.conns, max(t.goroutines, 1))
	}
	return result{}, fmt.Errorf("no service case %s", t.kase)
}

// latency times n FetchAndOp(SUM) or CompareAndSwap calls of one client,
// one at a time, and checks their old values: FetchAndOp's follow each
// other, CompareAndSwap's are the value the previous call left.
func (s *svcBench) latency(ctx context.Context, b *bench, kase string, n int) (r result, err error) {
	cl, w, err := s.dial(ctx)
	if err != nil {
		return result{}, err
	}
	defer func() {
		if cerr := cl.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	var next int64 // the old value the next call returns
	first := true
	one := func() error {
		var old int64
		var err error
		if kase == svcFetchAndOp {
			old, err = rma.FetchAndOp(ctx, w, int64(1), svcDispCounter, op.Sum)
		} else {
			old, err = rma.CompareAndSwap(ctx, w, int64(next), int64(next+1), svcDispCAS)
		}
		switch {
		case err != nil:
			return err
		case kase == svcCompareAndSwap && old != next:
			if !first {
				return fmt.Errorf("CompareAndSwap found %d, want %d", old, next)
			}
			next = old // the value earlier rounds left: the next call swaps it
		case kase == svcFetchAndOp && !first && old != next:
			return fmt.Errorf("FetchAndOp returned %d, want %d", old, next)
		default:
			next = old + 1
		}
		first = false
		return nil
	}
	b.prog.start(kase+" latency", int64(n))
	if b.c.warmup == 0 {
		if err := one(); err != nil { // learn the word's value
			return result{}, err
		}
	}
	o := "fetch_and_op"
	if kase == svcCompareAndSwap {
		o = "compare_and_swap"
	}
	r = result{Name: kase, Op: o, Mode: "latency", Route: opService, Bytes: 8}
	if err := b.timeLatency(one, n, &r); err != nil {
		return result{}, err
	}
	return r, nil
}

// rate runs n FetchAndOp(SUM) calls shared by conns clients, each dialed
// on its own and driven by per goroutines of its own, and checks that each
// goroutine's old values grow.
func (s *svcBench) rate(ctx context.Context, b *bench, kase string, n, conns, per int) (r result, err error) {
	if s.err != nil {
		return result{}, s.err
	}
	conns = min(conns, n)
	b.prog.start(fmt.Sprintf("%s message rate, %d clients", kase, conns), int64(n))
	cls := make([]*service.Client, conns)
	wins := make([]*service.Window, conns)
	errs := make([]error, conns)
	var wg sync.WaitGroup
	for i := range cls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cls[i], wins[i], errs[i] = s.dial(ctx)
		}()
	}
	wg.Wait()
	defer func() {
		for _, cl := range cls {
			if cl == nil {
				continue
			}
			if cerr := cl.Close(); err == nil && cerr != nil {
				err = cerr
			}
		}
	}()
	if err := firstErr(errs); err != nil {
		return result{}, err
	}
	// Warm up every connection, the first with the case's warm-up.
	for i, w := range wins {
		for j := 0; j < max(1, b.c.warmup/conns); j++ {
			if _, err := rma.FetchAndOp(ctx, w, int64(1), svcDispCounter, op.Sum); err != nil {
				return result{}, fmt.Errorf("client %d: %w", i, err)
			}
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	begin := make(chan struct{})
	errs = make([]error, conns*per)
	for k := range conns * per {
		i, w := k, wins[k/per]
		count := n / (conns * per)
		if i < n%(conns*per) {
			count++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-begin
			prev := int64(-1)
			for j := 0; j < count; j++ {
				old, err := rma.FetchAndOp(ctx, w, int64(1), svcDispCounter, op.Sum)
				if err == nil && old <= prev {
					err = fmt.Errorf("FetchAndOp returned %d after %d", old, prev)
				}
				if err != nil {
					errs[i] = fmt.Errorf("goroutine %d of client %d: %w", i%per, i/per, err)
					cancel()
					return
				}
				prev = old
				b.prog.add(1)
			}
		}()
	}
	m0 := mallocs()
	t := time.Now()
	close(begin)
	wg.Wait()
	dt := time.Since(t)
	m1 := mallocs()
	if err := firstErr(errs); err != nil {
		return result{}, err
	}
	sec := dt.Seconds()
	return result{Name: kase, Op: "fetch_and_op", Mode: "bandwidth", Route: opService, Bytes: 8, Iterations: n, InFlight: conns * per,
		BandwidthMBps: float64(n) * 8 / sec / (1 << 20), RateMops: float64(n) / sec / 1e6, Seconds: sec,
		AllocsPerOp: float64(m1-m0) / float64(n)}, nil
}

// firstErr is the first error of errs, saying how many others there are.
func firstErr(errs []error) error {
	var first error
	n := 0
	for _, err := range errs {
		if err != nil {
			if first == nil {
				first = err
			}
			n++
		}
	}
	if n > 1 {
		return fmt.Errorf("%w (and %d more)", first, n-1)
	}
	return first
}

// connect times dials connections one after the other: each from the
// start of service.Dial, through Open, to the return of its first
// FetchAndOp(SUM); each client is closed after, untimed. The figures are
// those of a latency row (typical: the median).
func (s *svcBench) connect(ctx context.Context, b *bench, dials int) (result, error) {
	b.prog.start(svcConnect, int64(dials))
	lat := make([]time.Duration, dials)
	var next int64
	m0 := mallocs()
	for i := range lat {
		t := time.Now()
		cl, w, err := s.dial(ctx)
		if err != nil {
			return result{}, fmt.Errorf("dial %d: %w", i+1, err)
		}
		old, err := rma.FetchAndOp(ctx, w, int64(1), svcDispConnect, op.Sum)
		lat[i] = time.Since(t)
		if cerr := cl.Close(); err == nil {
			err = cerr
		}
		if err == nil && i > 0 && old != next {
			err = fmt.Errorf("FetchAndOp returned %d, want %d", old, next)
		}
		if err != nil {
			return result{}, fmt.Errorf("dial %d: %w", i+1, err)
		}
		next = old + 1
		b.prog.add(1)
	}
	m1 := mallocs() // Dial, Open, FetchAndOp and Close
	r := result{Name: svcConnect, Op: "fetch_and_op", Mode: "latency", Route: opService, Bytes: 8, Iterations: dials,
		AllocsPerOp: float64(m1-m0) / float64(dials)}
	st := latencyStats(lat)
	r.MinUS, r.TypicalUS, r.AvgUS, r.StdevUS, r.P99US, r.P999US, r.MaxUS = st.min, st.typical, st.avg, st.stdev, st.p99, st.p999, st.max
	return r, nil
}
