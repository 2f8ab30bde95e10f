package bootstrap

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var testSecret = []byte("0123456789abcdef-test-secret")

// listen starts rank 0 of a group of size on a free loopback port.
func listen(t *testing.T, size int, mod func(*Config)) *Listener {
	t.Helper()
	cfg := Config{Rank: 0, Size: size, Addr: "127.0.0.1:0", Secret: testSecret}
	if mod != nil {
		mod(&cfg)
	}
	l, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func joinerCfg(l *Listener, rank int) Config {
	return Config{Rank: rank, Size: l.cfg.Size, Addr: l.Addr(), Secret: testSecret}
}

type joinResult struct {
	c   *Conn
	err error
}

// goJoin runs Join in a goroutine.
func goJoin(ctx context.Context, cfg Config) <-chan joinResult {
	ch := make(chan joinResult, 1)
	go func() {
		c, err := Join(ctx, cfg)
		ch <- joinResult{c, err}
	}()
	return ch
}

func goAccept(ctx context.Context, l *Listener) <-chan joinResult {
	ch := make(chan joinResult, 1)
	go func() {
		c, err := l.Accept(ctx)
		ch <- joinResult{c, err}
	}()
	return ch
}

func must(t *testing.T, r joinResult) *Conn {
	t.Helper()
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { r.c.Close() })
	return r.c
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// group forms a group of size over loopback and returns its Conns by rank.
func group(t *testing.T, size int) []*Conn {
	t.Helper()
	ctx := timeout(t, 10*time.Second)
	if size == 1 {
		c, err := Join(ctx, Config{Rank: 0, Size: 1})
		if err != nil {
			t.Fatal(err)
		}
		return []*Conn{c}
	}
	l := listen(t, size, nil)
	var chans []<-chan joinResult
	for r := 1; r < size; r++ {
		chans = append(chans, goJoin(ctx, joinerCfg(l, r)))
	}
	conns := []*Conn{must(t, <-goAccept(ctx, l))}
	for _, ch := range chans {
		conns = append(conns, must(t, <-ch))
	}
	for r, c := range conns {
		if c.Rank() != r || c.Size() != size {
			t.Fatalf("conn %d: rank %d size %d", r, c.Rank(), c.Size())
		}
	}
	return conns
}

// onAll runs f on every rank concurrently and returns the errors by rank.
func onAll(conns []*Conn, f func(c *Conn) error) []error {
	errs := make([]error, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(c)
		}()
	}
	wg.Wait()
	return errs
}

func noErrors(t *testing.T, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// payload is what rank r contributes in round k: its length and content
// depend on both, and round 2 sends nothing.
func payload(r, k int) []byte {
	switch k {
	case 2:
		return nil
	case 3:
		b := make([]byte, 300_000+r) // larger than socket buffers
		for i := range b {
			b[i] = byte(i*7 + r)
		}
		return b
	}
	return []byte(fmt.Sprintf("round %d from rank %d%s", k, r, strings.Repeat("!", r)))
}

func TestGroups(t *testing.T) {
	for _, size := range []int{1, 2, 4} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			conns := group(t, size)
			ctx := timeout(t, 20*time.Second)
			for k := 0; k < 4; k++ {
				got := make([][][]byte, size)
				noErrors(t, onAll(conns, func(c *Conn) (err error) {
					mine := payload(c.Rank(), k)
					got[c.Rank()], err = c.AllGather(ctx, mine)
					return err
				}))
				for r := range conns {
					if len(got[r]) != size {
						t.Fatalf("round %d rank %d: %d entries", k, r, len(got[r]))
					}
					for i, b := range got[r] {
						if want := payload(i, k); !bytes.Equal(b, want) {
							t.Errorf("round %d rank %d entry %d: %d bytes %.40q, want %d bytes %.40q", k, r, i, len(b), b, len(want), want)
						}
					}
				}
				noErrors(t, onAll(conns, func(c *Conn) error { return c.Barrier(ctx) }))
			}
			for root := 0; root < size; root++ {
				want := []byte(fmt.Sprintf("broadcast from %d", root))
				noErrors(t, onAll(conns, func(c *Conn) error {
					data := []byte("ignored")
					if c.Rank() == root {
						data = want
					}
					got, err := c.Broadcast(ctx, root, data)
					if err == nil && !bytes.Equal(got, want) {
						err = fmt.Errorf("got %q, want %q", got, want)
					}
					return err
				}))
			}
		})
	}
}

