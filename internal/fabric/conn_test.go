package fabric

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/onesided/rma/verbs"
)

// unlocked reports whether nobody holds rank's connection lock.
func unlocked(f *Fabric, rank int) bool {
	p := &f.peers[rank]
	if !p.qmu.TryLock() {
		return false
	}
	p.qmu.Unlock()
	return true
}

// TestUse: use returns the connection in use with its lock held for
// reading; a rank never connected has the manager asked for its first
// connection, and the caller waits until it is up; a lost rank, an ended
// context, a closed fabric end the wait, and hold no lock.
func TestUse(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 3})
	c, err := f.use(context.Background(), 0)
	if err != nil || c != f.peers[0].cur {
		t.Fatalf("use of the loopback pair: %v, %v", c, err)
	}
	if unlocked(f, 0) {
		t.Error("use returned without the connection's read lock")
	}
	f.peers[0].qmu.RUnlock()

	// Rank 1: the first use asks the manager, then waits.
	if _, err := f.use(ended(), 1); !errors.Is(err, context.Canceled) {
		t.Errorf("use of a rank not connected, ended context: %v", err)
	}
	if !f.peers[1].want.Load() || !kicked(f) {
		t.Error("the first use did not ask the manager for the connection")
	}
	got := make(chan *conn)
	go func() {
		c, err := f.use(context.Background(), 1)
		if err != nil {
			t.Error(err)
			got <- nil
			return
		}
		f.peers[1].qmu.RUnlock()
		got <- c
	}()
	time.Sleep(time.Millisecond)
	want := connectPeer(f, 1)
	if c := <-got; c != want {
		t.Errorf("use after the connection came up: %v, want %v", c, want)
	}
	if f.peers[1].want.Load() || f.peers[1].unready.Load() {
		t.Error("the connection is up but still wanted or unready")
	}

	// A failed connection the manager has not replaced: wait, within the
	// context, and the reconnect timeout.
	want.faulted.Store(true)
	if _, err := f.use(short(t, time.Millisecond), 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("use of a failed connection, 1 ms context: %v", err)
	}
	f.reconnectTimeout = 2 * time.Millisecond
	if _, err := f.use(context.Background(), 1); !errors.Is(err, ErrPeerLost) {
		t.Errorf("use of a failed connection not replaced within the reconnect timeout: %v, want ErrPeerLost", err)
	}
	if !unlocked(f, 1) {
		t.Error("a failed use kept the connection's lock")
	}

	f.setLost(2, errors.New("test"))
	if _, err := f.use(context.Background(), 2); !errors.Is(err, ErrPeerLost) || !unlocked(f, 2) {
		t.Errorf("use of a lost rank: %v (unlocked %v)", err, unlocked(f, 2))
	}
}

// TestAwaitUp: the wait for a connection ends when it is up, when the
// context ends, when the fabric closes, and at the latest after the
// reconnect timeout and a peer timeout (ErrPeerLost).
func TestAwaitUp(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 2, peerTimeout: time.Millisecond, reconnectTimeout: time.Millisecond})
	ready := make(chan struct{})
	close(ready)
	if err := f.awaitUp(context.Background(), 1, ready); err != nil {
		t.Errorf("awaitUp, ready: %v", err)
	}
	if err := f.awaitUp(ended(), 1, ready); !errors.Is(err, context.Canceled) {
		t.Errorf("awaitUp, ended context: %v", err)
	}
	start := time.Now()
	if err := f.awaitUp(context.Background(), 1, make(chan struct{})); !errors.Is(err, ErrPeerLost) {
		t.Errorf("awaitUp past the timeouts: %v, want ErrPeerLost", err)
	}
	if d := time.Since(start); d < 2*time.Millisecond {
		t.Errorf("awaitUp gave up after %v, before the reconnect and peer timeouts (2 ms)", d)
	}
	f.reconnectTimeout = time.Hour
	errc := make(chan error)
	go func() { errc <- f.awaitUp(context.Background(), 1, make(chan struct{})) }()
	time.Sleep(time.Millisecond)
	f.Close()
	if err := <-errc; !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("awaitUp when the fabric closed: %v, want verbs.ErrClosed", err)
	}
}

// TestAwaitUsable: nothing to wait for while the connection is usable;
// while it may be failed, the wait is for it, and holds no lock.
func TestAwaitUsable(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 2})
	if err := f.awaitUsable(ended(), 0); err != nil {
		t.Errorf("awaitUsable of the usable loopback pair: %v", err)
	}
	if err := f.awaitUsable(ended(), 1); !errors.Is(err, context.Canceled) {
		t.Errorf("awaitUsable of a rank being connected, ended context: %v", err)
	}
	connectPeer(f, 1)
	f.peers[1].unready.Store(true) // may have failed: it has not
	if err := f.awaitUsable(ended(), 1); err != nil || !unlocked(f, 1) {
		t.Errorf("awaitUsable of a connection up: %v (unlocked %v)", err, unlocked(f, 1))
	}
}

