package fabric

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/onesided/rma/internal/procs"
	"github.com/onesided/rma/verbs"
)

// Active messages: every rank may have Credits requests in flight to every
// other rank. A request is a SEND with immediate data (the credit index
// and the credit's sequence number) into a receive buffer of the target; the target's handler applies it and
// answers with a SEND whose immediate data is the credit with replyFlag
// set. Every QP of the fabric (the loopback pair's two halves too) takes
// its receives from one shared receive queue (SRQ), so that the receive
// memory does not grow with the group: RecvBuffers buffers for requests
// and replies from every rank. A sender that finds the target's SRQ empty
// is told so by the target's NIC (a receiver-not-ready NAK) and retries
// until a buffer is posted again (the QPs retry for ever on RNR), so a
// burst from many ranks at once slows, and loses nothing. Requests are
// built in one pool of request buffers (held with their credit until the
// reply comes), replies in one pool of reply buffers (held until the
// reply's SEND completes, unless it went inline). Memory per process,
// fixed at start: RecvBuffers + ReqBuffers + ReplyBuffers buffers of
// MsgSize bytes, whatever the group's size (see msgBuffers).
//
// A receive completion names the QP it arrived on (WC.QPNum), which names
// the connection (conn) and its rank: a message that came in on a
// connection since replaced is dropped. Replies go back on the connection
// the request came in on.
//
// A request is applied at most once. When its connection fails before its
// reply comes, the origin sends it again, unchanged, on the re-established
// connection (resendRequests): it may or may not have reached the target.
// Each use of a credit has the next sequence number (15 bits, never 0),
// and the target keeps, per rank and credit, the sequence number of the
// last request it applied and the reply it built: a request that comes
// again gets that reply, and is not applied again. One record per credit
// is enough, since a credit is used again only once its reply came.
//
// Receive completions arrive on their own CQ. The engine goroutine polls it,
// spins a little when work arrives, and sleeps on its completion channel
// when idle; a goroutine waiting for a reply polls it too, so a reply does
// not need a thread switch to be seen. Requests are sent solicited
// (IBV_SEND_SOLICITED) and replies not, and the idle engine arms the CQ
// for solicited completions only: a request wakes it, a reply does not
// (its waiter polls for it; one that has polled for ReplySpin and goes to
// sleep arms the CQ for any completion, so that its reply wakes the
// engine, which wakes it). Handlers run under recvMu, one at a time.

const (
	replyFlag = 1 << 31
	seqShift  = 16 // a request's sequence number: imm >> seqShift
	seqMask   = 1<<15 - 1
)

// Handlers are the two sides of the active-message protocol.
type Handlers struct {
	// Request handles a request from rank and returns the reply, built in
	// reply (a registered buffer of MsgSize bytes, empty).
	Request func(rank int, req, reply []byte) []byte
	// Reply receives the reply to the request that used credit, unless its
	// waiter gave up (Wait returned a context error).
	Reply func(rank, credit int, reply []byte)
	// Fail reports that the request that used credit will get no reply:
	// its rank is lost. Like Reply, it is called with the credit still
	// held, from one goroutine at a time.
	Fail func(rank, credit int, err error)
}

// creditResend is the state of a credit whose request was sent on a
// connection that failed before the reply came: it is sent again on the
// re-established one.
const creditResend = slotReserved + 1

type credit struct {
	state atomic.Uint32 // slotFree, slotReserved (acquired), slotBusy (sent), creditResend
	conn  *conn         // the connection it was sent on (while slotBusy)
	buf   int32         // the request buffer held (while reserved or busy), or -1
	n     int32         // the request's length (while busy)
	seq   uint32        // the sequence number of its last request
}

// applied is the target's record of the last request of one credit of a
// rank: its sequence number (0: none) and the reply it got.
type applied struct {
	seq   uint32
	reply []byte
}

type msgPeer struct {
	free    chan uint16 // credits not in use
	credits []credit
	wake    chan struct{} // a credit was released
	// resending: some credit is creditResend; resendMu: held by the one
	// who sends them again.
	resending atomic.Bool
	resendMu  sync.Mutex
	// applied: the target's records, by credit (under recvMu).
	applied []applied
}

// qpSide is what a QP number stands for: a connection, and for the own
// rank's loopback pair, which half (1: the responder, which receives the
// requests).
type qpSide struct {
	conn *conn
	side int
}

