package fabric

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/onesided/rma/verbs"
)

// sent takes a credit for rank (Acquire) and records it sent on cn, as
// Send does before it posts; it returns the credit.
func sent(t *testing.T, f *Fabric, rank int, cn *conn) int {
	t.Helper()
	c, _, err := f.Acquire(context.Background(), rank)
	if err != nil {
		t.Fatal(err)
	}
	cr := &f.m.peers[rank].credits[c]
	cr.conn, cr.n = cn, 1
	cr.seq = cr.seq%seqMask + 1
	cr.state.Store(slotBusy)
	f.exit() // Acquire's, as Send's return
	return c
}

// replies records what the handlers are told.
type replies struct {
	mu     sync.Mutex
	got    map[int]string // credit -> reply
	failed map[int]error
}

func (r *replies) handlers() Handlers {
	r.got, r.failed = map[int]string{}, map[int]error{}
	return Handlers{
		Reply: func(rank, credit int, reply []byte) {
			r.mu.Lock()
			r.got[credit] = string(reply)
			r.mu.Unlock()
		},
		Fail: func(rank, credit int, err error) {
			r.mu.Lock()
			r.failed[credit] = err
			r.mu.Unlock()
		},
	}
}

// TestOnReply: a reply is handed over, and its credit (with its request
// buffer) freed, only for a credit awaiting its reply on the connection
// the reply came in on: a reply for a credit out of range, not in flight,
// sent on another connection, or a duplicate, is dropped.
func TestOnReply(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 2, credits: 4})
	var r replies
	f.m.h = r.handlers()
	cn := connectPeer(f, 1)
	other := &conn{rank: 1, gen: 2}
	c := sent(t, f, 1, cn)
	reserved, _, _ := f.Acquire(context.Background(), 1) // acquired, not sent
	mp := &f.m.peers[1]
	freeCredits, freeBufs := len(mp.free), len(f.m.reqFree)

	f.m.recvMu.Lock()
	f.onReply(1, cn, 4, []byte("out of range"))
	f.onReply(1, cn, reserved, []byte("not sent"))
	f.onReply(1, other, c, []byte("other connection"))
	f.m.recvMu.Unlock()
	if len(r.got) != 0 || mp.credits[c].state.Load() != slotBusy || len(mp.free) != freeCredits {
		t.Fatalf("stray replies were taken: %v, credit state %d", r.got, mp.credits[c].state.Load())
	}
	if !f.Pending(1) {
		t.Error("Pending false with a request awaiting its reply")
	}

	f.m.recvMu.Lock()
	f.onReply(1, cn, c, []byte("the reply"))
	f.onReply(1, cn, c, []byte("duplicate"))
	f.m.recvMu.Unlock()
	if len(r.got) != 1 || r.got[c] != "the reply" {
		t.Errorf("replies handed over: %q, want credit %d's once", r.got, c)
	}
	cr := &mp.credits[c]
	if cr.state.Load() != slotFree || cr.conn != nil || cr.buf != -1 {
		t.Errorf("answered credit: state %d conn %v buf %d", cr.state.Load(), cr.conn, cr.buf)
	}
	if len(mp.free) != freeCredits+1 || len(f.m.reqFree) != freeBufs+1 {
		t.Errorf("the reply freed %d credits and %d request buffers, want 1 and 1",
			len(mp.free)-freeCredits, len(f.m.reqFree)-freeBufs)
	}
	if len(mp.wake) != 1 {
		t.Error("a credit came back without a wake-up for its waiters")
	}
	f.Release(1, reserved)
	if f.Pending(1) {
		t.Error("Pending true with every credit back")
	}
}

// TestFailCredits: the requests awaiting replies, sent or to be sent
// again, are failed (Handlers.Fail) and their credits freed; a credit
// acquired and not sent stays with its holder.
func TestFailCredits(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 2, credits: 4})
	var r replies
	f.m.h = r.handlers()
	cn := connectPeer(f, 1)
	busy := sent(t, f, 1, cn)
	resend := sent(t, f, 1, cn)
	mp := &f.m.peers[1]
	mp.credits[resend].state.Store(creditResend)
	mp.credits[resend].conn = nil
	reserved, _, _ := f.Acquire(context.Background(), 1)
	gone := errors.New("gone")
	if n := f.failCredits(1, gone); n != 2 {
		t.Errorf("failCredits failed %d, want 2", n)
	}
	if len(r.failed) != 2 || r.failed[busy] != gone || r.failed[resend] != gone {
		t.Errorf("failed: %v, want credits %d and %d with %v", r.failed, busy, resend, gone)
	}
	if mp.credits[reserved].state.Load() != slotReserved || len(mp.free) != 3 || len(f.m.reqFree) != cap(f.m.reqFree)-1 {
		t.Errorf("after failCredits: reserved credit state %d, %d credits and %d request buffers free",
			mp.credits[reserved].state.Load(), len(mp.free), len(f.m.reqFree))
	}
	if n := f.failCredits(1, gone); n != 0 {
		t.Errorf("failCredits again failed %d, want 0", n)
	}
	f.Release(1, reserved)
}

