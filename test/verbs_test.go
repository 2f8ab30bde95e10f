//go:build integration

package test

import (
	"context"
	"errors"
	"testing"
	"time"
	"unsafe"

	"github.com/onesided/rma/verbs"
)

// loopback is a device with a pair of RC QPs connected to each other.
type loopback struct {
	dev    *verbs.Context
	pd     *verbs.PD
	ch     *verbs.CompChannel // l.cq's channel (no event unless it is armed)
	cq     *verbs.CQ
	a, b   *verbs.QP
	mem    []byte
	mr     *verbs.MR
	closed []func() error
}

func newLoopback(t *testing.T, access verbs.Access) *loopback {
	t.Helper()
	requireDevice(t)
	l := &loopback{}
	t.Cleanup(func() {
		for i := len(l.closed) - 1; i >= 0; i-- {
			if err := l.closed[i](); err != nil {
				t.Errorf("close: %v", err)
			}
		}
	})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var err error
	l.dev, err = verbs.Open("")
	must(err)
	l.closed = append(l.closed, l.dev.Close)
	pa, err := l.dev.QueryPort(1)
	must(err)
	table, err := l.dev.GIDTable(1)
	must(err)
	gidIndex, err := verbs.DefaultGIDIndex(table)
	must(err)
	gid, err := l.dev.QueryGID(1, gidIndex)
	must(err)
	l.pd, err = l.dev.AllocPD()
	must(err)
	l.closed = append(l.closed, l.pd.Close)
	l.ch, err = l.dev.CreateCompChannel()
	must(err)
	l.closed = append(l.closed, l.ch.Close)
	l.cq, err = l.dev.CreateCQ(64, l.ch)
	must(err)
	l.closed = append(l.closed, l.cq.Close)
	l.mem, err = verbs.Alloc(4096)
	must(err)
	l.closed = append(l.closed, func() error { return verbs.Free(l.mem) })
	l.mr, err = l.pd.RegisterMR(l.mem, access|verbs.AccessLocalWrite)
	must(err)
	l.closed = append(l.closed, l.mr.Close)
	cfg := verbs.QPConfig{SendCQ: l.cq, RecvCQ: l.cq, MaxSendWR: 16, MaxRecvWR: 16}
	l.a, err = l.pd.CreateQP(cfg)
	must(err)
	l.closed = append(l.closed, l.a.Close)
	l.b, err = l.pd.CreateQP(cfg)
	must(err)
	l.closed = append(l.closed, l.b.Close)
	path := verbs.Path{Port: 1, LinkLayer: pa.LinkLayer, GIDIndex: gidIndex, MTU: pa.ActiveMTU,
		MaxRdAtomic: 1, Timeout: 14, RetryCount: 7, RNRRetry: 7, MinRNRTimer: 12, Access: access}
	ea := verbs.Endpoint{QPN: l.a.Num(), PSN: 1, LID: pa.LID, GID: gid.GID}
	eb := verbs.Endpoint{QPN: l.b.Num(), PSN: 2, LID: pa.LID, GID: gid.GID}
	must(l.a.Connect(&path, ea, eb))
	must(l.b.Connect(&path, eb, ea))
	return l
}

// one waits for one completion.
func (l *loopback) one(t *testing.T) verbs.WC {
	t.Helper()
	var wcs [4]verbs.WC
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		n, err := l.cq.Poll(wcs[:])
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			return wcs[0]
		}
		if n > 1 {
			t.Fatalf("%d completions, want 1", n)
		}
		time.Sleep(10 * time.Microsecond)
	}
	t.Fatal("no completion in 30 s")
	return verbs.WC{}
}