// deferredReq is a request that waits for a slot and a reply buffer.
type deferredReq struct {
	c            *conn
	side, credit int
	seq          uint32
	req          []byte
}

type messaging struct {
	cq       *verbs.CQ
	ch       *verbs.CompChannel
	srq      *verbs.SRQ
	mem      []byte
	mr       *verbs.MR
	size     int // bytes per buffer
	credits  int
	nrecv    int // receive buffers, from offset 0
	peers    []msgPeer
	qps      map[uint32]qpSide // QP number -> connection (under recvMu)
	reqOff   int               // request buffers: reqOff + i*size
	reqFree  chan uint16
	repOff   int // reply buffers
	repFree  chan uint16
	h        Handlers
	recvMu   sync.Mutex
	requests uint64 // requests served (under recvMu): the engine spins while they come
	// Receive buffers handled and not yet posted again (under recvMu): at
	// most cap(repost), a quarter of the buffers, go back in one batch at
	// the next poll that finds nothing, or when it is full, so that a
	// caller who waited for a reply returns without a post on its way.
	repost []verbs.RecvWR
	wcs    []verbs.WC // 32, in Fabric.mem
	// Reply waits that slept, and those of them a released credit ended
	// (the rest ended by the periodic re-check or their context).
	slept, woken atomic.Uint64
	// Requests that found no slot or reply buffer free, in the order they
	// came, copied from their receive buffers (at most one per credit of
	// every peer), and the copies' buffers kept for reuse (under recvMu).
	deferred []deferredReq
	spare    [][]byte
	stop     context.CancelFunc
	done     chan struct{}
	started  bool
}

// msgBuffers is how many receive, request and reply buffers a process of a
// group of size ranks keeps, with credits requests in flight per peer and
// at most recv receive buffers (0: 8 x credits). No more than the ranks
// could fill: (size+1) x 2 x credits receives, size x credits requests and
// replies.
func msgBuffers(size, credits, recv int) (nrecv, nreq, nrep int) {
	if recv <= 0 {
		recv = 8 * credits
	}
	return min(recv, (size+1)*2*credits), min(size, 2) * credits, credits
}

// MsgMemory is the memory a process of a group of size ranks registers
// for active messages, with the options' Credits, MsgSize and RecvBuffers
// (0: their defaults).
func MsgMemory(size int, o Options) int {
	o.defaults()
	nrecv, nreq, nrep := msgBuffers(size, o.Credits, o.RecvBuffers)
	return (nrecv + nreq + nrep) * o.MsgSize
}

func (f *Fabric) initMessaging(credits, size, recv int) (err error) {
	m := &f.m
	m.size, m.credits = size, credits
	nrecv, nreq, nrep := msgBuffers(f.size, credits, recv)
	m.nrecv = nrecv
	if m.ch, err = f.dev.CreateCompChannel(); err != nil {
		return err
	}
	if m.cq, err = f.dev.CreateCQ(nrecv+16, m.ch); err != nil {
		return err
	}
	if m.srq, err = f.pd.CreateSRQ(verbs.SRQConfig{MaxWR: nrecv}); err != nil {
		return err
	}
	m.reqOff = nrecv * size
	m.repOff = m.reqOff + nreq*size
	if m.mem, err = verbs.Alloc(m.repOff + nrep*size); err != nil {
		return err
	}
	if m.mr, err = f.pd.RegisterMR(m.mem, verbs.AccessLocalWrite); err != nil {
		return err
	}
	m.qps = make(map[uint32]qpSide)
	m.reqFree = make(chan uint16, nreq)
	for i := 0; i < nreq; i++ {
		m.reqFree <- uint16(i)
	}
	m.repFree = make(chan uint16, nrep)
	for i := 0; i < nrep; i++ {
		m.repFree <- uint16(i)
	}
	m.peers = make([]msgPeer, f.size)
	for r := range m.peers {
		p := &m.peers[r]
		p.free = make(chan uint16, credits)
		p.credits = make([]credit, credits)
		p.wake = make(chan struct{}, 1)
		p.applied = make([]applied, credits)
		for c := range p.credits {
			p.credits[c].buf = -1
			p.free <- uint16(c)
		}
	}
	m.repost = make([]verbs.RecvWR, 0, min(8, nrecv/4))
	m.deferred = make([]deferredReq, 0, f.size*credits)
	for id := 0; id < nrecv; id++ {
		if err := m.srq.PostRecv(uint64(id), m.mr.Local(id*m.size, m.size)); err != nil {
			return err
		}
	}
	return nil
}

