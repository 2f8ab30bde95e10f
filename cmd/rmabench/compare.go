package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	id   string // names the test on the control connection between hosts
	bin  string
	args []string
	bw   bool // a bandwidth test: -n is the bandwidth iterations
	size int  // a bandwidth test's message size (its -s)
}

func (p ptest) String() string { return strings.Join(append([]string{p.bin}, p.args...), " ") }

var (
	ptFetchAdd  = ptest{id: "fetch_add", bin: "ib_atomic_lat", args: []string{"-A", "FETCH_AND_ADD"}}
	ptCmpSwap   = ptest{id: "cmp_swap", bin: "ib_atomic_lat", args: []string{"-A", "CMP_AND_SWAP"}}
	ptReadLat   = ptest{id: "read_lat", bin: "ib_read_lat", args: []string{"-s", "8"}}
	ptWriteLat  = ptest{id: "write_lat", bin: "ib_write_lat", args: []string{"-s", "8"}}
	ptSendLat   = ptest{id: "send_lat", bin: "ib_send_lat", args: []string{"-s", "8"}}
	ptAtomicBW  = ptest{id: "atomic_bw", bin: "ib_atomic_bw", args: []string{"-A", "FETCH_AND_ADD"}, bw: true, size: 8}
	ptWriteBW1M = ptest{id: "write_bw_1M", bin: "ib_write_bw", args: []string{"-s", "1048576"}, bw: true, size: 1 << 20}
	ptReadBW1M  = ptest{id: "read_bw_1M", bin: "ib_read_bw", args: []string{"-s", "1048576"}, bw: true, size: 1 << 20}

	// ptWarmup runs once, untimed, before the others: the first perftest
	// test after the guest boots can be far slower than the same test a
	// moment later.
	ptWarmup = ptest{id: "warmup", bin: "ib_write_lat", args: []string{"-s", "8"}}

	ptests = []ptest{ptFetchAdd, ptCmpSwap, ptReadLat, ptWriteLat, ptSendLat, ptAtomicBW, ptWriteBW1M, ptReadBW1M, ptWarmup}
)

// warmupIters is the number of iterations of ptWarmup.
const warmupIters = 100

// ptestByID finds a test by its id.
func ptestByID(id string) (ptest, bool) {
	for _, p := range ptests {
		if p.id == id {
			return p, true
		}
	}
	return ptest{}, false
}

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
	column string // perftest's column
	// scale multiplies perftest's figure (0 means 1): ib_send_lat reports
	// half a round trip, so one SEND round trip is 2 x its t_typical.
	scale float64
	max   float64 // 0: informational, no target
	conns int     // package service's rate rows: the client connections
	// goroutines: the goroutines per connection of a rate row (0: 1).
	goroutines int
}

// Rows compared with one SEND round trip, the least an operation that goes
// through the target's engine can cost: a request and its reply.
const sendRTT = "/send_rtt"

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
	{name: "accumulate_sum_float64_1_flush" + sendRTT, metric: metricLatency, op: "accumulate", kase: "accumulate_sum_float64_8B", size: 8, pt: ptSendLat, column: "t_typical[usec]", scale: 2},
	{name: "get_accumulate_sum_float64_1" + sendRTT, metric: metricLatency, op: "get_accumulate", kase: "get_accumulate_sum_float64_8B", size: 8, pt: ptSendLat, column: "t_typical[usec]", scale: 2},
	{name: "fetch_and_op_max_float64" + sendRTT, metric: metricLatency, op: "fetch_and_op", kase: "fetch_and_op_max_float64", size: 8, pt: ptSendLat, column: "t_typical[usec]", scale: 2},
}

// The one-host comparison runs these perftest tests, in this order, each
// followed at once by the cases compared with it.
var hostOrder = []ptest{ptFetchAdd, ptCmpSwap, ptReadLat, ptWriteLat, ptSendLat, ptAtomicBW, ptWriteBW1M}

