// Command rmabench measures the one-sided operations of this module on an
// RDMA device, in the manner of perftest: latency (min, typical, average,
// p99, p99.9, max), bandwidth and message rate of Put, Get, FetchAndOp,
// CompareAndSwap, Accumulate and GetAccumulate, from 8 B to 4 MiB.
//
// It runs as two processes, like perftest's server and client: rank 1
// drives the operations at rank 0's window, and rank 0's CPU takes no part
// except in the accumulates that go through its engine (MAX on float64,
// SUM on float64).
//
//	rmabench [flags]                 both ranks on this host: rank 0 is forked
//	rmabench -server [flags]         rank 0, listening on -addr (RMA_SECRET must be set)
//	rmabench [flags] HOST[:PORT]     rank 1, against a server (same RMA_SECRET)
//	rmarun -n 2 rmabench [flags]     under a launcher (also mpirun, srun)
//	rmabench -compare [flags]        run perftest and rmabench on the same device and compare
//	RMA_RANK=0|1 RMA_SIZE=2 RMA_ADDR=HOST0:PORT RMA_SECRET=... rmabench -compare [flags]
//	                                 compare across two hosts: one rank on each
//	rmabench -merge [-json FILE] FILE...  one table of the rows of several -compare runs
//	rmabench -service-server -addr IP:PORT  the service server of -compare (RMA_SECRET set)
//
// The cases (-t) are put, get, fetch_and_op (SUM on int64 through the NIC's
// fetch-and-add, MAX on float64 through the target's engine),
// compare_and_swap (int64, the NIC's compare-and-swap), accumulate (SUM on
// float64, through the engine) and get_accumulate (likewise). Latency is
// that of one operation at a time: Get, FetchAndOp, CompareAndSwap and
// GetAccumulate return with their result; Put and Accumulate are followed
// by a Flush (their latency is that of the completed operation). Bandwidth
// and message rate come from -q operations in flight: -q goroutines each
// issue the blocking operations one after the other; Put and Accumulate,
// which return before they complete, are issued back to back by -q
// goroutines and completed by one Flush at the end. MB is 2^20 bytes, as in
// perftest.
//
// Results are printed as tables, and with -json FILE ("-" for stdout, the
// tables then go to stderr) as JSON. A progress line is shown on stderr when
// it is a terminal (-progress).
//
// -compare runs perftest (ib_atomic_lat FETCH_AND_ADD and CMP_AND_SWAP,
// ib_read_lat, ib_write_lat, ib_send_lat, ib_atomic_bw, ib_write_bw) server
// and client on the same device with the same iterations, interleaved with
// the matching rmabench cases, and prints one table of ratios against the
// targets; with -json it writes the rows (name, hosts, metric, ours,
// perftest, ratio, and target and met where the row has a target). The
// operations that go through the target's engine are also compared with one
// SEND round trip, 2 x ib_send_lat's t_typical (perftest reports half a
// round trip). An untimed ib_write_lat runs first, as a warm-up.
//
// On one host, -compare also measures package service (-service, on by
// default; -service=false leaves it out): a server process of its own
// (rmabench -service-server, run again from this binary) listens on the
// IPv4 address of the device's network interface (-service-addr) and
// exposes one window; the clients are in the driving process, each with
// its own connection (service.Dial). Its rows: service/fetch_and_op/lat
// (FetchAndOp SUM on int64) and service/compare_and_swap/lat, one client,
// one call at a time, against ib_atomic_lat FETCH_AND_ADD and
// CMP_AND_SWAP of the same round (target: at most 1.2 x);
// service/fetch_and_op/rate/1conn, 4conn and 16conn, the message rate of
// -nbw FetchAndOp(SUM) calls shared by 1, 4 or 16 clients, one goroutine
// each, beside ib_atomic_bw's (informational); and
// service/connect_first_op, from the start of service.Dial through Open
// to the return of the first FetchAndOp, typical (median) of 20
// connections made one after the other, each closed after (no perftest
// counterpart).
//
// With -mpich PATH, the one-host comparison also runs PATH, the MPI
// program mpich/osclat.c built with mpicc.mpich, on 2 ranks of
// mpiexec.mpich -launcher fork, UCX on the same device, port and GID
// index, once per round after the perftest tests: in one MPI_Win_lock_all
// epoch, rank 0 times MPI_Fetch_and_op (SUM, int64), MPI_Compare_and_swap
// (int64), MPI_Get and MPI_Put of 8 B, MPI_Accumulate and
// MPI_Get_accumulate (SUM, one float64) at rank 1, each followed by
// MPI_Win_flush, while rank 1 waits in MPI_Barrier. Its rows, with no
// target, are named as ours with /mpich appended (fetch_and_op_sum_int64/mpich,
// ...): ours against MPICH's median, in the perftest column, ratio
// ours/MPICH. When the program is missing or fails, those rows say why and
// the rest of the comparison goes on.
//
// Run as one rank of a group of 2 (RMA_RANK, RMA_SIZE=2, RMA_ADDR of rank 0,
// RMA_SECRET), -compare compares across two hosts: rank 0 runs perftest's
// servers and serves its window, rank 1 runs perftest's clients against
// RMA_ADDR's host and drives the operations; rank 1 tells rank 0 what to
// do over a control connection to -control (default: RMA_ADDR's port plus
// one). Each perftest test (ib_atomic_lat both ways, ib_read_lat,
// ib_write_lat, ib_send_lat, ib_write_bw and ib_read_bw of 1 MiB) runs with
// no group formed; then the ranks form the group, run the cases compared
// with it and close the group. Its rows' names end in /2host. make bench
// runs it across the test VM's two hosts (rxevm -hosts 2) and merges both
// tables with -merge.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/onesided/rma/group"
	"github.com/onesided/rma/verbs"
)

