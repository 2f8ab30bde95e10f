package fabric

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/onesided/rma/verbs"
)

// Signaller carries the reconnect protocol's messages to another rank out
// of band (the group uses its per-pair liveness connections). Messages are
// at most MaxSignal bytes and must arrive in order; the receiving side
// hands them to Fabric.HandleSignal. Signal must not block for long (it
// bounds its own write); a message it fails to send is sent again until
// the re-establishment's deadline (ReconnectTimeout), which alone marks
// the peer lost.
type Signaller interface {
	Signal(rank int, msg []byte) error
}

// A RoundTripper is a Signaller that also measures the round trip to a
// rank (the group's liveness connections report their kernel's TCP
// estimate): the fabric sets each connection's ACK timeout from it
// (ackTimeout).
type RoundTripper interface {
	// RoundTrip returns the least round-trip time to rank measured and the
	// mean deviation, or ok false if it has no measurement.
	RoundTrip(rank int) (least, dev time.Duration, ok bool)
}

// MaxSignal is the largest message a Signaller carries.
const MaxSignal = 64

// sigReconnectLen is the length of a RECONNECT message.
const sigReconnectLen = sigHeader + 2*verbs.EndpointSize

const (
	sigReconnect = 1 // gen (4 bytes, little endian), endpoint, probe QP's endpoint
	sigReady     = 2 // gen
	sigFenced    = 3 // gen (unused): the sender found the receiver lost and fenced it off
	sigHeader    = 5
)

type manager struct {
	kick chan struct{} // something to do
	stop chan struct{}
	done chan struct{}

	mu    sync.Mutex
	sig   Signaller
	inbox []signalMsg
	spare []signalMsg

	losses lossNotice // see Losses
}

type signalMsg struct {
	rank int
	n    int
	b    [MaxSignal]byte
}

// maxInbox bounds the signals waiting for the manager; a group member
// sends a few per failure.
const maxInbox = 1024

func (f *Fabric) startManager() {
	mg := &f.mgr
	mg.kick = make(chan struct{}, 1)
	mg.stop = make(chan struct{})
	mg.done = make(chan struct{})
	go f.manage()
}

func (f *Fabric) stopManager() {
	mg := &f.mgr
	if mg.stop != nil {
		close(mg.stop)
		<-mg.done
		mg.stop = nil
	}
}

// kick wakes the manager.
func (f *Fabric) kick() {
	select {
	case f.mgr.kick <- struct{}{}:
	default:
	}
}

// SetSignaller gives the fabric its out-of-band channel to the other
// ranks. Without one, a failed connection to another rank cannot be
// re-established and its peer is marked lost.
func (f *Fabric) SetSignaller(s Signaller) {
	f.mgr.mu.Lock()
	f.mgr.sig = s
	f.mgr.mu.Unlock()
}

// HandleSignal hands the fabric a message rank sent through its Signaller.
// Malformed and stale messages are ignored. It does not block.
func (f *Fabric) HandleSignal(rank int, msg []byte) {
	if rank < 0 || rank >= f.size || rank == f.rank || len(msg) < sigHeader || len(msg) > MaxSignal {
		return
	}
	mg := &f.mgr
	mg.mu.Lock()
	if len(mg.inbox) < maxInbox {
		mg.inbox = append(mg.inbox, signalMsg{rank: rank, n: len(msg)})
		copy(mg.inbox[len(mg.inbox)-1].b[:], msg)
	}
	mg.mu.Unlock()
	f.kick()
}

func (f *Fabric) signal(rank int, msg []byte) error {
	f.mgr.mu.Lock()
	s := f.mgr.sig
	f.mgr.mu.Unlock()
	if s == nil {
		return errors.New("no out-of-band channel")
	}
	return s.Signal(rank, msg)
}

// manage runs the reconnect protocol until stopManager.
func (f *Fabric) manage() {
	mg := &f.mgr
	defer close(mg.done)
	t := time.NewTimer(time.Hour)
	stopTimer := func() {
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
	}
	stopTimer()
	for {
		if d := f.manageStep(); d > 0 {
			t.Reset(d)
		}
		select {
		case <-mg.stop:
			stopTimer()
			return
		case <-mg.kick:
		case <-t.C:
		}
		stopTimer()
	}
}