// row is one line of bench-results.json.
type row struct {
	Name     string  `json:"name"`
	Hosts    int     `json:"hosts"` // 1: both ranks on one device; 2: one rank per host
	Metric   string  `json:"metric"`
	Ours     float64 `json:"ours"`
	Perftest float64 `json:"perftest"` // perftest's figure times PerftestScale; MPICH's in the /mpich rows
	Ratio    float64 `json:"ratio"`
	Target   float64 `json:"target,omitempty"` // absent: informational
	Met      *bool   `json:"met,omitempty"`    // absent: informational

	Test           string    `json:"perftest_test"`
	PerftestScale  float64   `json:"perftest_scale,omitempty"`
	Iterations     int       `json:"iterations"`
	OursRounds     []float64 `json:"ours_rounds,omitempty"`
	PerftestRounds []float64 `json:"perftest_rounds,omitempty"`
	OursDetail     *result   `json:"ours_detail,omitempty"`
	PerftestDetail ptResult  `json:"perftest_detail,omitempty"`
	Error          string    `json:"error,omitempty"` // why a round has no figure of ours (or of MPICH's)
}

// ptResult is the row perftest printed (or osclat, for MPICH): its columns
// by name.
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

// ptValue is the perftest figure the row compares with.
func (t target) ptValue(r ptResult) float64 {
	if t.scale != 0 {
		return r[t.column] * t.scale
	}
	return r[t.column]
}

// testName names the perftest figure of the row.
func (t target) testName() string {
	if t.scale != 0 {
		return strconv.FormatFloat(t.scale, 'g', -1, 64) + " x " + t.pt.String()
	}
	return t.pt.String()
}

// ourKey is a measurement of ours in a round.
type ourKey struct{ kase, mode string }

// round holds one round's measurements: ours, and perftest's (or MPICH's)
// by test; the errors of the cases of ours that failed, and why a test of
// MPICH has no figure.
type round struct {
	ours    map[ourKey]result
	pts     map[string]ptResult
	errs    map[ourKey]error
	refErrs map[string]error
}

func newRound() round {
	return round{ours: map[ourKey]result{}, pts: map[string]ptResult{}, errs: map[ourKey]error{}, refErrs: map[string]error{}}
}

// caseLimit bounds one case of ours in a comparison: one that fails or
// takes longer is reported in its rows, and the others still run.
const caseLimit = 2 * time.Minute

// failures counts the cases of ours that failed in the rounds.
func failures(rounds []round) int {
	n := 0
	for _, rd := range rounds {
		n += len(rd.errs)
	}
	return n
}

// steps prints, when no progress line is shown, a line per step of a
// comparison with the time since it began.
type steps struct {
	on    bool
	began time.Time
	n, of int
}

func (s *steps) next(label string) {
	s.n++
	if s.on {
		fmt.Fprintf(os.Stderr, "rmabench: %5.0fs [%d/%d] %s\n", time.Since(s.began).Seconds(), s.n, s.of, label)
	}
}

