package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// progress shows, on stderr, which case runs and how far it is.
type progress struct {
	on    bool
	mu    sync.Mutex // stderr writes, label
	label string
	total int64
	done  atomic.Int64
	began time.Time
	cases int // cases planned (0: unknown)
	index int // cases started
	shown bool
	quit  chan struct{}
	ended chan struct{}
}

func newProgress(on bool) *progress {
	p := &progress{on: on}
	if on {
		p.quit, p.ended = make(chan struct{}), make(chan struct{})
		go p.loop()
	}
	return p
}

func (p *progress) loop() {
	defer close(p.ended)
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.quit:
			return
		case <-t.C:
			p.draw()
		}
	}
}

func (p *progress) draw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.label == "" || time.Since(p.began) < 500*time.Millisecond {
		return // short cases need no indicator
	}
	done, total := p.done.Load(), p.total
	pct := 100 * float64(done) / float64(max(total, 1))
	eta := ""
	if done > 0 && done < total {
		left := time.Duration(float64(time.Since(p.began)) * float64(total-done) / float64(done))
		eta = fmt.Sprintf(", %s left", left.Round(time.Second))
	}
	of := ""
	if p.cases > 0 {
		of = fmt.Sprintf("[%d/%d] ", p.index, p.cases)
	}
	if total <= 1 {
		fmt.Fprintf(os.Stderr, "\r\x1b[K%s%s (%s)", of, p.label, time.Since(p.began).Round(time.Second))
	} else {
		fmt.Fprintf(os.Stderr, "\r\x1b[K%s%s: %d/%d (%.0f%%%s)", of, p.label, done, total, pct, eta)
	}
	p.shown = true
}

// clear removes the progress line; call with mu held.
func (p *progress) clear() {
	if p.shown {
		fmt.Fprint(os.Stderr, "\r\x1b[K")
		p.shown = false
	}
}

func (p *progress) start(label string, total int64) {
	if !p.on {
		return
	}
	p.mu.Lock()
	p.label, p.total, p.began = label, total, time.Now()
	p.index++
	p.done.Store(0)
	p.mu.Unlock()
}

func (p *progress) add(n int64) {
	if p.on {
		p.done.Add(n)
	}
}

// print writes to w with the progress line out of the way.
func (p *progress) print(w io.Writer, s string) {
	p.mu.Lock()
	p.clear()
	p.label = ""
	io.WriteString(w, s)
	p.mu.Unlock()
}

func (p *progress) stop() {
	if !p.on {
		return
	}
	p.mu.Lock()
	p.clear()
	p.label = ""
	p.mu.Unlock()
	select {
	case <-p.quit:
	default:
		close(p.quit)
		<-p.ended
	}
}

const (
	latHeader = " %-34s %-16s %8s %6s %9s %9s %9s %9s %9s %9s %9s\n"
	latRow    = " %-34s %-16s %8d %6d %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f\n"
	bwHeader  = " %-34s %-16s %8s %7s %6s %12s %13s %9s\n"
	bwRow     = " %-34s %-16s %8d %7d %6d %12.2f %13.6f %9.2f\n"
)

// report prints a result as a table row and keeps it.
func (b *bench) report(r result) {
	b.results = append(b.results, r)
	var s strings.Builder
	if b.header != r.Mode {
		b.header = r.Mode
		s.WriteString(strings.Repeat("-", 132) + "\n")
		if r.Mode == "latency" {
			fmt.Fprintf(&s, latHeader, "case", "route", "#bytes", "#iter", "t_min", "t_typical", "t_avg", "t_p99", "t_p99.9", "t_max", "allocs/op")
			fmt.Fprintf(&s, latHeader, "", "", "", "", "[usec]", "[usec]", "[usec]", "[usec]", "[usec]", "[usec]", "")
		} else {
			fmt.Fprintf(&s, bwHeader, "case", "route", "#bytes", "#iter", "#q", "BW[MB/sec]", "MsgRate[Mops]", "allocs/op")
		}
	}
	if r.Mode == "latency" {
		fmt.Fprintf(&s, latRow, r.Name, r.Route, r.Bytes, r.Iterations, r.MinUS, r.TypicalUS, r.AvgUS, r.P99US, r.P999US, r.MaxUS, r.AllocsPerOp)
	} else {
		fmt.Fprintf(&s, bwRow, r.Name, r.Route, r.Bytes, r.Iterations, r.InFlight, r.BandwidthMBps, r.RateMops, r.AllocsPerOp)
	}
	b.prog.print(b.out, s.String())
}

// report is the JSON of a run.
type report struct {
	Device   string   `json:"device"`
	Port     int      `json:"port"`
	GIDIndex int      `json:"gid_index"`
	MTU      int      `json:"mtu"`
	Spin     string   `json:"spin,omitempty"`
	Results  []result `json:"results"`
}

func (b *bench) writeJSON() error {
	p := b.g.Path()
	rep := report{Device: b.g.Device(), Port: p.Port, GIDIndex: p.GIDIndex, MTU: p.MTU.Bytes(), Results: b.results}
	if b.c.spin != 0 {
		rep.Spin = b.c.spin.String()
	}
	return writeJSONFile(b.c.jsonOut, rep)
}

func writeJSONFile(name string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if name == "-" {
		_, err = os.Stdout.Write(data)
		return err
	}
	return os.WriteFile(name, data, 0o644)
}
