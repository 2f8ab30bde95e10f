package service

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/onesided/rma"
	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/internal/core"
	"github.com/onesided/rma/internal/procs"
	"github.com/onesided/rma/verbs"
)

// Client is a connection to a Server. See Dial.
type Client struct {
	cfg  ClientConfig
	addr netip.AddrPort

	ch  *verbs.EventChannel
	id  *verbs.CMID
	dev *verbs.Context
	pd  *verbs.PD
	vcc *verbs.CompChannel
	vcq *verbs.CQ
	vqp *verbs.QP
	buf []byte // result word, send buffer, receive buffers, staging
	vmr *verbs.MR
	// What the calls use of vcc, vcq, vqp and vmr (set by Dial; the unit
	// tests give stand-ins).
	cc clientCC
	cq clientCQ
	qp clientQP
	mr clientMR
	// The 8 bytes the server's probes READ (and nothing else the server
	// can reach), and where and with what key (sent in msgAuth).
	probe     []byte
	probeMR   *verbs.MR
	probeAddr uint64
	probeKey  uint32

	atomics bool  // the NIC atomics are used: both devices have them and they passed the probe
	noNIC   error // why they are not (NICAtomics)
	wcancel context.CancelFunc
	wdone   chan struct{}
	lost    atomic.Bool // the connection manager reported a disconnect
	closing atomic.Bool // Close was called: calls waiting for the server return ErrClosed

	stats counters

	lockSlots chan struct{} // bounds the lock requests waiting (maxLockWaits)

	// The calls that are one work request or one engine message each
	// take a lane: many of them are in flight at once, none holding mu
	// while it waits (lane.go).
	lanes   [maxLanes]lane
	free    atomic.Uint32 // the free lanes, a bit each
	parked  atomic.Uint32 // lanes whose caller waits to be handed the polling of the CQ
	quiet   atomic.Bool   // no request pending and no reply awaited: a lane call may pass the calls under mu
	failed  atomic.Bool   // err is set
	engines atomic.Int32  // lanes carrying engine messages (at most engineLanes)
	laneSeq atomic.Uint32 // counts the engine messages of lanes (their sequence numbers)
	use     sync.RWMutex  // lane calls read-hold it; Close takes it before it frees the QP
	// The lanes' work requests: each lane's (its caller writes it before
	// it enqueues the lane), those enqueued for the holder of mu to
	// post, and whether that holder sleeps on the completion channel.
	wrs      [maxLanes]verbs.SendWR
	toPost   atomic.Uint32
	sleeping atomic.Bool

	mu       callMu // serializes the other calls; guards what follows
	closed   bool
	awaiting uint32      // a request whose caller left before its reply came
	pend     *Request    // the operation a request-based call started, not finished
	waits    []*lockWait // lock requests sent, not answered yet
	err      error       // the connection failed: every call returns it
	posted   uint64      // id of the last send work request posted
	done     uint64      // id of the last one completed (they complete in order)
	seq      uint32      // the current request's sequence number
	replySeq uint32      // the sequence number of the reply in reply
	replyLen int
	reply    [recvSize]byte
	wcs      [8]verbs.WC
	posting  [maxLanes]verbs.SendWR // the work requests postPending posts
	nudged   bool                   // a lane's caller was woken since the poller last yielded
	scratch  core.Scratch           // the compare-and-swap loops' operands
	cas      [64]byte               // an engine compare-and-swap: compare, then origin
	discard  [maxFetchData]byte     // old values: of an abandoned request, of a piece of GetAccumulateTo

	// The rkeys of the windows opened, by the handle a Window holds
	// (they change when the session is resumed); and what resume.go
	// needs to resume the session.
	rkeys []uint32
	resumeState
}

// Layout of Client.buf.
const (
	resultOff  = 0
	sendOff    = 64                 // a message of up to recvSize bytes
	recvOff    = sendOff + recvSize // clientRecv buffers of recvSize bytes
	clientRecv = 7 + engineLanes    // a reply, maxLockWaits grants and the lanes' replies fit
	// Then, from a page, ClientConfig.StagingSize bytes, then a slot per
	// lane.
	stagingOff = (recvOff + clientRecv*recvSize + 4095) &^ 4095
	// Then a slot per lane (laneOff), then resumeLen bytes for the
	// messages of a resumption (resume.go).

	recvTag   = 1 << 63 // marks receive work request ids
	spinPolls = 64      // CQ polls before sleeping on the channel
)

