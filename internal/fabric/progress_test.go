package fabric

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/onesided/rma/verbs"
)

// TestCompletionErr: a failed completion faults its connection (the pair
// is re-established) unless its rank is lost, whose error it then is. A
// flushed request's outcome is unknown, and so is that of one the
// transport gave up on, which is not the peer's death (no ErrPeerLost):
// both are posted again (reissuable). Other failures keep their class.
func TestCompletionErr(t *testing.T) {
	for _, c := range []struct {
		st        verbs.WCStatus
		lost      bool
		is, isNot []error
		reissue   bool
	}{
		{verbs.WCWRFlushErr, false, []error{verbs.ErrOutcomeUnknown, verbs.ErrFlushed}, []error{ErrPeerLost}, true},
		{verbs.WCRetryExcErr, false, []error{verbs.ErrOutcomeUnknown}, []error{ErrPeerLost}, true},
		{verbs.WCRNRRetryExcErr, false, []error{verbs.ErrOutcomeUnknown}, []error{ErrPeerLost}, true},
		{verbs.WCRemAccessErr, false, []error{verbs.ErrRemoteAccess}, []error{verbs.ErrOutcomeUnknown, ErrPeerLost}, false},
		{verbs.WCRemOpErr, false, []error{verbs.ErrRemoteOp}, []error{verbs.ErrOutcomeUnknown}, false},
		{verbs.WCLocProtErr, false, []error{verbs.ErrLocal}, []error{verbs.ErrOutcomeUnknown}, false},
		{verbs.WCWRFlushErr, true, []error{ErrPeerLost}, []error{verbs.ErrOutcomeUnknown}, false},
		{verbs.WCRemAccessErr, true, []error{ErrPeerLost}, nil, false},
	} {
		name := fmt.Sprintf("%v, lost %v", c.st, c.lost)
		f := newTestFabric(t, fabOpts{size: 2})
		cn := connectPeer(f, 1)
		if c.lost {
			f.setLost(1, errors.New("test"))
		}
		kicked(f)
		w := wc(0, c.st)
		err := f.completionErr(1, cn, w.Err())
		for _, e := range c.is {
			if !errors.Is(err, e) {
				t.Errorf("%s: %v does not match %v", name, err, e)
			}
		}
		for _, e := range c.isNot {
			if errors.Is(err, e) {
				t.Errorf("%s: %v matches %v", name, err, e)
			}
		}
		if got := reissuable(err); got != c.reissue {
			t.Errorf("%s: reissuable = %v, want %v", name, got, c.reissue)
		}
		if !c.lost && (!cn.faulted.Load() || !f.peers[1].unready.Load() || !kicked(f)) {
			t.Errorf("%s: faulted %v, unready %v: the connection is not handed to the manager", name,
				cn.faulted.Load(), f.peers[1].unready.Load())
		}
		if c.lost && cn.faulted.Load() {
			t.Errorf("%s: the lost rank's connection was faulted for re-establishment", name)
		}
	}
}

