package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"
)

// A perftest test: the program and its arguments beyond the common ones.
type ptest struct {
	bin  string
	args []string
	bw   bool // a bandwidth test: -n is the bandwidth iterations
}

func (p ptest) String() string { return strings.Join(append([]string{p.bin}, p.args...), " ") }

var (
	ptFetchAdd  = ptest{bin: "ib_atomic_lat", args: []string{"-A", "FETCH_AND_ADD"}}
	ptCmpSwap   = ptest{bin: "ib_atomic_lat", args: []string{"-A", "CMP_AND_SWAP"}}
	ptReadLat   = ptest{bin: "ib_read_lat", args: []string{"-s", "8"}}
	ptWriteLat  = ptest{bin: "ib_write_lat", args: []string{"-s", "8"}}
	ptAtomicBW  = ptest{bin: "ib_atomic_bw", args: []string{"-A", "FETCH_AND_ADD"}, bw: true}
	ptWriteBW1M = ptest{bin: "ib_write_bw", args: []string{"-s", "1048576"}, bw: true}
)

// Metrics of the comparison rows.
const (
	metricLatency   = "latency_us"
	metricBandwidth = "bandwidth_MBps"
	metricRate      = "rate_Mops"
)

// target is one row of the comparison: a case of ours, a perftest test, and
// the largest acceptable ratio (ours/perftest for latency, perftest/ours
// otherwise: lower is better).
type target struct {
	name   string
	metric string
	op     string // our case: the op of b.cases
	kase   string // and the case's name
	size   int
	pt     ptest
	column string  // perftest's column
	max    float64 // 0: informational, no target
}

var targets = []target{
	{name: "fetch_and_op_sum_int64", metric: metricLatency, op: "fetch_and_op", kase: "fetch_and_op_sum_int64", size: 8, pt: ptFetchAdd, column: "t_typical[usec]", max: 1.10},
	{name: "compare_and_swap_int64", metric: metricLatency, op: "compare_and_swap", kase: "compare_and_swap_int64", size: 8, pt: ptCmpSwap, column: "t_typical[usec]", max: 1.10},
	{name: "get_8B", metric: metricLatency, op: "get", kase: "get_8B", size: 8, pt: ptReadLat, column: "t_typical[usec]", max: 1.10},
	{name: "put_8B_flush", metric: metricLatency, op: "put", kase: "put_8B", size: 8, pt: ptReadLat, column: "t_typical[usec]", max: 1.15},
	{name: "accumulate_sum_float64_1_flush", metric: metricLatency, op: "accumulate", kase: "accumulate_sum_float64_8B", size: 8, pt: ptFetchAdd, column: "t_typical[usec]", max: 1.60},
	{name: "fetch_and_op_sum_int64_16_in_flight", metric: metricRate, op: "fetch_and_op", kase: "fetch_and_op_sum_int64", size: 8, pt: ptAtomicBW, column: "MsgRate[Mpps]", max: 1.10},
	{name: "put_1MiB", metric: metricBandwidth, op: "put", kase: "put_1MiB", size: 1 << 20, pt: ptWriteBW1M, column: "BW_average[MB/sec]", max: 1.05},
	{name: "accumulate_sum_float64_1MiB", metric: metricBandwidth, op: "accumulate", kase: "accumulate_sum_float64_1MiB", size: 1 << 20, pt: ptWriteBW1M, column: "BW_average[MB/sec]", max: 1.60},
}

// extras are shown in the table for context, with no target.
var extras = []target{
	{name: "put_8B_flush", metric: metricLatency, op: "put", kase: "put_8B", size: 8, pt: ptWriteLat, column: "t_typical[usec]"},
	{name: "fetch_and_op_max_float64", metric: metricLatency, op: "fetch_and_op", kase: "fetch_and_op_max_float64", size: 8, pt: ptFetchAdd, column: "t_typical[usec]"},
	{name: "get_accumulate_sum_float64_1", metric: metricLatency, op: "get_accumulate", kase: "get_accumulate_sum_float64_8B", size: 8, pt: ptFetchAdd, column: "t_typical[usec]"},
}