func TestAllGatherResultsAreFresh(t *testing.T) {
	conns := group(t, 2)
	ctx := timeout(t, 5*time.Second)
	got := make([][][]byte, 2)
	mine := [][]byte{[]byte("aa"), []byte("bb")}
	noErrors(t, onAll(conns, func(c *Conn) (err error) {
		got[c.Rank()], err = c.AllGather(ctx, mine[c.Rank()])
		return err
	}))
	mine[0][0] = 'X'
	got[0][0] = append(got[0][0], "123456"...) // must not run into entry 1
	if string(got[0][1]) != "bb" || string(got[0][0][:2]) != "aa" {
		t.Fatalf("results alias input or each other: %q", got[0])
	}
}

func TestBarrierWaitsForAll(t *testing.T) {
	conns := group(t, 3)
	ctx := timeout(t, 5*time.Second)
	var entered atomic.Int32
	errs := onAll(conns, func(c *Conn) error {
		if c.Rank() == 2 {
			time.Sleep(200 * time.Millisecond)
		}
		entered.Add(1)
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if n := entered.Load(); n != 3 {
			return fmt.Errorf("left the barrier when %d of 3 had entered", n)
		}
		return nil
	})
	noErrors(t, errs)
}

func TestWrongSecretRefused(t *testing.T) {
	var logged strings.Builder
	var mu sync.Mutex
	l := listen(t, 2, func(c *Config) {
		c.Logf = func(f string, a ...any) { mu.Lock(); fmt.Fprintf(&logged, f+"\n", a...); mu.Unlock() }
	})
	ctx := timeout(t, 10*time.Second)
	accepted := goAccept(ctx, l)

	bad := joinerCfg(l, 1)
	bad.Secret = []byte("not the secret")
	_, err := Join(ctx, bad)
	if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "rejected by rank 0") {
		t.Fatalf("wrong secret: got %v, want ErrAuth saying the secret was rejected by rank 0", err)
	}
	if l.Refused() != 1 {
		t.Fatalf("Refused() = %d, want 1", l.Refused())
	}

	// The real joiner still gets in.
	c1 := must(t, <-goJoin(ctx, joinerCfg(l, 1)))
	c0 := must(t, <-accepted)
	if c0.Refused() != 1 {
		t.Errorf("Conn.Refused() = %d, want 1", c0.Refused())
	}
	mu.Lock()
	if !strings.Contains(logged.String(), "wrong shared secret") {
		t.Errorf("log does not mention the refusal: %q", logged.String())
	}
	mu.Unlock()
	noErrors(t, onAll([]*Conn{c0, c1}, func(c *Conn) error { return c.Barrier(ctx) }))
}

func TestMissingSecret(t *testing.T) {
	ctx := timeout(t, 5*time.Second)
	_, err := Join(ctx, Config{Rank: 1, Size: 2, Addr: "127.0.0.1:1"})
	if !errors.Is(err, ErrConfig) || !errors.Is(err, ErrAuth) {
		t.Fatalf("joiner without secret: got %v, want ErrConfig and ErrAuth", err)
	}
	if _, err := Listen(Config{Rank: 0, Size: 2, Addr: "127.0.0.1:0"}); !errors.Is(err, ErrConfig) {
		t.Fatalf("rank 0 without secret: got %v, want ErrConfig", err)
	}
	// A peer that skips validation and proves with an empty secret is refused.
	l := listen(t, 2, nil)
	accepted := goAccept(ctx, l)
	cfg := joinerCfg(l, 1)
	cfg.Secret = nil
	if err := rawJoin(t, cfg); !errors.Is(err, ErrAuth) {
		t.Fatalf("empty secret: got %v, want ErrAuth", err)
	}
	must(t, <-goJoin(ctx, joinerCfg(l, 1)))
	must(t, <-accepted)
}