// TestReissuable: only an unknown outcome with the peer alive.
func TestReissuable(t *testing.T) {
	unknown := fmt.Errorf("x: %w", verbs.ErrOutcomeUnknown)
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("other"), false},
		{unknown, true},
		{fmt.Errorf("%w: %w", ErrPeerLost, unknown), false},
		{verbs.ErrFlushed, false},
	} {
		if got := reissuable(c.err); got != c.want {
			t.Errorf("reissuable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestDispatch: what a completion does to its slot and its rank's
// counters, by kind of request and outcome.
func TestDispatch(t *testing.T) {
	for _, c := range []struct {
		name       string
		async, msg bool
		redo       bool
		abandoned  bool
		lost       bool
		st         verbs.WCStatus
		// Outcome: the slot freed, done for its waiter, or kept to be
		// posted again; the rank's fire-and-forget error; its completed
		// count.
		freed, done, redone bool
		peerErr             error
		completed           uint64
	}{
		{name: "write ok", async: true, redo: true, st: verbs.WCSuccess, freed: true, completed: 1},
		{name: "write flushed", async: true, redo: true, st: verbs.WCWRFlushErr, redone: true},
		{name: "write retries exceeded", async: true, redo: true, st: verbs.WCRetryExcErr, redone: true},
		{name: "write bad rkey", async: true, redo: true, st: verbs.WCRemAccessErr, freed: true, peerErr: verbs.ErrRemoteAccess, completed: 1},
		{name: "write flushed, rank lost", async: true, redo: true, lost: true, st: verbs.WCWRFlushErr, freed: true, peerErr: ErrPeerLost, completed: 1},
		{name: "message failed", async: true, msg: true, st: verbs.WCRemOpErr, freed: true, completed: 1},
		{name: "message flushed", async: true, msg: true, st: verbs.WCWRFlushErr, freed: true, completed: 1},
		{name: "read ok", st: verbs.WCSuccess, done: true, completed: 1},
		{name: "read failed", st: verbs.WCRemAccessErr, done: true, completed: 1},
		{name: "read abandoned", abandoned: true, st: verbs.WCSuccess, freed: true, completed: 1},
		{name: "read abandoned, failed", abandoned: true, st: verbs.WCWRFlushErr, freed: true, completed: 1},
	} {
		f := newTestFabric(t, fabOpts{size: 2, slots: 2, chunks: 1})
		cn := connectPeer(f, 1)
		id := post(t, f, 1, c.async)
		ch, _ := f.tryAcquireChunk()
		s := &f.slots[id]
		s.msg, s.redo, s.chunk = c.msg, c.redo, ch
		if c.abandoned {
			s.state.Store(slotAbandoned)
		}
		if c.lost {
			f.setLost(1, errors.New("test"))
		}
		p := &f.peers[1]
		complete(f, wc(id, c.st), wc(99, verbs.WCSuccess)) // 99: no such slot, ignored
		if cn.completed.Load() != 1 {
			t.Errorf("%s: connection completed %d, want 1 (it is reaped when completed = posted)", c.name, cn.completed.Load())
		}
		if got := p.completed.Load(); got != c.completed {
			t.Errorf("%s: rank completed %d, want %d", c.name, got, c.completed)
		}
		if freed := s.state.Load() == slotFree; freed != c.freed {
			t.Errorf("%s: slot freed %v, want %v", c.name, freed, c.freed)
		}
		if c.freed && (f.nfree.Load() != 2 || len(f.freeChunks) != 1) {
			t.Errorf("%s: %d slots and %d chunks free, want 2 and 1", c.name, f.nfree.Load(), len(f.freeChunks))
		}
		if done := s.state.Load() == slotDone; done != c.done {
			t.Errorf("%s: slot done %v, want %v", c.name, done, c.done)
		}
		if c.done && (s.err == nil) != (c.st == verbs.WCSuccess) {
			t.Errorf("%s: the waiter's error is %v", c.name, s.err)
		}
		p.mu.Lock()
		redone, perr := len(p.redo) == 1 && p.redo[0] == id, p.err
		p.mu.Unlock()
		if redone != c.redone || p.redoing.Load() != c.redone {
			t.Errorf("%s: kept to be posted again %v (redoing %v), want %v", c.name, redone, p.redoing.Load(), c.redone)
		}
		if (perr == nil) != (c.peerErr == nil) || (perr != nil && !errors.Is(perr, c.peerErr)) {
			t.Errorf("%s: the rank's error for Flush is %v, want %v", c.name, perr, c.peerErr)
		}
	}
}

// TestDispatchKeepsFirstError: Flush reports the first fire-and-forget
// failure since the last Flush, not a later one.
func TestDispatchKeepsFirstError(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 1})
	a, b := post(t, f, 0, true), post(t, f, 0, true)
	complete(f, wc(a, verbs.WCRemAccessErr), wc(b, verbs.WCLocProtErr))
	if err := f.Flush(context.Background(), 0); !errors.Is(err, verbs.ErrRemoteAccess) {
		t.Errorf("Flush: %v, want the first failure (remote access)", err)
	}
	if err := f.Flush(context.Background(), 0); err != nil {
		t.Errorf("Flush again: %v, want nil (reported already)", err)
	}
}

// TestWait: a waiter gets its slot's outcome; one whose context ends first
// abandons the slot, which its completion frees; one polling finds its
// completion, and one that another goroutine polls for is woken by it.
func TestWait(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 1, slots: 2})

	id := post(t, f, 0, false)
	complete(f, wc(id, verbs.WCRemAccessErr))
	if ab, err := f.wait(context.Background(), id); ab || !errors.Is(err, verbs.ErrRemoteAccess) {
		t.Errorf("wait for a failed read: abandoned %v, %v; want false, remote access", ab, err)
	}
	f.releaseSlot(id)

	id = post(t, f, 0, false)
	if ab, err := f.wait(ended(), id); !ab || !errors.Is(err, context.Canceled) {
		t.Errorf("wait with an ended context: abandoned %v, %v; want true, canceled", ab, err)
	}
	if f.slots[id].state.Load() != slotAbandoned || f.nfree.Load() != 1 {
		t.Fatalf("abandoned slot: state %d, %d free", f.slots[id].state.Load(), f.nfree.Load())
	}
	complete(f, wc(id, verbs.WCSuccess))
	if f.nfree.Load() != 2 {
		t.Errorf("the abandoned slot's completion did not free it: %d free", f.nfree.Load())
	}

	// The waiter polls (nobody else does) and finds its completion.
	id = post(t, f, 0, false)
	done := make(chan error)
	go func() {
		_, err := f.wait(context.Background(), id)
		done <- err
	}()
	time.Sleep(time.Millisecond)
	complete(f, wc(id, verbs.WCSuccess))
	if err := <-done; err != nil {
		t.Errorf("wait: %v", err)
	}
	f.releaseSlot(id)

	// Another goroutine holds the poll: the waiter sleeps on its slot and
	// the completion, dispatched by the poller, wakes it.
	id = post(t, f, 0, false)
	f.pollMu.Lock()
	go func() {
		_, err := f.wait(context.Background(), id)
		done <- err
	}()
	for deadline := time.Now().Add(time.Second); !f.slots[id].sleeping.Load() && time.Now().Before(deadline); {
		time.Sleep(50 * time.Microsecond)
	}
	if !f.slots[id].sleeping.Load() {
		t.Error("the waiter did not go to sleep while another goroutine polled")
	}
	f.wcs = []verbs.WC{wc(id, verbs.WCSuccess)}
	f.dispatchLocked(1)
	f.wcs = nil
	f.pollMu.Unlock()
	if err := <-done; err != nil {
		t.Errorf("wait woken by the poller: %v", err)
	}
	f.releaseSlot(id)
}