// Dial connects to the server at addr (host:port; a host name is looked
// up first) and authenticates: the client proves it holds cfg.Secret, and
// the server proves it holds it too. It fails with an error matching
// ErrAuth when either proof fails, ErrServerFull when the server has as
// many connections as it takes, verbs.ErrNoListener when nothing listens
// there, and ErrProtocol when the peer does not speak this protocol.
//
// A Client may be used by many goroutines at once. A FetchAndOp or
// CompareAndSwap that is one NIC atomic (the route of atomics' default
// policy for SUM, NO_OP and compare-and-swap on 64-bit integers), a Put or
// Get of 1 to 256 bytes, and an Accumulate, GetAccumulate, FetchAndOp or
// CompareAndSwap that is one message of at most 256 bytes to the server's
// engine (up to 8 of these at once) run beside the others, up to 16 in
// flight on the connection; the other calls are carried out one at a
// time. Calls of different goroutines are not ordered with each other
// (those of one goroutine are). Close it to release its connection and
// memory.
//
// Like Listen, Dial gives a process with one P (GOMAXPROCS 1) a second
// one unless the GOMAXPROCS environment variable set it (see the package
// documentation).
func Dial(ctx context.Context, addr string, cfg ClientConfig) (c *Client, err error) {
	procs.Ensure()
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	ap, err := resolve(ctx, addr)
	if err != nil {
		return nil, err
	}
	c = &Client{cfg: cfg, addr: ap, lockSlots: make(chan struct{}, maxLockWaits)}
	c.initLanes()
	made := c
	defer func() {
		if err != nil {
			made.release()
			c = nil
		}
	}()
	if c.ch, err = verbs.NewEventChannel(); err != nil {
		return nil, err
	}
	if c.id, err = c.newID(ctx); err != nil {
		return nil, err
	}
	route, err := c.id.Route()
	if err != nil {
		return nil, err
	}
	if c.dev, err = verbs.OpenCM(route.Device); err != nil {
		return nil, err
	}
	if err = c.setUp(); err != nil {
		return nil, err
	}
	var cNonce, sNonce [nonceLen]byte
	c.vqp, cNonce, sNonce, err = c.connect(ctx, c.id)
	if err != nil {
		var ce *verbs.CMError
		if errors.As(err, &ce) && ce.Event == verbs.CMRejected {
			switch parseReject(ce.PrivateData) {
			case rejectFull:
				return nil, fmt.Errorf("service: dial %v: %w (%w)", ap, ErrServerFull, err)
			case rejectProtocol:
				return nil, fmt.Errorf("service: dial %v: %w: the server refused the handshake (%w)", ap, ErrProtocol, err)
			}
		}
		return nil, fmt.Errorf("service: dial %v: %w", ap, err)
	}
	if err = c.useQP(); err != nil {
		c.id.Disconnect()
		return nil, err
	}
	c.startWatch()
	if err = c.authenticate(ctx, &cNonce, &sNonce); err != nil {
		c.id.Disconnect()
		return nil, err
	}
	c.reconnect, c.breakQP = c.redial, func() { c.vqp.SetError() }
	c.startKeepalive()
	return c, nil
}

// setUp makes, on c.dev, the client's CQ, its registered buffer and the
// probe word.
func (c *Client) setUp() error {
	attr, err := c.dev.QueryDevice()
	if err != nil {
		return err
	}
	c.atomics = attr.AtomicCap != verbs.AtomicNone
	if !c.atomics {
		c.noNIC = fmt.Errorf("service: %w: device %s has no remote atomics", verbs.ErrNotSupported, c.dev.Name())
	}
	if c.pd, err = c.dev.AllocPD(); err != nil {
		return err
	}
	if c.vcc, err = c.dev.CreateCompChannel(); err != nil {
		return err
	}
	if c.vcq, err = c.dev.CreateCQ(sendDepth+clientRecv, c.vcc); err != nil {
		return err
	}
	if c.buf, err = verbs.Alloc(c.resumeOff() + resumeLen); err != nil {
		return err
	}
	if c.vmr, err = c.pd.RegisterMR(c.buf, verbs.AccessLocalWrite); err != nil {
		return err
	}
	if c.probe, err = verbs.Alloc(8); err != nil {
		return err
	}
	if c.probeMR, err = c.pd.RegisterMR(c.probe[:8], verbs.AccessRemoteRead); err != nil {
		return err
	}
	c.probeAddr, c.probeKey = c.probeMR.Addr(), c.probeMR.RKey()
	return nil
}