// manageStep handles the signals received, the failures found, the
// deadlines passed and the retired connections drained; it returns when
// it wants to run again (0: when kicked).
func (f *Fabric) manageStep() time.Duration {
	mg := &f.mgr
	mg.mu.Lock()
	msgs := mg.inbox
	mg.inbox = mg.spare[:0]
	mg.mu.Unlock()
	for i := range msgs {
		f.onSignal(msgs[i].rank, msgs[i].b[:msgs[i].n])
	}
	mg.mu.Lock()
	mg.spare = msgs[:0]
	mg.mu.Unlock()

	var wait time.Duration
	sooner := func(d time.Duration) {
		if d <= 0 {
			d = time.Millisecond
		}
		if wait == 0 || d < wait {
			wait = d
		}
	}
	for r := range f.peers {
		p := &f.peers[r]
		switch {
		case p.lost.Load() != nil:
			if !p.lostDone {
				f.settleLost(r)
			}
		case p.up && p.cur.faulted.Load():
			f.begin(r, p.cur.gen+1)
		case !p.up && p.next != nil && p.next.faulted.Load():
			f.begin(r, p.next.gen+1)
		case !p.up && p.cur == nil && p.next == nil && p.want.Load():
			f.begin(r, 1) // first use
		case !p.up && !p.deadline.IsZero() && time.Now().After(p.deadline):
			f.lose(r, fmt.Errorf("its connection was not established within %v", f.reconnectTimeout))
		}
		if !p.up && p.lost.Load() == nil && p.next != nil && (p.unsent[0] || p.unsent[1]) {
			f.resend(r)
			if p.unsent[0] || p.unsent[1] {
				sooner(f.peerTimeout / 10)
			}
		}
		if !p.up && p.lost.Load() == nil && !p.deadline.IsZero() {
			sooner(time.Until(p.deadline))
		}
		if len(p.retired) > 0 && !f.reap(r) {
			sooner(10 * time.Millisecond)
		}
	}
	return wait
}

// begin starts generation gen of the connection to rank: it retires the
// connection in use (and one half set up), creates a fresh one and tells
// the peer its endpoint.
func (f *Fabric) begin(rank int, gen uint32) {
	p := &f.peers[rank]
	f.m.recvMu.Lock()
	p.qmu.Lock()
	wasUp := p.up
	p.up = false
	p.unready.Store(true)
	if p.ready == nil {
		p.ready = make(chan struct{})
	}
	p.qmu.Unlock()
	if wasUp {
		f.retireLocked(rank, p.cur)
	}
	if wasUp || p.deadline.IsZero() {
		p.deadline = time.Now().Add(f.reconnectTimeout)
	}
	if p.next != nil {
		f.retireLocked(rank, p.next)
		p.next = nil
	}
	f.m.recvMu.Unlock()
	p.haveRemote, p.peerReady, p.unsent = false, false, [2]bool{}
	c, err := f.newConn(rank, gen)
	if err != nil {
		f.lose(rank, fmt.Errorf("re-creating its queue pair: %w", err))
		return
	}
	p.next = c
	if rank == f.rank {
		if err := f.connectLoopback(c); err != nil {
			f.lose(rank, fmt.Errorf("reconnecting the loopback pair: %w", err))
			return
		}
		c.connected = true
		f.up(rank)
		return
	}
	p.unsent[0] = true
	f.resend(rank)
}

// resend sends rank the signals of the exchange for p.next that are due and
// not sent yet: its endpoint (RECONNECT), then READY once it is connected.
// A Signaller that fails (its own connection being re-established) is tried
// again by the manager until the exchange's deadline: only the deadline
// marks the peer lost.
func (f *Fabric) resend(rank int) {
	p := &f.peers[rank]
	c := p.next
	if p.unsent[0] {
		var msg [sigReconnectLen]byte
		msg[0] = sigReconnect
		binary.LittleEndian.PutUint32(msg[1:], c.gen)
		c.probeLocal.AppendBinary(c.local.AppendBinary(msg[:sigHeader]))
		if f.signal(rank, msg[:]) != nil {
			return
		}
		p.unsent[0] = false
	}
	if p.unsent[1] {
		var msg [sigHeader]byte
		msg[0] = sigReady
		binary.LittleEndian.PutUint32(msg[1:], c.gen)
		if f.signal(rank, msg[:]) != nil {
			return
		}
		p.unsent[1] = false
	}
}

// retireLocked takes c out of use; recvMu is held. Requests sent on it
// that got no reply are to be sent again (resendRequests).
func (f *Fabric) retireLocked(rank int, c *conn) {
	p := &f.peers[rank]
	c.retired.Store(true)
	c.setError()
	p.retired = append(p.retired, c)
	mp := &f.m.peers[rank]
	for i := range mp.credits {
		cr := &mp.credits[i]
		if cr.conn != c || !cr.state.CompareAndSwap(slotBusy, creditResend) {
			continue
		}
		cr.conn = nil
		mp.resending.Store(true)
	}
}

// onSignal handles a reconnect message from rank.
func (f *Fabric) onSignal(rank int, msg []byte) {
	p := &f.peers[rank]
	if p.lost.Load() != nil {
		return
	}
	gen := binary.LittleEndian.Uint32(msg[1:])
	switch msg[0] {
	case sigReconnect:
		if len(msg) != sigReconnectLen {
			return
		}
		ep, err := verbs.DecodeEndpoint(msg[sigHeader : sigHeader+verbs.EndpointSize])
		if err != nil {
			return
		}
		probe, err := verbs.DecodeEndpoint(msg[sigHeader+verbs.EndpointSize:])
		if err != nil {
			return
		}
		var cur uint32 // 0: never connected
		if p.cur != nil {
			cur = p.cur.gen
		}
		if !p.up && p.next != nil {
			cur = p.next.gen
		}
		if gen < cur || (gen == cur && (p.up || p.haveRemote)) {
			return // stale, or said already
		}
		if gen > cur {
			f.begin(rank, gen)
		}
		if p.next == nil || p.next.gen != gen {
			return // begin failed: the peer is lost
		}
		p.remote, p.remoteProbe, p.haveRemote = ep, probe, true
		f.connectNext(rank)
	case sigFenced:
		f.MarkLost(rank, errors.New("it found this rank lost and fenced it off"))
	case sigReady:
		if len(msg) != sigHeader || p.up || p.next == nil || p.next.gen != gen || p.peerReady {
			return
		}
		p.peerReady = true
		if p.next.connected {
			f.up(rank)
		}
	}
}