// TestSettled: an error of a call to a rank stands unless the rank is
// lost (then it is ErrPeerLost); the own rank's and nil stand as they are.
func TestSettled(t *testing.T) {
	bad := fmt.Errorf("x: %w", verbs.ErrRemoteAccess)
	f := newTestFabric(t, fabOpts{size: 4})
	connectPeer(f, 1)
	f.setLost(2, errors.New("test"))
	for _, c := range []struct {
		name string
		ctx  context.Context
		rank int
		err  error
		want error
	}{
		{"nil", context.Background(), 1, nil, nil},
		{"own rank", context.Background(), 0, bad, verbs.ErrRemoteAccess},
		{"rank up", context.Background(), 1, bad, verbs.ErrRemoteAccess},
		{"rank lost", context.Background(), 2, bad, ErrPeerLost},
		{"lost already", context.Background(), 1, ErrPeerLost, ErrPeerLost},
		{"rank reconnecting, ctx ended", ended(), 3, bad, verbs.ErrRemoteAccess},
	} {
		got := f.settled(c.ctx, c.rank, c.err)
		if (got == nil) != (c.want == nil) || !errors.Is(got, c.want) {
			t.Errorf("%s: settled = %v, want %v", c.name, got, c.want)
		}
	}
	if !f.peers[1].qmu.TryLock() {
		t.Fatal("settled left rank 1's connection locked")
	}
	f.peers[1].qmu.Unlock()
	if err := f.Settled(context.Background(), 2, bad); !errors.Is(err, ErrPeerLost) {
		t.Errorf("Settled: %v, want ErrPeerLost", err)
	}
}