// config is what the driving rank was asked to do.
type config struct {
	device   string
	port     int
	gidIndex int // -1: the library's default (the RoCE v2 IPv4 GID)
	mtu      int // bytes; 0: the port's active MTU
	spin     time.Duration

	iters    int      // latency iterations
	itersBW  int      // bandwidth/rate iterations
	bwBytes  int64    // cap on the bytes one bandwidth case moves
	warmup   int      // untimed operations before each case
	sizes    []int    // message sizes of put, get, accumulate, get_accumulate
	ops      []string // cases (-t)
	modes    []string // lat, bw
	inflight int      // -q
	run      *regexp.Regexp

	jsonOut     string
	clock       string
	clk         *clock // the clock, once calibrated
	served      bool   // rank 0 has served a window (and said so)
	progress    bool
	cpuProfile  string
	cpuProfile0 string // rank 0's
	memProfile  string

	compare         bool
	rounds          int
	perftestHost    string
	perftestHostSet bool   // -perftest-host was given
	control         string // across hosts: rank 0's control address
	service         bool   // with -compare on one host: package service's rows too
	serviceIP       netip.Addr
	mpich           string // with -compare on one host: osclat, run under mpiexec.mpich
}

var allOps = []string{"put", "get", "fetch_and_op", "compare_and_swap", "accumulate", "get_accumulate"}

func main() {
	os.Exit(run())
}

func usage() {
	fmt.Fprintf(os.Stderr, `usage:
  rmabench [flags]               both ranks on this host (rank 0 is forked)
  rmabench -server [flags]       rank 0 for a client on another host (RMA_SECRET set on both)
  rmabench [flags] HOST[:PORT]   rank 1 against a server
  rmarun -n 2 rmabench [flags]   under a launcher (mpirun, srun: RMA_SECRET and RMA_ADDR set)
  rmabench -compare [flags]      run perftest too, on the same device, and compare
  RMA_RANK=0|1 RMA_SIZE=2 RMA_ADDR=HOST0:PORT RMA_SECRET=S rmabench -compare [flags]
                                 compare across two hosts, one rank on each (rank 0 on HOST0)
  rmabench -merge [-json FILE] FILE...
                                 one table of the JSON rows of -compare runs
  rmabench -service-server -addr IP:PORT
                                 the service server of -compare (RMA_SECRET set)

flags:
`)
	flag.PrintDefaults()
}