// row is one line of bench-results.json.
type row struct {
	Name     string  `json:"name"`
	Metric   string  `json:"metric"`
	Ours     float64 `json:"ours"`
	Perftest float64 `json:"perftest"`
	Ratio    float64 `json:"ratio"`
	Target   float64 `json:"target"`
	Met      bool    `json:"met"`

	Test           string    `json:"perftest_test"`
	Iterations     int       `json:"iterations"`
	OursRounds     []float64 `json:"ours_rounds,omitempty"`
	PerftestRounds []float64 `json:"perftest_rounds,omitempty"`
	OursDetail     *result   `json:"ours_detail,omitempty"`
	PerftestDetail ptResult  `json:"perftest_detail,omitempty"`
}

// ptResult is the row perftest printed: its columns by name.
type ptResult map[string]float64

func (t target) mode() string {
	if t.metric == metricLatency {
		return "latency"
	}
	return "bandwidth"
}

func (t target) value(r result) float64 {
	switch t.metric {
	case metricLatency:
		return r.TypicalUS
	case metricBandwidth:
		return r.BandwidthMBps
	}
	return r.RateMops
}

// compare runs every perftest test the targets need, each followed at once
// by our cases compared with it, -rounds times, and reports the medians'
// ratios.
func (b *bench) compare(ctx context.Context) error {
	dev, port, gid, err := b.perftestDevice()
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "rmabench: comparing with perftest on %s port %d GID index %d, MTU %d; %d latency, %d message-rate, %d bandwidth iterations; %d round(s)\n",
		dev, port, gid, b.g.Fabric().Path().MTU.Bytes(), b.c.iters, b.c.itersBW, b.bwIters(1<<20), b.c.rounds)
	type key struct{ kase, mode string }
	type round struct {
		ours map[key]result
		pts  map[string]ptResult
	}
	rounds := make([]round, b.c.rounds)
	order := []ptest{ptFetchAdd, ptCmpSwap, ptReadLat, ptWriteLat, ptAtomicBW, ptWriteBW1M}
	all := append(append([]target{}, targets...), extras...)
	b.prog.cases = len(order) * b.c.rounds
	for ri := range rounds {
		rd := &rounds[ri]
		rd.ours, rd.pts = map[key]result{}, map[string]ptResult{}
		for _, pt := range order {
			iters := b.c.iters
			if pt.bw {
				iters = b.c.itersBW
				if pt.String() == ptWriteBW1M.String() {
					iters = b.bwIters(1 << 20)
				}
			}
			b.prog.start(pt.String()+", then rmabench", 1)
			var res ptResult
			for try := 1; ; try++ {
				// perftest can fail to calibrate its clock on a busy host
				// (its table then says inf and nan): run it again.
				if res, err = runPerftest(ctx, pt, dev, port, gid, b.c.mtu, iters, b.c.perftestHost); err == nil || try == 3 || ctx.Err() != nil {
					break
				}
				b.prog.print(os.Stderr, fmt.Sprintf("rmabench: %v\nrmabench: running %s again\n", firstLine(err), pt))
			}
			if err != nil {
				return err
			}
			rd.pts[pt.String()] = res
			for _, t := range all {
				k := key{t.kase, t.mode()}
				if _, ok := rd.ours[k]; ok || t.pt.String() != pt.String() {
					continue
				}
				var kc *kase
				for _, c := range b.cases(t.op, t.size) {
					if c.name == t.kase {
						kc = &c
					}
				}
				if kc == nil {
					return fmt.Errorf("no case %s", t.kase)
				}
				var r result
				if k.mode == "latency" {
					r, err = b.latency(ctx, *kc, iters)
				} else {
					r, err = b.bandwidth(ctx, *kc, iters, b.c.inflight)
				}
				if err != nil {
					return fmt.Errorf("%s: %w", t.kase, err)
				}
				rd.ours[k] = r
			}
		}
	}
	b.prog.stop()

	var rows, info []row
	for i, t := range all {
		rw := row{Name: t.name, Metric: t.metric, Target: t.max, Test: t.pt.String()}
		var ours, pts []float64
		for _, rd := range rounds {
			ours = append(ours, t.value(rd.ours[key{t.kase, t.mode()}]))
			pts = append(pts, rd.pts[t.pt.String()][t.column])
		}
		oi, pi := medianIndex(ours), medianIndex(pts)
		rw.Ours, rw.Perftest = ours[oi], pts[pi]
		r := rounds[oi].ours[key{t.kase, t.mode()}]
		rw.OursDetail, rw.PerftestDetail, rw.Iterations = &r, rounds[pi].pts[t.pt.String()], r.Iterations
		if len(rounds) > 1 {
			rw.OursRounds, rw.PerftestRounds = ours, pts
		}
		if rw.Ours > 0 && rw.Perftest > 0 {
			if t.metric == metricLatency {
				rw.Ratio = rw.Ours / rw.Perftest
			} else {
				rw.Ratio = rw.Perftest / rw.Ours
			}
		}
		rw.Met = t.max > 0 && rw.Ratio > 0 && rw.Ratio <= t.max
		if i < len(targets) {
			rows = append(rows, rw)
		} else {
			info = append(info, rw)
		}
	}
	b.printComparison(rows, info)
	if b.c.jsonOut != "" {
		return writeJSONFile(b.c.jsonOut, rows)
	}
	return nil
}