// TestWaitSpin: Spin, or twice the usual operation time if longer, but
// never more than the reply spin; learnOpTime averages with weight 1/8 and
// leaves out times of a reply spin or more.
func TestWaitSpin(t *testing.T) {
	us := time.Microsecond
	for _, c := range []struct {
		spin, reply, op, want time.Duration
	}{
		{50 * us, 5000 * us, 0, 50 * us},
		{50 * us, 5000 * us, 10 * us, 50 * us},
		{50 * us, 5000 * us, 40 * us, 80 * us},
		{50 * us, 5000 * us, 4000 * us, 5000 * us},
		{100 * us, 60 * us, 1000 * us, 100 * us},
	} {
		f := &Fabric{spin: c.spin, replySpin: c.reply}
		f.opTime.Store(int64(c.op))
		if got := f.waitSpin(); got != c.want {
			t.Errorf("spin %v, reply spin %v, op time %v: waitSpin %v, want %v", c.spin, c.reply, c.op, got, c.want)
		}
	}
	f := &Fabric{replySpin: time.Millisecond}
	f.learnOpTime(800 * us)
	if got := time.Duration(f.opTime.Load()); got != 100*us {
		t.Errorf("opTime after 800us from 0: %v, want 100us", got)
	}
	f.learnOpTime(time.Millisecond) // a reply spin: left out
	f.learnOpTime(time.Hour)
	if got := time.Duration(f.opTime.Load()); got != 100*us {
		t.Errorf("opTime after times of a reply spin and more: %v, want 100us unchanged", got)
	}
	f.learnOpTime(900 * us)
	if got := time.Duration(f.opTime.Load()); got != 200*us {
		t.Errorf("opTime after 900us: %v, want 200us", got)
	}
}

// TestFlush: Flush waits for the requests posted before it; WRITEs cut short by a connection failure are posted again by it
// once the pair is re-established (they stay for the next Flush if its
// context ends first), and fail with the rank's error if it is lost.
func TestFlush(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 2, slots: 4})
	cn := connectPeer(f, 1)
	a := post(t, f, 1, true)
	done := make(chan error)
	go func() { done <- f.Flush(context.Background(), 1) }()
	time.Sleep(time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Flush returned (%v) before its request completed", err)
	default:
	}
	complete(f, wc(a, verbs.WCSuccess))
	if err := <-done; err != nil {
		t.Errorf("Flush: %v", err)
	}

	// A WRITE flushed by its connection's failure.
	w := post(t, f, 1, true)
	f.slots[w].redo = true
	complete(f, wc(w, verbs.WCWRFlushErr))
	if !cn.faulted.Load() || !f.peers[1].redoing.Load() {
		t.Fatal("a flushed WRITE is not kept to be posted again")
	}
	if err := f.Flush(short(t, time.Millisecond), 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Flush while the pair is not re-established, 1 ms context: %v, want the deadline", err)
	}
	if !f.peers[1].redoing.Load() || len(f.peers[1].redo) != 1 || f.slots[w].state.Load() != slotBusy {
		t.Fatal("the WRITE to post again was not kept for the next Flush")
	}
	f.setLost(1, errors.New("test"))
	if err := f.Flush(context.Background(), 1); !errors.Is(err, ErrPeerLost) {
		t.Errorf("Flush after the rank was lost: %v, want ErrPeerLost", err)
	}
	if f.peers[1].redoing.Load() || f.nfree.Load() != 4 {
		t.Errorf("after the Flush: redoing %v, %d slots free; want false, 4", f.peers[1].redoing.Load(), f.nfree.Load())
	}
	if got, want := f.peers[1].completed.Load(), f.peers[1].posted.Load(); got != want {
		t.Errorf("rank 1: %d completed of %d posted", got, want)
	}
	if err := f.FlushAll(context.Background()); err != nil {
		t.Errorf("FlushAll with nothing in flight: %v", err)
	}
}
