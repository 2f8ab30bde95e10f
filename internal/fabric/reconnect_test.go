package fabric

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/onesided/rma/verbs"
)

// signals is a Signaller that records what it carries, and fails while
// down is set.
type signals struct {
	mu   sync.Mutex
	down bool
	sent []string // "rank:hex"
	msgs [][]byte
}

func (s *signals) Signal(rank int, msg []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return errors.New("down")
	}
	s.sent = append(s.sent, fmt.Sprintf("%d:%x", rank, msg))
	s.msgs = append(s.msgs, append([]byte(nil), msg...))
	return nil
}

func (s *signals) take() ([]string, [][]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, b := s.sent, s.msgs
	s.sent, s.msgs = nil, nil
	return a, b
}

func genMsg(kind byte, gen uint32, rest ...byte) []byte {
	b := []byte{kind, 0, 0, 0, 0}
	binary.LittleEndian.PutUint32(b[1:], gen)
	return append(b, rest...)
}

// TestHandleSignal: a message is queued for the manager (which is kicked)
// only from another rank of the group, of a length the protocol has; the
// queue is bounded; the message is copied.
func TestHandleSignal(t *testing.T) {
	f := newTestFabric(t, fabOpts{rank: 1, size: 3})
	ok := genMsg(sigReady, 1)
	for _, c := range []struct {
		rank int
		msg  []byte
		want bool
	}{
		{0, ok, true},
		{2, ok, true},
		{1, ok, false}, // the own rank
		{-1, ok, false},
		{3, ok, false},
		{0, ok[:sigHeader-1], false},
		{0, make([]byte, MaxSignal), true},
		{0, make([]byte, MaxSignal+1), false},
	} {
		before := len(f.mgr.inbox)
		kicked(f)
		f.HandleSignal(c.rank, c.msg)
		if got := len(f.mgr.inbox) == before+1; got != c.want || kicked(f) != c.want {
			t.Errorf("HandleSignal(%d, %d bytes): queued %v, want %v", c.rank, len(c.msg), got, c.want)
		}
	}
	msg := genMsg(sigReady, 7)
	f.HandleSignal(2, msg)
	msg[1] = 99
	last := f.mgr.inbox[len(f.mgr.inbox)-1]
	if last.rank != 2 || last.n != sigHeader || binary.LittleEndian.Uint32(last.b[1:]) != 7 {
		t.Errorf("queued message: rank %d, %d bytes, gen %d; want rank 2, 5 bytes, gen 7 (a copy)",
			last.rank, last.n, binary.LittleEndian.Uint32(last.b[1:]))
	}
	for range maxInbox + 10 {
		f.HandleSignal(0, ok)
	}
	if len(f.mgr.inbox) != maxInbox {
		t.Errorf("inbox of %d messages, want at most %d", len(f.mgr.inbox), maxInbox)
	}
}

// TestReady: the peer's READY for the generation being set up puts the
// new connection in use once it is connected here too, and wakes the
// callers waiting for it; before that it is remembered. A READY of
// another generation, of the wrong length, or repeated, is ignored.
func TestReady(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 2})
	p := &f.peers[1]
	ready := p.ready
	next := &conn{rank: 1, gen: 3}
	p.next, p.deadline = next, time.Now().Add(time.Hour)
	p.want.Store(true)
	step := func(msg []byte) {
		f.HandleSignal(1, msg)
		f.manageStep()
	}
	for _, msg := range [][]byte{genMsg(sigReady, 2), genMsg(sigReady, 4), genMsg(sigReady, 3, 0)} {
		step(msg)
		if p.peerReady || p.up {
			t.Fatalf("READY %x for another generation or malformed was taken", msg)
		}
	}
	step(genMsg(sigReady, 3)) // not connected here yet: remembered
	if !p.peerReady || p.up || closed(ready) {
		t.Fatalf("READY before the local connect: peerReady %v, up %v", p.peerReady, p.up)
	}
	next.connected = true
	p.peerReady = false
	step(genMsg(sigReady, 3))
	if !p.up || p.cur != next || p.next != nil || !closed(ready) || p.ready != nil {
		t.Fatalf("READY once connected: up %v, cur %v, next %v, waiters woken %v", p.up, p.cur, p.next, closed(ready))
	}
	if p.unready.Load() || p.want.Load() || !p.deadline.IsZero() {
		t.Errorf("after up: unready %v, want %v, deadline %v", p.unready.Load(), p.want.Load(), p.deadline)
	}
	step(genMsg(sigReady, 3)) // repeated once up: nothing
	if !p.up || p.cur != next {
		t.Error("a repeated READY changed the connection")
	}
}

