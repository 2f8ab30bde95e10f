package main

import (
	"slices"
	"strings"
	"testing"
	"time"
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
