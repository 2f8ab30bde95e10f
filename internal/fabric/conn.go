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

// Connections and their re-establishment.
//
// Every rank has one RC connection to every rank it talks to (to itself
// through a loopback pair, made at start). The connection to another rank
// is made on first use: the caller asks the manager for it (peer.want),
// and the manager starts generation 1 of the pair exactly as it
// re-establishes a failed one, below.
//
// A failed work completion leaves the QP in the error state, and on a
// remote fault the peer's QP too. The pair is then replaced by a new
// generation: the side that sees the failure (a failed completion) retires
// its QP and sends the peer, out of band through the Signaller,
// RECONNECT(gen, endpoint of a fresh QP). The peer, on receiving it,
// retires its own QP, creates a fresh one and answers with its RECONNECT.
// Each side, once it holds the other's endpoint, connects its new QP (INIT,
// RTR, RTS) and sends READY(gen); it lets requests go out on the new QP
// only when it has the peer's READY as well, that is once the peer's QP is
// past RTR, so that nothing is sent to a QP that would drop it. Both sides
// may start at once (each then answers the other's RECONNECT); messages of
// an older generation are ignored, and one of a newer generation restarts
// the exchange at that generation. The loopback pair is re-created
// locally.
//
// Callers to a rank whose pair is being replaced wait for it (within their
// context and ReconnectTimeout); a pair not re-established within
// ReconnectTimeout has its peer marked lost. Requests of a retired QP
// complete (flushed) like any other; the QP is destroyed once they all have.
// Active messages sent on it that got no reply are sent again on the new
// one (see msg.go: the target applies each at most once).

// conn is one generation of the RC connection to a rank.
type conn struct {
	rank      int
	gen       uint32 // agreed with the peer: 1 at first, one more per re-establishment
	qp        *verbs.QP
	resp      *verbs.QP      // own rank only: the loopback pair's responder half
	local     verbs.Endpoint // qp's endpoint (with the PSN the peer is told)
	respLocal verbs.Endpoint
	// posted and completed count the send work requests on qp and resp: a
	// retired connection is destroyed once they are equal.
	posted, completed atomic.Uint64
	faulted           atomic.Bool // a failed completion showed it is in the error state
	retired           atomic.Bool // replaced: nothing more is posted to it (set under recvMu)
	connected         bool        // RTS (set by New or the manager)
}

func (f *Fabric) newConn(rank int, gen uint32) (c *conn, err error) {
	c = &conn{rank: rank, gen: gen}
	if c.qp, err = f.pd.CreateQP(f.qpc); err != nil {
		return nil, err
	}
	c.local = f.endpoint(c.qp)
	if rank == f.rank {
		if c.resp, err = f.pd.CreateQP(f.qpc); err != nil {
			c.qp.Close()
			return nil, err
		}
		c.respLocal = f.endpoint(c.resp)
	}
	f.register(c)
	return c, nil
}

// connectLoopback connects the two halves of the loopback pair.
func (f *Fabric) connectLoopback(c *conn) error {
	if err := c.resp.Connect(&f.path, c.respLocal, c.local); err != nil {
		return err
	}
	return c.qp.Connect(&f.path, c.local, c.respLocal)
}

// setError moves the connection's QPs to the error state: what is queued on
// them completes, flushed.
func (c *conn) setError() {
	c.qp.SetError()
	if c.resp != nil {
		c.resp.SetError()
	}
}

func (c *conn) close() error {
	var errs []error
	if c.qp != nil {
		errs = append(errs, c.qp.Close())
		c.qp = nil
	}
	if c.resp != nil {
		errs = append(errs, c.resp.Close())
		c.resp = nil
	}
	return errors.Join(errs...)
}