// recycleLocked gives receive buffer id, whose message was handled, back
// to the SRQ: at once if no batch is kept, else in the batch, posted when
// full. recvMu is held.
func (f *Fabric) recycleLocked(id int) {
	m := &f.m
	l := m.mr.Local(id*m.size, m.size)
	if cap(m.repost) == 0 {
		m.srq.PostRecv(uint64(id), l) // a buffer the SRQ refuses is lost to it (below)
		return
	}
	m.repost = append(m.repost, verbs.RecvWR{WRID: uint64(id), Local: l})
	if len(m.repost) == cap(m.repost) {
		f.repostLocked()
	}
}

// repostLocked posts the batch of handled receive buffers; recvMu is held.
// A buffer the SRQ cannot take back is lost to it; with none left, senders
// wait (RNR) until their connections fail them.
func (f *Fabric) repostLocked() {
	m := &f.m
	if len(m.repost) > 0 {
		m.srq.PostRecvs(m.repost)
		m.repost = m.repost[:0]
	}
}

// register records c's QPs as the fabric's, so that what arrives on them
// is handled; unregister forgets them, once c is retired and drained.
func (f *Fabric) register(c *conn) {
	m := &f.m
	m.recvMu.Lock()
	m.qps[c.qp.Num()] = qpSide{c, 0}
	if c.resp != nil {
		m.qps[c.resp.Num()] = qpSide{c, 1}
	}
	m.recvMu.Unlock()
}

func (f *Fabric) unregister(c *conn) {
	m := &f.m
	m.recvMu.Lock()
	// What arrived on c before it failed is in the CQ: handle (drop) it
	// before c's QP number may be given to a new QP.
	f.pollRecvLocked()
	for n, qs := range m.qps {
		if qs.conn == c {
			delete(m.qps, n)
		}
	}
	m.recvMu.Unlock()
}

// StartMessaging installs the handlers and starts the engine goroutine.
func (f *Fabric) StartMessaging(h Handlers) {
	m := &f.m
	m.recvMu.Lock()
	m.h = h
	m.recvMu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	m.stop, m.done, m.started = cancel, make(chan struct{}), true
	go f.engine(ctx)
}

// stopEngine ends the engine goroutine.
func (f *Fabric) stopEngine() {
	m := &f.m
	if m.started {
		m.stop()
		m.ch.Wake()
		<-m.done
		m.started = false
	}
}

func (f *Fabric) closeMessaging() error {
	m := &f.m
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	// The QPs are closed: the SRQ goes before the memory its receives name.
	if m.srq != nil {
		keep(m.srq.Close())
		m.srq = nil
	}
	if m.mr != nil {
		keep(m.mr.Close())
	}
	if m.mem != nil {
		keep(verbs.Free(m.mem))
	}
	// The CQ is closed after the QPs, in Close.
	return first
}

func (f *Fabric) closeMessagingCQ() error {
	m := &f.m
	var first error
	if m.cq != nil {
		first = m.cq.Close()
	}
	if m.ch != nil {
		if err := m.ch.Close(); first == nil {
			first = err
		}
	}
	return first
}