// ptIters is the -n of a perftest test, and the iterations of the cases
// compared with it.
func (c *config) ptIters(pt ptest) int {
	switch {
	case pt.id == ptWarmup.id:
		return warmupIters
	case !pt.bw:
		return c.iters
	case pt.size > 8:
		return c.bwIters(pt.size)
	}
	return c.itersBW
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
		dev, port, gid, b.g.Path().MTU.Bytes(), b.c.iters, b.c.itersBW, b.bwIters(1<<20), b.c.rounds)
	rounds := make([]round, b.c.rounds)
	all, ntargets := compareTargets(b.c.service)
	b.prog.cases = len(hostOrder)*b.c.rounds + 1
	if b.c.mpich != "" {
		all = append(all, mpichTargets()...)
		b.prog.cases += b.c.rounds // MPICH follows perftest in each round
	}
	if b.c.service {
		b.prog.cases += b.c.rounds // connect-to-first-op ends each round
		b.svc = startService(ctx, dev, b.c.serviceIP)
		if b.svc.err != nil {
			fmt.Fprintf(os.Stderr, "rmabench: %v\n", b.svc.err)
		} else {
			fmt.Fprintf(os.Stderr, "rmabench: service server on %s\n", b.svc.addr)
		}
		defer func() {
			if serr := b.svc.stop(); serr != nil {
				fmt.Fprintf(os.Stderr, "rmabench: %v\n", serr)
			}
		}()
	}
	st := &steps{on: !b.c.progress, began: time.Now(), of: b.prog.cases}
	st.next(ptWarmup.String() + " (warm-up)")
	b.prog.start(ptWarmup.String()+" (warm-up)", 1)
	if _, err := runPerftest(ctx, ptWarmup, dev, port, gid, b.c.mtu, warmupIters, b.c.perftestHost); err != nil {
		b.prog.print(os.Stderr, fmt.Sprintf("rmabench: warm-up: %v\n", firstLine(err)))
	}
	for ri := range rounds {
		rd := &rounds[ri]
		*rd = newRound()
		for _, pt := range hostOrder {
			iters := b.c.ptIters(pt)
			st.next(fmt.Sprintf("round %d: %s, then rmabench", ri+1, pt))
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
			if err := b.measure(ctx, all, pt, iters, rd); err != nil {
				return err
			}
		}
		if b.c.mpich != "" {
			// Ours were measured beside perftest: MPICH's figures only.
			st.next(fmt.Sprintf("round %d: MPICH (%s)", ri+1, b.c.mpich))
			b.prog.start("MPICH ("+b.c.mpich+")", 1)
			b.measureMPICH(ctx, dev, port, gid, b.c.iters, rd)
		}
		if b.c.service {
			// The rows compared with no perftest test.
			st.next(fmt.Sprintf("round %d: service connect to first op", ri+1))
			b.prog.start("service connect to first op", 1)
			if err := b.measure(ctx, all, ptest{}, svcDials, rd); err != nil {
				return err
			}
		}
	}
	b.prog.stop()

	rows := buildRows(all, ntargets, rounds, 1)
	var note strings.Builder
	fmt.Fprintf(&note, " latency: typical (median) of %d; rate: %d FetchAndOp with %d in flight; bandwidth: MB = 2^20 bytes.\n",
		b.c.iters, b.c.itersBW, b.c.inflight)
	if b.c.rounds > 1 {
		fmt.Fprintf(&note, " ours and perftest: medians of %d rounds, each perftest test followed at once by the cases compared with it.\n", b.c.rounds)
	}
	if b.c.service {
		where := b.svc.addr
		if b.svc.err != nil {
			where = "(none: it did not start)"
		}
		fmt.Fprintf(&note, " service/: one client per connection to a server process on %s; lat: one client, one call at a time;"+
			" rate: %d FetchAndOp(SUM) shared by %s clients, one goroutine each; connect_first_op: typical of %d Dial+Open+first FetchAndOp, each client closed after.\n",
			where, b.c.itersBW, joinInts(svcConns), svcDials)
	}
	if b.c.mpich != "" {
		lib := b.mpichLib
		if lib == "" {
			lib = "(no run succeeded)"
		}
		fmt.Fprintf(&note, " /mpich: %s, 2 ranks of mpiexec.mpich -launcher fork (UCX on %s port %d GID index %d), %s; typical of %d, each round after perftest.\n",
			lib, dev, port, gid, b.c.mpich, b.c.iters)
	}
	fmt.Fprintf(&note, " took %.0f s.\n", time.Since(st.began).Seconds())
	b.prog.print(b.out, comparisonTable(rows)+note.String())
	if b.c.jsonOut != "" {
		if err := writeJSONFile(b.c.jsonOut, rows); err != nil {
			return err
		}
	}
	if n := failures(rounds); n > 0 {
		return fmt.Errorf("%d case(s) failed: see the rows' errors", n)
	}
	return nil
}