// TestAcquire: a credit comes with its own request buffer of MsgSize bytes
// in the registered memory; with every credit to a rank in use, or every
// request buffer, Acquire waits for one to come back (or its context to
// end, holding nothing); Release gives both back. A lost rank, or a closed
// fabric, gets no credit.
func TestAcquire(t *testing.T) {
	// Three ranks, two credits each: four request buffers, shared.
	f := newTestFabric(t, fabOpts{size: 3, credits: 2, msgSize: 32})
	if f.MsgSize() != 32 || f.Credits() != 2 {
		t.Errorf("MsgSize %d, Credits %d; want 32, 2", f.MsgSize(), f.Credits())
	}
	type held struct{ rank, c int }
	var all []held
	bufs := map[uintptr]bool{}
	base := uintptr(unsafe.Pointer(&f.m.mem[f.m.reqOff]))
	for _, rank := range []int{1, 1, 2, 2} {
		c, buf, err := f.Acquire(context.Background(), rank)
		if err != nil {
			t.Fatal(err)
		}
		a := uintptr(unsafe.Pointer(&buf[:1][0]))
		if len(buf) != 32 || cap(buf) != 32 || a < base || a >= base+uintptr(f.m.repOff-f.m.reqOff) || (a-base)%32 != 0 || bufs[a] {
			t.Errorf("rank %d credit %d: buffer of %d (cap %d) at request offset %d (taken: %v)", rank, c, len(buf), cap(buf), a-base, bufs[a])
		}
		bufs[a] = true
		if st := f.m.peers[rank].credits[c].state.Load(); st != slotReserved {
			t.Errorf("acquired credit state %d, want reserved", st)
		}
		all = append(all, held{rank, c})
	}
	// Rank 1's credits are all taken: wait.
	if _, _, err := f.Acquire(short(t, time.Millisecond), 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire with no credit free: %v, want the deadline", err)
	}
	// Rank 0 has credits, but every request buffer is taken: wait, and
	// keep no credit.
	if _, _, err := f.Acquire(short(t, time.Millisecond), 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire with no request buffer free: %v, want the deadline", err)
	}
	if n := len(f.m.peers[0].free); n != 2 {
		t.Errorf("rank 0 has %d credits free after the failed Acquire, want 2", n)
	}
	// A release lets a waiting Acquire through.
	got := make(chan error)
	go func() {
		c, _, err := f.Acquire(context.Background(), 0)
		if err == nil {
			f.Release(0, c)
		}
		got <- err
	}()
	time.Sleep(time.Millisecond)
	f.Release(all[0].rank, all[0].c)
	if err := <-got; err != nil {
		t.Errorf("Acquire after a release: %v", err)
	}
	for _, h := range all[1:] {
		f.Release(h.rank, h.c)
	}
	if len(f.m.reqFree) != 4 {
		t.Errorf("%d request buffers free after every release, want 4", len(f.m.reqFree))
	}

	f.setLost(2, errors.New("test"))
	if _, _, err := f.Acquire(context.Background(), 2); !errors.Is(err, ErrPeerLost) {
		t.Errorf("Acquire for a lost rank: %v, want ErrPeerLost", err)
	}
	f.Close()
	if _, _, err := f.Acquire(context.Background(), 1); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("Acquire after Close: %v, want verbs.ErrClosed", err)
	}
}

// TestSendFails: a Send that cannot post (its rank lost, no slot free
// before its context ends, the connection not up before it ends) frees
// the credit with its buffer, and the slot it took.
func TestSendFails(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 3, slots: 1, credits: 2})
	check := func(name string, err, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Errorf("%s: Send: %v, want %v", name, err, want)
		}
		for r := range f.m.peers {
			if n := len(f.m.peers[r].free); n != 2 {
				t.Errorf("%s: rank %d has %d credits free, want 2", name, r, n)
			}
		}
		if len(f.m.reqFree) != cap(f.m.reqFree) || f.nfree.Load() != 1 {
			t.Errorf("%s: %d request buffers and %d slots free, want all", name, len(f.m.reqFree), f.nfree.Load())
		}
	}

	c, _, _ := f.Acquire(context.Background(), 2)
	f.setLost(2, errors.New("test"))
	check("lost rank", f.Send(context.Background(), 2, c, 1), ErrPeerLost)

	c, _, _ = f.Acquire(context.Background(), 1)
	check("not connected", f.Send(short(t, time.Millisecond), 1, c, 1), context.DeadlineExceeded)

	id, _ := f.tryAcquireSlot(0, false)
	c, _, _ = f.Acquire(context.Background(), 1)
	err := f.Send(short(t, time.Millisecond), 1, c, 1)
	f.releaseSlot(id)
	check("no slot", err, context.DeadlineExceeded)
}