// useQP takes c.vqp, made on c.vcq, for its calls, and posts its receives.
func (c *Client) useQP() error {
	c.cc, c.cq, c.qp, c.mr = c.vcc, c.vcq, verbsQP{c.vqp}, c.vmr
	c.qpn = c.vqp.Num()
	return c.postRecvs()
}

// postRecvs posts the receives on c.qp.
func (c *Client) postRecvs() error {
	for i := 0; i < clientRecv; i++ {
		if err := c.qp.PostRecv(recvTag|uint64(i), c.mr.Local(recvOff+i*recvSize, recvSize)); err != nil {
			return err
		}
	}
	return nil
}

// newID makes a connection manager id, resolved to the server.
func (c *Client) newID(ctx context.Context) (*verbs.CMID, error) {
	id, err := c.ch.CreateID()
	if err != nil {
		return nil, err
	}
	if err = id.ResolveAddr(ctx, netip.Addr{}, c.addr); err == nil {
		err = id.ResolveRoute(ctx)
	}
	if err != nil {
		id.Close()
		return nil, err
	}
	return id, nil
}

// connect makes id's QP, on the client's PD and CQ, and connects it to
// the server, returning the handshake's nonces. The QP posts nothing yet
// (the server sends nothing before the client's msgAuth).
func (c *Client) connect(ctx context.Context, id *verbs.CMID) (qp *verbs.QP, cNonce, sNonce [nonceLen]byte, err error) {
	if _, err = rand.Read(cNonce[:]); err != nil {
		return nil, cNonce, sNonce, err
	}
	if err = id.SetAckTimeout(c.cfg.AckTimeout); err != nil {
		return nil, cNonce, sNonce, err
	}
	if qp, err = id.CreateQP(c.pd, verbs.QPConfig{SendCQ: c.vcq, RecvCQ: c.vcq, MaxSendWR: sendDepth, MaxRecvWR: clientRecv}); err != nil {
		return nil, cNonce, sNonce, err
	}
	ev, err := id.Connect(ctx, verbs.ConnParam{PrivateData: appendHello(nil, &cNonce)})
	if err == nil {
		if sNonce, err = parseHello(ev.PrivateData); err != nil {
			id.Disconnect()
		}
	}
	if err != nil {
		qp.Close()
		return nil, cNonce, sNonce, err
	}
	qp.SetMinRNRTimer(12)
	return qp, cNonce, sNonce, nil
}

// startWatch starts watch on c.id.
func (c *Client) startWatch() {
	wctx, cancel := context.WithCancel(context.Background())
	c.wcancel, c.wdone = cancel, make(chan struct{})
	go c.watch(c.id, wctx)
}

// stopWatch stops watch.
func (c *Client) stopWatch() {
	if c.wcancel != nil {
		c.wcancel()
		<-c.wdone
		c.wcancel = nil
	}
}

// redial connects to the server again on a new QP, which the calls then
// use, and returns the handshake's nonces (resumeState.reconnect). The
// failed QP and its connection go once the session is resumed on the new
// one: their disconnect must not reach the server before.
func (c *Client) redial(ctx context.Context) (cNonce, sNonce [nonceLen]byte, err error) {
	id, err := c.newID(ctx)
	if err != nil {
		return cNonce, sNonce, err
	}
	qp, cNonce, sNonce, err := c.connect(ctx, id)
	if err != nil {
		id.Close()
		return cNonce, sNonce, err
	}
	c.stopWatch()
	c.lost.Store(false) // the failed connection's disconnect, if its watch saw it
	c.stale = append(c.stale, c.vqp, c.id)
	c.id, c.vqp = id, qp
	c.qp, c.qpn = verbsQP{qp}, qp.Num()
	c.startWatch()
	return cNonce, sNonce, nil
}