// measure runs, once per round, each case of ours that a target of ts
// compares with perftest test pt (the zero ptest: the targets compared
// with no perftest test), for at most caseLimit each, and keeps its result
// in rd, or its error: it fails only when ctx ends.
func (b *bench) measure(ctx context.Context, ts []target, pt ptest, iters int, rd *round) error {
	for _, t := range ts {
		k := ourKey{t.kase, t.mode()}
		_, done := rd.ours[k]
		if _, failed := rd.errs[k]; done || failed || t.pt.String() != pt.String() {
			continue
		}
		var kc *kase
		for _, c := range b.cases(t.op, t.size) {
			if c.name == t.kase {
				kc = &c
			}
		}
		if kc == nil && t.op != opService {
			return fmt.Errorf("no case %s", t.kase)
		}
		var r result
		var err error
		cctx, cancel := context.WithTimeout(ctx, caseLimit)
		switch {
		case t.op == opService:
			r, err = b.svc.measure(cctx, b, t, iters)
		case k.mode == "latency":
			r, err = b.latency(cctx, *kc, iters)
		default:
			r, err = b.bandwidth(cctx, *kc, iters, b.c.inflight)
		}
		cancel()
		switch {
		case err == nil:
			rd.ours[k] = r
		case ctx.Err() != nil:
			return fmt.Errorf("%s: %w", t.kase, err)
		default:
			rd.errs[k] = fmt.Errorf("%s %s: %w", t.kase, k.mode, err)
			b.prog.print(os.Stderr, fmt.Sprintf("rmabench: %v\n", rd.errs[k]))
		}
	}
	return nil
}

// buildRows makes the rows of ts from the rounds: the medians of ours and
// perftest's, and their ratio. The first ntargets of ts have targets, the
// others are informational. Ours is the median of the rounds in which the
// case did not fail; a row whose case failed in any round misses its
// target.
func buildRows(ts []target, ntargets int, rounds []round, hosts int) []row {
	rows := make([]row, 0, len(ts))
	for i, t := range ts {
		if len(rounds) == 0 {
			break
		}
		rw := row{Name: t.name, Hosts: hosts, Metric: t.metric, Test: t.testName(), PerftestScale: t.scale}
		k := ourKey{t.kase, t.mode()}
		var ours, pts []float64
		var oursAt, ptsAt []int // the round of each of ours and perftest's
		for ri, rd := range rounds {
			if r, ok := rd.pts[t.pt.String()]; ok || t.pt.String() == "" {
				pts, ptsAt = append(pts, t.ptValue(r)), append(ptsAt, ri)
			} else if err := rd.refErrs[t.pt.String()]; err != nil && rw.Error == "" {
				rw.Error = err.Error()
			}
			if r, ok := rd.ours[k]; ok {
				ours, oursAt = append(ours, t.value(r)), append(oursAt, ri)
			} else if err := rd.errs[k]; err != nil && rw.Error == "" {
				rw.Error = err.Error()
			} else if rw.Error == "" {
				rw.Error = fmt.Sprintf("no result in round %d", ri+1)
			}
		}
		if len(pts) > 0 {
			pi := medianIndex(pts)
			rw.Perftest, rw.PerftestDetail = pts[pi], rounds[ptsAt[pi]].pts[t.pt.String()]
		}
		if len(ours) > 0 {
			oi := medianIndex(ours)
			r := rounds[oursAt[oi]].ours[k]
			rw.Ours, rw.OursDetail, rw.Iterations = ours[oi], &r, r.Iterations
		}
		if len(rounds) > 1 {
			rw.OursRounds, rw.PerftestRounds = ours, pts
		}
		rw.Ratio = ratio(t.metric, rw.Ours, rw.Perftest)
		if i < ntargets {
			met := t.max > 0 && rw.Ratio > 0 && rw.Ratio <= t.max && rw.Error == ""
			rw.Target, rw.Met = t.max, &met
		}
		rows = append(rows, rw)
	}
	return rows
}