func run() int {
	var c config
	var sizes, ops, modes, mtu, progress string
	var all, server bool
	var addr string
	var gid int
	flag.StringVar(&c.device, "d", "", "RDMA `device` (default: RMA_DEVICE, else the first device)")
	flag.IntVar(&c.port, "i", 0, "device `port` (default: RMA_PORT, else 1)")
	flag.IntVar(&gid, "x", -1, "source GID `index` (default: RMA_GID_INDEX, else the RoCE v2 IPv4 GID)")
	flag.StringVar(&mtu, "m", "", "path `MTU`: 256, 512, 1024, 2048 or 4096 (default: the port's active MTU)")
	flag.DurationVar(&c.spin, "spin", 0, "how long a waiting call polls before it sleeps (default: RMA_SPIN, else the library's)")
	flag.IntVar(&c.iters, "n", 1000, "iterations of each latency case")
	flag.IntVar(&c.itersBW, "nbw", 5000, "iterations of each bandwidth and message-rate case (see -bw-bytes)")
	bwBytes := flag.String("bw-bytes", "1GiB", "at most this many bytes per bandwidth case (fewer iterations for large sizes)")
	flag.IntVar(&c.warmup, "w", 0, "untimed warm-up operations before each case (default: n/10, at most 100)")
	flag.StringVar(&sizes, "s", "8", "message `sizes` of put, get, accumulate and get_accumulate: a list (8,4K,1M) or a range of powers of two (8-4M)")
	flag.BoolVar(&all, "a", false, "all sizes from 8 B to 4 MiB (-s 8-4M)")
	flag.StringVar(&ops, "t", strings.Join(allOps, ","), "`cases` to run, from "+strings.Join(allOps, ", "))
	flag.StringVar(&modes, "mode", "lat,bw", "what to measure: lat (latency), bw (bandwidth and message rate), or both")
	runRE := flag.String("run", "", "run only the cases whose name matches this `regexp`")
	flag.IntVar(&c.inflight, "q", 16, "operations in flight in bandwidth and message-rate cases")
	flag.StringVar(&c.clock, "clock", "auto", "what stamps latency samples: tsc (the time-stamp counter, as perftest), os (the system clock), auto (tsc on amd64)")
	flag.StringVar(&c.jsonOut, "json", "", "also write the results as JSON to `file` (- for stdout: the tables go to stderr)")
	flag.StringVar(&progress, "progress", "auto", "show a progress line on stderr: auto (when it is a terminal), on, off")
	flag.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the driving rank to `file`")
	flag.StringVar(&c.cpuProfile0, "cpuprofile0", "", "write a CPU profile of rank 0 (the target) to `file`")
	flag.StringVar(&c.memProfile, "memprofile", "", "write an allocation profile of the driving rank to `file`")
	flag.BoolVar(&server, "server", false, "be rank 0 for a client on another host")
	flag.StringVar(&addr, "addr", ":18515", "with -server: the `host:port` to listen on")
	flag.BoolVar(&c.compare, "compare", false, "run perftest on the same device with the same iterations, and print the ratios to the targets")
	flag.IntVar(&c.rounds, "rounds", 1, "with -compare: run everything this many times and compare the medians")
	flag.StringVar(&c.perftestHost, "perftest-host", "127.0.0.1", "with -compare: the address perftest's client connects to its server by (across hosts: RMA_ADDR's host)")
	flag.StringVar(&c.control, "control", "", "with -compare across hosts: rank 0's `host:port` for rank 1's control connection (default: RMA_ADDR's port plus one)")
	flag.BoolVar(&c.service, "service", true, "with -compare on one host: also measure package service (FetchAndOp and CompareAndSwap latency, FetchAndOp rate with 1, 4 and 16 clients, Dial to first FetchAndOp) against a server process of its own")
	flag.StringVar(&c.mpich, "mpich", "", "with -compare on one host: run the MPICH latency program at this `path` (cmd/rmabench/mpich/osclat.c built with mpicc.mpich) under mpiexec.mpich on the same device in each round, and add rows against it (names ending in /mpich)")
	svcAddr := flag.String("service-addr", "", "with -compare -service: the IP `address` the service server listens on (default: the IPv4 address of the device's network interface)")
	svcServer := flag.Bool("service-server", false, "be the server of -compare -service, listening on -addr (an IP address; RMA_SECRET set): prints \"ready PORT\", serves until stdin ends")
	merge := flag.Bool("merge", false, "print the rows of the -compare JSON files given as arguments as one table (and with -json, write them all there)")
	flag.Usage = usage
	flag.Parse()
	flag.Visit(func(f *flag.Flag) { c.perftestHostSet = c.perftestHostSet || f.Name == "perftest-host" })

	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "rmabench: "+format+"\n", args...)
		return 2
	}
	var err error
	c.gidIndex = gid
	if mtu != "" {
		n, err := strconv.Atoi(mtu)
		if err != nil || verbs.MTUFromBytes(n) == 0 {
			return fail("-m %s: the MTU is 256, 512, 1024, 2048 or 4096", mtu)
		}
		c.mtu = n
	}
	if all {
		sizes = "8-4M"
	}
	if c.sizes, err = parseSizes(sizes); err != nil {
		return fail("-s: %v", err)
	}
	if c.ops, err = parseList(ops, allOps); err != nil {
		return fail("-t: %v", err)
	}
	if c.modes, err = parseList(modes, []string{"lat", "bw"}); err != nil {
		return fail("-mode: %v", err)
	}
	if b, err := parseSize(*bwBytes); err != nil || b < 1 {
		return fail("-bw-bytes %s: not a size", *bwBytes)
	} else {
		c.bwBytes = int64(b)
	}
	if c.run, err = regexp.Compile(*runRE); err != nil {
		return fail("-run: %v", err)
	}
	if c.iters < 1 || c.itersBW < 1 || c.inflight < 1 || c.rounds < 1 || c.warmup < 0 {
		return fail("-n, -nbw, -q and -rounds must be at least 1, -w at least 0")
	}
	if c.warmup == 0 {
		c.warmup = min(c.iters/10, 100)
	}
	switch progress {
	case "auto":
		c.progress = isTerminal(os.Stderr)
	case "on", "true", "1":
		c.progress = true
	case "off", "false", "0":
	default:
		return fail("-progress must be auto, on or off")
	}
	if *svcAddr != "" {
		if c.serviceIP, err = netip.ParseAddr(*svcAddr); err != nil || c.serviceIP.IsUnspecified() {
			return fail("-service-addr %s: not a specific IP address", *svcAddr)
		}
	}
	if *svcServer {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return serveService(ctx, addr)
	}
	if *merge {
		if flag.NArg() == 0 {
			return fail("-merge: name the JSON files of -compare")
		}
		out := os.Stdout
		if c.jsonOut == "-" {
			out = os.Stderr
		}
		if err := mergeResults(flag.Args(), out, c.jsonOut); err != nil {
			return fail("-merge: %v", err)
		}
		return 0
	}
	if flag.NArg() > 1 {
		usage()
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// Who are we?
	opts, envErr := group.FromEnv()
	switch {
	case server || flag.NArg() == 1:
		if c.compare {
			return fail("-compare runs both ranks on this host: no -server or HOST")
		}
		opts = group.Options{Rank: 1, Size: 2, Addr: addr, Secret: []byte(os.Getenv("RMA_SECRET"))}
		if server {
			opts.Rank = 0
		} else {
			opts.Addr = flag.Arg(0)
			if _, _, err := net.SplitHostPort(opts.Addr); err != nil {
				opts.Addr = net.JoinHostPort(opts.Addr, "18515")
			}
		}
		if len(opts.Secret) == 0 {
			return fail("set RMA_SECRET to the same secret on the server and the client")
		}
		if err := applyDeviceFlags(&opts, &c); err != nil {
			return fail("%v", err)
		}
	case envErr == nil && opts.Size >= 2:
		if err := applyDeviceFlags(&opts, &c); err != nil {
			return fail("%v", err)
		}
		if c.compare && os.Getenv("RMABENCH_CHILD") == "" {
			if opts.Size != 2 {
				return fail("-compare across hosts runs one rank on each of two hosts: RMA_SIZE=2, not %d", opts.Size)
			}
			if c.mpich != "" {
				fmt.Fprintln(os.Stderr, "rmabench: -mpich: MPICH runs in the one-host comparison only")
			}
			return crossCompare(ctx, opts, &c)
		}
	case os.Getenv("RMA_RANK") != "":
		return fail("%v", envErr)
	default:
		// Both ranks here: fork rank 0 and be rank 1.
		child, o, err := forkServer(ctx)
		if err != nil {
			return fail("%v", err)
		}
		opts = o
		if err := applyDeviceFlags(&opts, &c); err != nil {
			child.Process.Kill()
			child.Wait()
			return fail("%v", err)
		}
		code := drive(ctx, opts, &c)
		if werr := waitChild(child, code != 0); werr != nil && code == 0 {
			fmt.Fprintf(os.Stderr, "rmabench: rank 0: %v\n", werr)
			code = 1
		}
		return code
	}
	if opts.Rank == 1 {
		return drive(ctx, opts, &c)
	}
	return serve(ctx, opts, &c)
}