// TestReconnectIgnored: RECONNECT messages that are stale (an older
// generation, or the current one once up or once its endpoint is known),
// malformed, or from a lost rank change nothing; unknown kinds neither.
func TestReconnectIgnored(t *testing.T) {
	one := verbs.Endpoint{QPN: 0x1234, PSN: 0x42, MTU: verbs.MTU1024}.AppendBinary(nil)
	ep := verbs.Endpoint{QPN: 0x1235, PSN: 0x43, MTU: verbs.MTU1024}.AppendBinary(one) // data and probe QPs
	bad := verbs.Endpoint{QPN: 1 << 24}.AppendBinary(one)
	f := newTestFabric(t, fabOpts{size: 3})
	connectPeer(f, 1)
	cur := connectPeer(f, 1) // generation 2, up
	for _, msg := range [][]byte{
		genMsg(sigReconnect, 1, ep...), // older
		genMsg(sigReconnect, 2, ep...), // current, up
		genMsg(sigReconnect, 9, ep[:10]...),
		genMsg(sigReconnect, 9, one...), // no probe QP
		genMsg(sigReconnect, 9, bad...),
		genMsg(42, 9, ep...),
	} {
		f.HandleSignal(1, msg)
		f.manageStep()
		p := &f.peers[1]
		if !p.up || p.cur != cur || p.next != nil || p.haveRemote || f.PeerErr(1) != nil {
			t.Fatalf("RECONNECT %x changed the connection: up %v, next %v, lost %v", msg, p.up, p.next, f.PeerErr(1))
		}
	}
	// Rank 2: being set up, the peer's endpoint known already.
	p := &f.peers[2]
	p.next, p.haveRemote, p.deadline = &conn{rank: 2, gen: 5}, true, time.Now().Add(time.Hour)
	remote := p.remote
	f.HandleSignal(2, genMsg(sigReconnect, 5, ep...))
	f.HandleSignal(2, genMsg(sigReconnect, 4, ep...))
	f.manageStep()
	if p.remote != remote || p.next.gen != 5 || p.next.connected {
		t.Error("a repeated or stale RECONNECT for the generation being set up was taken")
	}
	// A lost rank's signals are ignored.
	p.next = nil
	f.lose(2, errors.New("test"))
	f.HandleSignal(2, genMsg(sigReady, 5))
	f.manageStep()
	if p.up {
		t.Error("a lost rank's READY brought its connection up")
	}
}

// TestFencedSignal: a rank that says it found this one lost is marked lost
// (it fenced this rank off and answers nothing more).
func TestFencedSignal(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 2})
	f.HandleSignal(1, genMsg(sigFenced, 0))
	f.manageStep()
	if err := f.PeerErr(1); !errors.Is(err, ErrPeerLost) {
		t.Errorf("after FENCED: PeerErr %v, want ErrPeerLost", err)
	}
	if f.Lost().Err() == nil {
		t.Error("Lost did not fire at FENCED")
	}
}