// ratio is ours/perftest for latency, perftest/ours otherwise (lower is
// better), 0 when either is missing.
func ratio(metric string, ours, perftest float64) float64 {
	if ours <= 0 || perftest <= 0 {
		return 0
	}
	if metric == metricLatency {
		return ours / perftest
	}
	return perftest / ours
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

// comparisonTable prints rows as a table: the rows with a target first,
// then the informational ones, each in the order given.
func comparisonTable(rows []row) string {
	var s strings.Builder
	line := strings.Repeat("-", 134) + "\n"
	s.WriteString(line)
	fmt.Fprintf(&s, " %-46s %-15s %6s %10s %10s %7s %7s %4s  %s\n", "name", "metric", "#iter", "ours", "perftest", "ratio", "target", "met", "perftest test")
	s.WriteString(line)
	met, ntargets, ninfo, hosts2 := 0, 0, 0, false
	for _, r := range rows {
		if r.Met == nil {
			ninfo++
			continue
		}
		ntargets++
		mark := "no"
		if *r.Met {
			mark = "yes"
			met++
		}
		hosts2 = hosts2 || r.Hosts == 2
		fmt.Fprintf(&s, " %-46s %-15s %6d %10.3f %10.3f %7.3f %7s %4s  %s\n", r.Name, r.Metric, r.Iterations, r.Ours, r.Perftest, r.Ratio, "<="+strconv.FormatFloat(r.Target, 'f', 2, 64), mark, r.Test)
	}
	s.WriteString(line)
	for _, r := range rows {
		if r.Met == nil {
			hosts2 = hosts2 || r.Hosts == 2
			fmt.Fprintf(&s, " %-46s %-15s %6d %10.3f %10.3f %7.3f %7s %4s  %s\n", r.Name, r.Metric, r.Iterations, r.Ours, r.Perftest, r.Ratio, "-", "-", r.Test)
		}
	}
	if ninfo > 0 {
		s.WriteString(line)
	}
	fmt.Fprintf(&s, " %d of %d targets met. ratio: ours/perftest for latency, perftest/ours for bandwidth and rate (lower is better).\n", met, ntargets)
	for _, r := range rows {
		if r.Error != "" {
			fmt.Fprintf(&s, " %s: a round failed: %s\n", r.Name, r.Error)
		}
	}
	s.WriteString(" " + sendRTT[1:] + ": one SEND round trip, 2 x ib_send_lat's t_typical (which is half a round trip).\n")
	for _, r := range rows {
		if strings.HasSuffix(r.Name, mpichSuffix) {
			s.WriteString(" " + mpichSuffix[1:] + ": against MPICH (cmd/rmabench/mpich/osclat.c) on the same device, its median in the perftest column; ratio ours/MPICH.\n")
			break
		}
	}
	if hosts2 {
		s.WriteString(" /2host: across two hosts, rank 0 and perftest's server on host0, rank 1 and perftest's client on host1.\n")
	}
	return s.String()
}

// mergeResults reads the rows of each of files (as -compare writes them)
// and prints them as one table on out; with jsonOut, it writes them all
// there too.
func mergeResults(files []string, out io.Writer, jsonOut string) error {
	var all []row
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var rows []row
		if err := json.Unmarshal(data, &rows); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		all = append(all, rows...)
	}
	if len(all) == 0 {
		return errors.New("no rows")
	}
	if _, err := io.WriteString(out, comparisonTable(all)); err != nil {
		return err
	}
	if jsonOut != "" {
		return writeJSONFile(jsonOut, all)
	}
	return nil
}

// perftestDevice is the device, port and GID index the group uses, for
// perftest to use the same.
func (b *bench) perftestDevice() (string, int, int, error) {
	p := b.g.Path()
	return b.g.Device(), p.Port, p.GIDIndex, nil
}