// medianIndex is the index of the median of v (the lower one of an even count).
func medianIndex(v []float64) int {
	idx := make([]int, len(v))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return v[idx[a]] < v[idx[b]] })
	return idx[(len(v)-1)/2]
}

func (b *bench) printComparison(rows, info []row) {
	var s strings.Builder
	line := strings.Repeat("-", 120) + "\n"
	s.WriteString(line)
	fmt.Fprintf(&s, " %-36s %-15s %10s %10s %7s %7s %4s  %s\n", "name", "metric", "ours", "perftest", "ratio", "target", "met", "perftest test")
	s.WriteString(line)
	met := 0
	for _, r := range rows {
		mark := "no"
		if r.Met {
			mark = "yes"
			met++
		}
		fmt.Fprintf(&s, " %-36s %-15s %10.3f %10.3f %7.3f %7s %4s  %s\n", r.Name, r.Metric, r.Ours, r.Perftest, r.Ratio, "<="+strconv.FormatFloat(r.Target, 'f', 2, 64), mark, r.Test)
	}
	s.WriteString(line)
	for _, r := range info {
		fmt.Fprintf(&s, " %-36s %-15s %10.3f %10.3f %7.3f %7s %4s  %s\n", r.Name, r.Metric, r.Ours, r.Perftest, r.Ratio, "-", "-", r.Test)
	}
	if len(info) > 0 {
		s.WriteString(line)
	}
	fmt.Fprintf(&s, " %d of %d targets met. ratio: ours/perftest for latency, perftest/ours for bandwidth and rate (lower is better).\n", met, len(rows))
	fmt.Fprintf(&s, " latency: typical (median) of %d; rate: %d FetchAndOp with %d in flight; bandwidth: MB = 2^20 bytes.\n",
		b.c.iters, b.c.itersBW, b.c.inflight)
	if b.c.rounds > 1 {
		fmt.Fprintf(&s, " ours and perftest: medians of %d rounds, each perftest test followed at once by the cases compared with it.\n", b.c.rounds)
	}
	b.prog.print(b.out, s.String())
}

// perftestDevice is the device, port and GID index the group uses, for
// perftest to use the same.
func (b *bench) perftestDevice() (string, int, int, error) {
	p := b.g.Fabric().Path()
	return b.g.Device(), p.Port, p.GIDIndex, nil
}