// rawJoin runs the joiner handshake without Join's validation.
func rawJoin(t *testing.T, cfg Config) error {
	nc, err := net.Dial("tcp", cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	return joinHandshake(nc, cfg)
}

// TestHandshakeSpec drives rank 0 with a joiner written from the protocol
// description, computing both MACs independently.
func TestHandshakeSpec(t *testing.T) {
	l := listen(t, 2, nil)
	ctx := timeout(t, 5*time.Second)
	accepted := goAccept(ctx, l)
	nc, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	frame := func(typ byte, p []byte) []byte {
		return append([]byte{0xB5, 1, typ, 0, 0, 0, byte(len(p))}, p...)
	}
	read := func(typ byte, n int) []byte {
		b := make([]byte, 7+n)
		if _, err := io.ReadFull(nc, b); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b[:7], []byte{0xB5, 1, typ, 0, 0, 0, byte(n)}) {
			t.Fatalf("header % x, want type %d length %d", b[:7], typ, n)
		}
		return b[7:]
	}
	macOf := func(label string, nj, n0 []byte) []byte {
		m := hmac.New(sha256.New, testSecret)
		m.Write([]byte(label))
		m.Write([]byte{0, 0, 0, 2, 0, 0, 0, 1}) // size 2, rank 1
		m.Write(nj)
		m.Write(n0)
		return m.Sum(nil)
	}
	nj := make([]byte, 32)
	rand.Read(nj)
	nc.Write(frame(1, append([]byte{0, 0, 0, 2, 0, 0, 0, 1}, nj...)))  // HELLO
	n0 := read(2, 32)                                                  // CHALLENGE
	nc.Write(frame(3, macOf("rma-bootstrap-v1 joiner proof", nj, n0))) // PROOF
	if got := read(4, 32); !bytes.Equal(got, macOf("rma-bootstrap-v1 rank0 proof", nj, n0)) {
		t.Fatal("rank 0's MAC is not HMAC-SHA256(secret, label || size || rank || Nj || N0)")
	}
	read(6, 0) // READY
	must(t, <-accepted)
}

// TestReplayRefused records a real joiner's bytes through a proxy and
// replays them on a new connection.
func TestReplayRefused(t *testing.T) {
	l := listen(t, 3, nil)
	ctx := timeout(t, 10*time.Second)
	accepted := goAccept(ctx, l)

	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	var recorded bytes.Buffer
	var recMu sync.Mutex
	go func() {
		in, err := pl.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", l.Addr())
		if err != nil {
			in.Close()
			return
		}
		go func() { io.Copy(in, out); in.Close() }()
		buf := make([]byte, 4096)
		for {
			n, err := in.Read(buf)
			recMu.Lock()
			recorded.Write(buf[:n])
			recMu.Unlock()
			out.Write(buf[:n])
			if err != nil {
				out.Close()
				return
			}
		}
	}()
	cfg1 := joinerCfg(l, 1)
	cfg1.Addr = pl.Addr().String()
	joined1 := goJoin(ctx, cfg1)

	// Wait until the legitimate handshake is recorded (HELLO + PROOF).
	want := headerLen + helloLen + headerLen + proofLen
	for {
		recMu.Lock()
		n := recorded.Len()
		recMu.Unlock()
		if n >= want {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("legitimate handshake not seen")
		}
		time.Sleep(10 * time.Millisecond)
	}
	recMu.Lock()
	replay := bytes.Clone(recorded.Bytes()[:want])
	recMu.Unlock()

	nc, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	nc.Write(replay)
	reply, _ := io.ReadAll(nc)
	nc.Close()
	// CHALLENGE (7+32 bytes), then REFUSE with code 1 (wrong secret).
	wantTail := []byte{0xB5, 1, msgRefuse, 0, 0, 0, 1, codeAuth}
	if len(reply) != headerLen+challengeLen+len(wantTail) || !bytes.HasSuffix(reply, wantTail) {
		t.Fatalf("replay got % x, want a challenge then % x", reply, wantTail)
	}
	if l.Refused() != 1 {
		t.Fatalf("Refused() = %d, want 1", l.Refused())
	}
	c2 := must(t, <-goJoin(ctx, joinerCfg(l, 2)))
	c0 := must(t, <-accepted)
	c1 := must(t, <-joined1)
	noErrors(t, onAll([]*Conn{c0, c1, c2}, func(c *Conn) error { return c.Barrier(ctx) }))
}

func TestDuplicateRankRefused(t *testing.T) {
	l := listen(t, 3, nil)
	ctx := timeout(t, 10*time.Second)
	accepted := goAccept(ctx, l)
	a, b := goJoin(ctx, joinerCfg(l, 1)), goJoin(ctx, joinerCfg(l, 1))
	// Exactly one of the two claims of rank 1 is refused, whichever came second.
	var ra joinResult
	var other <-chan joinResult
	select {
	case ra = <-a:
		other = b
	case ra = <-b:
		other = a
	}
	if !errors.Is(ra.err, ErrRankTaken) {
		t.Fatalf("second claim of rank 1: got %v, want ErrRankTaken", ra.err)
	}
	c2 := must(t, <-goJoin(ctx, joinerCfg(l, 2)))
	c0 := must(t, <-accepted)
	c1 := must(t, <-other)
	if l.Refused() != 1 {
		t.Errorf("Refused() = %d, want 1", l.Refused())
	}
	noErrors(t, onAll([]*Conn{c0, c1, c2}, func(c *Conn) error { return c.Barrier(ctx) }))
}