// TestWaitMessages: a wait for replies returns when they come (handled by
// another goroutine, as the engine does); a wait on a lost rank fails its
// requests in flight, and returns nil if that is what it waited for, else
// the rank's error.
func TestWaitMessages(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 3, credits: 2})
	var r replies
	f.m.h = r.handlers()
	cn := connectPeer(f, 1)
	a, b := sent(t, f, 1, cn), sent(t, f, 1, cn)
	flushed := make(chan error)
	go func() { flushed <- f.FlushMessages(context.Background(), 1) }()
	waited := make(chan error)
	go func() {
		waited <- f.WaitMessages(context.Background(), 1, func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			return r.got[a] != ""
		})
	}()
	time.Sleep(time.Millisecond)
	reply := func(c int) {
		f.m.recvMu.Lock()
		f.onReply(1, cn, c, []byte("ok"))
		f.m.recvMu.Unlock()
	}
	reply(a)
	if err := <-waited; err != nil {
		t.Errorf("WaitMessages: %v", err)
	}
	select {
	case err := <-flushed:
		t.Fatalf("FlushMessages returned (%v) with a request awaiting its reply", err)
	default:
	}
	reply(b)
	if err := <-flushed; err != nil {
		t.Errorf("FlushMessages: %v", err)
	}
	if err := f.WaitMessages(ended(), 1, func() bool { return false }); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitMessages with an ended context: %v", err)
	}

	// Rank 2 is lost with a request in flight.
	cn2 := connectPeer(f, 2)
	c := sent(t, f, 2, cn2)
	f.setLost(2, errors.New("test"))
	if err := f.FlushMessages(context.Background(), 2); err != nil {
		t.Errorf("FlushMessages on a lost rank whose request failed: %v, want nil", err)
	}
	if !errors.Is(r.failed[c], ErrPeerLost) {
		t.Errorf("the lost rank's request failed with %v, want ErrPeerLost", r.failed[c])
	}
	if err := f.WaitMessages(context.Background(), 2, func() bool { return false }); !errors.Is(err, ErrPeerLost) {
		t.Errorf("WaitMessages on a lost rank, nothing to fail: %v, want ErrPeerLost", err)
	}
}

// TestProgressMessages: a non-blocking progress on a lost rank fails its
// requests in flight, as a wait would.
func TestProgressMessages(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 2, credits: 2})
	var r replies
	f.m.h = r.handlers()
	cn := connectPeer(f, 1)
	c := sent(t, f, 1, cn)
	f.ProgressMessages(1)
	if len(r.failed) != 0 || !f.Pending(1) {
		t.Fatal("ProgressMessages failed a request to a live rank")
	}
	f.setLost(1, errors.New("test"))
	f.ProgressMessages(1)
	if !errors.Is(r.failed[c], ErrPeerLost) || f.Pending(1) {
		t.Errorf("ProgressMessages on a lost rank: failed %v, pending %v", r.failed, f.Pending(1))
	}
}

// TestResendWaits: requests to send again stay so (and hold no slot) while
// the pair is not re-established or no slot is free, and the next call
// tries again.
func TestResendWaits(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 2, slots: 2, credits: 2})
	cn := connectPeer(f, 1)
	c := sent(t, f, 1, cn)
	mp, p := &f.m.peers[1], &f.peers[1]
	cr := &mp.credits[c]
	cr.state.Store(creditResend)
	cr.conn = nil

	f.resendRequests(1) // not flagged: nothing to do
	if cr.state.Load() != creditResend || f.nfree.Load() != 2 {
		t.Fatal("resendRequests acted without the resending flag")
	}
	mp.resending.Store(true)
	for _, c := range []struct {
		name  string
		setup func()
	}{
		{"unready", func() { p.unready.Store(true) }},
		{"pair down", func() { p.unready.Store(false); p.qmu.Lock(); p.up = false; p.qmu.Unlock() }},
		{"rank lost", func() {
			p.qmu.Lock()
			p.up = true
			p.qmu.Unlock()
			e := error(ErrPeerLost)
			p.lost.Store(&e)
		}},
		{"pair faulted", func() { p.lost.Store(nil); cn.faulted.Store(true) }},
		{"no slot", func() {
			cn.faulted.Store(false)
			f.tryAcquireSlot(0, false)
			f.tryAcquireSlot(0, false)
		}},
	} {
		c.setup()
		free := f.nfree.Load()
		f.resendRequests(1)
		if cr.state.Load() != creditResend || !mp.resending.Load() || f.nfree.Load() != free {
			t.Errorf("%s: credit state %d, resending %v, %d slots free (was %d)", c.name,
				cr.state.Load(), mp.resending.Load(), f.nfree.Load(), free)
		}
	}
	f.releaseSlot(0)
	f.releaseSlot(1)
}