// TestSettleLost: the manager settles a lost rank once: the callers
// waiting for its connection are woken, it is fenced off (the fence word,
// and a FENCED signal unless it left), and its deadline no longer counts.
func TestSettleLost(t *testing.T) {
	var sig signals
	f := newTestFabric(t, fabOpts{size: 4})
	f.SetSignaller(&sig)
	r1, r2 := f.peers[1].ready, f.peers[2].ready
	f.peers[1].deadline = time.Now().Add(time.Hour)
	f.setLost(1, errors.New("died"))
	f.setLost(2, ErrPeerLeft)
	if d := f.manageStep(); d != 0 {
		t.Errorf("manageStep with nothing left to do asks to run again in %v", d)
	}
	if !closed(r1) || !closed(r2) || !f.peers[1].lostDone || !f.peers[2].lostDone {
		t.Error("the callers waiting for the lost ranks' connections were not woken")
	}
	for r, want := range []bool{false, true, true, false} {
		if fenced, _ := f.Fenced(context.Background(), 0, r); fenced != want {
			t.Errorf("rank %d fenced %v, want %v", r, fenced, want)
		}
	}
	sent, _ := sig.take()
	if want := []string{fmt.Sprintf("1:%x", genMsg(sigFenced, 0))}; fmt.Sprint(sent) != fmt.Sprint(want) {
		t.Errorf("signals sent: %v, want FENCED to rank 1 alone (rank 2 left)", sent)
	}
	f.manageStep()
	if sent, _ := sig.take(); len(sent) != 0 {
		t.Errorf("a second step sent %v", sent)
	}
}

// TestDeadline: a connection not re-established by its deadline has its
// rank lost; the manager asks to run again at the deadline until then.
func TestDeadline(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 3})
	f.peers[1].deadline = time.Now().Add(time.Hour)
	f.peers[2].deadline = time.Now().Add(-time.Millisecond)
	ready := f.peers[2].ready
	d := f.manageStep()
	if d < 59*time.Minute || d > time.Hour {
		t.Errorf("manageStep with a deadline in an hour asks to run again in %v", d)
	}
	if f.PeerErr(1) != nil {
		t.Errorf("rank 1 lost before its deadline: %v", f.PeerErr(1))
	}
	if err := f.PeerErr(2); !errors.Is(err, ErrPeerLost) || !closed(ready) {
		t.Errorf("rank 2 past its deadline: %v (waiters woken %v), want ErrPeerLost", err, closed(ready))
	}
}

// TestResendSignals: the exchange's signals for the connection being set
// up: RECONNECT (its generation, then its endpoint) and READY (the
// generation). A Signaller that fails is tried again, the manager asking
// to run again within a tenth of the peer timeout, and nothing is sent
// twice.
func TestResendSignals(t *testing.T) {
	var sig signals
	f := newTestFabric(t, fabOpts{size: 2, peerTimeout: time.Second})
	f.SetSignaller(&sig)
	p := &f.peers[1]
	local := verbs.Endpoint{QPN: 0xabcdef, PSN: 0x123456, LID: 7, MTU: verbs.MTU4096}
	local.GID[15] = 1
	probe := local
	probe.QPN, probe.PSN = 0xabcdf0, 0x654321
	p.next = &conn{rank: 1, gen: 0x01020304, local: local, probeLocal: probe}
	p.deadline = time.Now().Add(time.Hour)
	p.unsent = [2]bool{true, true}
	sig.down = true
	if d := f.manageStep(); d <= 0 || d > 100*time.Millisecond {
		t.Errorf("manageStep with signals unsent asks to run again in %v, want within 100 ms", d)
	}
	if p.unsent != [2]bool{true, true} {
		t.Errorf("unsent %v after a failed Signal", p.unsent)
	}
	sig.down = false
	if d := f.manageStep(); d < 59*time.Minute {
		t.Errorf("manageStep with everything sent asks to run again in %v, want at the deadline", d)
	}
	_, msgs := sig.take()
	if len(msgs) != 2 {
		t.Fatalf("sent %d messages, want RECONNECT and READY", len(msgs))
	}
	rc, rd := msgs[0], msgs[1]
	if len(rc) != sigHeader+2*verbs.EndpointSize || rc[0] != sigReconnect || binary.LittleEndian.Uint32(rc[1:]) != 0x01020304 {
		t.Errorf("RECONNECT %x: want kind 1, generation 0x01020304 little endian, then the two endpoints", rc)
	} else if ep, err := verbs.DecodeEndpoint(rc[sigHeader : sigHeader+verbs.EndpointSize]); err != nil || ep != local {
		t.Errorf("RECONNECT's endpoint %+v (%v), want %+v", ep, err, local)
	} else if ep, err := verbs.DecodeEndpoint(rc[sigHeader+verbs.EndpointSize:]); err != nil || ep != probe {
		t.Errorf("RECONNECT's probe endpoint %+v (%v), want %+v", ep, err, probe)
	}
	if string(rd) != string(genMsg(sigReady, 0x01020304)) {
		t.Errorf("READY %x, want %x", rd, genMsg(sigReady, 0x01020304))
	}
	if len(rc) > MaxSignal {
		t.Errorf("RECONNECT of %d bytes: more than a Signaller carries (%d)", len(rc), MaxSignal)
	}
	f.manageStep()
	if sent, _ := sig.take(); len(sent) != 0 {
		t.Errorf("sent again: %v", sent)
	}
}