func TestBadClaimsRefused(t *testing.T) {
	l := listen(t, 3, nil)
	ctx := timeout(t, 10*time.Second)
	accepted := goAccept(ctx, l)

	other := Config{Rank: 4, Size: 5, Addr: l.Addr(), Secret: testSecret}
	if _, err := Join(ctx, other); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "size") {
		t.Fatalf("size 5 against 3: got %v, want ErrConfig about the size", err)
	}
	for _, rank := range []int{0, 3, 1 << 30} {
		cfg := joinerCfg(l, rank)
		if err := rawJoin(t, cfg); !errors.Is(err, ErrConfig) {
			t.Fatalf("claim of rank %d: got %v, want ErrConfig", rank, err)
		}
	}
	j1, j2 := goJoin(ctx, joinerCfg(l, 1)), goJoin(ctx, joinerCfg(l, 2))
	must(t, <-j1)
	must(t, <-j2)
	must(t, <-accepted)
	if l.Refused() != 4 {
		t.Errorf("Refused() = %d, want 4", l.Refused())
	}
}

func TestSilentPeer(t *testing.T) {
	t.Run("closed after the handshake timeout", func(t *testing.T) {
		l := listen(t, 2, func(c *Config) { c.HandshakeTimeout = 200 * time.Millisecond })
		ctx := timeout(t, 10*time.Second)
		accepted := goAccept(ctx, l)
		nc, err := net.Dial("tcp", l.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(5 * time.Second))
		start := time.Now()
		if n, err := nc.Read(make([]byte, 1)); err != io.EOF || n != 0 {
			t.Fatalf("silent peer: read %d bytes, %v; want EOF", n, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("silent peer dropped after %v", d)
		}
		for l.Refused() != 1 && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		must(t, <-goJoin(ctx, joinerCfg(l, 1)))
		must(t, <-accepted)
	})
	t.Run("does not delay others", func(t *testing.T) {
		l := listen(t, 2, nil) // default 10 s timeout
		ctx := timeout(t, 5*time.Second)
		accepted := goAccept(ctx, l)
		nc, err := net.Dial("tcp", l.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.Write([]byte{0xB5, 1, msgHello}) // and then nothing
		must(t, <-goJoin(ctx, joinerCfg(l, 1)))
		must(t, <-accepted)
	})
}

func TestJoinCancel(t *testing.T) {
	// A port where nobody listens.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := Config{Rank: 1, Size: 2, Addr: addr, Secret: testSecret}

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err = Join(ctx, cfg)
	if !errors.Is(err, context.Canceled) || time.Since(start) > 2*time.Second {
		t.Fatalf("cancelled dial: %v after %v", err, time.Since(start))
	}

	// Rank 0 that never completes the group: joiner waits for READY.
	l := listen(t, 3, nil)
	go l.Accept(timeout(t, 10*time.Second))
	start = time.Now()
	_, err = Join(timeout(t, 300*time.Millisecond), joinerCfg(l, 1))
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Fatalf("joiner waiting for the group: %v after %v", err, time.Since(start))
	}

	// Rank 0 whose ranks never come.
	l = listen(t, 2, nil)
	start = time.Now()
	_, err = l.Accept(timeout(t, 200*time.Millisecond))
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Fatalf("accept: %v after %v", err, time.Since(start))
	}
}