type peer struct {
	// qmu guards cur, up and ready. Posting to cur holds it for reading, so
	// the manager, holding it for writing, knows nobody posts to a
	// connection it retires.
	qmu   sync.RWMutex
	cur   *conn                 // the connection in use, or the one being replaced
	up    bool                  // requests may be posted to cur
	ready chan struct{}         // while !up: closed once the pair is up again, or lost
	lost  atomic.Pointer[error] // set once the peer is known gone
	// want: a caller needs the connection, never made yet (cur is nil).
	want atomic.Bool
	// unready: cur may have failed and not been replaced yet. A call sees
	// it before it takes a slot, and waits for the new connection without
	// holding one (the engine's replies need them).
	unready atomic.Bool

	probeAddr uint64
	probeRKey uint32
	posted    atomic.Uint64
	completed atomic.Uint64
	mu        sync.Mutex
	err       error // first error of a fire-and-forget request since the last Flush
	// redo: WRITEs whose connection failed, to be posted again (reissue);
	// redoing: redo is not empty. Both under mu.
	redo    []uint32
	redoing atomic.Bool

	// The manager's alone: the connection being set up while !up, the
	// peer's endpoint for it and whether the peer is ready, the deadline of
	// the re-establishment; retired connections not yet destroyed.
	next       *conn
	remote     verbs.Endpoint
	haveRemote bool
	peerReady  bool
	deadline   time.Time
	retired    []*conn
	lostDone   bool
	// unsent: signals of the exchange that the Signaller could not carry
	// yet (its connection being re-established); sent again until the
	// deadline.
	unsent [2]bool // RECONNECT, READY
}

// use returns rank's connection, ready to post to, with the peer's qmu held
// for reading: the caller posts, then calls p.qmu.RUnlock. While the
// connection is being re-established it waits, within ctx.
func (f *Fabric) use(ctx context.Context, rank int) (*conn, error) {
	p := &f.peers[rank]
	var since time.Time
	for i := 0; ; i++ {
		p.qmu.RLock()
		if e := p.lost.Load(); e != nil {
			p.qmu.RUnlock()
			return nil, *e
		}
		if p.up && !p.cur.faulted.Load() {
			return p.cur, nil
		}
		if p.up {
			// Failed, and the manager has not taken it out of use yet:
			// anything posted now would be flushed. Wait for it (it
			// runs as soon as it is kicked).
			p.qmu.RUnlock()
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if since.IsZero() {
				since = time.Now()
			} else if time.Since(since) > f.reconnectTimeout {
				return nil, fmt.Errorf("fabric: %w: rank %d: failed connection not replaced within %v", ErrPeerLost, rank, f.reconnectTimeout)
			}
			f.kick()
			time.Sleep(time.Duration(min(i+1, 20)) * 50 * time.Microsecond)
			continue
		}
		ready := p.ready
		first := p.cur == nil
		p.qmu.RUnlock()
		if first && !p.want.Load() && p.want.CompareAndSwap(false, true) {
			f.kick() // the first use: have the manager connect
		}
		if err := f.awaitUp(ctx, rank, ready); err != nil {
			return nil, err
		}
	}
}

// awaitUp waits until ready is closed (the pair is up again, or lost).
// The manager closes it within ReconnectTimeout; the timer is a backstop.
func (f *Fabric) awaitUp(ctx context.Context, rank int, ready chan struct{}) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t := time.NewTimer(f.reconnectTimeout + f.peerTimeout)
	defer t.Stop()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-f.closed:
		return errClosed
	case <-t.C:
		return fmt.Errorf("fabric: %w: rank %d: connection not established within %v", ErrPeerLost, rank, f.reconnectTimeout)
	}
}

// fault records that c is in the error state and has the manager replace it.
func (f *Fabric) fault(c *conn) {
	if c != nil && c.faulted.CompareAndSwap(false, true) {
		if !c.retired.Load() {
			f.peers[c.rank].unready.Store(true)
		}
		f.kick()
	}
}

// awaitUsable waits, if rank's connection may be failed or being
// re-established, until it is usable again.
func (f *Fabric) awaitUsable(ctx context.Context, rank int) error {
	p := &f.peers[rank]
	if !p.unready.Load() {
		return nil
	}
	if _, err := f.use(ctx, rank); err != nil {
		return err
	}
	p.qmu.RUnlock()
	return nil
}

// setLost records that rank is gone; calls to it fail from now on. It
// takes no lock: completion handling calls it.
func (f *Fabric) setLost(rank int, cause error) {
	err := fmt.Errorf("fabric: %w: rank %d: %w", ErrPeerLost, rank, cause)
	if f.peers[rank].lost.CompareAndSwap(nil, &err) {
		if !errors.Is(cause, ErrPeerLeft) {
			f.lostCancel(err)
		}
		f.mgr.losses.fire()
		f.kick()
	}
}

