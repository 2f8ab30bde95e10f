//go:build integration

package test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onesided/rma"
	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/service"
	"github.com/onesided/rma/verbs"
	"github.com/onesided/rma/win"
)

// The service tests run a server and clients as processes of this binary,
// chosen by RMA_SVC_ROLE ("server", "client"; the client's RMA_SVC_MODE
// says what it does). They coordinate through files in RMA_TEST_DIR: the
// server writes its port, answers "sample.K" files (holding a connection
// count to wait for) with "stats.K" files (its VmPin, thread and goroutine
// counts), and stops at a "stop" file, printing its counter word.

func init() {
	if role := os.Getenv("RMA_SVC_ROLE"); role != "" {
		os.Exit(runSvcRole(role))
	}
}

const (
	svcAlpha   = 4096     // bytes of window "alpha"
	svcBeta    = 64 << 10 // bytes of window "beta"
	svcCounter = 4096     // bytes of window "counter"
)

func runSvcRole(role string) int {
	verbs.TrackObjects(true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var err error
	switch role {
	case "server":
		err = svcServer(ctx)
	case "frozen":
		err = svcFrozen(ctx)
	case "client":
		err = svcClient(ctx, os.Getenv("RMA_SVC_MODE"))
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err == nil {
		if open := verbs.OpenObjects(); len(open) > 0 {
			err = fmt.Errorf("%d verbs objects left open:\n%s", len(open), strings.Join(open, "\n"))
		}
	}
	if err != nil {
		fmt.Printf("FAIL: %s: %v\n", role, err)
		return 1
	}
	return 0
}

func svcDir(name string) string { return filepath.Join(os.Getenv("RMA_TEST_DIR"), name) }

// svcWrite writes a file atomically (through a rename).
func svcWrite(name, content string) error {
	tmp := svcDir(name + ".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, svcDir(name))
}

// svcAwait waits for a file and returns its contents.
func svcAwait(ctx context.Context, name string) (string, error) {
	for {
		if b, err := os.ReadFile(svcDir(name)); err == nil {
			return string(b), nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("waiting for %s: %w", name, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// procStatus returns a field of /proc/self/status (VmPin in kB, Threads).
func procStatus(field string) int {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n
		}
	}
	return -1
}

// svcServer listens on RMA_SVC_LISTEN, exposes alpha, beta and counter,
// writes its port to RMA_SVC_PORTFILE, answers samples and stops.
func svcServer(ctx context.Context) (err error) {
	var c cmCloser
	defer func() { c.close(&err) }()
	cfg := service.ServerConfig{Secret: []byte(os.Getenv("RMA_SVC_SECRET"))}
	if n, err := strconv.Atoi(os.Getenv("RMA_SVC_MAXCONNS")); err == nil {
		cfg.MaxConns = n
	}
	if n, err := strconv.Atoi(os.Getenv("RMA_SVC_MAXPENDING")); err == nil {
		cfg.MaxPending = n
	}
	if d, err := time.ParseDuration(os.Getenv("RMA_SVC_PROBE")); err == nil {
		cfg.ProbeInterval = d
	}
	if os.Getenv("RMA_SVC_AUTHZ") != "" {
		cfg.Authorize = svcAuthorize
	}
	mems := map[string][]byte{}
	for _, w := range []struct {
		name string
		size int
	}{{"alpha", svcAlpha}, {"beta", svcBeta}, {"counter", svcCounter}} {
		m, err := verbs.Alloc(w.size)
		if err != nil {
			return err
		}
		c.add(func() error { return verbs.Free(m) })
		mems[w.name] = m
	}
	start := time.Now()
	srv, err := service.Listen(ctx, os.Getenv("RMA_SVC_LISTEN"), cfg)
	if err != nil {
		return err
	}
	c.add(srv.Close)
	for _, name := range []string{"alpha", "beta", "counter"} {
		if err := srv.Expose(name, mems[name]); err != nil {
			return err
		}
	}
	if err := srv.Expose("alpha", mems["beta"]); !errors.Is(err, service.ErrExists) {
		return fmt.Errorf("exposing alpha twice: %v, want ErrExists", err)
	}
	if err := srv.Expose("odd", mems["beta"][1:9]); !errors.Is(err, win.ErrInvalid) {
		return fmt.Errorf("exposing misaligned memory: %v, want win.ErrInvalid", err)
	}
	fmt.Printf("server: listening on %v after %v\n", srv.Addr(), time.Since(start))
	if err := svcWrite(os.Getenv("RMA_SVC_PORTFILE"), strconv.Itoa(int(srv.Addr().Port()))); err != nil {
		return err
	}
	for k := 1; ; {
		if _, err := os.Stat(svcDir("stop")); err == nil {
			break
		}
		if b, err := os.ReadFile(svcDir("rotate")); err == nil {
			// "rotate" holds the new secret and the grace.
			secret, grace, _ := strings.Cut(string(b), " ")
			d, err := time.ParseDuration(grace)
			if err != nil {
				return err
			}
			if err := srv.SetSecret([]byte(secret), d); err != nil {
				return err
			}
			os.Remove(svcDir("rotate"))
			if err := svcWrite("rotated", ""); err != nil {
				return err
			}
			continue
		}
		if b, err := os.ReadFile(svcDir("sample." + strconv.Itoa(k))); err == nil {
			want, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			deadline := time.Now().Add(30 * time.Second)
			for srv.Conns() != want && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if got := srv.Conns(); got != want {
				return fmt.Errorf("sample %d: %d connections, want %d", k, got, want)
			}
			time.Sleep(300 * time.Millisecond) // the last teardown finishes
			runtime.GC()
			stats := fmt.Sprintf("conns=%d vmpin=%d threads=%d goroutines=%d", srv.Conns(),
				procStatus("VmPin"), procStatus("Threads"), runtime.NumGoroutine())
			fmt.Printf("server: sample %d: %s\n", k, stats)
			if err := svcWrite("stats."+strconv.Itoa(k), stats); err != nil {
				return err
			}
			k++
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	fmt.Printf("counter=%d\n", int64(binary.NativeEndian.Uint64(mems["counter"])))
	st := srv.Stats()
	a := st.Windows["alpha"]
	fmt.Printf("server stats: requests=%d connects=%d disconnects=%d authfailures=%d authtimeouts=%d evicted=%d refused=%d lockrecoveries=%d alpha_engineops=%d alpha_rejects=%d alpha_lockgrants=%d alpha_lockwaits=%d alpha_denied=%d\n",
		st.Requests, st.Connects, st.Disconnects, st.AuthFailures, st.AuthTimeouts, st.Evicted, st.Refused, st.LockRecoveries,
		a.EngineOps, a.EngineRejects, a.LockGrants, a.LockWaits, a.Denied)
	fmt.Printf("requests=%d\nauthtimeouts=%d\nevicted=%d\nauthfailures=%d\n", st.Requests, st.AuthTimeouts, st.Evicted, st.AuthFailures)
	fmt.Printf("lockrecoveries=%d\n", st.LockRecoveries)
	start = time.Now()
	if err := srv.Close(); err != nil {
		return err
	}
	fmt.Printf("server: closed in %v\n", time.Since(start))
	if err := srv.Close(); err != nil {
		return fmt.Errorf("second Close: %v, want nil", err)
	}
	return nil
}

// svcSample asks the server for a sample once it has want connections.
func svcSample(ctx context.Context, k, want int) (string, error) {
	if err := svcWrite("sample."+strconv.Itoa(k), strconv.Itoa(want)); err != nil {
		return "", err
	}
	return svcAwait(ctx, "stats."+strconv.Itoa(k))
}

func svcConfig() service.ClientConfig {
	return service.ClientConfig{Secret: []byte(os.Getenv("RMA_SVC_SECRET"))}
}

// svcModes are the client modes of other files.
var svcModes = map[string]func(ctx context.Context, addr string) error{}

func svcClient(ctx context.Context, mode string) error {
	addr := os.Getenv("RMA_SVC_ADDR")
	if f, ok := svcModes[mode]; ok {
		return f(ctx, addr)
	}
	switch mode {
	case "seq":
		return svcSeq(ctx, addr)
	case "many":
		return svcMany(ctx, addr)
	case "auth":
		return svcAuth(ctx, addr)
	case "restart":
		return svcRestart(ctx, addr)
	case "scale":
		return svcScale(ctx, addr)
	case "frozen":
		return svcFrozenClient(ctx, addr)
	case "stopped":
		return svcStoppedClient(ctx, addr)
	case "stall":
		return svcStall(ctx, addr)
	case "holder", "waiter", "accdie", "acccheck":
		return svcLockClient(ctx, addr, mode)
	case "frozenholder":
		return svcFrozenHolder(ctx, addr)
	case "shards":
		return svcShards(ctx, []string{addr, os.Getenv("RMA_SVC_ADDR2")})
	}
	return fmt.Errorf("unknown client mode %q", mode)
}

// svcExpect fails unless got == want.
func svcExpect(what string, got, want int64, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if got != want {
		return fmt.Errorf("%s returned %d, want %d", what, got, want)
	}
	return nil
}

func svcPattern(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31 + seed*7 + 1)
	}
	return b
}

// svcRound is one client's life in test (a): dial, open both windows,
// exact Put/Get and atomics, refused calls, close.
func svcRound(ctx context.Context, addr string, i int, checkAllocs bool) (err error) {
	cfg := svcConfig()
	cfg.StagingSize = 4096 // Puts and Gets of beta go in pieces
	cl, err := service.Dial(ctx, addr, cfg)
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	closed := false
	defer func() {
		if !closed {
			cl.Close()
		}
	}()
	// rxe has atomics on both sides: Dial's byte-order probe (one
	// fetch-and-add, one READ of the server's word) passed.
	if st := cl.Stats(); cl.NICAtomics() != nil || st.NICAtomics != 1 || st.Reads != 1 {
		return fmt.Errorf("after Dial: NICAtomics() = %v, %d NIC atomics and %d READs; want nil, 1, 1", cl.NICAtomics(), st.NICAtomics, st.Reads)
	}
	alpha, err := cl.Open(ctx, "alpha")
	if err != nil {
		return err
	}
	beta, err := cl.Open(ctx, "beta")
	if err != nil {
		return err
	}
	if alpha.Size() != svcAlpha || beta.Size() != svcBeta {
		return fmt.Errorf("sizes %d and %d, want %d and %d", alpha.Size(), beta.Size(), svcAlpha, svcBeta)
	}
	// Put and Get, exact bytes; beta's crosses three staging pieces.
	for _, c := range []struct {
		w    *service.Window
		disp int
		n    int
	}{{alpha, 512, 256}, {beta, 1000, 10000}, {alpha, svcAlpha - 1, 1}} {
		src := svcPattern(c.n, i)
		if err := c.w.Put(ctx, src, c.disp); err != nil {
			return fmt.Errorf("put %d at %d: %w", c.n, c.disp, err)
		}
		dst := make([]byte, c.n)
		if err := c.w.Get(ctx, dst, c.disp); err != nil {
			return fmt.Errorf("get %d at %d: %w", c.n, c.disp, err)
		}
		if !bytes.Equal(dst, src) {
			return fmt.Errorf("get %d at %d after put: % x..., want % x...", c.n, c.disp, dst[:8], src[:8])
		}
	}
	// Atomics on alpha's word 0 (and beta's word 8), exact old values.
	base := int64(i)*1000 + 5
	word := make([]byte, 8)
	binary.NativeEndian.PutUint64(word, uint64(base))
	if err := alpha.Put(ctx, word, 0); err != nil {
		return err
	}
	steps := []struct {
		o    op.Op
		v    int64
		want int64 // the old value returned
	}{
		{op.Sum, 7, base}, {op.Replace, -3, base + 7}, {op.Max, 100, -3}, {op.Max, 50, 100},
		{op.Min, -9, 100}, {op.NoOp, 0, -9}, {op.Bxor, 0xff, -9}, {op.Prod, 3, -9 ^ 0xff},
		{op.Sum, -1, (-9 ^ 0xff) * 3},
	}
	for _, s := range steps {
		old, err := rma.FetchAndOp(ctx, alpha, int64(s.v), 0, s.o)
		if err := svcExpect(fmt.Sprintf("FetchAndOp(%v, %d)", s.o, s.v), old, s.want, err); err != nil {
			return err
		}
	}
	now := int64((-9^0xff)*3 - 1)
	old, err := rma.CompareAndSwap(ctx, alpha, int64(now), int64(42), 0)
	if err := svcExpect("CompareAndSwap(match)", old, now, err); err != nil {
		return err
	}
	old, err = rma.CompareAndSwap(ctx, alpha, int64(1), int64(2), 0)
	if err := svcExpect("CompareAndSwap(no match)", old, 42, err); err != nil {
		return err
	}
	if err := alpha.Get(ctx, word, 0); err != nil || int64(binary.NativeEndian.Uint64(word)) != 42 {
		return fmt.Errorf("word 0 holds %d (%v), want 42", int64(binary.NativeEndian.Uint64(word)), err)
	}
	if _, err := rma.FetchAndOp(ctx, beta, int64(0), svcBeta-8, op.Replace); err != nil {
		return err
	}
	old, err = rma.FetchAndOp(ctx, beta, int64(11), svcBeta-8, op.Sum)
	if err := svcExpect("beta's last word", old, 0, err); err != nil {
		return err
	}
	// Refused calls, before anything is sent.
	refusals := []struct {
		what string
		err  error
		want error
	}{}
	refuse := func(what string, err, want error) {
		refusals = append(refusals, struct {
			what string
			err  error
			want error
		}{what, err, want})
	}
	_, e := rma.FetchAndOp(ctx, alpha, int64(1), 4, op.Sum)
	refuse("FetchAndOp at 4", e, win.ErrAlignment)
	_, e = rma.CompareAndSwap(ctx, alpha, int64(0), int64(1), 12)
	refuse("CompareAndSwap at 12", e, win.ErrAlignment)
	_, e = rma.FetchAndOp(ctx, alpha, int64(1), svcAlpha, op.Sum)
	refuse("FetchAndOp at the end", e, win.ErrOutOfWindow)
	_, e = rma.FetchAndOp(ctx, alpha, int64(1), -8, op.Sum)
	refuse("FetchAndOp at -8", e, win.ErrOutOfWindow)
	refuse("Put across the end", alpha.Put(ctx, make([]byte, 16), svcAlpha-8), win.ErrOutOfWindow)
	refuse("Get at -1", alpha.Get(ctx, make([]byte, 1), -1), win.ErrOutOfWindow)
	_, e = cl.Open(ctx, "gamma")
	refuse("Open(gamma)", e, service.ErrUnknownWindow)
	_, e = cl.Open(ctx, "")
	refuse("Open(\"\")", e, win.ErrInvalid)
	_, e = rma.FetchAndOp(ctx, alpha, int64(1), 0, op.Maxloc)
	refuse("FetchAndOp(MAXLOC) on int64", e, op.ErrOpDatatype)
	for _, r := range refusals {
		if !errors.Is(r.err, r.want) {
			return fmt.Errorf("%s: %v, want %v", r.what, r.err, r.want)
		}
	}
	if i == 1 {
		for _, r := range refusals {
			fmt.Printf("refused: %s: %v\n", r.what, r.err)
		}
	}
	old, err = rma.FetchAndOp(ctx, alpha, int64(0), 0, op.NoOp)
	if err := svcExpect("NO_OP after the refusals", old, 42, err); err != nil {
		return err
	}
	if err := svcEngineCalls(ctx, cl, alpha, beta, i); err != nil {
		return err
	}
	if err := svcRequestCalls(ctx, alpha, beta, i); err != nil {
		return err
	}
	if err := alpha.Flush(ctx); err != nil {
		return err
	}
	if checkAllocs {
		bg := context.Background()
		small := make([]byte, 8)
		var ferr error
		f64 := make([]byte, 16)
		// Record every allocation, to say where the ones that happen come from.
		runtime.MemProfileRate = 1
		before := allocProfile()
		allocs := testing.AllocsPerRun(50, func() {
			_, e1 := rma.FetchAndOp(bg, alpha, int64(1), 8, op.Sum)
			_, e2 := rma.FetchAndOp(bg, alpha, int64(5), 8, op.Max)
			_, e3 := rma.CompareAndSwap(bg, alpha, int64(0), int64(0), 16)
			e4 := alpha.Put(bg, small, 24)
			e5 := alpha.Get(bg, small, 24)
			e6 := alpha.Lock(bg, win.LockExclusive)
			e7 := alpha.Accumulate(bg, f64[:8], datatype.Float64, 2048, op.Sum)
			e8 := alpha.GetAccumulate(bg, f64[:8], f64[8:], datatype.Float64, 2048, op.Max)
			e9 := alpha.Unlock(bg)
			if err := errors.Join(e1, e2, e3, e4, e5, e6, e7, e8, e9); err != nil {
				ferr = err
			}
		})
		fmt.Printf("allocs per FetchAndOp(SUM)+FetchAndOp(MAX)+CompareAndSwap+Put+Get+Lock+Accumulate+GetAccumulate+Unlock: %v\n", allocs)
		if ferr != nil || allocs != 0 {
			printSites("service_hot_path", before, allocProfile(), 51)
			return fmt.Errorf("hot path: %v allocations per run (%v), want 0", allocs, ferr)
		}
	}
	closed = true
	if err := cl.Close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	if err := cl.Close(); !errors.Is(err, service.ErrClosed) {
		return fmt.Errorf("second close: %v, want ErrClosed", err)
	}
	if _, err := rma.FetchAndOp(ctx, alpha, int64(1), 0, op.Sum); !errors.Is(err, service.ErrClosed) {
		return fmt.Errorf("FetchAndOp after close: %v, want ErrClosed", err)
	}
	return nil
}

// svcSeq: RMA_SVC_ITERS rounds, one client after the other, with the
// server sampled after the first and after the last.
func svcSeq(ctx context.Context, addr string) error {
	iters, _ := strconv.Atoi(os.Getenv("RMA_SVC_ITERS"))
	start := time.Now()
	for i := 1; i <= iters; i++ {
		t0 := time.Now()
		if err := svcRound(ctx, addr, i, i == 1); err != nil {
			return fmt.Errorf("round %d: %w", i, err)
		}
		if i == 1 {
			fmt.Printf("round 1 took %v\n", time.Since(t0))
			s, err := svcSample(ctx, 1, 0)
			if err != nil {
				return err
			}
			fmt.Printf("after_first=%s\n", s)
		}
	}
	fmt.Printf("rounds=%d in %v (%v each)\n", iters, time.Since(start), time.Since(start)/time.Duration(iters))
	s, err := svcSample(ctx, 2, 0)
	if err != nil {
		return err
	}
	fmt.Printf("after_last=%s\n", s)
	return nil
}

// svcDialMany dials n clients, at most 8 at a time.
func svcDialMany(ctx context.Context, addr string, n int) ([]*service.Client, error) {
	cls := make([]*service.Client, n)
	errs := make([]error, n)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range cls {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			cls[i], errs[i] = service.Dial(ctx, addr, svcConfig())
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, c := range cls {
			if c != nil {
				c.Close()
			}
		}
		return nil, err
	}
	return cls, nil
}

// svcMany: RMA_SVC_N clients at once, each adding 1 to the counter when
// the "go" file appears; prints the old values.
func svcMany(ctx context.Context, addr string) error {
	n, _ := strconv.Atoi(os.Getenv("RMA_SVC_N"))
	cls, err := svcDialMany(ctx, addr, n)
	if err != nil {
		return err
	}
	defer func() {
		for _, c := range cls {
			c.Close()
		}
	}()
	ws := make([]*service.Window, n)
	for i, c := range cls {
		if ws[i], err = c.Open(ctx, "counter"); err != nil {
			return err
		}
	}
	if err := svcWrite("connected."+os.Getenv("RMA_SVC_ID"), ""); err != nil {
		return err
	}
	if _, err := svcAwait(ctx, "go"); err != nil {
		return err
	}
	olds := make([]int64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			olds[i], errs[i] = rma.FetchAndOp(ctx, w, int64(1), 0, op.Sum)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	s := make([]string, n)
	for i, o := range olds {
		s[i] = strconv.FormatInt(o, 10)
	}
	fmt.Printf("olds=%s\n", strings.Join(s, ","))
	for i, c := range cls {
		if err := c.Close(); err != nil {
			return err
		}
		cls[i] = nil
	}
	cls = nil
	return nil
}

// svcRaw is a client of the wire protocol on raw verbs: it connects,
// sends the given messages and records every message it receives until
// the server disconnects.
func svcRaw(ctx context.Context, addr string, msgs [][]byte) (got [][]byte, disconnected time.Duration, err error) {
	var c cmCloser
	defer func() { c.close(&err) }()
	dst, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, 0, err
	}
	ch, err := verbs.NewEventChannel()
	if err != nil {
		return nil, 0, err
	}
	c.add(ch.Close)
	id, err := ch.CreateID()
	if err != nil {
		return nil, 0, err
	}
	c.add(id.Close)
	if err := id.ResolveAddr(ctx, netip.Addr{}, dst); err != nil {
		return nil, 0, err
	}
	if err := id.ResolveRoute(ctx); err != nil {
		return nil, 0, err
	}
	route, err := id.Route()
	if err != nil {
		return nil, 0, err
	}
	s, err := newCMSide(&c, route.Device, 0)
	if err != nil {
		return nil, 0, err
	}
	qp, err := id.CreateQP(s.pd, verbs.QPConfig{SendCQ: s.cq, RecvCQ: s.cq, MaxSendWR: 8, MaxRecvWR: 8})
	if err != nil {
		return nil, 0, err
	}
	c.add(qp.Close)
	for i := 0; i < 8; i++ {
		if err := qp.PostRecv(uint64(100+i), s.mr.Local(2048+i*256, 256)); err != nil {
			return nil, 0, err
		}
	}
	hello := append([]byte("RMAS\x05\x00\x00\x00"), make([]byte, 32)...)
	ev, err := id.Connect(ctx, verbs.ConnParam{PrivateData: hello})
	if err != nil {
		return nil, 0, err
	}
	if len(ev.PrivateData) < 40 || string(ev.PrivateData[:5]) != "RMAS\x05" {
		return nil, 0, fmt.Errorf("accept private data %q", ev.PrivateData)
	}
	start := time.Now()
	for i, m := range msgs {
		copy(s.mem[i*128:], m)
		if err := qp.PostSend(uint64(i), s.mr.Local(i*128, len(m)), 0); err != nil {
			return nil, 0, err
		}
	}
	// Collect receives until the server disconnects.
	evc := make(chan error, 1)
	go func() {
		ev, err := id.Event(ctx)
		if err == nil && ev.Type != verbs.CMDisconnected {
			err = fmt.Errorf("event %v, want DISCONNECTED", ev.Type)
		}
		evc <- err
	}()
	var wcs [8]verbs.WC
	for {
		n, err := s.cq.Poll(wcs[:])
		if err != nil {
			return nil, 0, err
		}
		for _, wc := range wcs[:n] {
			if wc.WRID >= 100 && wc.Err() == nil {
				off := 2048 + int(wc.WRID-100)*256
				got = append(got, bytes.Clone(s.mem[off:off+int(wc.ByteLen)]))
			}
		}
		select {
		case err := <-evc:
			disconnected = time.Since(start)
			// Whatever arrived before the disconnect.
			time.Sleep(50 * time.Millisecond)
			n, _ := s.cq.Poll(wcs[:])
			for _, wc := range wcs[:n] {
				if wc.WRID >= 100 && wc.Err() == nil {
					off := 2048 + int(wc.WRID-100)*256
					got = append(got, bytes.Clone(s.mem[off:off+int(wc.ByteLen)]))
				}
			}
			return got, disconnected, err
		case <-ctx.Done():
			return got, 0, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// svcAuth: a client with the wrong secret, raw clients that send a wrong
// proof (then an open), an open without a proof, and nothing at all; then
// the connection limit (the server takes 3).
func svcAuth(ctx context.Context, addr string) error {
	bad := service.ClientConfig{Secret: []byte("not the secret")}
	t0 := time.Now()
	cl, err := service.Dial(ctx, addr, bad)
	fmt.Printf("wrong secret: %v after %v\n", err, time.Since(t0))
	if !errors.Is(err, service.ErrAuth) || cl != nil {
		return fmt.Errorf("dial with the wrong secret: %v, want ErrAuth and no client", err)
	}
	open := append([]byte{2, 0, 0, 0, 2, 0, 0, 0, 5}, "alpha"...)
	wrong := append([]byte{1, 0, 0, 0, 1, 0, 0, 0}, bytes.Repeat([]byte{0xa5}, 32)...)
	for _, c := range []struct {
		name string
		msgs [][]byte
		want int // messages received: an AUTH_FAIL, or nothing
	}{{"wrong proof then open", [][]byte{wrong, open}, 1}, {"open first", [][]byte{open}, 1}, {"silent", nil, 0}} {
		got, took, err := svcRaw(ctx, addr, c.msgs)
		if err != nil {
			return fmt.Errorf("raw client %q: %w", c.name, err)
		}
		fmt.Printf("raw client %q: received %q, disconnected after %v\n", c.name, got, took)
		if len(got) != c.want {
			return fmt.Errorf("raw client %q received %d messages %q, want %d", c.name, len(got), got, c.want)
		}
		for _, m := range got {
			if len(m) != 8 || m[0] != 0x82 {
				return fmt.Errorf("raw client %q received % x, want only an 8-byte AUTH_FAIL", c.name, m)
			}
		}
		if c.want == 0 && (took < 1500*time.Millisecond || took > 5*time.Second) {
			return fmt.Errorf("silent client dropped after %v, want about the 2 s authentication deadline", took)
		}
	}
	// The pending limit (2): of three silent clients, the oldest is
	// dropped when the third comes, the others at their deadline.
	var wg sync.WaitGroup
	tooks := make([]time.Duration, 3)
	errs := make([]error, 3)
	for i := range tooks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var got [][]byte
			got, tooks[i], errs[i] = svcRaw(ctx, addr, nil)
			if errs[i] == nil && len(got) != 0 {
				errs[i] = fmt.Errorf("silent client %d received %q", i, got)
			}
		}()
		time.Sleep(300 * time.Millisecond)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Printf("three silent clients with 2 pending allowed: dropped after %v\n", tooks)
	if tooks[0] > 1500*time.Millisecond || tooks[1] < 1500*time.Millisecond || tooks[2] < 1500*time.Millisecond {
		return fmt.Errorf("silent clients dropped after %v: want the first (oldest) at once, the others after the 2 s deadline", tooks)
	}
	if _, err := svcSample(ctx, 1, 0); err != nil {
		return err
	}
	// The connection limit: 3 clients are taken, the fourth is refused.
	// They dial one after the other: three at once would be three pending
	// connections, one more than the server keeps.
	var cls []*service.Client
	for i := 0; i < 3; i++ {
		c, err := service.Dial(ctx, addr, svcConfig())
		if err != nil {
			for _, c := range cls {
				c.Close()
			}
			return fmt.Errorf("client %d of 3: %w", i+1, err)
		}
		cls = append(cls, c)
	}
	_, err = service.Dial(ctx, addr, svcConfig())
	fmt.Printf("fourth client: %v\n", err)
	if !errors.Is(err, service.ErrServerFull) {
		for _, c := range cls {
			c.Close()
		}
		return fmt.Errorf("dial beyond MaxConns: %v, want ErrServerFull", err)
	}
	for _, c := range cls[1:] {
		c.Close()
	}
	if err := cls[0].Close(); err != nil {
		return err
	}
	if _, err := svcSample(ctx, 2, 0); err != nil {
		return err
	}
	cl, err = service.Dial(ctx, addr, svcConfig())
	if err != nil {
		return fmt.Errorf("dial after the others left: %w", err)
	}
	return cl.Close()
}

// svcRestart: a client whose server is killed and restarted.
func svcRestart(ctx context.Context, addr string) error {
	cl, err := service.Dial(ctx, addr, svcConfig())
	if err != nil {
		return err
	}
	defer cl.Close()
	w, err := cl.Open(ctx, "counter")
	if err != nil {
		return err
	}
	if old, err := rma.FetchAndOp(ctx, w, int64(5), 0, op.Sum); err != nil || old != 0 {
		return fmt.Errorf("first FetchAndOp: %d, %v; want 0", old, err)
	}
	if err := svcWrite("ready", ""); err != nil {
		return err
	}
	if _, err := svcAwait(ctx, "killed"); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	t0 := time.Now()
	_, err = rma.FetchAndOp(cctx, w, int64(1), 0, op.Sum)
	fmt.Printf("call after the kill: %v after %v\n", err, time.Since(t0))
	fmt.Printf("lost_after_ms=%d\n", time.Since(t0).Milliseconds())
	if !errors.Is(err, verbs.ErrPeerLost) {
		return fmt.Errorf("call to a killed server: %v, want ErrPeerLost", err)
	}
	if _, err := rma.FetchAndOp(cctx, w, int64(1), 0, op.Sum); !errors.Is(err, verbs.ErrPeerLost) {
		return fmt.Errorf("second call to a killed server: %v, want ErrPeerLost", err)
	}
	if err := w.Put(cctx, make([]byte, 8), 0); !errors.Is(err, verbs.ErrPeerLost) {
		return fmt.Errorf("put to a killed server: %v, want ErrPeerLost", err)
	}
	if err := cl.Close(); err != nil {
		return err
	}
	if _, err := svcAwait(ctx, "restarted"); err != nil {
		return err
	}
	t0 = time.Now()
	cl2, err := service.Dial(ctx, addr, svcConfig())
	if err != nil {
		return fmt.Errorf("dial the restarted server: %w", err)
	}
	defer cl2.Close()
	fmt.Printf("dialed the restarted server in %v\n", time.Since(t0))
	w2, err := cl2.Open(ctx, "counter")
	if err != nil {
		return err
	}
	if old, err := rma.FetchAndOp(ctx, w2, int64(1), 0, op.Sum); err != nil || old != 0 {
		return fmt.Errorf("FetchAndOp on the restarted server: %d, %v; want 0 (fresh memory)", old, err)
	}
	// The server closes (Server.Close) while this client is connected.
	if err := svcWrite("ready2", ""); err != nil {
		return err
	}
	if _, err := svcAwait(ctx, "closed"); err != nil {
		return err
	}
	t0 = time.Now()
	_, err = rma.FetchAndOp(cctx, w2, int64(1), 0, op.Sum)
	fmt.Printf("call after Server.Close: %v after %v\n", err, time.Since(t0))
	if !errors.Is(err, verbs.ErrPeerLost) {
		return fmt.Errorf("call to a closed server: %v, want ErrPeerLost", err)
	}
	return cl2.Close()
}

// svcScale: N clients at once for N in 1, 16, 64, 128, with the server
// sampled while they are connected.
func svcScale(ctx context.Context, addr string) error {
	for k, n := range []int{1, 16, 64, 128} {
		t0 := time.Now()
		cls, err := svcDialMany(ctx, addr, n)
		if err != nil {
			return fmt.Errorf("%d clients: %w", n, err)
		}
		took := time.Since(t0)
		for _, c := range cls {
			w, err := c.Open(ctx, "counter")
			if err == nil {
				_, err = rma.FetchAndOp(ctx, w, int64(1), 0, op.Sum)
			}
			if err != nil {
				return err
			}
		}
		s, err := svcSample(ctx, k+1, n)
		if err != nil {
			return err
		}
		fmt.Printf("scale n=%d connect=%v per_conn=%v server: %s\n", n, took.Round(time.Millisecond), (took / time.Duration(n)).Round(time.Microsecond), s)
		for _, c := range cls {
			if err := c.Close(); err != nil {
				return err
			}
		}
	}
	return nil
}

// svcTest starts a server and returns it with its address.
type svcTest struct {
	t      *testing.T
	ctx    context.Context
	dir    string
	ip     netip.Addr
	secret string
}

func newSvcTest(t *testing.T, ctx context.Context) *svcTest {
	requireDevice(t)
	return &svcTest{t: t, ctx: ctx, dir: t.TempDir(), ip: cmIPv4(t), secret: secret()}
}

func (s *svcTest) start(name, role string, env ...string) *cmProc {
	s.t.Helper()
	p := &cmProc{name: name, done: make(chan error, 1)}
	p.cmd = exec.CommandContext(s.ctx, os.Args[0], "-test.run=^$")
	p.cmd.Cancel = quitProcess(p.cmd)
	p.cmd.Env = append(os.Environ(), "RMA_SVC_ROLE="+role, "RMA_TEST_DIR="+s.dir, "RMA_SVC_SECRET="+s.secret)
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stdout = &p.out
	p.cmd.Stderr = &p.out
	p.cmd.WaitDelay = time.Second
	if err := p.cmd.Start(); err != nil {
		s.t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	return p
}

// server starts a server on port (0: any) and returns it and its address.
func (s *svcTest) server(name string, port int, env ...string) (*cmProc, string) {
	s.t.Helper()
	pf := "port." + name
	env = append(env, "RMA_SVC_LISTEN="+netip.AddrPortFrom(s.ip, uint16(port)).String(), "RMA_SVC_PORTFILE="+pf)
	p := s.start(name, "server", env...)
	s.t.Cleanup(func() {
		// A test that failed before it stopped its server shows what the
		// server saw.
		if !s.t.Failed() || p.waited.Load() {
			return
		}
		os.WriteFile(filepath.Join(s.dir, "stop"), nil, 0o644)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
		s.t.Logf("%s output, after the failure:\n%s", name, p.out.String())
	})
	got := string(waitCMFile(s.ctx, s.t, filepath.Join(s.dir, pf), p))
	return p, s.ip.String() + ":" + got
}

func (s *svcTest) client(name, addr, mode string, env ...string) *cmProc {
	return s.start(name, "client", append(env, "RMA_SVC_ADDR="+addr, "RMA_SVC_MODE="+mode)...)
}

func (s *svcTest) stop(srv *cmProc) string {
	s.t.Helper()
	if err := os.WriteFile(filepath.Join(s.dir, "stop"), nil, 0o644); err != nil {
		s.t.Fatal(err)
	}
	return srv.wait(s.t, false)
}

// svcStats parses "k=v ..." stats.
func svcStats(t *testing.T, s string) map[string]int {
	t.Helper()
	m := map[string]int{}
	for _, f := range strings.Fields(s) {
		k, v, _ := strings.Cut(f, "=")
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("stats %q: %v", s, err)
		}
		m[k] = n
	}
	return m
}

// TestServiceSequential (a): 200 clients one after the other, each dialing,
// opening two windows, doing exact Put/Get and atomics and refused calls,
// and closing; the server's pinned memory and goroutines after the last
// equal those after the first.
func TestServiceSequential(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	s := newSvcTest(t, ctx)
	srv, addr := s.server("server", 0)
	start := time.Now()
	cl := s.client("client", addr, "seq", "RMA_SVC_ITERS=200")
	out := cl.wait(t, false)
	t.Logf("200 rounds in %v", time.Since(start))
	s.stop(srv)
	first, last := svcStats(t, value(t, out, "after_first")), svcStats(t, value(t, out, "after_last"))
	t.Logf("server after the first client: %v; after the last: %v", first, last)
	if first["vmpin"] != last["vmpin"] || first["goroutines"] != last["goroutines"] || last["conns"] != 0 {
		t.Errorf("server grew: after the first client %v, after the 200th %v", first, last)
	}
}

// TestServiceConcurrent (b): 4 processes of 32 clients, all connected at
// once, each adding 1 to one counter word: the old values are 0..127, each
// once, and the counter ends at 128.
func TestServiceConcurrent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := newSvcTest(t, ctx)
	srv, addr := s.server("server", 0)
	const procs, per = 4, 32
	var cls []*cmProc
	for i := 0; i < procs; i++ {
		cls = append(cls, s.client(fmt.Sprintf("client %d", i), addr, "many", "RMA_SVC_N="+strconv.Itoa(per), "RMA_SVC_ID="+strconv.Itoa(i)))
	}
	for i := 0; i < procs; i++ {
		waitCMFile(ctx, t, filepath.Join(s.dir, "connected."+strconv.Itoa(i)), cls[i])
	}
	// Written whole, then renamed: the server reads the file as soon as it
	// exists, and an empty one would ask for 0 connections.
	if err := os.WriteFile(filepath.Join(s.dir, "sample.1.tmp"), []byte(strconv.Itoa(procs*per)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(s.dir, "sample.1.tmp"), filepath.Join(s.dir, "sample.1")); err != nil {
		t.Fatal(err)
	}
	stats := string(waitCMFile(ctx, t, filepath.Join(s.dir, "stats.1"), srv))
	t.Logf("server with %d clients connected: %s", procs*per, stats)
	if err := os.WriteFile(filepath.Join(s.dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var olds []int
	for _, c := range cls {
		for _, f := range strings.Split(value(t, c.wait(t, false), "olds"), ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatal(err)
			}
			olds = append(olds, n)
		}
	}
	slices.Sort(olds)
	for i, o := range olds {
		if o != i {
			t.Fatalf("old values of the %d fetch-and-adds, sorted: %v; want 0..%d once each", len(olds), olds, procs*per-1)
		}
	}
	if len(olds) != procs*per {
		t.Fatalf("%d old values, want %d", len(olds), procs*per)
	}
	if got := value(t, s.stop(srv), "counter"); got != strconv.Itoa(procs*per) {
		t.Errorf("counter=%s, want %d", got, procs*per)
	}
}

// TestServiceAuth (c): the wrong secret is refused with ErrAuth; raw
// clients that send a wrong proof, an open without a proof, or nothing,
// receive at most an AUTH_FAIL (never a window) and are disconnected;
// beyond MaxPending the oldest unauthenticated connection is dropped; a
// client beyond MaxConns gets ErrServerFull.
func TestServiceAuth(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := newSvcTest(t, ctx)
	srv, addr := s.server("server", 0, "RMA_SVC_MAXCONNS=3", "RMA_SVC_MAXPENDING=2")
	s.client("client", addr, "auth").wait(t, false)
	s.stop(srv)
}

// TestServiceRestart (d): a server killed with SIGKILL: the client's next
// call fails with ErrPeerLost within 15 s; the server restarted on the
// same port takes a new Dial; when that server closes (Server.Close), the
// client's next call fails with ErrPeerLost too.
func TestServiceRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := newSvcTest(t, ctx)
	srv, addr := s.server("server", 0)
	cl := s.client("client", addr, "restart")
	waitCMFile(ctx, t, filepath.Join(s.dir, "ready"), cl)
	if err := srv.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	srv.wait(t, true)
	if err := os.WriteFile(filepath.Join(s.dir, "killed"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, port, _ := strings.Cut(addr, ":")
	p, _ := strconv.Atoi(port)
	srv2, addr2 := s.server("server2", p)
	if addr2 != addr {
		t.Fatalf("restarted server at %s, want %s", addr2, addr)
	}
	if err := os.WriteFile(filepath.Join(s.dir, "restarted"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitCMFile(ctx, t, filepath.Join(s.dir, "ready2"), cl)
	if got := value(t, s.stop(srv2), "counter"); got != "1" {
		t.Errorf("restarted server's counter=%s, want 1", got)
	}
	if err := os.WriteFile(filepath.Join(s.dir, "closed"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out := cl.wait(t, false)
	ms, _ := strconv.Atoi(value(t, out, "lost_after_ms"))
	t.Logf("the call after the kill failed after %d ms", ms)
	if ms > 15000 {
		t.Errorf("the call after the kill took %d ms to fail, want at most 15 s", ms)
	}
}

// TestServiceScale (e): the server's pinned memory, threads and the
// connect time at 1, 16, 64 and 128 connections.
func TestServiceScale(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := newSvcTest(t, ctx)
	srv, addr := s.server("server", 0)
	out := s.client("client", addr, "scale").wait(t, false)
	s.stop(srv)
	t.Logf("%-6s %-10s %-10s %-12s %-8s %-10s", "conns", "connect", "per conn", "VmPin (kB)", "threads", "goroutines")
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "scale ") {
			continue
		}
		f := map[string]string{}
		for _, kv := range strings.Fields(line)[1:] {
			k, v, _ := strings.Cut(kv, "=")
			f[k] = v
		}
		t.Logf("%-6s %-10s %-10s %-12s %-8s %-10s", f["n"], f["connect"], f["per_conn"], f["vmpin"], f["threads"], f["goroutines"])
	}
}

// svcFrozen is a server of the wire protocol on raw verbs that, once its
// client has opened its window, stops answering without disconnecting (its
// QP goes to the error state, as when its host dies): only the client's
// transport timeout can tell.
func svcFrozen(ctx context.Context) (err error) {
	var c cmCloser
	defer func() { c.close(&err) }()
	ap, err := netip.ParseAddrPort(os.Getenv("RMA_SVC_LISTEN"))
	if err != nil {
		return err
	}
	ch, err := verbs.NewEventChannel()
	if err != nil {
		return err
	}
	c.add(ch.Close)
	lid, err := ch.CreateID()
	if err != nil {
		return err
	}
	c.add(lid.Close)
	if err := lid.Listen(ap, 4); err != nil {
		return err
	}
	route, err := lid.Route()
	if err != nil {
		return err
	}
	s, err := newCMSide(&c, route.Device, verbs.AccessRemoteRead|verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic)
	if err != nil {
		return err
	}
	if err := svcWrite(os.Getenv("RMA_SVC_PORTFILE"), strconv.Itoa(int(lid.LocalAddr().Port()))); err != nil {
		return err
	}
	ev, err := lid.Event(ctx)
	if err != nil {
		return err
	}
	if ev.Type != verbs.CMConnectRequest || len(ev.PrivateData) < 40 || string(ev.PrivateData[:5]) != "RMAS\x05" {
		return fmt.Errorf("event %v with private data %q, want a connection request of the protocol", ev.Type, ev.PrivateData)
	}
	id := ev.ID
	c.add(id.Close)
	cNonce := bytes.Clone(ev.PrivateData[8:40])
	sNonce := bytes.Repeat([]byte{7}, 32)
	qp, err := id.CreateQP(s.pd, verbs.QPConfig{SendCQ: s.cq, RecvCQ: s.cq, MaxSendWR: 8, MaxRecvWR: 8})
	if err != nil {
		return err
	}
	c.add(qp.Close)
	for i := 0; i < 8; i++ {
		if err := qp.PostRecv(uint64(100+i), s.mr.Local(2048+i*256, 256)); err != nil {
			return err
		}
	}
	if _, err := id.Accept(ctx, verbs.ConnParam{PrivateData: append([]byte("RMAS\x05\x00\x00\x00"), sNonce...)}); err != nil {
		return err
	}
	recv := func() ([]byte, error) {
		for {
			wc, err := s.poll(ctx)
			if err == nil {
				err = wc.Err()
			}
			if err != nil {
				return nil, err
			}
			if wc.Opcode == verbs.WCRecv {
				off := 2048 + int(wc.WRID-100)*256
				return bytes.Clone(s.mem[off : off+int(wc.ByteLen)]), nil
			}
		}
	}
	send := func(b []byte) error {
		copy(s.mem[1024:], b)
		return qp.PostSend(1, s.mr.Local(1024, len(b)), verbs.SendSignaled)
	}
	m, err := recv()
	if err != nil {
		return err
	}
	if len(m) != 72 || m[0] != 1 || !hmac.Equal(m[40:], wireMAC(os.Getenv("RMA_SVC_SECRET"), "rma-service-client", sNonce, cNonce, m[8:40])) {
		return fmt.Errorf("proof % x is not the client's", m)
	}
	// Its byte-order word: at 512, after the window.
	binary.NativeEndian.PutUint64(s.mem[512:], atomics.ProbeValue)
	ok := []byte{0x81, 0, 0, 0, m[4], m[5], m[6], m[7]}
	ok = binary.LittleEndian.AppendUint64(ok, s.mr.Addr()+512)
	ok = binary.LittleEndian.AppendUint32(ok, s.mr.RKey())
	ok = binary.LittleEndian.AppendUint32(ok, 0)
	ok = append(ok, "a session, 16 B."...)
	if err := send(append(ok, wireMAC(os.Getenv("RMA_SVC_SECRET"), "rma-service-server", cNonce, sNonce, ok[8:40])...)); err != nil {
		return err
	}
	if m, err = recv(); err != nil {
		return err
	}
	if len(m) != 10 || m[0] != 2 || string(m[9:]) != "w" {
		return fmt.Errorf("open request % x, want one for \"w\"", m)
	}
	reply := []byte{0x83, 0, 0, 0, m[4], m[5], m[6], m[7]}
	reply = binary.LittleEndian.AppendUint64(reply, s.mr.Addr())
	reply = binary.LittleEndian.AppendUint32(reply, s.mr.RKey())
	reply = binary.LittleEndian.AppendUint32(reply, 0)   // window id
	reply = binary.LittleEndian.AppendUint64(reply, 512) // size
	reply = binary.LittleEndian.AppendUint64(reply, 15)  // flags: atomics, and read, write and atomic access
	if err := send(reply); err != nil {
		return err
	}
	if _, err := svcAwait(ctx, "opened"); err != nil {
		return err
	}
	if err := qp.SetError(); err != nil {
		return err
	}
	fmt.Println("frozen server: QP in the error state, no disconnect")
	if err := svcWrite("frozen", ""); err != nil {
		return err
	}
	_, err = svcAwait(ctx, "done")
	return err
}

// svcFrozenClient: a client of svcFrozen.
func svcFrozenClient(ctx context.Context, addr string) error {
	cl, err := service.Dial(ctx, addr, svcConfig())
	if err != nil {
		return err
	}
	defer cl.Close()
	w, err := cl.Open(ctx, "w")
	if err != nil {
		return err
	}
	if old, err := rma.FetchAndOp(ctx, w, int64(3), 0, op.Sum); err != nil || old != 0 {
		return fmt.Errorf("FetchAndOp before the freeze: %d, %v; want 0", old, err)
	}
	if err := svcWrite("opened", ""); err != nil {
		return err
	}
	if _, err := svcAwait(ctx, "frozen"); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	t0 := time.Now()
	_, err = rma.FetchAndOp(cctx, w, int64(1), 0, op.Sum)
	fmt.Printf("call to the frozen server: %v after %v\n", err, time.Since(t0))
	fmt.Printf("lost_after_ms=%d\n", time.Since(t0).Milliseconds())
	if !errors.Is(err, verbs.ErrPeerLost) {
		return fmt.Errorf("call to a frozen server: %v, want ErrPeerLost", err)
	}
	if err := cl.Close(); err != nil {
		return err
	}
	return svcWrite("done", "")
}

// TestServiceDeadPeer (d, without a disconnect): a server that stops
// answering without disconnecting (a raw-verbs server of the protocol
// whose QP goes to the error state, as when its host dies): the client's
// next call fails with ErrPeerLost once its transport retries (ACK
// timeout 67 ms, 6 retries) run out, within 15 s.
func TestServiceDeadPeer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := newSvcTest(t, ctx)
	pf := "port.frozen"
	srv := s.start("frozen server", "frozen", "RMA_SVC_LISTEN="+netip.AddrPortFrom(s.ip, 0).String(), "RMA_SVC_PORTFILE="+pf)
	port := string(waitCMFile(ctx, t, filepath.Join(s.dir, pf), srv))
	out := s.client("client", s.ip.String()+":"+port, "frozen").wait(t, false)
	srv.wait(t, false)
	ms, _ := strconv.Atoi(value(t, out, "lost_after_ms"))
	t.Logf("the call to the frozen server failed after %d ms", ms)
	if ms > 15000 {
		t.Errorf("the call to the frozen server took %d ms to fail, want at most 15 s", ms)
	}
}