// TestReap: a retired connection is destroyed (and its QP numbers
// forgotten) once every request posted on it has completed, never the one
// in use; the manager runs again soon while some remain.
func TestReap(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 2})
	p := &f.peers[1]
	cur := connectPeer(f, 1)
	done, busy := &conn{rank: 1, gen: 1}, &conn{rank: 1, gen: 2}
	done.posted.Store(3)
	done.completed.Store(3)
	busy.posted.Store(2)
	busy.completed.Store(1)
	f.m.qps[10], f.m.qps[11], f.m.qps[12] = qpSide{done, 0}, qpSide{busy, 0}, qpSide{cur, 0}
	p.retired = []*conn{done, busy, cur}
	if d := f.manageStep(); d <= 0 || d > 10*time.Millisecond {
		t.Errorf("manageStep with a connection still draining asks to run again in %v, want within 10 ms", d)
	}
	if len(p.retired) != 2 || p.retired[0] != busy || p.retired[1] != cur {
		t.Errorf("retired after reaping: %v, want the draining one and the one in use", p.retired)
	}
	if _, ok := f.m.qps[10]; ok || len(f.m.qps) != 2 {
		t.Errorf("QP numbers after reaping: %v, want the drained connection's forgotten", f.m.qps)
	}
	busy.completed.Add(1)
	p.retired = p.retired[:1]
	if !f.reap(1) || len(p.retired) != 0 {
		t.Errorf("reap of a drained connection left %v", p.retired)
	}
}

// TestManager: the manager goroutine handles the signals it is kicked for,
// and runs again when the step asked (a deadline) without a kick; it stops
// when told to.
func TestManager(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 3})
	f.peers[2].deadline = time.Now().Add(2 * time.Millisecond)
	f.startManager()
	f.HandleSignal(1, genMsg(sigFenced, 0))
	select {
	case <-f.Lost().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the manager did not handle a FENCED signal")
	}
	if err := f.PeerErr(1); !errors.Is(err, ErrPeerLost) {
		t.Errorf("rank 1 after FENCED: %v", err)
	}
	for deadline := time.Now().Add(10 * time.Second); f.PeerErr(2) == nil && time.Now().Before(deadline); {
		time.Sleep(100 * time.Microsecond)
	}
	if err := f.PeerErr(2); !errors.Is(err, ErrPeerLost) {
		t.Errorf("rank 2 past its deadline, no kick: %v, want ErrPeerLost", err)
	}
	f.stopManager()
	f.stopManager() // stopped already: nothing
}