// perftestArgs are the arguments of a perftest server; its client adds the
// server's address.
func perftestArgs(pt ptest, dev string, port, gid, mtu, iters, tcp int) []string {
	args := []string{"-d", dev, "-i", strconv.Itoa(port), "-x", strconv.Itoa(gid), "-n", strconv.Itoa(iters), "-p", strconv.Itoa(tcp), "-F"}
	if mtu != 0 {
		args = append(args, "-m", strconv.Itoa(mtu))
	}
	return append(args, pt.args...)
}

// ptServer is a perftest server that listens for its client.
type ptServer struct {
	pt     ptest
	port   int // its TCP port
	cmd    *exec.Cmd
	out    bytes.Buffer
	done   chan error
	cancel context.CancelFunc
}

// startPerftestServer starts a perftest server on a free TCP port and
// returns when it listens there. The server is killed when limit has
// passed.
func startPerftestServer(ctx context.Context, pt ptest, dev string, port, gid, mtu, iters int, limit time.Duration) (*ptServer, error) {
	if _, err := exec.LookPath(pt.bin); err != nil {
		return nil, fmt.Errorf("%s not found (apt-get install perftest): %w", pt.bin, err)
	}
	s := &ptServer{pt: pt, port: freeTCPPort(), done: make(chan error, 1)}
	ctx, s.cancel = context.WithTimeout(ctx, limit)
	s.cmd = exec.CommandContext(ctx, pt.bin, perftestArgs(pt, dev, port, gid, mtu, iters, s.port)...)
	s.cmd.Stdout, s.cmd.Stderr = &s.out, &s.out
	if err := s.cmd.Start(); err != nil {
		s.cancel()
		return nil, err
	}
	go func() { s.done <- s.cmd.Wait() }()
	for deadline := time.Now().Add(20 * time.Second); !listening(s.port); {
		select {
		case err := <-s.done:
			s.cancel()
			return nil, fmt.Errorf("%s server ended before it listened: %v\n%s", pt, err, s.out.Bytes())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.cancel()
			<-s.done
			return nil, fmt.Errorf("%s server did not listen on port %d:\n%s", pt, s.port, s.out.Bytes())
		}
	}
	return s, nil
}

// wait waits for the server to end, killing it after limit, and returns
// how it ended and what it printed.
func (s *ptServer) wait(limit time.Duration) ([]byte, error) {
	var err error
	select {
	case err = <-s.done:
	case <-time.After(limit):
		s.cancel()
		err = <-s.done
	}
	s.cancel()
	return s.out.Bytes(), err
}

// runPerftestClient runs a perftest client against the server at host,
// for at most limit, and returns its result row.
func runPerftestClient(ctx context.Context, pt ptest, dev string, port, gid, mtu, iters, tcp int, host string, limit time.Duration) (ptResult, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cli := exec.CommandContext(ctx, pt.bin, append(perftestArgs(pt, dev, port, gid, mtu, iters, tcp), host)...)
	out, err := cli.CombinedOutput()
	if err != nil {
		return nil, out, fmt.Errorf("%s client: %v\n%s", pt, err, out)
	}
	res, err := parsePerftest(out)
	if err != nil {
		return nil, out, fmt.Errorf("%s: %v\n%s", pt, err, out)
	}
	return res, out, nil
}

// runPerftest runs a perftest server and client on this host and returns
// the client's result row.
func runPerftest(ctx context.Context, pt ptest, dev string, port, gid, mtu, iters int, host string) (ptResult, error) {
	srv, err := startPerftestServer(ctx, pt, dev, port, gid, mtu, iters, 5*time.Minute)
	if err != nil {
		return nil, err
	}
	res, _, cerr := runPerftestClient(ctx, pt, dev, port, gid, mtu, iters, srv.port, host, 5*time.Minute)
	sout, serr := srv.wait(10 * time.Second)
	if cerr != nil {
		return nil, fmt.Errorf("%w\nserver:\n%s", cerr, sout)
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
