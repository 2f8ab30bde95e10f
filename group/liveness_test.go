package group

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"maps"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onesided/rma/internal/fabric"
)

// dialMember connects to addr as rank r and sends the hello.
func dialMember(t *testing.T, addr string, r int, tok [livenessToken]byte) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Errorf("rank %d: dial: %v", r, err)
		return nil
	}
	var hello [4 + livenessToken]byte
	binary.LittleEndian.PutUint32(hello[:], uint32(r))
	copy(hello[4:], tok[:])
	if _, err := c.Write(hello[:]); err != nil {
		t.Errorf("rank %d: hello: %v", r, err)
	}
	return c
}

// fakeLive stands in for the fabric of a liveness: it records the signals
// and the losses, and its Probe answers as probe says (nil: the peer
// answers over RDMA).
type fakeLive struct {
	mu      sync.Mutex
	signals map[int][][]byte
	lost    map[int]error
	probes  int
	probe   func(ctx context.Context, rank int) error
}

func (f *fakeLive) HandleSignal(rank int, msg []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.signals == nil {
		f.signals = map[int][][]byte{}
	}
	f.signals[rank] = append(f.signals[rank], bytes.Clone(msg))
}

func (f *fakeLive) MarkLost(rank int, cause error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lost == nil {
		f.lost = map[int]error{}
	}
	if f.lost[rank] == nil {
		f.lost[rank] = cause
	}
}

func (f *fakeLive) PeerErr(rank int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lost[rank]
}

func (f *fakeLive) Probe(ctx context.Context, rank int) error {
	f.mu.Lock()
	f.probes++
	probe := f.probe
	f.mu.Unlock()
	if probe == nil {
		return nil
	}
	if err := probe(ctx, rank); err != nil {
		if ctx.Err() == nil {
			f.MarkLost(rank, err)
		}
		return err
	}
	return nil
}

func (f *fakeLive) state() (signals map[int]int, lost map[int]error, probes int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	signals = map[int]int{}
	for r, m := range f.signals {
		signals[r] = len(m)
	}
	return signals, maps.Clone(f.lost), f.probes
}

// TestLivenessStrangers: strangers connected to the liveness listener (one
// silent, one sending garbage, one with a wrong token, one claiming a rank
// out of range, and enough silent ones to fill the pending bound several
// times) do not delay the members, though the handshake timeout is long.
func TestLivenessStrangers(t *testing.T) {
	const me = 3
	const bound = 3 * time.Second
	var tok, wrong [livenessToken]byte
	copy(tok[:], "the group token.")
	copy(wrong[:], "not the token...")
	for _, flood := range []int{0, 1, 3 * maxPendingLiveness} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		var strangers []net.Conn
		dial := func() net.Conn {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatalf("flood %d: stranger: %v", flood, err)
			}
			strangers = append(strangers, c)
			return c
		}
		// Connected before the listener accepts anything: first in line.
		for i := 0; i < flood; i++ {
			dial()
		}
		dial().Write([]byte("GET / HTTP/1.0\r\n\r\n and more garbage than a hello holds"))
		w := dial()
		var bad [4 + livenessToken]byte
		copy(bad[4:], wrong[:])
		w.Write(bad[:])
		o := dial()
		binary.LittleEndian.PutUint32(bad[:], me) // a rank that does not dial this one
		copy(bad[4:], tok[:])
		o.Write(bad[:])

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		start := time.Now()
		fab := &fakeLive{}
		// A handshake bound (2 x 15 s) far beyond the bound above.
		lv := newLiveness(fab, me, tok, make([]string, me+1), ln, 15*time.Second)
		done := make(chan error, 1)
		go func() { done <- lv.connect(ctx) }()
		var mu sync.Mutex
		members := make([]net.Conn, me)
		var wg sync.WaitGroup
		for r := 0; r < me; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(20 * time.Millisecond * time.Duration(r))
				c := dialMember(t, addr, r, tok)
				mu.Lock()
				members[r] = c
				mu.Unlock()
			}()
		}
		err = <-done
		took := time.Since(start)
		wg.Wait()
		cancel()
		if err != nil {
			t.Fatalf("flood %d: connect: %v (after %v)", flood, err, took)
		}
		if took > bound {
			t.Errorf("flood %d: the group's connections took %v with strangers connected, want under %v", flood, took, bound)
		}
		// Each installed connection is the member's own: a signal sent on
		// the member's side arrives as that rank's.
		for r, c := range members {
			if c == nil {
				t.Fatalf("flood %d: rank %d: no connection", flood, r)
			}
			c.Write([]byte{1, byte(0x40 + r)})
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			fab.mu.Lock()
			n := 0
			for r := 0; r < me; r++ {
				if m := fab.signals[r]; len(m) == 1 && len(m[0]) == 1 && m[0][0] == byte(0x40+r) {
					n++
				}
			}
			fab.mu.Unlock()
			if n == me {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("flood %d: signals %v, want one of 0x40+rank from each member", flood, fab.signals)
			}
			time.Sleep(5 * time.Millisecond)
		}
		// The strangers are turned away (those that sent something at
		// once, the silent ones at the handshake bound or, here, when the
		// liveness closes): each reads EOF (or a reset).
		lv.close()
		for i, c := range strangers {
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			var b [1]byte
			if n, err := c.Read(b[:]); n != 0 || err == nil || isTimeout(err) {
				t.Errorf("flood %d: stranger %d still connected after the liveness closed: %d, %v", flood, i, n, err)
			}
			c.Close()
		}
		for _, c := range members {
			c.Close()
		}
		t.Logf("flood %d: members connected in %v", flood, took.Round(time.Millisecond))
	}
}