// applyDeviceFlags puts the device flags into the group's options (flags
// win over the environment).
func applyDeviceFlags(o *group.Options, c *config) error {
	if c.device != "" {
		o.Device = c.device
	}
	if c.port != 0 {
		o.Port = c.port
	}
	if c.gidIndex >= 0 {
		o.GIDIndex, o.SetGIDIndex = c.gidIndex, true
	}
	if c.mtu != 0 {
		o.MTU = verbs.MTUFromBytes(c.mtu)
	}
	if c.spin != 0 {
		o.Spin = c.spin
	}
	return nil
}

// forkServer starts this program again as rank 0 of a group of 2 on this
// host and returns the options for rank 1.
func forkServer(ctx context.Context) (*exec.Cmd, group.Options, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, group.Options{}, err
	}
	addr := l.Addr().String()
	l.Close()
	key := make([]byte, 16)
	if _, err := rand.Read(key); err != nil {
		return nil, group.Options{}, err
	}
	secret := hex.EncodeToString(key)
	self, err := os.Executable()
	if err != nil {
		return nil, group.Options{}, err
	}
	cmd := exec.Command(self, os.Args[1:]...)
	cmd.Env = append(os.Environ(), "RMA_RANK=0", "RMA_SIZE=2", "RMA_ADDR="+addr, "RMA_SECRET="+secret, "RMABENCH_CHILD=1")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, group.Options{}, err
	}
	o, _ := group.FromEnv() // device variables
	o.Rank, o.Size, o.Addr, o.Secret = 1, 2, addr, []byte(secret)
	return cmd, o, nil
}