// dropStale destroys the QPs and connections the session left.
func (c *Client) dropStale() {
	for _, o := range c.stale {
		switch o := o.(type) {
		case *verbs.QP:
			o.Close()
		case *verbs.CMID:
			o.Disconnect()
			o.Close()
		}
	}
	clear(c.stale)
	c.stale = c.stale[:0]
}

// watch waits for the connection manager's events: a disconnect (the
// server closed, died or dropped the connection) fails every call.
func (c *Client) watch(id *verbs.CMID, ctx context.Context) {
	defer close(c.wdone)
	for {
		ev, err := id.Event(ctx)
		if err != nil {
			return
		}
		if ev.Type == verbs.CMDisconnected || ev.Type == verbs.CMDeviceRemoval {
			c.lost.Store(true)
			c.cc.Wake()
			go c.mendIdle()
		}
	}
}

func (c *Client) authenticate(ctx context.Context, cNonce, sNonce *[nonceLen]byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nextSeq()
	n := putAuth(c.buf[sendOff:], c.seq, c.cfg.Secret, sNonce, cNonce, c.probeAddr, c.probeKey, &session{}, c.cfg.Name)
	if err := c.request(ctx, n); err != nil {
		if errors.Is(err, verbs.ErrPeerLost) {
			return fmt.Errorf("service: the server dropped the connection before authenticating it: %w", err)
		}
		return err
	}
	switch c.reply[0] {
	case msgAuthFail:
		return fmt.Errorf("%w: the server refused the client's proof (the secrets differ)", ErrAuth)
	case msgAuthOK:
		r, ok := parseAuthOK(c.reply[:c.replyLen], c.cfg.Secret, cNonce, sNonce)
		if !ok {
			return fmt.Errorf("%w: the server's proof is wrong (the secrets differ)", ErrAuth)
		}
		c.session = r.session
		if r.rkey != 0 {
			c.orderAddr, c.orderKey, c.hasOrder = r.addr, c.addKey(r.rkey), true
		}
		switch {
		case !c.atomics:
		case r.rkey == 0:
			c.atomics, c.noNIC = false, fmt.Errorf("service: %w: the server's device has no remote atomics", verbs.ErrNotSupported)
		default:
			// Calls whose NIC atomics would not be in host byte order
			// take the server's engine instead.
			err := probeOrder(ctx, (*clientNIC)(c), c.orderAddr, c.orderKey)
			if !errors.Is(err, verbs.ErrNotSupported) {
				return err
			}
			c.atomics, c.noNIC = false, fmt.Errorf("service: %w", err)
		}
		return nil
	}
	return fmt.Errorf("%w: reply %#x to the authentication", ErrProtocol, c.reply[0])
}

// probeOrder checks, on the server's byte-order word at addr, that the
// NIC atomics between the client and the server work in host byte order
// (atomics.Probe, as a group checks its ranks'): a fetch-and-add of 1,
// then a READ of the word. It returns an error matching
// verbs.ErrNotSupported if they do not, or the one that ended the probe.
func probeOrder(ctx context.Context, nic core.NIC, addr uint64, rkey uint32) error {
	return atomics.Probe(func(add uint64) (old, after uint64, err error) {
		if old, err = nic.FetchAdd(ctx, addr, rkey, add); err == nil {
			after, err = nic.Read8(ctx, addr, rkey)
		}
		return old, after, err
	})
}

// NICAtomics reports whether the client's calls use the NIC atomics
// (nil), or why they do not: either device has none, or the byte-order
// probe at Dial failed (the error then matches verbs.ErrNotSupported, as
// group.Group.NICAtomics's does). Without them every FetchAndOp,
// CompareAndSwap and Accumulate goes to the server's engine.
func (c *Client) NICAtomics() error { return c.noNIC }

