package main

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The wire of a two-host run: each guest's socket netdev sends its Ethernet frames (one UDP
// datagram each) to a relay port of rxevm, which forwards them to the other guest's port,
// with the faults of a wireFaults: loss, duplication, reordering, delay and jitter, drawn
// from a seeded generator. Delay and jitter keep the frames' order, as a path whose queues
// vary does (a frame that draws a shorter wait than the one before it leaves right after
// it); only reordering lets later frames overtake. The faults can change while the guests run: a host's command
// writes a line "rxevm: wire SPEC" (WireMarker, then a spec as -wire takes) to its stdout.

// WireMarker starts the line that, written by a host's command to its stdout, sets the
// wire's faults (the rest of the line is a spec, as -wire takes).
const WireMarker = "rxevm: wire "

// wireFaults are a wire's faults, in both directions.
type wireFaults struct {
	loss, dup, reorder float64       // probabilities per frame
	delay, jitter      time.Duration // each frame waits delay, plus or minus up to jitter (in order)
	cutTCP             bool          // every TCP frame is dropped (RoCE's UDP goes on)
}

// parseWire parses a spec: comma-separated loss=P, dup=P, reorder=P (P a percentage, "2%",
// or a fraction, "0.02"), delay=D, jitter=D (Go durations), cut=tcp (TCP cut, the rest
// not), and seed=N (with -wire only; returned apart, 0 if absent). "" and "none" are a
// clean wire.
func parseWire(spec string) (f wireFaults, seed uint64, err error) {
	spec = strings.TrimSpace(spec)
	if spec == "" || spec == "none" {
		return f, 0, nil
	}
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return f, 0, fmt.Errorf("wire spec %q: %q is not key=value", spec, kv)
		}
		switch k {
		case "loss", "dup", "reorder":
			p, err := parseProb(v)
			if err != nil {
				return f, 0, fmt.Errorf("wire spec %q: %s: %w", spec, k, err)
			}
			switch k {
			case "loss":
				f.loss = p
			case "dup":
				f.dup = p
			default:
				f.reorder = p
			}
		case "delay", "jitter":
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return f, 0, fmt.Errorf("wire spec %q: %s=%s is not a duration of 0 or more", spec, k, v)
			}
			if k == "delay" {
				f.delay = d
			} else {
				f.jitter = d
			}
		case "cut":
			if v != "tcp" {
				return f, 0, fmt.Errorf("wire spec %q: cut=%s: only tcp can be cut", spec, v)
			}
			f.cutTCP = true
		case "seed":
			if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
				return f, 0, fmt.Errorf("wire spec %q: seed=%s: %w", spec, v, err)
			}
		default:
			return f, 0, fmt.Errorf("wire spec %q: unknown key %q (loss, dup, reorder, delay, jitter, cut, seed)", spec, k)
		}
	}
	return f, seed, nil
}

func parseProb(v string) (float64, error) {
	pct := strings.HasSuffix(v, "%")
	p, err := strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
	if err != nil {
		return 0, err
	}
	if pct {
		p /= 100
	}
	if p < 0 || p > 1 {
		return 0, fmt.Errorf("%s is not between 0 and 100%%", v)
	}
	return p, nil
}

func (f wireFaults) String() string {
	s := fmt.Sprintf("loss=%g%%,dup=%g%%,reorder=%g%%,delay=%v,jitter=%v", 100*f.loss, 100*f.dup, 100*f.reorder, f.delay, f.jitter)
	if f.cutTCP {
		s += ",cut=tcp"
	}
	return s
}

// wireCounts are what a wire did, since it started.
type wireCounts struct {
	frames, dropped, duplicated, reordered, cut atomic.Uint64
}

func (c *wireCounts) String() string {
	return fmt.Sprintf("%d frames, %d dropped, %d duplicated, %d reordered, %d TCP cut",
		c.frames.Load(), c.dropped.Load(), c.duplicated.Load(), c.reordered.Load(), c.cut.Load())
}

// reorderGap is how much longer a frame chosen to be reordered waits than the frames after
// it, at least.
const reorderGap = 2 * time.Millisecond

// A wire relays frames between two guests' netdevs.
type wire struct {
	mu     sync.Mutex // guards faults and rng
	faults wireFaults
	rng    *rand.Rand
	counts wireCounts

	socks [2]*net.UDPConn // sock[i] receives host i's frames and sends host 1-i's
	to    [2]*net.UDPAddr // host i's own port
	wg    sync.WaitGroup
}