// connectNext connects the new connection to the peer's endpoint, posts
// its receives and tells the peer it is ready.
func (f *Fabric) connectNext(rank int) {
	p := &f.peers[rank]
	c := p.next
	path := f.path
	path.Timeout = f.ackTimeout(rank)
	if err := c.qp.Connect(&path, c.local, p.remote); err != nil {
		f.lose(rank, fmt.Errorf("connecting its new queue pair: %w", err))
		return
	}
	if c.probe != nil {
		if err := c.probe.Connect(&path, c.probeLocal, p.remoteProbe); err != nil {
			f.lose(rank, fmt.Errorf("connecting its new probe queue pair: %w", err))
			return
		}
	}
	c.connected = true
	p.unsent[1] = true
	f.resend(rank)
	if p.peerReady {
		f.up(rank)
	}
}

// up puts the new connection in use and wakes the callers waiting for it.
func (f *Fabric) up(rank int) {
	p := &f.peers[rank]
	p.qmu.Lock()
	p.cur = p.next
	p.up = true
	close(p.ready)
	p.ready = nil
	if !p.cur.faulted.Load() {
		p.unready.Store(false)
	}
	p.qmu.Unlock()
	p.next, p.deadline = nil, time.Time{}
	p.want.Store(false)
}

// lose marks rank lost because its connection could not be re-established.
func (f *Fabric) lose(rank int, cause error) {
	f.setLost(rank, cause)
	f.settleLost(rank)
}

// settleLost fails rank's connections and wakes the callers waiting for a
// re-established one: they find the peer lost. Then rank is fenced off:
// nothing it sends can reach this rank's memory any more (its queue pairs
// are in the error state and no new one will be made for it), which the
// fence word tells the other ranks (Fenced).
func (f *Fabric) settleLost(rank int) {
	p := &f.peers[rank]
	p.lostDone = true
	f.m.recvMu.Lock()
	p.qmu.Lock()
	if rank != f.rank && p.cur != nil {
		p.cur.setError()
	}
	if p.ready != nil {
		close(p.ready)
		p.ready = nil
	}
	p.qmu.Unlock()
	if p.next != nil {
		f.retireLocked(rank, p.next)
		p.next = nil
	}
	f.m.recvMu.Unlock()
	if rank != f.rank {
		atomic.StoreUint64((*uint64)(unsafe.Pointer(&f.probeMem[8+8*rank])), 1)
		// Tell it, if it lives and can hear (best effort): its requests to
		// this rank now go unanswered, which alone its transport would
		// retry without end.
		if e := p.lost.Load(); e != nil && !errors.Is(*e, ErrPeerLeft) {
			f.signal(rank, []byte{sigFenced, 0, 0, 0, 0})
		}
	}
}

// Fenced reports whether target has fenced holder off: target found it
// lost and failed every queue pair with it for good, so that nothing
// holder sends can reach target's memory any more (a Put posted before
// landed or fails). This is the evidence a rank needs before it takes
// back what holder held in target's memory (a lock word): that this rank
// believes holder dead is not enough, since a falsely suspected holder
// may still write under the lock. It reads target's fence word for holder
// (an RDMA READ, or this rank's own word).
func (f *Fabric) Fenced(ctx context.Context, target, holder int) (bool, error) {
	if target < 0 || target >= f.size || holder < 0 || holder >= f.size {
		return false, fmt.Errorf("%w: ranks %d and %d of %d", verbs.ErrInvalid, target, holder, f.size)
	}
	if target == f.rank {
		if err := f.enter(); err != nil {
			return false, err
		}
		defer f.exit()
		return atomic.LoadUint64((*uint64)(unsafe.Pointer(&f.probeMem[8+8*holder]))) != 0, nil
	}
	p := &f.peers[target]
	v, err := f.Read8(ctx, target, p.probeAddr+8+8*uint64(holder), p.probeRKey)
	return v != 0, err
}

// reap destroys the retired connections to rank whose requests have all
// completed, and reports whether none is left.
func (f *Fabric) reap(rank int) bool {
	p := &f.peers[rank]
	// Collect flushed completions if no caller is polling.
	if f.pollMu.TryLock() {
		f.pollLocked()
		f.pollMu.Unlock()
	}
	kept := p.retired[:0]
	for _, c := range p.retired {
		if c == p.cur || c.posted.Load() != c.completed.Load() {
			kept = append(kept, c)
			continue
		}
		f.unregister(c)
		p.qmu.Lock()
		c.close()
		p.qmu.Unlock()
	}
	clear(p.retired[len(kept):])
	p.retired = kept
	return len(kept) == 0
}