// request sends the n-byte message in the send buffer (its sequence
// number c.seq) and waits for the reply; c.mu is held.
func (c *Client) request(ctx context.Context, n int) error {
	if err := c.send(n); err != nil {
		return err
	}
	return c.wait(ctx, c.posted, c.seq)
}

// send posts the request of n bytes at sendOff; its reply carries c.seq.
func (c *Client) send(n int) error {
	c.posted++
	if err := c.post(verbs.SendWR{WRID: c.posted, Local: c.mr.Local(sendOff, n), Op: verbs.OpSend, Flags: verbs.SendSignaled}); err != nil {
		c.posted--
		return err
	}
	c.sentLen = n
	return nil
}

// Open opens the window the server exposes under name.
func (c *Client) Open(ctx context.Context, name string) (*Window, error) {
	if len(name) == 0 || len(name) > MaxNameLen {
		return nil, fmt.Errorf("%w: window name of %d bytes (1 to %d)", rma.ErrInvalid, len(name), MaxNameLen)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.begin(ctx); err != nil {
		return nil, err
	}
	c.nextSeq()
	n := putOpen(c.buf[sendOff:], c.seq, name)
	if err := c.request(ctx, n); err != nil {
		return nil, err
	}
	switch c.reply[0] {
	case msgOpenOK:
		r, err := parseOpenOK(c.reply[:c.replyLen])
		if err != nil {
			return nil, err
		}
		if r.size > uint64(int(^uint(0)>>1)) {
			return nil, fmt.Errorf("%w: window of %d bytes", ErrProtocol, r.size)
		}
		// The lock wait's timer is made here, stopped, so that a Lock
		// that waits allocates nothing.
		t := time.NewTimer(time.Hour)
		t.Stop()
		w := &Window{c: c, name: name, addr: r.addr, rkey: c.addKey(r.rkey), id: r.id, size: int(r.size), access: Access(r.flags>>accessShift) & AccessAll,
			policy: atomics.DefaultPolicy(c.atomics && r.flags&flagAtomics != 0),
			lw:     lockWait{ch: make(chan struct{}, 1), timer: t}}
		c.wins = append(c.wins, w)
		return w, nil
	case msgOpenErr:
		if c.replyLen == openErrLen && c.reply[headerLen] == openUnknown {
			return nil, fmt.Errorf("%w: %q", ErrUnknownWindow, name)
		}
		if c.replyLen == openErrLen && c.reply[headerLen] == openDenied {
			return nil, fmt.Errorf("%w: the server does not let this client open %q", ErrDenied, name)
		}
		if c.replyLen == openErrLen && c.reply[headerLen] == openNoKey {
			return nil, fmt.Errorf("%w: the server could make no key for %q (the connection has %d windows open, or the device no memory window left)",
				verbs.ErrQueueFull, name, maxConnBinds)
		}
		return nil, fmt.Errorf("%w: the server refused to open %q", ErrProtocol, name)
	}
	return nil, fmt.Errorf("%w: reply %#x to an open", ErrProtocol, c.reply[0])
}

// Close disconnects from the server and releases the client's memory and
// objects. Calls of other goroutines waiting for the server return
// ErrClosed at once, and later calls on the client's windows too.
func (c *Client) Close() error {
	if c.closing.CompareAndSwap(false, true) {
		c.cc.Wake() // a call sleeping on the completion channel sees closing
	}
	c.nudgeAll()
	c.use.Lock() // the lane calls have left
	defer c.use.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	c.closed = true
	if r := c.pend; r != nil {
		if !r.abandoned {
			r.done, r.err = true, ErrClosed
		}
		c.pend = nil
		c.setQuiet()
	}
	c.id.Disconnect()
	return c.release()
}

// release frees what Dial made, in reverse order; c.mu is held or the
// client was never returned.
func (c *Client) release() error {
	c.stopKeepalive()
	c.stopWatch()
	c.dropStale()
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if c.vqp != nil {
		add(c.vqp.Close())
	}
	if c.id != nil {
		add(c.id.Close())
	}
	if c.vmr != nil {
		add(c.vmr.Close())
	}
	if c.probeMR != nil {
		add(c.probeMR.Close())
	}
	if c.probe != nil {
		add(verbs.Free(c.probe))
	}
	if c.buf != nil {
		add(verbs.Free(c.buf))
	}
	if c.vcq != nil {
		add(c.vcq.Close())
	}
	if c.vcc != nil {
		add(c.vcc.Close())
	}
	if c.pd != nil {
		add(c.pd.Close())
	}
	if c.dev != nil {
		add(c.dev.Close())
	}
	if c.ch != nil {
		add(c.ch.Close())
	}
	return errors.Join(errs...)
}

// begin checks that the client can take a call and waits for the work
// requests of calls whose context ended; c.mu is held.
func (c *Client) begin(ctx context.Context) error {
	if c.closed || c.closing.Load() {
		return ErrClosed
	}
	if c.err != nil {
		return c.err
	}
	if err := ctx.Err(); err != nil {
		return err // a call whose context has ended sends nothing
	}
	if c.pend != nil {
		if err := c.finishPending(ctx); err != nil {
			return err
		}
		if c.err != nil {
			return c.err
		}
	}
	if c.awaiting != 0 {
		if err := c.wait(ctx, c.posted, c.awaiting); err != nil {
			return err
		}
		c.awaiting = 0
		c.setQuiet()
	}
	if c.done < c.posted {
		if err := c.wait(ctx, c.posted, 0); err != nil && !errors.Is(err, verbs.ErrOutcomeUnknown) {
			return err // that of an abandoned call is not this one's
		}
	}
	return nil
}

// fail records the connection's failure; c.mu is held.
func (c *Client) fail(err error) {
	if c.err != nil {
		return
	}
	if errors.Is(err, verbs.ErrPeerLost) {
		c.err = fmt.Errorf("service: connection to %v lost: %w", c.addr, err)
	} else {
		c.err = fmt.Errorf("service: connection to %v lost: %w: %w", c.addr, verbs.ErrPeerLost, err)
	}
	c.failed.Store(true)
}

var errDisconnected = errors.New("the server disconnected")

// wait waits until send work request wr has completed and, if reply is
// not 0, the reply to request reply has arrived. c.mu is held.
func (c *Client) wait(ctx context.Context, wr uint64, reply uint32) error {
	err := c.waitFor(ctx, reply, func() bool {
		if reply != 0 {
			return c.replySeq == reply
		}
		return c.done >= wr
	})
	if err == nil && reply == 0 && c.unknown != 0 && c.unknown == wr {
		c.unknown = 0
		return fmt.Errorf("service: the connection failed before the NIC atomic's completion: %w", verbs.ErrOutcomeUnknown)
	}
	return err
}

// waitLanes waits until no lane abandoned by its caller is in flight.
// c.mu is held.
func (c *Client) waitLanes(ctx context.Context) error {
	return c.waitFor(ctx, 0, c.lanesIdle)
}

// waitFor polls the CQ until cond holds: a while, then it sleeps on the
// completion channel. If ctx ends first and reply is not 0, the next call
// waits for that reply first. c.mu is held.
func (c *Client) waitFor(ctx context.Context, reply uint32, cond func() bool) error {
	spins, armed := 0, false
	for {
		posted := c.postPending()
		n, err := c.cq.Poll(c.wcs[:])
		procs.Polled()
		if err != nil {
			c.fail(err)
		}
		for i := 0; i < n; i++ {
			c.complete(&c.wcs[i])
		}
		c.yieldToNudged()
		if reply != 0 && cond() {
			return nil // the reply came: the request's send completed too
		}
		if c.err != nil {
			return c.err
		}
		if reply == 0 && cond() && !c.broken {
			return nil
		}
		if err := c.mend(ctx); err != nil {
			return err
		}
		if c.closing.Load() {
			return ErrClosed
		}
		if n > 0 || posted {
			spins, armed = 0, false
			continue
		}
		if spins < spinPolls {
			spins++
			continue
		}
		if !armed {
			if err := c.cq.ReqNotify(); err != nil {
				c.fail(err)
				return c.err
			}
			armed = true
			continue // poll once more: a completion may have come before the arming
		}
		if err := c.sleep(ctx); err != nil {
			if ctx.Err() != nil {
				if reply != 0 {
					c.awaiting = reply // the next call waits for it first
					c.setQuiet()
				}
				return ctx.Err()
			}
			c.fail(err)
			return c.err
		}
		armed = false
	}
}

// complete handles one completion; c.mu is held.
func (c *Client) complete(wc *verbs.WC) {
	if wc.QPNum != c.qpn {
		return // of a QP the session left
	}
	if wc.Err() != nil && c.resumable() {
		c.breakAt(wc)
		return
	}
	if wc.WRID&resumeTag != 0 {
		return
	}
	if wc.WRID&keepTag != 0 {
		c.retire(wc.WRID)
		return
	}
	if wc.WRID&recvTag == 0 {
		c.retire(wc.WRID)
	}
	if wc.WRID&laneTag != 0 {
		c.laneDone(int(wc.WRID&^laneTag), wc.Err())
		return
	}
	if wc.WRID&recvTag == 0 {
		c.done = wc.WRID
		if err := wc.Err(); err != nil {
			c.fail(err)
		}
		return
	}
	if err := wc.Err(); err != nil {
		c.fail(err)
		return
	}
	i := int(wc.WRID &^ recvTag)
	if i >= clientRecv || wc.ByteLen > recvSize {
		return
	}
	off := recvOff + i*recvSize
	msg := c.buf[off : off+int(wc.ByteLen)]
	if _, seq, ok := header(msg); ok && !c.handshakeReply(seq, msg) && !c.laneReply(seq, msg) && !c.answered(seq, msg) && seq == c.seq && c.replySeq != seq {
		c.replyLen = copy(c.reply[:], msg)
		c.replySeq = seq
	}
	if err := c.qp.PostRecv(wc.WRID, c.mr.Local(off, recvSize)); err != nil {
		c.fail(err)
	}
}

// The one-sided operations; c.mu is held and begin has succeeded.

func (c *Client) write(ctx context.Context, src []byte, raddr uint64, rkey uint32) error {
	for len(src) > 0 {
		n, err := c.postWrite(src, raddr, rkey)
		if err != nil {
			return err
		}
		if err := c.wait(ctx, c.posted, 0); err != nil {
			return err
		}
		src, raddr = src[n:], raddr+uint64(n)
	}
	return nil
}

// postWrite copies what of src fits into the staging buffer and posts its
// WRITE to raddr, returning how many bytes it took.
func (c *Client) postWrite(src []byte, raddr uint64, rkey uint32) (int, error) {
	n := copy(c.buf[stagingOff:stagingOff+c.cfg.StagingSize], src)
	c.posted++
	if err := c.post(verbs.SendWR{WRID: c.posted, Local: c.mr.Local(stagingOff, n), RAddr: raddr, RKey: rkey, Op: verbs.OpWrite, Flags: verbs.SendSignaled}); err != nil {
		c.posted--
		return 0, err
	}
	c.stats.writes.Add(1)
	c.stats.bytesWritten.Add(uint64(n))
	return n, nil
}

func (c *Client) read(ctx context.Context, dst []byte, raddr uint64, rkey uint32) error {
	for len(dst) > 0 {
		n, err := c.postRead(len(dst), raddr, rkey)
		if err != nil {
			return err
		}
		if err := c.wait(ctx, c.posted, 0); err != nil {
			return err
		}
		copy(dst, c.buf[stagingOff:stagingOff+n])
		dst, raddr = dst[n:], raddr+uint64(n)
	}
	return nil
}

// postRead posts a READ of what of n bytes at raddr fits into the staging
// buffer, returning how many bytes it reads.
func (c *Client) postRead(n int, raddr uint64, rkey uint32) (int, error) {
	n = min(n, c.cfg.StagingSize)
	c.posted++
	if err := c.post(verbs.SendWR{WRID: c.posted, Local: c.mr.Local(stagingOff, n), RAddr: raddr, RKey: rkey, Op: verbs.OpRead, Flags: verbs.SendSignaled}); err != nil {
		c.posted--
		return 0, err
	}
	c.stats.reads.Add(1)
	c.stats.bytesRead.Add(uint64(n))
	return n, nil
}

func (c *Client) result() uint64 { return binary.NativeEndian.Uint64(c.buf[resultOff:]) }

func (c *Client) read8(ctx context.Context, raddr uint64, rkey uint32) (uint64, error) {
	if err := c.postRead8(raddr, rkey); err != nil {
		return 0, err
	}
	if err := c.wait(ctx, c.posted, 0); err != nil {
		return 0, err
	}
	return c.result(), nil
}

// postRead8 posts an 8-byte READ into resultOff.
func (c *Client) postRead8(raddr uint64, rkey uint32) error {
	c.posted++
	if err := c.post(verbs.SendWR{WRID: c.posted, Local: c.mr.Local(resultOff, 8), RAddr: raddr, RKey: rkey, Op: verbs.OpRead, Flags: verbs.SendSignaled}); err != nil {
		c.posted--
		return err
	}
	c.stats.reads.Add(1)
	c.stats.bytesRead.Add(8)
	return nil
}

func (c *Client) fetchAdd(ctx context.Context, raddr uint64, rkey uint32, v uint64) (uint64, error) {
	if err := c.postFetchAdd(raddr, rkey, v); err != nil {
		return 0, err
	}
	if err := c.wait(ctx, c.posted, 0); err != nil {
		return 0, err
	}
	return c.result(), nil
}

// postFetchAdd posts a fetch-and-add whose old value lands at resultOff.
func (c *Client) postFetchAdd(raddr uint64, rkey uint32, v uint64) error {
	c.posted++
	if err := c.post(verbs.SendWR{WRID: c.posted, Local: c.mr.Local(resultOff, 8), RAddr: raddr, RKey: rkey, A: v, Op: verbs.OpFetchAdd, Flags: verbs.SendSignaled}); err != nil {
		c.posted--
		return err
	}
	c.stats.nicAtomics.Add(1)
	return nil
}

func (c *Client) compareSwap(ctx context.Context, raddr uint64, rkey uint32, compare, swap uint64) (uint64, error) {
	c.posted++
	if err := c.post(verbs.SendWR{WRID: c.posted, Local: c.mr.Local(resultOff, 8), RAddr: raddr, RKey: rkey, A: compare, B: swap, Op: verbs.OpCompareSwap, Flags: verbs.SendSignaled}); err != nil {
		c.posted--
		return 0, err
	}
	c.stats.nicAtomics.Add(1)
	if err := c.wait(ctx, c.posted, 0); err != nil {
		return 0, err
	}
	return c.result(), nil
}

// The verbs objects' methods the calls use (a *verbs.QP, *verbs.CQ,
// *verbs.CompChannel and *verbs.MR).
type (
	clientQP interface {
		PostList(wrs []verbs.SendWR) (int, error)
		PostSend(wrID uint64, l verbs.Local, flags verbs.SendFlags) error
		PostWrite(wrID uint64, l verbs.Local, raddr uint64, rkey uint32, flags verbs.SendFlags) error
		PostRead(wrID uint64, l verbs.Local, raddr uint64, rkey uint32, flags verbs.SendFlags) error
		PostFetchAdd(wrID uint64, l verbs.Local, raddr uint64, rkey uint32, add uint64, flags verbs.SendFlags) error
		PostCompareSwap(wrID uint64, l verbs.Local, raddr uint64, rkey uint32, compare, swap uint64, flags verbs.SendFlags) error
		PostRecv(wrID uint64, l verbs.Local) error
	}
	clientCQ interface {
		Poll(wcs []verbs.WC) (int, error)
		ReqNotify() error
	}
	clientCC interface {
		Wait(ctx context.Context) error
		Wake()
	}
	clientMR interface {
		Local(off, n int) verbs.Local
	}
)

// verbsQP is a *verbs.QP as a clientQP: its PostList polls nothing.
type verbsQP struct{ *verbs.QP }

func (q verbsQP) PostList(wrs []verbs.SendWR) (int, error) {
	n, _, err := q.QP.PostList(wrs, nil, nil)
	return n, err
}

var (
	_ clientQP = verbsQP{}
	_ clientCQ = (*verbs.CQ)(nil)
	_ clientCC = (*verbs.CompChannel)(nil)
	_ clientMR = (*verbs.MR)(nil)
)