// engine serves requests while nobody else polls the receive CQ.
func (f *Fabric) engine(ctx context.Context) {
	m := &f.m
	defer close(m.done)
	// Spin after the last request served for spin: at least engineSpin,
	// and three times the usual gap between requests (an average of the
	// gaps shorter than maxSpin), so that a peer whose round trip is
	// longer than engineSpin finds the engine awake, at most maxSpin.
	// Replies to this rank's own requests do not extend it: their waiters
	// poll for them. The clock (the monotonic one alone) is read once
	// every 64 polls that serve nothing, never per request: a request
	// counts from the first reading after it. The CPU is yielded every 16
	// polls (when threads wait for one: yield); the P is given up as
	// procs.Polled says.
	maxSpin := 16 * f.engineSpin
	epoch := time.Now()
	lastReq, gap := -maxSpin, time.Duration(0) // lastReq: since epoch
	fresh := false                             // requests served since the last reading
	spin := f.engineSpin
	for i := 1; ctx.Err() == nil; i++ {
		m.recvMu.Lock()
		before := m.requests
		f.pollRecvLocked()
		if m.requests != before {
			m.recvMu.Unlock()
			procs.Polled()
			fresh = true
			continue
		}
		if len(m.deferred) > 0 {
			// Requests wait for the sends of earlier replies: sleep on
			// their completions rather than spin.
			m.recvMu.Unlock()
			f.awaitReplyRoom(ctx)
			continue
		}
		if i&63 != 0 {
			m.recvMu.Unlock()
			procs.Polled()
			if i&15 == 0 {
				yield()
			}
			continue
		}
		now := time.Since(epoch)
		if fresh {
			fresh = false
			if d := now - lastReq; d < maxSpin {
				gap += (d - gap) / 8
				spin = min(max(f.engineSpin, 3*gap), maxSpin)
			}
			lastReq = now
		}
		if now-lastReq < spin {
			m.recvMu.Unlock()
			continue
		}
		// Idle: arm, check once more, and sleep on the channel. Requests
		// are sent solicited and replies not, and the CQ is armed for
		// solicited completions only: a reply, polled by the caller who
		// waits for it, does not wake the engine (a caller that sleeps
		// arms the CQ for any completion, progressMsg).
		if err := m.cq.ReqNotifySolicited(); err != nil {
			m.recvMu.Unlock()
			return
		}
		before = m.requests
		f.pollRecvLocked()
		served := m.requests != before
		m.recvMu.Unlock()
		if served {
			fresh = true
			continue
		}
		// No context to Wait (whose cancellation would cost allocations
		// on every sleep): stopEngine wakes the channel.
		if err := m.ch.Wait(context.Background()); err != nil && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		i = 63 // woken: poll, and unless that serves a request, back to the idle check
	}
}

// awaitReplyRoom waits, at most a millisecond, until a slot and a reply
// buffer are free for a deferred request: it spins as a waiting call does,
// then sleeps until a send completes.
func (f *Fabric) awaitReplyRoom(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, time.Millisecond)
	f.progressUntil(ctx, func() bool { return f.nfree.Load() > 0 && len(f.m.repFree) > 0 }, nil)
	cancel()
}

// pollRecvLocked handles one batch of receives, after the deferred
// requests that can be served now; recvMu is held.
func (f *Fabric) pollRecvLocked() int {
	m := &f.m
	if len(m.deferred) > 0 {
		// The completions of earlier replies' sends free what they wait for.
		if f.pollMu.TryLock() {
			f.pollLocked()
			f.pollMu.Unlock()
		}
		f.serveDeferredLocked()
	}
	n, err := m.cq.Poll(m.wcs[:])
	if err != nil {
		return 0
	}
	if n == 0 {
		f.repostLocked() // idle: the buffers handled go back now
	}
	for i := 0; i < n; i++ {
		wc := &m.wcs[i]
		id := int(wc.WRID)
		if id >= m.nrecv {
			continue
		}
		qs := m.qps[wc.QPNum]
		c := qs.conn
		switch {
		case c == nil:
			// A QP no longer known: its message is dropped.
		case wc.Status != verbs.WCSuccess:
			// The receive failed with its QP, now in the error state.
			if !c.retired.Load() {
				f.fault(c)
			}
		case c.retired.Load():
			// Its sender learns that the request failed.
		case wc.Imm&replyFlag != 0:
			f.onReply(c.rank, c, int(wc.Imm&0xffff), m.mem[id*m.size:id*m.size+int(min(wc.ByteLen, uint32(m.size)))])
		default:
			m.requests++
			f.onRequest(c, qs.side, int(wc.Imm&0xffff), wc.Imm>>seqShift&seqMask, m.mem[id*m.size:id*m.size+int(min(wc.ByteLen, uint32(m.size)))])
		}
		f.recycleLocked(id) // free again once its message is handled
	}
	return n
}