// newWire opens the relay's two ports (Ports tells them) for guests that listen on
// hostPorts.
func newWire(f wireFaults, seed uint64, hostPorts [2]int) (*wire, error) {
	w := &wire{faults: f, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	for i := range w.socks {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			w.close()
			return nil, err
		}
		c.SetReadBuffer(4 << 20)
		c.SetWriteBuffer(4 << 20)
		w.socks[i] = c
		w.to[i] = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: hostPorts[i]}
	}
	return w, nil
}

// Ports are the relay ports: host i sends its frames to Ports()[i].
func (w *wire) Ports() [2]int {
	return [2]int{w.socks[0].LocalAddr().(*net.UDPAddr).Port, w.socks[1].LocalAddr().(*net.UDPAddr).Port}
}

// set changes the faults.
func (w *wire) set(f wireFaults) {
	w.mu.Lock()
	w.faults = f
	w.mu.Unlock()
}

// start relays until close.
func (w *wire) start() {
	for i := range w.socks {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.relay(w.socks[i], w.socks[1-i], w.to[1-i])
		}()
	}
}

// relay forwards what in receives to dst, through out. Frames that are not held back for
// reordering leave in the order they came, each at its draw's time or right after the one
// before it, whichever is later (sender).
func (w *wire) relay(in, out *net.UDPConn, dst *net.UDPAddr) {
	q := make(chan timedFrame, 8192)
	var queued atomic.Int64 // frames in q or being sent by the sender
	go func() {
		for f := range q {
			if d := time.Until(f.due); d > 0 {
				time.Sleep(d)
			}
			out.WriteToUDP(f.b, dst)
			queued.Add(-1)
		}
	}()
	defer close(q)
	var last time.Time // when the last in-order frame leaves
	buf := make([]byte, 65536)
	for {
		n, _, err := in.ReadFromUDP(buf)
		if err != nil {
			return // closed
		}
		w.counts.frames.Add(1)
		if isTCP(buf[:n]) && w.cuttingTCP() {
			w.counts.cut.Add(1)
			continue
		}
		copies := w.fate()
		if len(copies) == 0 {
			w.counts.dropped.Add(1)
			continue
		}
		if len(copies) > 1 {
			w.counts.duplicated.Add(1)
		}
		reordered := false
		for _, c := range copies {
			if c.held {
				reordered = true
				frame := append([]byte(nil), buf[:n]...)
				time.AfterFunc(c.wait, func() { out.WriteToUDP(frame, dst) })
				continue
			}
			now := time.Now()
			due := now.Add(c.wait)
			if due.Before(last) {
				due = last
			}
			last = due
			if !due.After(now) && queued.Load() == 0 {
				out.WriteToUDP(buf[:n], dst)
				continue
			}
			queued.Add(1)
			q <- timedFrame{due, append([]byte(nil), buf[:n]...)}
		}
		if reordered {
			w.counts.reordered.Add(1)
		}
	}
}

// timedFrame is a frame and when it leaves.
type timedFrame struct {
	due time.Time
	b   []byte
}

// copyFate is what happens to one copy of a frame: how long it waits, and whether it is
// held back for later frames to overtake.
type copyFate struct {
	wait time.Duration
	held bool
}

// fate draws what happens to one frame: its copies (none: dropped; two: duplicated).
func (w *wire) fate() []copyFate {
	w.mu.Lock()
	defer w.mu.Unlock()
	f := w.faults
	if f.loss > 0 && w.rng.Float64() < f.loss {
		return nil
	}
	copies := 1
	if f.dup > 0 && w.rng.Float64() < f.dup {
		copies = 2
	}
	var out []copyFate
	for range copies {
		c := copyFate{wait: f.delay}
		if f.jitter > 0 {
			c.wait += time.Duration(w.rng.Int64N(int64(2*f.jitter+1))) - f.jitter
		}
		if f.reorder > 0 && w.rng.Float64() < f.reorder {
			c.wait += max(reorderGap, f.jitter)
			c.held = true
		}
		c.wait = max(c.wait, 0)
		out = append(out, c)
	}
	return out
}

// isTCP reports whether an Ethernet frame carries TCP over IPv4 or IPv6.
func isTCP(frame []byte) bool {
	if len(frame) < 14 {
		return false
	}
	switch uint16(frame[12])<<8 | uint16(frame[13]) {
	case 0x0800: // IPv4: the protocol at byte 9 of its header
		return len(frame) > 14+9 && frame[14+9] == 6
	case 0x86dd: // IPv6: the next header at byte 6
		return len(frame) > 14+6 && frame[14+6] == 6
	}
	return false
}

func (w *wire) cuttingTCP() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.faults.cutTCP
}

// close stops the relay.
func (w *wire) close() {
	for _, c := range w.socks {
		if c != nil {
			c.Close()
		}
	}
	w.wg.Wait()
}