// TestFault: a failed connection is handed to the manager once; one
// retired already does not make its rank unready.
func TestFault(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 2})
	c := connectPeer(f, 1)
	f.fault(nil) // no connection: nothing to do
	if kicked(f) {
		t.Error("fault(nil) kicked the manager")
	}
	f.fault(c)
	if !c.faulted.Load() || !f.peers[1].unready.Load() || !kicked(f) {
		t.Error("fault did not mark the connection, its rank unready, and kick the manager")
	}
	f.fault(c)
	if kicked(f) {
		t.Error("a second fault of the same connection kicked the manager again")
	}
	f.peers[1].unready.Store(false)
	old := &conn{rank: 1}
	old.retired.Store(true)
	f.fault(old)
	if f.peers[1].unready.Load() {
		t.Error("the fault of a retired connection made its rank unready")
	}
}

// TestSetLost: a lost rank's calls fail with ErrPeerLost wrapping the
// cause; Lost fires with the first loss other than a leave; Losses fires
// at every loss, a leave too, and once per rank.
func TestSetLost(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 4})
	if f.PeerErr(1) != nil {
		t.Fatal("a rank is lost at start")
	}
	losses := f.Losses()
	f.setLost(1, ErrPeerLeft)
	if err := f.PeerErr(1); !errors.Is(err, ErrPeerLost) || !errors.Is(err, ErrPeerLeft) {
		t.Errorf("PeerErr of a rank that left: %v", err)
	}
	if f.Lost().Err() != nil {
		t.Error("Lost fired when a rank left")
	}
	if !closed(losses) {
		t.Error("Losses did not fire when a rank left")
	}
	losses = f.Losses()
	died := errors.New("died")
	f.MarkLost(2, died)
	if err := f.PeerErr(2); !errors.Is(err, ErrPeerLost) || !errors.Is(err, died) {
		t.Errorf("PeerErr of a rank marked lost: %v", err)
	}
	if cause := context.Cause(f.Lost()); !errors.Is(cause, died) || !errors.Is(cause, ErrPeerLost) {
		t.Errorf("Lost's cause: %v, want the loss of rank 2", cause)
	}
	if !closed(losses) {
		t.Error("Losses did not fire at a loss")
	}
	losses = f.Losses()
	f.setLost(2, errors.New("again"))
	if err := f.PeerErr(2); !errors.Is(err, died) {
		t.Errorf("a second loss of rank 2 replaced its error: %v", err)
	}
	if closed(losses) {
		t.Error("a second loss of the same rank fired Losses")
	}
	f.MarkLost(0, died) // the own rank: no connection to fail
	if err := f.PeerErr(0); !errors.Is(err, died) {
		t.Errorf("PeerErr of the own rank marked lost: %v", err)
	}
	if cause := context.Cause(f.Lost()); errors.Is(cause, ErrPeerLeft) || !errors.Is(cause, died) {
		t.Errorf("Lost's cause changed: %v", cause)
	}
	f.Close()
	f.MarkLost(3, died) // closed: nothing
	if err := f.PeerErr(3); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("PeerErr after Close: %v, want verbs.ErrClosed", err)
	}
}

// TestFenced: the own fence words are read directly: set for a rank once
// it is found lost and its connections failed (settleLost), never for one
// alive; ranks out of range are refused; a lost target cannot be asked.
func TestFenced(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 3})
	for _, c := range [][2]int{{-1, 0}, {3, 0}, {0, -1}, {0, 3}} {
		if _, err := f.Fenced(context.Background(), c[0], c[1]); !errors.Is(err, verbs.ErrInvalid) {
			t.Errorf("Fenced(%d, %d): %v, want verbs.ErrInvalid", c[0], c[1], err)
		}
	}
	for r := 0; r < 3; r++ {
		if fenced, err := f.Fenced(context.Background(), 0, r); fenced || err != nil {
			t.Errorf("Fenced(0, %d) at start: %v, %v", r, fenced, err)
		}
	}
	f.lose(1, errors.New("test"))
	if fenced, err := f.Fenced(context.Background(), 0, 1); !fenced || err != nil {
		t.Errorf("Fenced(0, 1) after rank 1 was lost: %v, %v; want true", fenced, err)
	}
	if fenced, _ := f.Fenced(context.Background(), 0, 2); fenced {
		t.Error("a rank alive is fenced")
	}
	if _, err := f.Fenced(context.Background(), 1, 2); !errors.Is(err, ErrPeerLost) {
		t.Errorf("Fenced asked of a lost rank: %v, want ErrPeerLost", err)
	}
	if err := f.Probe(context.Background(), 1); !errors.Is(err, ErrPeerLost) {
		t.Errorf("Probe of a lost rank: %v, want ErrPeerLost", err)
	}
	if err := f.Probe(ended(), 2); err != nil {
		t.Errorf("Probe of a rank being connected, ended context: %v, want nil (nothing was asked)", err)
	}
	f.Close()
	if _, err := f.Fenced(context.Background(), 0, 2); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("Fenced after Close: %v", err)
	}
	if err := f.Probe(context.Background(), 2); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("Probe after Close: %v", err)
	}
}