// onRequest serves a request that came in on c (on the loopback pair's
// responder half if side is 1) and sends the reply back on it; recvMu is
// held, so c stays in use meanwhile. A reply that cannot be posted fails
// the connection, so that the requester learns its request failed instead
// of waiting for ever.
//
// The engine never waits for a slot or a reply buffer: a request that
// finds none free, and every request after it while one waits (they are
// served in the order they came), is copied aside (deferred) and its
// receive buffer goes back to the SRQ, to be served once the sends of
// earlier replies complete. Waiting instead, with its receive buffer held
// and the SRQ not drained, would keep the replies of other engines from
// arriving, and with few receive buffers engines that reply to each other
// would wait for each other until their connections failed.
func (f *Fabric) onRequest(c *conn, side, credit int, seq uint32, req []byte) {
	m := &f.m
	if credit >= m.credits || m.h.Request == nil {
		return // not a request a conforming origin sends: drop it
	}
	if len(m.deferred) == 0 && f.serve(c, side, credit, seq, req) {
		return
	}
	if len(m.deferred) == cap(m.deferred) {
		// More than every peer's credits: not conforming origins.
		f.fault(c)
		return
	}
	var b []byte
	if k := len(m.spare); k > 0 {
		b, m.spare = m.spare[k-1], m.spare[:k-1]
	}
	m.deferred = append(m.deferred, deferredReq{c: c, side: side, credit: credit, seq: seq, req: append(b[:0], req...)})
}

// serveDeferredLocked serves the deferred requests, in order, as far as
// slots and reply buffers allow; recvMu is held.
func (f *Fabric) serveDeferredLocked() {
	m := &f.m
	n := 0
	for ; n < len(m.deferred); n++ {
		d := &m.deferred[n]
		if !d.c.retired.Load() && !f.serve(d.c, d.side, d.credit, d.seq, d.req) {
			break
		}
		m.spare = append(m.spare, d.req)
		*d = deferredReq{}
	}
	if n > 0 {
		k := copy(m.deferred, m.deferred[n:])
		clear(m.deferred[k:])
		m.deferred = m.deferred[:k]
	}
}

// serve has the handler build the reply to req and posts it, if a slot
// and a reply buffer are free; it reports whether they were. A request
// applied already (sent again) gets its recorded reply.
func (f *Fabric) serve(c *conn, side, credit int, seq uint32, req []byte) bool {
	m := &f.m
	rank := c.rank
	id, ok := f.tryAcquireSlot(rank, true)
	if !ok {
		return false
	}
	var rb uint16
	select {
	case rb = <-m.repFree:
	default:
		f.releaseSlot(id)
		return false
	}
	off := m.repOff + int(rb)*m.size
	rec := &m.peers[rank].applied[credit]
	var reply []byte
	if seq != 0 && rec.seq == seq {
		reply = append(m.mem[off:off:off+m.size], rec.reply...)
	} else {
		reply = m.h.Request(rank, req, m.mem[off:off:off+m.size])
		rec.seq, rec.reply = seq, append(rec.reply[:0], reply...)
	}
	imm := uint32(replyFlag | credit)
	if c.resp == nil && f.failReply.Load() > 0 && f.failReply.Add(-1) >= 0 {
		// The test hook: the request is applied and its reply lost with
		// the connection.
		f.releaseSlot(id)
		f.putReplyBuf(rb)
		c.setError()
		f.fault(c)
		return true
	}
	s := &f.slots[id]
	s.msg = true
	qp := c.qp
	if side == 1 {
		qp = c.resp
	}
	p := &f.peers[rank]
	f.posting(id, p, c)
	var err error
	if len(reply) <= f.maxInline {
		err = qp.PostSendInlineImm(uint64(id), reply, imm, verbs.SendSignaled)
		f.putReplyBuf(rb) // copied by the post
	} else {
		s.reply = int32(rb) // freed with the slot, once sent
		err = qp.PostSendImm(uint64(id), m.mr.Local(off, len(reply)), imm, verbs.SendSignaled)
	}
	if err != nil {
		f.unpost(id, p, c)
		f.fault(c)
	}
	return true
}

// putReplyBuf frees a reply buffer.
func (f *Fabric) putReplyBuf(b uint16) {
	f.m.repFree <- b
	f.wakePoller()
}

// onReply hands the reply that came in on c to Handlers.Reply; recvMu is
// held.
func (f *Fabric) onReply(rank int, c *conn, credit int, reply []byte) {
	m := &f.m
	if credit >= m.credits {
		return
	}
	p := &m.peers[rank]
	cr := &p.credits[credit]
	if cr.state.Load() != slotBusy || cr.conn != c {
		return // not a request in flight on c: a stray or duplicate reply
	}
	if m.h.Reply != nil {
		m.h.Reply(rank, credit, reply)
	}
	cr.conn = nil
	if cr.state.CompareAndSwap(slotBusy, slotFree) {
		f.putCredit(rank, credit)
	}
}