// waitChild waits for rank 0, killing it if rank 1 failed and it does not
// end by itself soon.
func waitChild(cmd *exec.Cmd, failed bool) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	limit := 30 * time.Second
	if failed {
		limit = 3 * time.Second
	}
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		cmd.Process.Kill()
		<-done
		return errors.New("did not end: killed")
	}
}

// join forms the group, with a time limit.
func join(ctx context.Context, o group.Options) (*group.Group, error) {
	jctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return group.Join(jctx, o)
}

// startCPUProfile writes a CPU profile to path until stop is called; an
// empty path profiles nothing.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// drive is rank 1: it runs the cases and reports.
func drive(ctx context.Context, o group.Options, c *config) int {
	stop, err := startCPUProfile(c.cpuProfile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rmabench:", err)
		return 1
	}
	defer stop()
	g, err := join(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rmabench:", err)
		return 1
	}
	b, err := newBench(ctx, g, c)
	if err == nil {
		if c.compare {
			err = b.compare(ctx)
		} else {
			err = b.runAll(ctx)
		}
		if cerr := b.close(ctx); err == nil {
			err = cerr
		}
	}
	if cerr := g.Close(); err == nil {
		err = cerr
	}
	if c.memProfile != "" {
		if f, ferr := os.Create(c.memProfile); ferr == nil {
			pprof.Lookup("allocs").WriteTo(f, 0)
			f.Close()
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rmabench:", err)
		return 1
	}
	return 0
}

// serve is rank 0 (and any other rank but 1): it exposes its window and
// waits until rank 1 is done.
func serve(ctx context.Context, o group.Options, c *config) int {
	if o.Rank == 0 {
		stop, err := startCPUProfile(c.cpuProfile0)
		if err != nil {
			fmt.Fprintln(os.Stderr, "rmabench:", err)
			return 1
		}
		defer stop()
	}
	g, err := join(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rmabench:", err)
		return 1
	}
	if o.Rank == 0 && os.Getenv("RMABENCH_CHILD") == "" && !c.served {
		fmt.Fprintf(os.Stderr, "rmabench: rank 0 of %d on %s, serving\n", g.Size(), g.Device())
	}
	c.served = true
	err = serveWindow(ctx, g)
	if cerr := g.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rmabench:", err)
		return 1
	}
	return 0
}