func TestAllGatherCancel(t *testing.T) {
	conns := group(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := conns[1].AllGather(ctx, []byte("x")) // rank 0 never calls
	if !errors.Is(err, context.Canceled) || time.Since(start) > 2*time.Second {
		t.Fatalf("rank 1: %v after %v", err, time.Since(start))
	}
	if err := conns[1].Barrier(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("rank 1 after interruption: got %v, want ErrClosed", err)
	}
	// Rank 0 now finds rank 1 gone rather than waiting. (Its first call
	// may complete with the contribution rank 1 had already sent.)
	start = time.Now()
	_, err = conns[0].AllGather(timeout(t, 10*time.Second), []byte("y"))
	if err == nil {
		err = conns[0].Barrier(timeout(t, 10*time.Second))
	}
	if !errors.Is(err, ErrClosed) || time.Since(start) > 2*time.Second {
		t.Fatalf("rank 0: %v after %v", err, time.Since(start))
	}

	// Rank 0 cut short by its deadline: the others hear of it.
	conns = group(t, 3)
	start = time.Now()
	errs := onAll(conns, func(c *Conn) error {
		switch c.Rank() {
		case 0:
			_, err := c.AllGather(timeout(t, 200*time.Millisecond), nil)
			return err
		case 1:
			_, err := c.AllGather(timeout(t, 10*time.Second), nil)
			return err
		}
		return nil // rank 2 never calls
	})
	if !errors.Is(errs[0], context.DeadlineExceeded) || !errors.Is(errs[1], ErrClosed) || time.Since(start) > 3*time.Second {
		t.Fatalf("got %v after %v; want DeadlineExceeded on rank 0, ErrClosed on rank 1", errs, time.Since(start))
	}
}

func TestPeerLost(t *testing.T) {
	conns := group(t, 3)
	conns[2].Close()
	ctx := timeout(t, 10*time.Second)
	start := time.Now()
	errs := onAll(conns[:2], func(c *Conn) error { return c.Barrier(ctx) })
	for r, err := range errs {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("rank %d: got %v, want ErrClosed", r, err)
		}
	}
	if !strings.Contains(errs[1].Error(), "rank 2") {
		t.Errorf("rank 1's error does not name rank 2: %v", errs[1])
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %v", d)
	}

	// Rank 0 lost.
	conns = group(t, 2)
	conns[0].Close()
	if _, err := conns[1].AllGather(ctx, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("rank 1 with rank 0 gone: got %v, want ErrClosed", err)
	}
}

func TestCloseInterrupts(t *testing.T) {
	conns := group(t, 2)
	time.AfterFunc(100*time.Millisecond, func() { conns[1].Close() })
	if err := conns[1].Barrier(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("got %v, want ErrClosed", err)
	}
	if err := conns[1].Close(); err != nil {
		t.Fatal(err)
	}
}

func TestMismatchedCollectives(t *testing.T) {
	conns := group(t, 3)
	ctx := timeout(t, 10*time.Second)
	errs := onAll(conns, func(c *Conn) error {
		if c.Rank() == 1 {
			_, err := c.Broadcast(ctx, 0, nil)
			return err
		}
		return c.Barrier(ctx)
	})
	for r, err := range errs {
		if !errors.Is(err, ErrProtocol) {
			t.Errorf("rank %d: got %v, want ErrProtocol", r, err)
		}
	}
	// Sequence numbers: rank 1 skips a call.
	conns = group(t, 2)
	seq := func(c *Conn) error {
		if c.Rank() == 0 {
			if err := c.Barrier(ctx); err != nil {
				return err
			}
		}
		return c.Barrier(ctx)
	}
	conns[1].seq++ // as if rank 1 had made a call rank 0 never saw
	for r, err := range onAll(conns, seq) {
		if !errors.Is(err, ErrProtocol) {
			t.Errorf("rank %d: got %v, want ErrProtocol", r, err)
		}
	}
}

func TestArguments(t *testing.T) {
	conns := group(t, 2)
	ctx := timeout(t, 5*time.Second)
	if _, err := conns[0].Broadcast(ctx, 2, nil); !errors.Is(err, ErrConfig) {
		t.Errorf("root out of range: %v", err)
	}
	if _, err := conns[0].AllGather(ctx, make([]byte, MaxMessage)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("too large: %v", err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := conns[0].Barrier(done); !errors.Is(err, context.Canceled) {
		t.Errorf("ended context: %v", err)
	}
	// None of these broke the group.
	noErrors(t, onAll(conns, func(c *Conn) error { return c.Barrier(ctx) }))
}

func TestTooLargeResult(t *testing.T) {
	conns := group(t, 3)
	ctx := timeout(t, 20*time.Second)
	start := time.Now()
	errs := onAll(conns, func(c *Conn) error {
		_, err := c.AllGather(ctx, make([]byte, MaxMessage/2))
		return err
	})
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
	for r, err := range errs {
		if !errors.Is(err, ErrTooLarge) {
			t.Errorf("rank %d: got %v, want ErrTooLarge", r, err)
		}
	}
}

func TestFrameBound(t *testing.T) {
	// A header announcing more than the limit is refused without reading on.
	var h [headerLen]byte
	h[0], h[1], h[2] = frameMagic, frameVersion, msgResult
	binary.BigEndian.PutUint32(h[3:], MaxMessage+1)
	if _, _, err := readFrame(bytes.NewReader(h[:]), MaxMessage); !errors.Is(err, ErrProtocol) {
		t.Fatalf("got %v, want ErrProtocol", err)
	}
	if err := writeFrame(io.Discard, msgResult, make([]byte, MaxMessage), []byte{1}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
}