// runPerftest runs a perftest server and client on this host and returns
// the client's result row.
func runPerftest(ctx context.Context, pt ptest, dev string, port, gid, mtu, iters int, host string) (ptResult, error) {
	if _, err := exec.LookPath(pt.bin); err != nil {
		return nil, fmt.Errorf("%s not found (apt-get install perftest): %w", pt.bin, err)
	}
	tcp := freeTCPPort()
	args := []string{"-d", dev, "-i", strconv.Itoa(port), "-x", strconv.Itoa(gid), "-n", strconv.Itoa(iters), "-p", strconv.Itoa(tcp), "-F"}
	if mtu != 0 {
		args = append(args, "-m", strconv.Itoa(mtu))
	}
	args = append(args, pt.args...)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var sout bytes.Buffer
	srv := exec.CommandContext(ctx, pt.bin, args...)
	srv.Stdout, srv.Stderr = &sout, &sout
	if err := srv.Start(); err != nil {
		return nil, err
	}
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Wait() }()
	// Wait for the server to listen.
	for deadline := time.Now().Add(20 * time.Second); !listening(tcp); {
		select {
		case err := <-srvDone:
			return nil, fmt.Errorf("%s server ended before it listened: %v\n%s", pt, err, sout.Bytes())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			srv.Process.Kill()
			<-srvDone
			return nil, fmt.Errorf("%s server did not listen on port %d:\n%s", pt, tcp, sout.Bytes())
		}
	}
	cli := exec.CommandContext(ctx, pt.bin, append(args, host)...)
	out, cerr := cli.CombinedOutput()
	var serr error
	select {
	case serr = <-srvDone:
	case <-time.After(10 * time.Second):
		srv.Process.Kill()
		serr = <-srvDone
	}
	if cerr != nil {
		return nil, fmt.Errorf("%s client: %v\n%s\nserver:\n%s", pt, cerr, out, sout.Bytes())
	}
	res, err := parsePerftest(out)
	if err != nil {
		return nil, fmt.Errorf("%s: %v\n%s", pt, err, out)
	}
	if serr != nil {
		fmt.Fprintf(os.Stderr, "rmabench: %s server: %v\n", pt, serr)
	}
	return res, nil
}

// perftest's multi-word column names, made single words.
var ptColumns = strings.NewReplacer(
	"99% percentile", "99%_percentile",
	"99.9% percentile", "99.9%_percentile",
	"BW peak", "BW_peak",
	"BW average", "BW_average",
)

// parsePerftest finds the result table in perftest's output (the line that
// starts with #bytes and the data line after it) and returns its columns.
func parsePerftest(out []byte) (ptResult, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	var head []string
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#bytes") {
			head = strings.Fields(ptColumns.Replace(line))
			continue
		}
		if head == nil {
			continue
		}
		f := strings.Fields(line)
		if len(f) != len(head) {
			continue
		}
		res := ptResult{}
		for i, h := range head {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
				return nil, fmt.Errorf("perftest's column %s is %q, not a number", h, f[i])
			}
			res[h] = v
		}
		return res, nil
	}
	if head == nil {
		return nil, errors.New("no result table (#bytes ...) in perftest's output")
	}
	return nil, errors.New("no result row after perftest's header")
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// freeTCPPort picks a port for perftest's connection.
func freeTCPPort() int {
	for i := 0; i < 100; i++ {
		p := 20000 + int(time.Now().UnixNano()%20000)
		if !listening(p) {
			return p
		}
	}
	return 18515
}

// listening reports whether a TCP socket listens on port (read from
// /proc/net/tcp and tcp6, so that no connection disturbs the server).
func listening(port int) bool {
	want := fmt.Sprintf(":%04X ", port)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			fields := strings.Fields(line)
			if len(fields) > 3 && strings.HasSuffix(fields[1]+" ", want) && fields[3] == "0A" {
				return true
			}
		}
	}
	return false
}