func TestVerbsDevice(t *testing.T) {
	requireDevice(t)
	devs, _ := verbs.Devices()
	dev, err := verbs.Open(devs[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	da, err := dev.QueryDevice()
	if err != nil {
		t.Fatal(err)
	}
	pa, err := dev.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	table, err := dev.GIDTable(1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("device %s on %v: atomic_cap %v, max_qp_wr %d, max_qp_rd_atom %d, port %v, link layer %v, active MTU %v",
		dev.Name(), devs[0].Netdevs, da.AtomicCap, da.MaxQPWR, da.MaxQPRdAtom, pa.State, pa.LinkLayer, pa.ActiveMTU)
	for _, e := range table {
		t.Logf("GID %d: %v %v %s", e.Index, e.GID, e.Type, e.Netdev)
	}
	if pa.State != verbs.PortActive {
		t.Errorf("port 1 is %v", pa.State)
	}
	if da.MaxQPWR < 1 || da.PhysPortCount < 1 {
		t.Errorf("implausible attributes %+v", da)
	}
	if _, err := verbs.Open("no-such-device"); !errors.Is(err, verbs.ErrNoDevice) {
		t.Errorf("Open of a missing device: %v", err)
	}
}

func TestVerbsAtomics(t *testing.T) {
	l := newLoopback(t, verbs.AccessRemoteAtomic|verbs.AccessRemoteRead|verbs.AccessRemoteWrite)
	word := (*uint64)(unsafe.Pointer(&l.mem[64]))
	*word = 40
	if err := l.a.PostFetchAdd(7, l.mr.Local(0, 8), l.mr.Addr()+64, l.mr.RKey(), 2, verbs.SendSignaled); err != nil {
		t.Fatal(err)
	}
	wc := l.one(t)
	if err := wc.Err(); err != nil || wc.WRID != 7 || wc.Opcode != verbs.WCFetchAdd {
		t.Fatalf("fetch-add completion %+v: %v", wc, err)
	}
	if old := *(*uint64)(unsafe.Pointer(&l.mem[0])); old != 40 || *word != 42 {
		t.Fatalf("fetch-add: old %d, now %d; want 40, 42", old, *word)
	}
	if err := l.a.PostCompareSwap(8, l.mr.Local(8, 8), l.mr.Addr()+64, l.mr.RKey(), 42, 5, verbs.SendSignaled); err != nil {
		t.Fatal(err)
	}
	if wc := l.one(t); wc.Err() != nil || *word != 5 {
		t.Fatalf("compare-swap: %v, word %d", wc.Err(), *word)
	}
	// A misaligned atomic is refused (at post time on some providers, with
	// an error completion on others) and leaves memory alone.
	err := l.a.PostFetchAdd(9, l.mr.Local(0, 8), l.mr.Addr()+68, l.mr.RKey(), 1, verbs.SendSignaled)
	if err == nil {
		wc = l.one(t)
		err = wc.Err()
		var ce *verbs.CompletionError
		if !errors.As(err, &ce) {
			t.Fatalf("misaligned fetch-add completed with %v", err)
		}
	}
	t.Logf("misaligned fetch-add: %v", err)
	if *word != 5 || *(*uint64)(unsafe.Pointer(&l.mem[72])) != 0 {
		t.Fatalf("misaligned fetch-add changed memory")
	}
}

func TestVerbsBadRKey(t *testing.T) {
	l := newLoopback(t, verbs.AccessRemoteRead|verbs.AccessRemoteWrite)
	if err := l.a.PostRead(1, l.mr.Local(0, 8), l.mr.Addr()+64, l.mr.RKey()^0x5a5a, verbs.SendSignaled); err != nil {
		t.Fatal(err)
	}
	wc := l.one(t)
	if err := wc.Err(); !errors.Is(err, verbs.ErrRemoteAccess) {
		t.Fatalf("read with a bad rkey: %v, want ErrRemoteAccess", err)
	}
}

func TestVerbsNoAtomicRight(t *testing.T) {
	l := newLoopback(t, verbs.AccessRemoteRead|verbs.AccessRemoteWrite)
	if err := l.a.PostFetchAdd(1, l.mr.Local(0, 8), l.mr.Addr()+64, l.mr.RKey(), 1, verbs.SendSignaled); err != nil {
		t.Fatal(err)
	}
	wc := l.one(t)
	if err := wc.Err(); err == nil {
		t.Fatal("fetch-add on a region without remote-atomic access succeeded")
	} else {
		t.Logf("fetch-add without the right: %v", err)
	}
}

// TestVerbsDeadPeer: a WRITE to a QP that no longer exists completes only
// when the transport's retries run out (never, with a retry count of 7 on
// Soft-RoCE, which treats 7 as "retry forever"); moving the QP to the error
// state, as the fabric does when a peer's process is found gone, completes
// it with ErrFlushed at once.
func TestVerbsDeadPeer(t *testing.T) {
	l := newLoopback(t, verbs.AccessRemoteRead|verbs.AccessRemoteWrite)
	l.b.Close()
	l.closed = l.closed[:len(l.closed)-1]
	if err := l.a.PostWrite(1, l.mr.Local(0, 8), l.mr.Addr()+64, l.mr.RKey(), verbs.SendSignaled); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if err := l.a.SetError(); err != nil {
		t.Fatal(err)
	}
	if st, err := l.a.State(); err != nil || st != verbs.QPErr {
		t.Fatalf("QP state %v, %v; want ERR", st, err)
	}
	wc := l.one(t)
	if err := wc.Err(); !errors.Is(err, verbs.ErrFlushed) && !errors.Is(err, verbs.ErrPeerLost) {
		t.Fatalf("write to a destroyed QP after SetError: %v, want ErrFlushed", err)
	}
	t.Logf("write to a destroyed QP after SetError: %v", wc.Err())
}

// TestVerbsWaitEndedContext: a Wait whose context ends as its event comes
// returns nil or the context's error and leaves nothing behind: the event
// it did not take is there for the next Wait, and a Wait with no event and
// a context of 1 ms ends by its context, not at once by a deadline the
// earlier Wait's context left on the descriptor (which made every later
// call of a service client fail with ErrPeerLost).
func TestVerbsWaitEndedContext(t *testing.T) {
	l := newLoopback(t, verbs.AccessRemoteRead|verbs.AccessRemoteWrite)
	ch, cq, qp := l.ch, l.cq, l.a
	var err error
	var wcs [4]verbs.WC
	const rounds = 400
	for i := 0; i < rounds; i++ {
		// The completion, and so the event, comes while Wait waits and
		// its context ends: both after delays of 0 to 60 us.
		if err := cq.ReqNotify(); err != nil {
			t.Fatal(err)
		}
		posted := make(chan error, 1)
		go func() {
			time.Sleep(time.Duration(i%7) * 10 * time.Microsecond)
			posted <- qp.PostWrite(uint64(i), l.mr.Local(0, 8), l.mr.Addr()+64, l.mr.RKey(), verbs.SendSignaled)
		}()
		racing, cancel := context.WithTimeout(context.Background(), time.Duration(i%5)*15*time.Microsecond)
		werr := ch.Wait(racing)
		cancel()
		if werr != nil && !errors.Is(werr, context.DeadlineExceeded) {
			t.Fatalf("round %d: Wait as its context ends: %v, want nil or %v", i, werr, context.DeadlineExceeded)
		}
		if err := <-posted; err != nil {
			t.Fatal(err)
		}
		for n := 0; n == 0; {
			if n, err = cq.Poll(wcs[:]); err != nil {
				t.Fatal(err)
			}
		}
		if err := wcs[0].Err(); err != nil {
			t.Fatalf("round %d: write: %v", i, err)
		}
		if werr != nil {
			// The event is still to be taken.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := ch.Wait(ctx)
			cancel()
			if err != nil {
				t.Fatalf("round %d: Wait for the event left by the cut Wait: %v, want nil", i, err)
			}
		}
		short, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		err := ch.Wait(short)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("round %d: the next Wait (1 ms, no event): %v, want %v", i, err, context.DeadlineExceeded)
		}
	}
	// Wake still works after all that.
	ch.Wake()
	if err := ch.Wait(context.Background()); err != nil {
		t.Fatalf("Wait after Wake: %v", err)
	}
}
