package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onesided/rma/group"
)

// Output of perftest 6.x on rxe (trimmed), as the client prints it.
const atomicLatOut = `---------------------------------------------------------------------------------------
                    Atomic FETCH_AND_ADD Latency Test
 Dual-port       : OFF		Device         : rxe0
---------------------------------------------------------------------------------------
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 8       1000          13.27          1769.93      13.44    	       19.07       	72.76  		99.17   		1769.93
---------------------------------------------------------------------------------------
`

const writeBWOut = `---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 1048576    200              48.68              28.94  		   0.000029
---------------------------------------------------------------------------------------
`

func TestParsePerftest(t *testing.T) {
	r, err := parsePerftest([]byte(atomicLatOut))
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]float64{"#bytes": 8, "t_min[usec]": 13.27, "t_typical[usec]": 13.44,
		"t_avg[usec]": 19.07, "99%_percentile[usec]": 99.17, "99.9%_percentile[usec]": 1769.93} {
		if r[k] != want {
			t.Errorf("%s = %v, want %v (%v)", k, r[k], want, r)
		}
	}
	r, err = parsePerftest([]byte(writeBWOut))
	if err != nil {
		t.Fatal(err)
	}
	if r["BW_average[MB/sec]"] != 28.94 || r["MsgRate[Mpps]"] != 0.000029 || r["BW_peak[MB/sec]"] != 48.68 {
		t.Errorf("bandwidth columns: %v", r)
	}
	bad := strings.Replace(atomicLatOut, " 8       1000          13.27          1769.93      13.44    	       19.07       	72.76 ",
		" 8       1000          inf            inf          inf      	       inf         	-nan  ", 1)
	if _, err := parsePerftest([]byte(bad)); err == nil {
		t.Error("inf and nan accepted")
	}
	if _, err := parsePerftest([]byte("Couldn't connect to 127.0.0.1:18515\n")); err == nil {
		t.Error("no table: no error")
	}
}

