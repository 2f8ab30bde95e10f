package fabric

import (
	"context"
	"time"

	"github.com/onesided/rma/internal/procs"
	"github.com/onesided/rma/verbs"
)

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
	reply := m.replyTo(rank, credit, seq, req, m.mem[off:off:off+m.size])
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

// replyTo has the handler apply request seq of rank's credit and build
// its reply in buf (empty), and records both; a request applied already
// (sent again) gets its recorded reply in buf, and is not applied again.
func (m *messaging) replyTo(rank, credit int, seq uint32, req, buf []byte) []byte {
	rec := &m.peers[rank].applied[credit]
	if seq != 0 && rec.seq == seq {
		return append(buf, rec.reply...)
	}
	reply := m.h.Request(rank, req, buf)
	rec.seq, rec.reply = seq, append(rec.reply[:0], reply...)
	return reply
}

// putReplyBuf frees a reply buffer.
func (f *Fabric) putReplyBuf(b uint16) {
	f.m.repFree <- b
	f.wakePoller()
}