// failCredits fails every request to rank, gone with err, that awaits its
// reply: Handlers.Fail is told, and the credit released. It returns how
// many it failed.
func (f *Fabric) failCredits(rank int, err error) int {
	m := &f.m
	m.recvMu.Lock()
	defer m.recvMu.Unlock()
	mp := &m.peers[rank]
	n := 0
	for i := range mp.credits {
		cr := &mp.credits[i]
		if !cr.state.CompareAndSwap(slotBusy, slotFree) && !cr.state.CompareAndSwap(creditResend, slotFree) {
			continue
		}
		cr.conn = nil
		if m.h.Fail != nil {
			m.h.Fail(rank, i, err)
		}
		f.putCredit(rank, i)
		n++
	}
	return n
}

// releaseCredit frees a credit taken by Acquire and not sent.
func (f *Fabric) releaseCredit(rank, c int) {
	f.m.peers[rank].credits[c].state.Store(slotFree)
	f.putCredit(rank, c)
}

// putCredit makes a free credit available again, with the request buffer
// it held.
func (f *Fabric) putCredit(rank, c int) {
	m := &f.m
	p := &m.peers[rank]
	cr := &p.credits[c]
	if b := cr.buf; b >= 0 {
		cr.buf = -1
		m.reqFree <- uint16(b)
	}
	p.free <- uint16(c)
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// MsgSize is the largest active message.
func (f *Fabric) MsgSize() int { return f.m.size }

// Credits is the number of requests in flight per target.
func (f *Fabric) Credits() int { return f.m.credits }

// Acquire takes a credit for a request to rank and returns it with the
// registered buffer to build the request in. Send or Release must follow.
func (f *Fabric) Acquire(ctx context.Context, rank int) (c int, buf []byte, err error) {
	// The call lasts until Send or Release: buf is the fabric's memory,
	// which Close must not release under the caller.
	if err := f.enter(); err != nil {
		return 0, nil, err
	}
	defer func() {
		if err != nil {
			f.exit()
		}
	}()
	if err := f.peerErr(rank); err != nil {
		return 0, nil, err
	}
	m := &f.m
	p := &m.peers[rank]
	for {
		select {
		case c := <-p.free:
			cr := &p.credits[c]
			b, err := f.requestBuf(ctx, rank)
			if err != nil {
				f.putCredit(rank, int(c))
				return 0, nil, err
			}
			cr.buf = int32(b)
			cr.state.Store(slotReserved)
			off := m.reqOff + int(b)*m.size
			return int(c), m.mem[off : off+m.size : off+m.size], nil
		default:
		}
		if err := f.progressMsg(ctx, rank, func() bool { return len(p.free) > 0 }); err != nil {
			return 0, nil, err
		}
	}
}

// requestBuf takes a request buffer, waiting for a reply (from any rank)
// to free one if none is.
func (f *Fabric) requestBuf(ctx context.Context, rank int) (uint16, error) {
	m := &f.m
	for {
		select {
		case b := <-m.reqFree:
			return b, nil
		default:
		}
		if err := f.progressMsg(ctx, rank, func() bool { return len(m.reqFree) > 0 }); err != nil {
			return 0, err
		}
	}
}

// Send posts the request of n bytes built in credit's buffer. The credit
// is released when its reply has been handed to Handlers.Reply, or its
// failure to Handlers.Fail (or now, if Send fails). Send waits for a free
// slot, and if the connection to rank is being re-established, for it (at
// most ReconnectTimeout), unless ctx ends first.
func (f *Fabric) Send(ctx context.Context, rank, c, n int) error {
	defer f.exit() // Acquire's enter
	m := &f.m
	if err := f.peerErr(rank); err != nil {
		f.releaseCredit(rank, c)
		return err
	}
	id, err := f.takeSlot(ctx, rank, true)
	if err != nil {
		f.releaseCredit(rank, c)
		return err
	}
	f.slots[id].msg = true
	cn, err := f.use(ctx, rank)
	if err != nil {
		f.releaseSlot(id)
		f.releaseCredit(rank, c)
		return err
	}
	p := &f.peers[rank]
	cr := &m.peers[rank].credits[c]
	cr.conn, cr.n = cn, int32(n)
	cr.seq = cr.seq%seqMask + 1
	cr.state.Store(slotBusy) // publishes the caller's records of the request to the reply handler
	f.posting(id, p, cn)
	err = f.postRequest(cn, id, c)
	if err != nil {
		f.unpost(id, p, cn)
		// Still under the read lock: the manager cannot be failing it too.
		if cr.state.CompareAndSwap(slotBusy, slotFree) {
			cr.conn = nil
			f.putCredit(rank, c)
		}
	}
	p.qmu.RUnlock()
	return err
}

// postRequest posts credit c's request on cn, with slot id.
func (f *Fabric) postRequest(cn *conn, id uint32, c int) error {
	m := &f.m
	cr := &m.peers[cn.rank].credits[c]
	off, n := m.reqOff+int(cr.buf)*m.size, int(cr.n)
	imm := uint32(c) | cr.seq<<seqShift
	// Solicited: the peer's idle engine sleeps until a request comes.
	if n <= f.maxInline {
		return cn.qp.PostSendInlineImm(uint64(id), m.mem[off:off+n], imm, verbs.SendSignaled|verbs.SendSolicited)
	}
	return cn.qp.PostSendImm(uint64(id), m.mr.Local(off, n), imm, verbs.SendSignaled|verbs.SendSolicited)
}

// resendRequests sends again the requests to rank whose connection failed
// before their replies came (creditResend), once the pair is re-established;
// until then, or while no slot is free, it leaves them for the next call.
func (f *Fabric) resendRequests(rank int) {
	mp := &f.m.peers[rank]
	p := &f.peers[rank]
	if !mp.resending.Load() || p.unready.Load() || !mp.resendMu.TryLock() {
		return
	}
	defer mp.resendMu.Unlock()
	mp.resending.Store(false)
	for i := range mp.credits {
		cr := &mp.credits[i]
		if cr.state.Load() != creditResend {
			continue
		}
		id, ok := f.tryAcquireSlot(rank, true)
		if !ok {
			mp.resending.Store(true)
			return
		}
		f.slots[id].msg = true
		p.qmu.RLock()
		// Under the read lock the manager cannot retire cur: a request
		// made busy on it is found by retireLocked if it fails later.
		if !p.up || p.cur.faulted.Load() || p.lost.Load() != nil {
			p.qmu.RUnlock()
			f.releaseSlot(id)
			mp.resending.Store(true)
			return
		}
		cn := p.cur
		cr.conn = cn
		if !cr.state.CompareAndSwap(creditResend, slotBusy) {
			cr.conn = nil // failed meanwhile: its rank is lost
			p.qmu.RUnlock()
			f.releaseSlot(id)
			continue
		}
		f.posting(id, p, cn)
		if err := f.postRequest(cn, id, i); err != nil {
			f.unpost(id, p, cn)
			cr.conn = nil
			cr.state.Store(creditResend)
			mp.resending.Store(true)
			f.fault(cn)
		}
		p.qmu.RUnlock()
	}
}

// SyncEngine orders the caller's accesses to local memory with the
// handlers': everything a handler did before the call happens before the
// caller's later accesses, and the caller's earlier accesses happen before
// every handler that runs after it (handlers run under recvMu).
func (f *Fabric) SyncEngine() {
	f.m.recvMu.Lock()
	//lint:ignore SA2001 taking and releasing the lock is the synchronisation
	f.m.recvMu.Unlock()
}

// Release gives back a credit that was acquired but not sent.
func (f *Fabric) Release(rank, c int) {
	f.releaseCredit(rank, c)
	f.exit() // Acquire's enter
}

// FlushMessages waits until every request to rank has been answered.
func (f *Fabric) FlushMessages(ctx context.Context, rank int) error {
	if err := f.enter(); err != nil {
		return err
	}
	defer f.exit()
	m := &f.m
	p := &m.peers[rank]
	return f.progressMsg(ctx, rank, func() bool { return len(p.free) == m.credits })
}

// WaitMessages drives progress until done reports true or ctx ends; done
// should become true as replies from rank arrive.
func (f *Fabric) WaitMessages(ctx context.Context, rank int, done func() bool) error {
	if err := f.enter(); err != nil {
		return err
	}
	defer f.exit()
	return f.progressMsg(ctx, rank, done)
}

// Pending reports whether requests to rank are awaiting replies.
func (f *Fabric) Pending(rank int) bool { return len(f.m.peers[rank].free) != f.m.credits }

// progressMsg drives receives (and sends) until done or ctx ends. After
// spinning it sleeps on rank's wake channel, which the engine goroutine
// signals when a credit comes back. If nothing comes from rank for the
// peer timeout, it probes rank and fails with ErrPeerLost if rank is gone.
func (f *Fabric) progressMsg(ctx context.Context, rank int, done func() bool) error {
	m := &f.m
	if done() {
		return nil
	}
	wake := m.peers[rank].wake
	// The clock is read once in 16 empty polls (it can cost as much as a
	// poll), from the 16th: a reply that comes sooner costs no reading.
	var start, spinStart time.Time
	var timer *time.Timer
	empty := 0
	for {
		if done() {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := f.peerErr(rank); err != nil {
			// Rank is gone: its requests in flight get no reply. Fail
			// them (their callers learn why), then see whether that
			// was what done waited for.
			if f.failCredits(rank, err) > 0 {
				continue
			}
			return err
		}
		f.resendRequests(rank)
		if m.recvMu.TryLock() {
			n := f.pollRecvLocked()
			m.recvMu.Unlock()
			if n > 0 {
				spinStart, empty = time.Time{}, 0
				continue
			}
		}
		// The send completions (requests sent, whose slots they free)
		// are polled one time in four: what is waited for is a reply.
		if empty&3 == 0 && f.pollMu.TryLock() {
			f.pollLocked()
			f.pollMu.Unlock()
		}
		procs.Polled()
		if empty++; empty&15 != 0 {
			continue
		}
		if spinStart.IsZero() {
			spinStart = time.Now()
			if start.IsZero() {
				start = spinStart
			}
			continue
		}
		if time.Since(spinStart) < f.replySpin {
			yield()
			continue
		}
		if time.Since(start) > f.peerTimeout {
			if err := f.probe(ctx, rank); err != nil {
				return err
			}
			start = time.Now()
		}
		// Sleep until the engine goroutine signals, re-checking every ms.
		// The engine sleeps until a request comes (ReqNotifySolicited):
		// arm the CQ for any completion, so that the reply wakes it, and
		// poll once more for what came before the arming.
		m.cq.ReqNotify() // if it fails, the timer still re-checks
		if m.recvMu.TryLock() {
			f.pollRecvLocked()
			m.recvMu.Unlock()
		}
		select {
		case <-wake: // a release that came before: done tells
		default:
		}
		if done() {
			return nil
		}
		m.slept.Add(1)
		if timer == nil {
			timer = time.NewTimer(time.Millisecond)
		} else {
			timer.Reset(time.Millisecond)
		}
		select {
		case <-wake:
			m.woken.Add(1)
		case <-timer.C:
		case <-ctx.Done():
		}
		timer.Stop()
		spinStart = time.Time{}
	}
}

// ReplyWaits reports how many times a caller waiting for a reply went to
// sleep, and how many of those sleeps ended because a credit came back
// (the engine, woken by the completion, handled the reply); the others
// ended by the periodic re-check or their context.
func (f *Fabric) ReplyWaits() (slept, woken uint64) {
	return f.m.slept.Load(), f.m.woken.Load()
}

// ProgressMessages is Progress for a caller that waits for replies from
// rank without blocking (a request's Test): if rank is gone, or the fabric
// closed, its requests in flight are failed (Handlers.Fail), as a wait for
// them would.
func (f *Fabric) ProgressMessages(rank int) {
	f.Progress()
	if err := f.peerErr(rank); err != nil {
		f.failCredits(rank, err)
		return
	}
	if f.enter() == nil {
		f.resendRequests(rank)
		f.exit()
	}
}

// Progress polls both completion queues once, if nobody else is.
func (f *Fabric) Progress() {
	if f.enter() != nil {
		return
	}
	defer f.exit()
	if f.m.recvMu.TryLock() {
		f.pollRecvLocked()
		f.m.recvMu.Unlock()
	}
	if f.pollMu.TryLock() {
		f.pollLocked()
		f.pollMu.Unlock()
	}
}