// Lost is done once some peer has been lost other than by leaving
// (ErrPeerLeft); context.Cause gives the error of the first.
func (f *Fabric) Lost() context.Context { return f.lostCtx }

// Losses returns a channel that is closed at the next loss of a peer after
// the call (one that left, ErrPeerLeft, too): at every loss, not only the
// first as Lost. A caller that takes it, then checks the peers it cares
// about (PeerErr), then waits on it, misses none: a loss before the check
// is seen by the check (PeerErr reports a peer before its loss is
// announced), and one after closes the channel.
func (f *Fabric) Losses() <-chan struct{} { return f.mgr.losses.next() }

// lossNotice is a broadcast at each loss: the channel of the next one,
// made when somebody first waits for it and closed (and dropped) at it.
// It takes no lock, as setLost may not.
type lossNotice struct {
	ch atomic.Pointer[chan struct{}]
}

func (n *lossNotice) next() <-chan struct{} {
	for {
		if p := n.ch.Load(); p != nil {
			return *p
		}
		c := make(chan struct{})
		if n.ch.CompareAndSwap(nil, &c) {
			return c
		}
	}
}

func (n *lossNotice) fire() {
	if p := n.ch.Swap(nil); p != nil {
		close(*p)
	}
}

// MarkLost records that rank is gone (its process died): calls to it fail
// with ErrPeerLost from now on, including those in flight. Its QP is moved
// to the error state, so every request in flight to it completes (flushed)
// even if the transport has not timed it out yet.
func (f *Fabric) MarkLost(rank int, cause error) {
	if f.enter() != nil {
		return // closed: every peer reads as gone already
	}
	defer f.exit()
	f.setLost(rank, cause)
	if rank == f.rank {
		return
	}
	p := &f.peers[rank]
	p.qmu.RLock()
	if p.cur != nil {
		p.cur.setError()
	}
	p.qmu.RUnlock()
}

// peerErr is the error of calls to a rank known to be gone, or nil.
func (f *Fabric) peerErr(rank int) error {
	if e := f.peers[rank].lost.Load(); e != nil {
		return *e
	}
	return nil
}

// PeerErr reports whether rank is known to be gone (an error wrapping
// ErrPeerLost) or not (nil).
func (f *Fabric) PeerErr(rank int) error { return f.peerErr(rank) }

// probe reads rank's probe word: see Probe.
func (f *Fabric) probe(ctx context.Context, rank int) error {
	p := &f.peers[rank]
	_, err := f.Read8(ctx, rank, p.probeAddr, p.probeRKey)
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		if p.unready.Load() {
			return nil // its pair is being re-established: nothing was asked
		}
		return ctx.Err()
	}
	if errors.Is(err, ErrPeerLost) {
		f.MarkLost(rank, err)
		return f.peerErr(rank)
	}
	return nil
}

// Probe reads rank's probe word over RDMA: the evidence of whether a rank
// lives when another channel to it went quiet. It returns ctx's error if
// the read was asked and not answered before ctx ended (the transport
// retries a read to a dead host without end on Soft-RoCE), and marks rank
// lost and returns its error if the transport gave up and the queue pair
// could not be re-established. Other failures, and a ctx that ends while
// the pair is being re-established, say nothing about rank: nil.
func (f *Fabric) Probe(ctx context.Context, rank int) error {
	if err := f.enter(); err != nil {
		return err
	}
	defer f.exit()
	return f.probe(ctx, rank)
}

// --- the manager ---

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

const (
	sigReconnect = 1 // gen (4 bytes, little endian), endpoint
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
		var msg [sigHeader + verbs.EndpointSize]byte
		msg[0] = sigReconnect
		binary.LittleEndian.PutUint32(msg[1:], c.gen)
		c.local.AppendBinary(msg[:sigHeader])
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
		if len(msg) != sigHeader+verbs.EndpointSize {
			return
		}
		ep, err := verbs.DecodeEndpoint(msg[sigHeader:])
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
		p.remote, p.haveRemote = ep, true
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