func TestParseSizes(t *testing.T) {
	for in, want := range map[string][]int{
		"8":          {8},
		"8-64":       {8, 16, 32, 64},
		"4K,1MiB":    {4096, 1 << 20},
		"1M-4M, 100": {1 << 20, 2 << 20, 4 << 20, 100},
	} {
		got, err := parseSizes(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("parseSizes(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "x", "0", "64-8", "1G", "-1"} {
		if got, err := parseSizes(bad); err == nil {
			t.Errorf("parseSizes(%q) = %v, want an error", bad, got)
		}
	}
	if n, err := parseSize("200MiB"); err != nil || n != 200<<20 {
		t.Errorf("parseSize(200MiB) = %d, %v", n, err)
	}
	for n, want := range map[int]string{8: "8B", 1024: "1KiB", 1 << 20: "1MiB", 1536: "1536B"} {
		if got := sizeName(n); got != want {
			t.Errorf("sizeName(%d) = %s, want %s", n, got, want)
		}
	}
}

func TestLatencyStats(t *testing.T) {
	lat := make([]time.Duration, 1000)
	for i := range lat {
		lat[len(lat)-1-i] = time.Duration(i+1) * time.Microsecond // 1..1000 us, reversed
	}
	s := latencyStats(lat)
	if s.min != 1 || s.max != 1000 || s.typical != 501 || s.avg != 500.5 || s.p99 != 991 || s.p999 != 1000 {
		t.Errorf("stats %+v", s)
	}
	if lat[0] != 1000*time.Microsecond {
		t.Error("latencyStats sorted its argument")
	}
}

func TestMedianIndex(t *testing.T) {
	for _, c := range []struct {
		v    []float64
		want int
	}{{[]float64{3}, 0}, {[]float64{3, 1, 2}, 2}, {[]float64{5, 1, 4, 2}, 3}} {
		if got := medianIndex(c.v); got != c.want {
			t.Errorf("medianIndex(%v) = %d, want %d", c.v, got, c.want)
		}
	}
}

func TestListening(t *testing.T) {
	if listening(1) {
		t.Error("port 1 listening?")
	}
}

// ib_send_lat and ib_read_bw of perftest 4.5 on rxe, as the clients print
// them (trimmed).
const sendLatOut = `---------------------------------------------------------------------------------------
                    Send Latency Test
 Dual-port       : OFF		Device         : rxe0
 GID index       : 1
---------------------------------------------------------------------------------------
 local address: LID 0000 QPN 0x0012 PSN 0x6331fd
 GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:99:00:01
---------------------------------------------------------------------------------------
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 8       300          12.33          12445.72      12.71    	       205.90      	1200.13		10147.09 		12445.72
---------------------------------------------------------------------------------------
`

const readBWOut = `---------------------------------------------------------------------------------------
Device not recognized to implement inline feature. Disabling it
---------------------------------------------------------------------------------------
                    RDMA_Read BW Test
 Outstand reads  : 128
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 1048576    20               54.71              49.59  		   0.000050
---------------------------------------------------------------------------------------
`

func TestParsePerftestSendAndRead(t *testing.T) {
	r, err := parsePerftest([]byte(sendLatOut))
	if err != nil {
		t.Fatal(err)
	}
	if r["t_typical[usec]"] != 12.71 || r["#iterations"] != 300 || r["99%_percentile[usec]"] != 10147.09 {
		t.Errorf("ib_send_lat columns: %v", r)
	}
	// One SEND round trip is twice ib_send_lat's figure (half a round trip).
	tg := target{pt: ptSendLat, column: "t_typical[usec]", scale: 2}
	if got := tg.ptValue(r); got != 25.42 {
		t.Errorf("SEND round trip = %v, want 25.42", got)
	}
	if got := tg.testName(); got != "2 x ib_send_lat -s 8" {
		t.Errorf("testName = %q", got)
	}
	r, err = parsePerftest([]byte(readBWOut))
	if err != nil {
		t.Fatal(err)
	}
	if r["BW_average[MB/sec]"] != 49.59 || r["#bytes"] != 1048576 {
		t.Errorf("ib_read_bw columns: %v", r)
	}
}

func TestBuildRows(t *testing.T) {
	ts := []target{
		{name: "a", metric: metricLatency, kase: "k1", pt: ptSendLat, column: "t_typical[usec]", scale: 2, max: 1.3},
		{name: "b", metric: metricBandwidth, kase: "k2", pt: ptReadBW1M, column: "BW_average[MB/sec]", max: 1.2},
		{name: "c", metric: metricLatency, kase: "k1", pt: ptFetchAdd, column: "t_typical[usec]"},
	}
	var rounds []round
	// Three rounds: the medians are ours 26, 40 and perftest 10 (x2), 50, 20.
	for i, v := range []struct{ lat, bw, send, rbw, fa float64 }{{26, 40, 10, 50, 20}, {30, 30, 9, 60, 30}, {20, 45, 11, 40, 10}} {
		rd := newRound()
		rd.ours[ourKey{"k1", "latency"}] = result{TypicalUS: v.lat, Iterations: 300 + i}
		rd.ours[ourKey{"k2", "bandwidth"}] = result{BandwidthMBps: v.bw, Iterations: 20}
		rd.pts[ptSendLat.String()] = ptResult{"t_typical[usec]": v.send}
		rd.pts[ptReadBW1M.String()] = ptResult{"BW_average[MB/sec]": v.rbw}
		rd.pts[ptFetchAdd.String()] = ptResult{"t_typical[usec]": v.fa}
		rounds = append(rounds, rd)
	}
	rows := buildRows(ts, 2, rounds, 2)
	if len(rows) != 3 {
		t.Fatalf("%d rows", len(rows))
	}
	a, b, c := rows[0], rows[1], rows[2]
	// a: 26 us against one SEND round trip of 2 x 10 us: 1.3, met (<= 1.3).
	if a.Ours != 26 || a.Perftest != 20 || a.Ratio != 1.3 || a.Met == nil || !*a.Met || a.Iterations != 300 || a.Hosts != 2 || a.PerftestScale != 2 {
		t.Errorf("row a: %+v", a)
	}
	// b: bandwidth 40 MB/s against 50: perftest/ours = 1.25 > 1.2, not met.
	if b.Ours != 40 || b.Perftest != 50 || b.Ratio != 1.25 || b.Met == nil || *b.Met || b.Target != 1.2 {
		t.Errorf("row b: %+v", b)
	}
	// c: informational, no target and no met.
	if c.Met != nil || c.Target != 0 || c.Ours != 26 || c.Perftest != 20 || c.Ratio != 1.3 {
		t.Errorf("row c: %+v", c)
	}
	table := comparisonTable(rows)
	for _, want := range []string{"1 of 2 targets met", "2 x ib_send_lat -s 8", "/2host: across two hosts"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	// A case that failed in a round is named in its rows, and counted.
	rounds[1].errs[ourKey{"k1", "latency"}] = errors.New("k1 latency: context deadline exceeded")
	delete(rounds[1].ours, ourKey{"k1", "latency"})
	rows = buildRows(ts, 2, rounds, 2)
	if rows[0].Error != "k1 latency: context deadline exceeded" || rows[2].Error != rows[0].Error || rows[1].Error != "" || failures(rounds) != 1 {
		t.Errorf("errors: %q %q %q, %d failures", rows[0].Error, rows[1].Error, rows[2].Error, failures(rounds))
	}
	// Ours is then the median of the other rounds (26 and 20: the lower),
	// and the row misses its target whatever its ratio.
	if rows[0].Ours != 20 || *rows[0].Met || !slices.Equal(rows[0].OursRounds, []float64{26, 20}) || !strings.Contains(comparisonTable(rows), "a round failed") {
		t.Errorf("row a with a failed round: %+v", rows[0])
	}
	// A round with no perftest figure gives no ratio and fails its target.
	rounds[0].pts[ptSendLat.String()] = nil
	rows = buildRows(ts[:1], 1, rounds[:1], 1)
	if rows[0].Ratio != 0 || *rows[0].Met {
		t.Errorf("missing perftest figure: %+v", rows[0])
	}
}

func TestMergeResults(t *testing.T) {
	dir := t.TempDir()
	yes, no := true, false
	one := filepath.Join(dir, "one.json")
	two := filepath.Join(dir, "two.json")
	if err := writeJSONFile(one, []row{{Name: "get_8B", Hosts: 1, Metric: metricLatency, Ours: 11, Perftest: 10, Ratio: 1.1, Target: 1.1, Met: &yes}}); err != nil {
		t.Fatal(err)
	}
	if err := writeJSONFile(two, []row{
		{Name: "get_8B/2host", Hosts: 2, Metric: metricLatency, Ours: 700, Perftest: 500, Ratio: 1.4, Target: 1.2, Met: &no},
		{Name: "get_1MiB/2host", Hosts: 2, Metric: metricBandwidth, Ours: 9, Perftest: 10, Ratio: 10.0 / 9},
	}); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	merged := filepath.Join(dir, "all.json")
	if err := mergeResults([]string{one, two}, &out, merged); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "1 of 2 targets met") || !strings.Contains(out.String(), "get_1MiB/2host") {
		t.Errorf("table:\n%s", out.String())
	}
	data, err := os.ReadFile(merged)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	if strings.Count(s, `"name"`) != 3 || strings.Count(s, `"target"`) != 2 || strings.Count(s, `"met": true`) != 1 || strings.Count(s, `"met": false`) != 1 {
		t.Errorf("merged JSON:\n%s", s)
	}
	if err := mergeResults([]string{filepath.Join(dir, "none.json")}, &out, ""); err == nil {
		t.Error("a missing file merged")
	}
}

func TestReadyPort(t *testing.T) {
	if p, err := readyPort("ready 20001"); err != nil || p != 20001 {
		t.Errorf("ready 20001: %d, %v", p, err)
	}
	for _, bad := range []string{"ready", "ready 0", "ready 70000", "ready x", "", "nope 1"} {
		if p, err := readyPort(bad); err == nil {
			t.Errorf("readyPort(%q) = %d, want an error", bad, p)
		}
	}
	if _, err := readyPort(`error "ib_send_lat not found"`); err == nil || err.Error() != "ib_send_lat not found" {
		t.Errorf("error reply: %v", err)
	}
}

func TestControlAddr(t *testing.T) {
	c := &config{}
	if a, err := controlAddr(c, group.Options{Addr: "10.77.0.1:18600"}); err != nil || a != "10.77.0.1:18601" {
		t.Errorf("controlAddr = %q, %v", a, err)
	}
	for _, bad := range []string{"10.77.0.1", "10.77.0.1:65535", "h:x"} {
		if a, err := controlAddr(c, group.Options{Addr: bad}); err == nil {
			t.Errorf("controlAddr(%q) = %q, want an error", bad, a)
		}
	}
	c.control = "h:1"
	if a, _ := controlAddr(c, group.Options{Addr: "bad"}); a != "h:1" {
		t.Errorf("-control ignored: %q", a)
	}
}

func TestPtIters(t *testing.T) {
	c := &config{iters: 300, itersBW: 5000, bwBytes: 32 << 20}
	for pt, want := range map[string]int{ptSendLat.id: 300, ptFetchAdd.id: 300, ptReadBW1M.id: 32, ptWriteBW1M.id: 32, ptAtomicBW.id: 5000, ptWarmup.id: warmupIters} {
		p, ok := ptestByID(pt)
		if !ok {
			t.Fatalf("no test %s", pt)
		}
		if got := c.ptIters(p); got != want {
			t.Errorf("ptIters(%s) = %d, want %d", pt, got, want)
		}
	}
	if _, ok := ptestByID("sh"); ok {
		t.Error("an unknown test id was found")
	}
}

// TestControlHandshake runs both ends of the control connection's
// handshake over TCP on the loopback: the same secret connects, a wrong
// one is refused by rank 0 (which keeps listening) and fails rank 1.
func TestControlHandshake(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	secret := []byte("0123456789abcdef")
	type accepted struct {
		cc  *control
		err error
	}
	done := make(chan accepted, 1)
	go func() {
		cc, err := acceptControl(ctx, addr, secret)
		done <- accepted{cc, err}
	}()
	if _, err := dialControl(ctx, addr, []byte("wrong secret")); err == nil {
		t.Error("a wrong secret connected")
	}
	cc, err := dialControl(ctx, addr, secret)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	a := <-done
	if a.err != nil {
		t.Fatal(a.err)
	}
	defer a.cc.Close()
	if err := cc.send("perftest send_lat 300"); err != nil {
		t.Fatal(err)
	}
	if got, err := a.cc.recv(5 * time.Second); err != nil || got != "perftest send_lat 300" {
		t.Errorf("rank 0 read %q, %v", got, err)
	}
	if err := cc.send("two\nlines"); err == nil {
		t.Error("a line break was sent")
	}
}

// TestServiceRows checks the rows of package service in a one-host
// comparison: their names, what they are compared with, which have a
// target, and their JSON.
func TestServiceRows(t *testing.T) {
	all, n := compareTargets(true)
	plain, np := compareTargets(false)
	if np != len(targets) || len(plain) != len(targets)+len(extras) {
		t.Errorf("without service: %d rows, %d with a target", len(plain), np)
	}
	for _, tg := range plain {
		if strings.HasPrefix(tg.name, "service/") || tg.op == opService {
			t.Errorf("without service: row %s", tg.name)
		}
	}
	if n != len(targets)+2 {
		t.Errorf("with service: %d rows with a target, want %d", n, len(targets)+2)
	}
	want := map[string]struct {
		metric, test string
		max          float64
		conns        int
		target       bool
	}{
		"service/fetch_and_op/lat":           {metricLatency, "ib_atomic_lat -A FETCH_AND_ADD", 1.2, 0, true},
		"service/compare_and_swap/lat":       {metricLatency, "ib_atomic_lat -A CMP_AND_SWAP", 1.2, 0, true},
		"service/fetch_and_op/rate/1conn":    {metricRate, "ib_atomic_bw -A FETCH_AND_ADD", 0, 1, false},
		"service/fetch_and_op/rate/4conn":    {metricRate, "ib_atomic_bw -A FETCH_AND_ADD", 0, 4, false},
		"service/fetch_and_op/rate/16conn":   {metricRate, "ib_atomic_bw -A FETCH_AND_ADD", 0, 16, false},
		"service/fetch_and_op/rate/1conn16g": {metricRate, "ib_atomic_bw -A FETCH_AND_ADD", 0, 1, false},
		"service/connect_first_op":           {metricLatency, "", 0, 0, false},
	}
	seen := map[string]bool{}
	keys := map[ourKey]string{}
	for i, tg := range all {
		k := ourKey{tg.kase, tg.mode()}
		if other, dup := keys[k]; dup && (tg.op == opService) != strings.HasPrefix(other, "service/") {
			t.Errorf("rows %s and %s share the case %v", tg.name, other, k)
		}
		keys[k] = tg.name
		w, ok := want[tg.name]
		if !ok {
			if tg.op == opService {
				t.Errorf("unexpected service row %s", tg.name)
			}
			continue
		}
		seen[tg.name] = true
		if tg.op != opService || tg.metric != w.metric || tg.testName() != w.test || tg.max != w.max || tg.conns != w.conns || (i < n) != w.target {
			t.Errorf("row %s: %+v (index %d of %d with a target), want %+v", tg.name, tg, i, n, w)
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("no row %s", name)
		}
	}
	if got := joinInts(svcConns); got != "1, 4 or 16" {
		t.Errorf("joinInts = %q", got)
	}

	// Two rounds: the service's FetchAndOp latency 15 and 13 us against
	// ib_atomic_lat's 12 and 11 (ratio 13/11 = 1.18: met), CompareAndSwap
	// 15 against 12 (1.25: not met), the rates against ib_atomic_bw, and
	// the connect time with no perftest figure.
	var rounds []round
	for _, v := range []struct{ fa, cs, ptfa, ptcs, rate, ptrate, conn float64 }{{15, 15, 12, 12, 0.02, 0.1, 90000}, {13, 15, 11, 12, 0.03, 0.12, 80000}} {
		rd := newRound()
		rd.ours[ourKey{svcFetchAndOp, "latency"}] = result{TypicalUS: v.fa, Iterations: 300}
		rd.ours[ourKey{svcCompareAndSwap, "latency"}] = result{TypicalUS: v.cs, Iterations: 300}
		for _, c := range svcConns {
			rd.ours[ourKey{svcRateKase(c), "bandwidth"}] = result{RateMops: v.rate * float64(c), Iterations: 2000, InFlight: c}
		}
		rd.ours[ourKey{svcConnect, "latency"}] = result{TypicalUS: v.conn, Iterations: svcDials}
		rd.pts[ptFetchAdd.String()] = ptResult{"t_typical[usec]": v.ptfa}
		rd.pts[ptCmpSwap.String()] = ptResult{"t_typical[usec]": v.ptcs}
		rd.pts[ptAtomicBW.String()] = ptResult{"MsgRate[Mpps]": v.ptrate}
		rounds = append(rounds, rd)
	}
	svc := append(append([]target{}, svcTargets...), svcExtras()...)
	rows := buildRows(svc, len(svcTargets), rounds, 1)
	byName := map[string]row{}
	for _, r := range rows {
		byName[r.Name] = r
	}
	fa, cs := byName["service/fetch_and_op/lat"], byName["service/compare_and_swap/lat"]
	if fa.Ours != 13 || fa.Perftest != 11 || fa.Met == nil || !*fa.Met || fa.Target != 1.2 || fa.Iterations != 300 {
		t.Errorf("fetch_and_op/lat: %+v", fa)
	}
	if cs.Ours != 15 || cs.Perftest != 12 || cs.Ratio != 1.25 || cs.Met == nil || *cs.Met {
		t.Errorf("compare_and_swap/lat: %+v", cs)
	}
	r16 := byName["service/fetch_and_op/rate/16conn"]
	if r16.Ours != 0.02*16 || r16.Perftest != 0.1 || r16.Met != nil || r16.Target != 0 || r16.OursDetail == nil || r16.OursDetail.InFlight != 16 {
		t.Errorf("rate/16conn: %+v", r16)
	}
	conn := byName["service/connect_first_op"]
	if conn.Ours != 80000 || conn.Perftest != 0 || conn.Ratio != 0 || conn.Met != nil || conn.Iterations != svcDials || conn.Error != "" {
		t.Errorf("connect_first_op: %+v", conn)
	}
	data, err := json.Marshal(conn)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{`"target"`, `"met"`} {
		if strings.Contains(string(data), bad) {
			t.Errorf("connect_first_op's JSON has %s: %s", bad, data)
		}
	}
	for _, good := range []string{`"name":"service/connect_first_op"`, `"hosts":1`, `"metric":"latency_us"`, `"ours":80000`, `"perftest":0`} {
		if !strings.Contains(string(data), good) {
			t.Errorf("connect_first_op's JSON lacks %s: %s", good, data)
		}
	}
	table := comparisonTable(rows)
	if !strings.Contains(table, "1 of 2 targets met") || !strings.Contains(table, "service/fetch_and_op/rate/4conn") {
		t.Errorf("table:\n%s", table)
	}
}

func TestFirstErr(t *testing.T) {
	a, b := errors.New("a"), errors.New("b")
	if err := firstErr([]error{nil, nil}); err != nil {
		t.Errorf("no errors: %v", err)
	}
	if err := firstErr([]error{nil, a}); err != a {
		t.Errorf("one error: %v", err)
	}
	if err := firstErr([]error{nil, a, nil, b, b}); !errors.Is(err, a) || err.Error() != "a (and 2 more)" {
		t.Errorf("three errors: %v", err)
	}
}

// osclat's output in the test VM (mpich/osclat.c, MPICH 4.0.2 on rxe0,
// 200 iterations), as rank 0 prints it.
const osclatOut = `# MPICH Version: 4.0.2
#case #iterations t_min[usec] t_typical[usec] t_avg[usec] 99%_percentile[usec] 99.9%_percentile[usec] t_max[usec]
fetch_and_op_sum_int64 200 60.890 80.106 87.086 276.854 419.343 419.343
compare_and_swap_int64 200 59.597 70.225 79.359 378.129 391.460 391.460
get_8B 200 50.549 65.237 70.202 246.900 289.700 289.700
put_8B_flush 200 26.319 36.619 39.347 227.764 264.821 264.821
accumulate_sum_float64_1_flush 200 52.642 63.018 71.256 296.461 450.751 450.751
get_accumulate_sum_float64_1 200 61.748 72.304 78.205 243.194 469.011 469.011
`

func TestParseOsclat(t *testing.T) {
	res, lib, err := parseOsclat([]byte("[proxy:0:0@vm] a line of mpiexec's\n" + osclatOut))
	if err != nil {
		t.Fatal(err)
	}
	if lib != "MPICH Version: 4.0.2" || len(res) != len(mpichCases) {
		t.Errorf("library %q, %d cases: %v", lib, len(res), res)
	}
	for _, m := range mpichCases {
		if _, ok := res[m.name]; !ok {
			t.Errorf("no case %s", m.name)
		}
	}
	fa := res["fetch_and_op_sum_int64"]
	if fa["t_typical[usec]"] != 80.106 || fa["#iterations"] != 200 || fa["t_min[usec]"] != 60.89 || fa["99.9%_percentile[usec]"] != 419.343 || fa["t_max[usec]"] != 419.343 {
		t.Errorf("fetch_and_op_sum_int64: %v", fa)
	}
	if res["put_8B_flush"]["t_typical[usec]"] != 36.619 {
		t.Errorf("put_8B_flush: %v", res["put_8B_flush"])
	}
	bad := strings.Replace(osclatOut, "get_8B 200 50.549 65.237", "get_8B 200 50.549 nan", 1)
	if _, _, err := parseOsclat([]byte(bad)); err == nil || !strings.Contains(err.Error(), "get_8B") {
		t.Errorf("nan: %v", err)
	}
	if _, _, err := parseOsclat([]byte("Abort(1) on node 0\n")); err == nil {
		t.Error("no table: no error")
	}
	head, _, _ := strings.Cut(osclatOut, "fetch_and_op")
	if _, _, err := parseOsclat([]byte(head)); err == nil {
		t.Error("a header alone: no error")
	}
}

func TestMPICHRows(t *testing.T) {
	ts := mpichTargets()
	if len(ts) != len(mpichCases) {
		t.Fatalf("%d rows against MPICH, want %d", len(ts), len(mpichCases))
	}
	// Each row is ours of the same name against MPICH: the same case of ours.
	all, n := compareTargets(false)
	ours := map[string]target{}
	for _, tg := range all {
		if _, dup := ours[tg.name]; !dup {
			ours[tg.name] = tg
		}
	}
	for i, tg := range ts {
		m := mpichCases[i]
		o, ok := ours[m.name]
		if tg.name != m.name+"/mpich" || !ok || tg.kase != o.kase || tg.op != o.op || tg.metric != metricLatency || tg.max != 0 || tg.scale != 0 {
			t.Errorf("row %s: %+v, ours %+v", tg.name, tg, o)
		}
		if got := tg.testName(); got != "MPICH "+m.calls {
			t.Errorf("row %s compared with %q", tg.name, got)
		}
	}

	// Three rounds: ours 40, 30, 35 us for every case; MPICH's osclat
	// output, scaled by 1, 1.5 and 0.5, and in the third round failed.
	res, _, err := parseOsclat([]byte(osclatOut))
	if err != nil {
		t.Fatal(err)
	}
	var rounds []round
	for i, v := range []struct{ ours, scale float64 }{{40, 1}, {30, 1.5}, {35, 0.5}} {
		rd := newRound()
		for _, tg := range all {
			rd.ours[ourKey{tg.kase, tg.mode()}] = result{TypicalUS: v.ours, Iterations: 200}
			rd.pts[tg.pt.String()] = ptResult{"t_typical[usec]": 20, "BW_average[MB/sec]": 10, "MsgRate[Mpps]": 1}
		}
		for _, m := range mpichCases {
			if i == 2 {
				rd.refErrs[m.pt().String()] = errors.New("MPICH: mpiexec.mpich osclat: exit status 143")
				continue
			}
			r := ptResult{}
			for k, x := range res[m.name] {
				r[k] = x * v.scale
			}
			rd.pts[m.pt().String()] = r
		}
		rounds = append(rounds, rd)
	}
	rows := buildRows(append(all, ts...), n, rounds, 1)
	byName := map[string]row{}
	for _, r := range rows {
		if _, dup := byName[r.Name]; !dup {
			byName[r.Name] = r
		}
	}
	for _, m := range mpichCases {
		r, o := byName[m.name+"/mpich"], byName[m.name]
		want := res[m.name]["t_typical[usec]"] // the median of x1 and x1.5: the lower
		if r.Ours != 35 || r.Ours != o.Ours || r.Perftest != want || r.Ratio != 35/want || r.Met != nil || r.Target != 0 ||
			len(r.PerftestRounds) != 2 || r.Error != "MPICH: mpiexec.mpich osclat: exit status 143" || r.PerftestDetail["#iterations"] != 200 {
			t.Errorf("row %s: %+v (ours %+v)", r.Name, r, o)
		}
		if o.Error != "" {
			t.Errorf("MPICH's failure reached our row %s: %s", o.Name, o.Error)
		}
	}
	if failures(rounds) != 0 {
		t.Error("MPICH's failure counted as a case of ours")
	}
	table := comparisonTable(rows)
	for _, want := range []string{"get_accumulate_sum_float64_1/mpich", "MPICH MPI_Get(8 B) + MPI_Win_flush", "mpich: against MPICH", "a round failed: MPICH: mpiexec.mpich"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}

	// No run succeeded: no figure, no ratio, and the reason.
	for i := range rounds {
		for _, m := range mpichCases {
			delete(rounds[i].pts, m.pt().String())
			rounds[i].refErrs[m.pt().String()] = errors.New("MPICH: mpiexec.mpich: executable file not found in $PATH (apt-get install mpich)")
		}
	}
	rows = buildRows(ts, 0, rounds, 1)
	for _, r := range rows {
		if r.Perftest != 0 || r.Ratio != 0 || r.Ours != 35 || !strings.Contains(r.Error, "apt-get install mpich") {
			t.Errorf("row %s with MPICH missing: %+v", r.Name, r)
		}
	}
}

func TestMPICHEnv(t *testing.T) {
	env := mpichEnv([]string{"PATH=/bin", "UCX_TLS=rc_verbs,self", "UCX_NET_DEVICES=mlx5_0:1"}, "rxe0", 1, 3)
	got := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v // the last one wins, as in exec
	}
	for k, want := range map[string]string{"PATH": "/bin", "UCX_TLS": "rc_verbs,self", "UCX_NET_DEVICES": "rxe0:1", "UCX_IB_GID_INDEX": "3",
		"UCX_UD_VERBS_ETH_DGID_CHECK": "n", "MPIR_CVAR_NOLOCAL": "1"} {
		if got[k] != want {
			t.Errorf("%s=%q, want %q (%v)", k, got[k], want, env)
		}
	}
}

// TestRunMPICH runs osclat through a stand-in for mpiexec.mpich, a shell
// script that checks its arguments and environment and prints what the
// file beside osclat holds.
func TestRunMPICH(t *testing.T) {
	dir := t.TempDir()
	osclat := filepath.Join(dir, "osclat")
	mpiexec := `#!/bin/sh
[ "$1 $2 $3 $4 $6 $7 $8 $9" = "-launcher fork -n 2 -n 300 -w 30" ] || { echo "arguments: $*" >&2; exit 3; }
[ "$UCX_NET_DEVICES $UCX_IB_GID_INDEX $UCX_TLS" = "rxe0:1 1 rc_verbs,ud_verbs,self" ] || { echo "environment: $UCX_NET_DEVICES $UCX_IB_GID_INDEX $UCX_TLS" >&2; exit 4; }
cat "$5.out"
[ -e "$5.hang" ] && sleep 30
[ -e "$5.fail" ] && { echo "[vm:238  :0:238]       ud_ep.c:276  Fatal: UD endpoint 0x55d0 to <no debug data>: unhandled timeout error" >&2; echo "==== backtrace (tid:    238) ====" >&2; exit 143; }
exit 0
`
	for name, text := range map[string]string{"mpiexec.mpich": mpiexec, "osclat": "", "osclat.out": osclatOut} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	t.Setenv("UCX_TLS", "")
	os.Unsetenv("UCX_TLS")
	ctx := context.Background()
	res, lib, err := runMPICH(ctx, osclat, "rxe0", 1, 1, 300, 30)
	if err != nil || lib != "MPICH Version: 4.0.2" || res["get_8B"]["t_typical[usec]"] != 65.237 {
		t.Fatalf("runMPICH: %v, %q, %v", err, lib, res)
	}

	// measureMPICH keeps the figures of a round, or why there are none.
	b := &bench{c: &config{mpich: osclat, warmup: 30}, prog: newProgress(false)}
	rd := newRound()
	b.measureMPICH(ctx, "rxe0", 1, 1, 300, &rd)
	if len(rd.refErrs) != 0 || len(rd.pts) != len(mpichCases) || b.mpichLib != "MPICH Version: 4.0.2" ||
		rd.pts[mpichCases[0].pt().String()]["t_typical[usec]"] != 80.106 {
		t.Errorf("a round: %v, %v, %q", rd.pts, rd.refErrs, b.mpichLib)
	}
	if err := os.WriteFile(osclat+".fail", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runMPICH(ctx, osclat, "rxe0", 1, 1, 300, 30); err == nil || !strings.Contains(err.Error(), "exit status 143") || !strings.Contains(firstLine(err), "exit status 143: [vm:238 :0:238] ud_ep.c:276 Fatal: UD endpoint 0x55d0 to <no debug data>: unhandled timeout error") {
		t.Errorf("a failed run: %v", err)
	}
	for _, c := range []struct {
		path, hung, want string
	}{
		{osclat, "", "MPICH: mpiexec.mpich " + osclat + ": exit status 143: [vm:238 :0:238] ud_ep.c:276 Fatal: UD endpoint"},
		{filepath.Join(dir, "none"), "", "apt-get install mpich libmpich-dev"},
		{osclat, "not run: an earlier run was killed", "MPICH: not run: an earlier run was killed"},
	} {
		b := &bench{c: &config{mpich: c.path, warmup: 30}, prog: newProgress(false)}
		if c.hung != "" {
			b.mpichHung = errors.New(c.hung)
		}
		rd := newRound()
		b.measureMPICH(ctx, "rxe0", 1, 1, 300, &rd)
		for _, m := range mpichCases {
			if err := rd.refErrs[m.pt().String()]; err == nil || !strings.Contains(err.Error(), c.want) || rd.pts[m.pt().String()] != nil {
				t.Errorf("%s (hung %q): case %s: %v", c.path, c.hung, m.name, err)
			}
		}
	}

	// A run that outlives its limit is killed, its rank processes with it,
	// and the later rounds run none.
	defer func(d time.Duration) { mpichLimit = d }(mpichLimit)
	mpichLimit = 200 * time.Millisecond
	if err := os.WriteFile(osclat+".hang", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	b = &bench{c: &config{mpich: osclat, warmup: 30}, prog: newProgress(false)}
	began := time.Now()
	for i := 0; i < 2; i++ {
		rd := newRound()
		b.measureMPICH(ctx, "rxe0", 1, 1, 300, &rd)
		want := "MPICH: mpiexec.mpich " + osclat + ": killed on its time limit (200ms)"
		if i == 1 {
			want = "MPICH: not run: an earlier run was killed on its time limit"
		}
		if err := rd.refErrs[mpichCases[0].pt().String()]; err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("round %d of a run that hangs: %v, want %q", i+1, err, want)
		}
	}
	if d := time.Since(began); d > 10*time.Second {
		t.Errorf("a run that hangs took %v", d)
	}
}
