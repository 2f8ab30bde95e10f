package fabric

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/onesided/rma/verbs"
)

// Connections and their re-establishment.
//
// Every rank has one RC connection to every rank it talks to (two queue
// pairs, see conn; to itself through a loopback pair, made at start). The
// connection to another rank is made on first use: the caller asks the
// manager for it (peer.want), and the manager starts generation 1 of the
// pair exactly as it re-establishes a failed one, below.
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
// one (see msg.go: the target applies each at most once). The manager
// and the protocol are in reconnect.go.

// conn is one generation of the RC connection to a rank.
//
// To another rank it is two queue pairs: qp for everything, and probe for
// the liveness probe's READ alone (see Probe). An RC queue pair answers in
// order, so a probe on qp would wait behind everything posted before it:
// on a lossy wire, behind a long WRITE that the transport retries for
// longer than the peer timeout. The two are made, exchanged, connected,
// failed and destroyed together.
type conn struct {
	rank       int
	gen        uint32 // agreed with the peer: 1 at first, one more per re-establishment
	qp         *verbs.QP
	resp       *verbs.QP      // own rank only: the loopback pair's responder half
	probe      *verbs.QP      // other ranks only: the probe's
	local      verbs.Endpoint // qp's endpoint (with the PSN the peer is told)
	respLocal  verbs.Endpoint
	probeLocal verbs.Endpoint
	// posted and completed count the send work requests on its QPs: a
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
	} else {
		if c.probe, err = f.pd.CreateQP(f.qpc); err != nil {
			c.qp.Close()
			return nil, err
		}
		c.probeLocal = f.endpoint(c.probe)
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
	if c.probe != nil {
		c.probe.SetError()
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
	if c.probe != nil {
		errs = append(errs, c.probe.Close())
		c.probe = nil
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
	next        *conn
	remote      verbs.Endpoint
	remoteProbe verbs.Endpoint // its probe QP's
	haveRemote  bool
	peerReady   bool
	deadline    time.Time
	retired     []*conn
	lostDone    bool
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
	id, err := f.readSmall(ctx, rank, wordProbe, p.probeAddr, p.probeRKey, 8)
	if err == nil {
		f.releaseSlot(id)
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

// Probe reads rank's probe word over RDMA, on a queue pair of its own (see
// conn): the evidence of whether a rank lives when another channel to it
// went quiet. It returns ctx's error if the read was asked and not
// answered before ctx ended (the transport retries a read to a dead host
// without end on Soft-RoCE), and marks rank lost and returns its error if
// the transport gave up and the queue pair could not be re-established.
// Other failures, and a ctx that ends while the pair is being
// re-established, say nothing about rank: nil.
func (f *Fabric) Probe(ctx context.Context, rank int) error {
	if err := f.enter(); err != nil {
		return err
	}
	defer f.exit()
	return f.probe(ctx, rank)
}

// --- the manager ---