// livePair makes the liveness of ranks 0 and 1 over loopback TCP, each
// with its fake fabric.
func livePair(t *testing.T, timeout time.Duration) ([2]*liveness, [2]*fakeLive) {
	t.Helper()
	var tok [livenessToken]byte
	copy(tok[:], "the pair token..")
	var lns [2]net.Listener
	addrs := make([]string, 2)
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i], addrs[i] = ln, ln.Addr().String()
	}
	var lvs [2]*liveness
	var fabs [2]*fakeLive
	for i := range lvs {
		fabs[i] = &fakeLive{}
		lvs[i] = newLiveness(fabs[i], i, tok, addrs, lns[i], timeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	for _, lv := range lvs {
		go func() { errs <- lv.connect(ctx) }()
	}
	for range lvs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, lv := range lvs {
			lv.close()
		}
	})
	return lvs, fabs
}

// conn returns lv's connection to rank r, or nil.
func (lv *liveness) conn(r int) net.Conn {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	return lv.conns[r]
}

// TestLivenessBrokenConnection: a liveness connection that fails without
// its peer closing it (a reset, as after a keep-alive timeout on a lossy
// wire) does not mark the peer lost while it answers over RDMA: the
// connection is made again, by the lower rank, and carries signals both
// ways. With the previous code, the peer was lost at the first read error.
func TestLivenessBrokenConnection(t *testing.T) {
	lvs, fabs := livePair(t, 200*time.Millisecond)
	for round := 0; round < 3; round++ {
		side := round % 2 // the side whose end is reset
		old := lvs[side].conn(1 - side)
		old.(*net.TCPConn).SetLinger(0) // Close sends a reset
		old.Close()
		deadline := time.Now().Add(10 * time.Second)
		for {
			c0, c1 := lvs[0].conn(1), lvs[1].conn(0)
			if c0 != nil && c1 != nil && c0 != old && c1 != old {
				if err := lvs[0].Signal(1, []byte{byte(round), 0, 0, 0, 0}); err != nil {
					t.Fatalf("round %d: Signal 0 -> 1: %v", round, err)
				}
				if err := lvs[1].Signal(0, []byte{byte(round), 1, 1, 1, 1}); err != nil {
					t.Fatalf("round %d: Signal 1 -> 0: %v", round, err)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no new connection after 10 s (rank 0's %v, rank 1's %v)", round, c0, c1)
			}
			time.Sleep(5 * time.Millisecond)
		}
		for {
			s0, lost0, p0 := fabs[0].state()
			s1, lost1, p1 := fabs[1].state()
			if len(lost0) > 0 || len(lost1) > 0 {
				t.Fatalf("round %d: a peer marked lost: rank 0 %v, rank 1 %v", round, lost0, lost1)
			}
			if s0[1] == round+1 && s1[0] == round+1 {
				t.Logf("round %d: reconnected; probes over RDMA: rank 0 %d, rank 1 %d", round, p0, p1)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: signals received: rank 0 %v, rank 1 %v; want %d each", round, s0, s1, round+1)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// TestLivenessDeaths: a peer whose connection fails and that does not
// answer over RDMA either is marked lost; one whose process closes its end
// (EOF) at once, without a probe; one that says bye as having left.
func TestLivenessDeaths(t *testing.T) {
	t.Run("silent", func(t *testing.T) {
		lvs, fabs := livePair(t, 100*time.Millisecond)
		fabs[0].mu.Lock()
		fabs[0].probe = func(context.Context, int) error { return errors.New("test: no answer over RDMA") }
		fabs[0].mu.Unlock()
		c := lvs[0].conn(1)
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
		waitLost(t, fabs[0], 1, "no answer over RDMA")
	})
	t.Run("unanswered", func(t *testing.T) {
		// A READ to a dead host is retried without end (rxe's transport),
		// so the probe only times out: that, with the broken connection,
		// is the death.
		lvs, fabs := livePair(t, 100*time.Millisecond)
		fabs[0].mu.Lock()
		fabs[0].probe = func(ctx context.Context, _ int) error { <-ctx.Done(); return ctx.Err() }
		fabs[0].mu.Unlock()
		c := lvs[0].conn(1)
		c.(*net.TCPConn).SetLinger(0)
		start := time.Now()
		c.Close()
		waitLost(t, fabs[0], 1, "answered no RDMA read")
		if d := time.Since(start); d > time.Second {
			t.Errorf("lost after %v, want about the peer timeout of 100ms", d)
		}
	})
	t.Run("closed", func(t *testing.T) {
		lvs, fabs := livePair(t, 100*time.Millisecond)
		lvs[1].conn(0).(*net.TCPConn).CloseWrite() // as its kernel does when its process dies
		waitLost(t, fabs[0], 1, "its process is gone")
		if _, _, p := fabs[0].state(); p != 0 {
			t.Errorf("%d probes for a peer whose process closed its connection, want 0", p)
		}
	})
	t.Run("bye", func(t *testing.T) {
		lvs, fabs := livePair(t, 100*time.Millisecond)
		lvs[1].close()
		waitLost(t, fabs[0], 1, fabric.ErrPeerLeft.Error())
	})
}

func waitLost(t *testing.T, f *fakeLive, r int, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, lost, _ := f.state()
		if err := lost[r]; err != nil {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("rank %d lost with %q, want %q in it", r, err, want)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("rank %d not lost after 10 s", r)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestLivenessSignals: frames written by Signal come out of read, in
// order, and a malformed frame ends the reading.
func TestLivenessSignals(t *testing.T) {
	a, b := net.Pipe()
	lv := newLiveness(&fakeLive{}, 0, [livenessToken]byte{}, make([]string, 2), nil, 5*time.Second)
	lv.conns[1] = a
	msgs := [][]byte{{1, 2, 3, 4, 5}, bytes.Repeat([]byte{7}, 64), {9, 9, 9, 9, 9, 9}}
	go func() {
		for _, m := range msgs {
			if err := lv.Signal(1, m); err != nil {
				t.Errorf("Signal: %v", err)
			}
		}
		a.Write([]byte{200}) // longer than any signal
	}()
	var got [][]byte
	err := lv.read(b, func(m []byte) { got = append(got, bytes.Clone(m)) })
	if err == nil {
		t.Fatal("read returned nil after a malformed frame")
	}
	if len(got) != len(msgs) {
		t.Fatalf("got %d signals, want %d", len(got), len(msgs))
	}
	for i := range msgs {
		if !bytes.Equal(got[i], msgs[i]) {
			t.Errorf("signal %d: %x, want %x", i, got[i], msgs[i])
		}
	}
	if err := lv.Signal(1, make([]byte, 65)); err == nil {
		t.Error("Signal of 65 bytes succeeded")
	}
	if err := lv.Signal(0, []byte{1}); err == nil {
		t.Error("Signal to a rank without a connection succeeded")
	}
	a.Close()
	b.Close()
}

// TestLivenessProbeUnasked: a probe that could not ask (its ctx ended while
// the RDMA pair was being re-established: Probe returns nil) is no
// evidence of death: the peer is not marked lost, and it is probed again.
func TestLivenessProbeUnasked(t *testing.T) {
	lvs, fabs := livePair(t, 100*time.Millisecond)
	fabs[1].mu.Lock()
	fabs[1].probe = func(ctx context.Context, _ int) error { <-ctx.Done(); return nil }
	fabs[1].mu.Unlock()
	// Rank 1 dials nobody (the lower rank does), and rank 0, marked as
	// closing, leaves the broken connection alone: only rank 1's probes run.
	lvs[0].mu.Lock()
	lvs[0].closing = true
	lvs[0].mu.Unlock()
	c := lvs[1].conn(0)
	c.(*net.TCPConn).SetLinger(0)
	c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, lost, probes := fabs[1].state()
		if len(lost) > 0 {
			t.Fatalf("marked lost after %d probes that could not ask: %v", probes, lost)
		}
		if probes >= 3 {
			t.Logf("%d probes, none taken for a death", probes)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d probes after 10 s, want 3", probes)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