func isTerminal(f *os.File) bool {
	return isatty(int(f.Fd()))
}

func parseList(s string, valid []string) ([]string, error) {
	var out []string
	for _, v := range strings.Split(s, ",") {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		ok := false
		for _, w := range valid {
			if v == w {
				ok = true
			}
		}
		if !ok {
			return nil, fmt.Errorf("unknown %q (valid: %s)", v, strings.Join(valid, ", "))
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}

// parseSize reads 8, 4K, 4KiB, 1M, 1MiB, 1G (powers of 1024).
func parseSize(s string) (int, error) {
	s = strings.TrimSpace(s)
	u := strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(s), "B"), "I")
	mult := 1
	switch {
	case strings.HasSuffix(u, "K"):
		mult, u = 1<<10, u[:len(u)-1]
	case strings.HasSuffix(u, "M"):
		mult, u = 1<<20, u[:len(u)-1]
	case strings.HasSuffix(u, "G"):
		mult, u = 1<<30, u[:len(u)-1]
	}
	n, err := strconv.Atoi(u)
	if err != nil || n < 0 || n > (1<<40)/mult {
		return 0, fmt.Errorf("%q is not a size", s)
	}
	return n * mult, nil
}

// maxSize bounds the message size (the window rank 0 allocates).
const maxSize = 64 << 20

// parseSizes reads a comma-separated list of sizes and ranges of powers of
// two ("8-4M").
func parseSizes(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := parseSize(lo)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = parseSize(hi); err != nil {
				return nil, err
			}
		}
		if a < 1 || b < a || b > maxSize {
			return nil, fmt.Errorf("%q: sizes are from 1 B to %s", part, sizeName(maxSize))
		}
		for n := a; n <= b; n *= 2 {
			out = append(out, n)
			if !isRange {
				break
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no sizes")
	}
	return out, nil
}

// sizeName writes 8 as 8B, 1024 as 1KiB, 1048576 as 1MiB.
func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}
