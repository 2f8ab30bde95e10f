package service

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/onesided/rma/verbs"
)

// Sessions: a connection that fails on the transport is not the end of
// its client.
//
// Each authenticated connection has a session, named by 16 random bytes
// it learns in msgAuthOK. When the connection's QP fails on the transport
// (the server's replies or probes to it exhaust their retries: a lossy or
// cut wire), the server holds its session for ServerConfig.ResumeWithin:
// the locks it holds or waits for stay its own, and the replies it is due
// are recorded. The QP is destroyed at once, and with it every key bound
// to it, so nothing the client sent on it can land afterwards. A client
// that connects again and names the session in msgAuth resumes it: the
// new connection takes the session's locks, lock requests, grants (bound
// again to its QP when it opens their windows again) and recorded
// replies, and a connection of the session that the server still held
// for live is failed first (its QP put in the error state before the
// reply to msgAuth is sent). The client then sends again the requests it
// had no reply to, under their sequence numbers: one the server handled
// gets its recorded reply and is not handled again; a lock request still
// waiting stays in its place.
//
// A session is let go (its locks given up, as when its client dies) when
// it is not resumed in time, and at once when its connection ends in any
// other way: the client closed it or its process died (its kernel
// disconnects), the server dropped it, or its secret was retired.

// replyRingLen bounds the replies a session records: more than a client
// has requests outstanding (maxConnSends), so that every request whose
// reply a failed connection lost is still there.
const replyRingLen = 2 * maxConnSends

// replyRing is the last replies sent on a session, by sequence number.
type replyRing struct {
	next int
	r    [replyRingLen]struct {
		seq uint32
		n   int
		b   [maxReply]byte
	}
}

// record keeps b, a reply.
func (r *replyRing) record(b []byte) {
	_, seq, ok := header(b)
	if !ok || len(b) > maxReply {
		return
	}
	e := &r.r[r.next]
	e.seq, e.n = seq, copy(e.b[:], b)
	r.next = (r.next + 1) % replyRingLen
}

// resend sends c the reply recorded for seq again, reporting whether
// there was one; s.mu is held.
func (r *replyRing) resend(s *Server, c *sconn, seq uint32) bool {
	for i := range r.r {
		if e := &r.r[i]; e.n > 0 && e.seq == seq {
			var b [maxReply]byte
			n := copy(b[:], e.b[:e.n])
			s.reply(c, b[:n])
			return true
		}
	}
	return false
}

// newSession gives c, just authenticated, a session of its own; s.mu is
// held.
func (s *Server) newSession(c *sconn) {
	for {
		rand.Read(c.session[:])
		if _, taken := s.sessions[c.session]; !taken && c.session != (session{}) {
			break
		}
	}
	c.replies = &replyRing{}
	s.sessions[c.session] = c
}

// resume moves the session named by id to c, just authenticated,
// reporting whether there was one to move; s.mu is held.
func (s *Server) resume(c *sconn, id *session) bool {
	old := s.sessions[*id]
	if old == nil || old == c || s.retired(old.gen) {
		return false
	}
	if !old.held {
		// Its connection still looks alive: fail it before the client
		// learns that its session moved, so that nothing it sent on it
		// can land later.
		if old.qp != nil {
			old.qp.SetError()
		}
		old.kill = true
		s.signal()
	}
	old.moved, old.held = true, false
	c.session, c.replies, c.resumed = old.session, old.replies, true
	c.locks, old.locks = old.locks, nil
	for id := range c.locks {
		l := &s.byID[id].locks
		if l.excl == old {
			l.excl = c
		}
		for i := range l.queue {
			if l.queue[i].c == old {
				l.queue[i].c = c
			}
		}
	}
	c.grants = make(map[uint32]*grant, len(old.grants))
	for id, g := range old.grants {
		c.grants[id] = &grant{access: g.access} // bound again when opened again
	}
	c.stats.Requests += old.stats.Requests
	c.stats.LockWaits += old.stats.LockWaits
	c.stats.EngineOps += old.stats.EngineOps
	c.stats.EngineRejects += old.stats.EngineRejects
	s.sessions[c.session] = c
	s.stats.Resumed++
	return true
}

// hold holds the session of c, whose connection is being torn down, if
// it failed on the transport, reporting whether it did; s.mu is held.
func (s *Server) hold(c *sconn, now time.Time) bool {
	if !c.authed || !c.broken || s.closed || s.retired(c.gen) || s.sessions[c.session] != c {
		return false
	}
	c.held, c.until = true, now.Add(s.cfg.ResumeWithin)
	s.stats.Held++
	return true
}

// letGo lets go of the sessions held past their time, and returns when
// the next one's ends (zero if none); s.mu is held.
func (s *Server) letGo(now time.Time) (next time.Time) {
	for _, c := range s.sessions {
		if !c.held {
			continue
		}
		if !now.Before(c.until) {
			c.held = false
			s.gone(c)
			continue
		}
		if next.IsZero() || c.until.Before(next) {
			next = c.until
		}
	}
	return next
}

// The client's side: it resumes its session when its QP fails.
//
// Every send work request the client posts is recorded (record) until
// its completion, or a later one's, tells that it was carried out. When
// the QP fails (a completion with an error, or the connection manager's
// disconnect), the requests before the first that failed were carried
// out; the others were not, or may have been. The holder of the client's
// mu then resumes the session (mend): it connects again, names its
// session in msgAuth, opens its windows again (their keys were bound to
// the failed QP), and carries on what was in flight:
//   - a READ or WRITE is posted again (with the window's new key): doing
//     one twice is doing it once, within an epoch's rules;
//   - a NIC atomic is not: its call fails with verbs.ErrOutcomeUnknown,
//     the target may or may not have applied it;
//   - a request to the server (an engine call, a lock, an unlock) whose
//     reply had not come is sent again with its sequence number, and the
//     server answers it at most once (see the server's side above).
// Calls wait meanwhile; the lanes enqueued are posted once it is done. A
// session that cannot be resumed within ClientConfig.ResumeWithin of the
// failure (the server is gone, or let the session go) fails the client
// with verbs.ErrPeerLost, as a failure did before.

// resumeTag marks the work request ids of a resumption's messages,
// keepTag the keepalive's READs that a call's wait posts.
const (
	resumeTag = 1 << 61
	keepTag   = 1 << 60
)

// resumeLen is the room in Client.buf for a resumption's messages (one
// request, and maxLockWaits lock requests sent again) and the word a
// keepalive reads.
const resumeLen = recvSize + maxLockWaits*lockLen + 8

// handshakeSeq is the sequence number of a resumption's messages.
const handshakeSeq = 1<<31 - 1

// resumeState is the Client's state for resumption; under mu.
type resumeState struct {
	session  session
	wins     []*Window // opened: opened again on a new connection
	qpn      uint32    // the QP the calls use: completions of others are stale
	fifo     [sendDepth]verbs.SendWR
	fhead    int
	flen     int
	one      [1]verbs.SendWR
	broken   bool      // the QP failed: mend resumes the session
	cut      bool      // the first failed work request is known
	brokenAt time.Time // when broken was set: ResumeWithin counts from it
	unknown  uint64    // a NIC atomic of the serialized path whose outcome is unknown
	hsLen    int       // the reply to a resumption's message
	hs       [recvSize]byte
	hsOn     bool // a handshake is under way: a failure of its QP ends it (hsErr)
	hsErr    bool
	sentLen  int // the length of the serialized path's last request at sendOff
	// reconnect makes a new connection and QP and makes them the
	// client's, returning the nonces of the handshake (Dial's; the
	// tests give their own); breakQP puts the QP in the error state.
	reconnect func(ctx context.Context) (cNonce, sNonce [nonceLen]byte, err error)
	breakQP   func()
	stale     []any // what redial left for dropStale
	// The server's byte-order word, which keepalive reads.
	orderAddr uint64
	orderKey  uint32 // its handle
	hasOrder  bool
	kcancel   context.CancelFunc
	kdone     chan struct{}
	touchDue  atomic.Bool // keepalive asks the holder of mu to touch
}

func (c *Client) resumeOff() int { return c.laneOff() + laneData*maxLanes }

// resumable reports whether a failure of the QP is resumed rather than
// the end of the client; mu is held.
func (c *Client) resumable() bool {
	return c.session != (session{}) && c.reconnect != nil && c.err == nil && !c.closing.Load()
}

// addKey records rkey and returns the handle the calls give for it.
func (c *Client) addKey(rkey uint32) uint32 {
	c.rkeys = append(c.rkeys, rkey)
	return uint32(len(c.rkeys) - 1)
}

// rkey returns the key of wr's handle now; mu is held.
func (c *Client) rkey(wr *verbs.SendWR) uint32 {
	if wr.Op == verbs.OpSend || int(wr.RKey) >= len(c.rkeys) {
		return 0
	}
	return c.rkeys[wr.RKey]
}

// post posts wr (its RKey a handle) and records it; mu is held. While
// the QP is failed it only records it: resume posts it.
func (c *Client) post(wr verbs.SendWR) error {
	if c.broken {
		c.record(wr)
		return nil
	}
	c.one[0] = wr
	c.one[0].RKey = c.rkey(&wr)
	if _, err := c.qp.PostList(c.one[:]); err != nil {
		return err
	}
	c.record(wr)
	return nil
}

// record keeps wr until its completion; mu is held.
func (c *Client) record(wr verbs.SendWR) {
	if c.flen == len(c.fifo) {
		return // the send queue bounds it
	}
	c.fifo[(c.fhead+c.flen)%len(c.fifo)] = wr
	c.flen++
}

// pop takes the oldest work request recorded; mu is held.
func (c *Client) pop() verbs.SendWR {
	wr := c.fifo[c.fhead]
	c.fhead = (c.fhead + 1) % len(c.fifo)
	c.flen--
	return wr
}

// retire forgets the work requests recorded up to id, which completed
// (an RC QP completes them in order); mu is held.
func (c *Client) retire(id uint64) {
	for n := c.flen; n > 0; n-- {
		if c.pop().WRID == id {
			return
		}
	}
}

// breakAt handles the first failed completion of the QP: the work
// requests recorded before the one that failed were carried out (those
// of lanes posted unsignalled are done now), the others are carried on
// by resume; mu is held.
func (c *Client) breakAt(wc *verbs.WC) {
	if c.hsOn {
		c.hsErr = true // the new connection failed too
		return
	}
	if !c.broken {
		c.broken, c.brokenAt = true, time.Now()
	}
	if c.cut || wc.WRID&(recvTag|resumeTag) != 0 {
		return
	}
	c.cut = true
	for c.flen > 0 && c.fifo[c.fhead].WRID != wc.WRID {
		switch wr := c.pop(); {
		case wr.WRID&laneTag != 0:
			c.laneSent(int(wr.WRID &^ laneTag))
		case wr.WRID&keepTag == 0:
			c.done = wr.WRID
		}
	}
}

// laneSent counts the completion of lane i's work request; mu is held.
func (c *Client) laneSent(i int) {
	if l := &c.lanes[i]; l.posted {
		l.posted, l.list = false, 0
		c.laneEvent(i)
	}
}

// mend returns the client's failure, or resumes its session if its QP
// failed; mu is held.
func (c *Client) mend(ctx context.Context) error {
	if c.err != nil {
		return c.err
	}
	if c.lost.Load() {
		c.lost.Store(false)
		if !c.resumable() {
			c.fail(errDisconnected)
			return c.err
		}
		if !c.broken {
			c.broken, c.brokenAt = true, time.Now()
		}
	}
	if !c.broken {
		if c.touchDue.Swap(false) {
			c.touch()
		}
		return nil
	}
	if err := c.resume(ctx); err != nil {
		return err
	}
	return c.err
}

// resume resumes the session on a new connection; mu is held. It returns
// ctx's error if ctx ends first (the next holder of mu carries on), and
// fails the client if the session could not be resumed in time.
func (c *Client) resume(ctx context.Context) error {
	rctx, cancel := context.WithDeadline(ctx, c.brokenAt.Add(c.cfg.ResumeWithin))
	defer cancel()
	give := func(err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		msg := "service: the session could not be resumed"
		if rctx.Err() != nil {
			msg += " within " + c.cfg.ResumeWithin.String()
		}
		c.fail(fmt.Errorf("%s: %w", msg, err))
		return c.err
	}
	// Learn which work requests the failed QP carried out.
	if !c.cut && c.flen > 0 {
		c.breakQP()
		for !c.cut && c.flen > 0 {
			if err := c.pollFor(rctx, func() bool { return c.cut || c.flen == 0 }); err != nil {
				return give(err)
			}
		}
	}
	for {
		// Each try gets a sixth of the time: a connection request sent
		// while the wire is still cut waits for the connection
		// manager's retries, seconds, and the next try may find it back.
		actx, acancel := context.WithTimeout(rctx, c.cfg.ResumeWithin/6)
		err := c.handshake(actx)
		acancel()
		if err == nil {
			break
		}
		if errors.Is(err, ErrAuth) || errors.Is(err, errLetGo) || refused(err) || rctx.Err() != nil {
			return give(err)
		}
		select {
		case <-rctx.Done():
			return give(err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if c.stale != nil {
		c.dropStale()
	}
	c.broken, c.cut = false, false
	if err := c.replay(); err != nil {
		return give(err)
	}
	c.stats.resumes.Add(1)
	return nil
}

// startKeepalive starts keepalive.
func (c *Client) startKeepalive() {
	if !c.hasOrder {
		return // no word to read: a failure is found by the next call
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.kcancel, c.kdone = cancel, make(chan struct{})
	go c.keepalive(ctx)
}

// stopKeepalive stops keepalive.
func (c *Client) stopKeepalive() {
	if c.kcancel != nil {
		c.kcancel()
		<-c.kdone
		c.kcancel = nil
	}
}

// keepalive finds that the client's connection failed although nothing
// the client posts fails: every ResumeWithin/4, it READs the server's
// byte-order word (touch), whose failure then resumes the session before
// the server lets it go (the server holds it for its own ResumeWithin
// from when its replies or probes fail). A call may be waiting for a
// reply the failed connection lost: keepalive then has the call's
// polling touch (mend). With no call, it touches itself while the client
// holds or waits for a lock.
func (c *Client) keepalive(ctx context.Context) {
	defer close(c.kdone)
	t := time.NewTicker(c.cfg.ResumeWithin / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !c.mu.TryLock() {
			c.touchDue.Store(true) // for the call that polls
			c.cc.Wake()
			continue
		}
		if !c.closed && c.err == nil && c.locking() && c.begin(ctx) == nil {
			c.posted++
			err := c.post(verbs.SendWR{WRID: c.posted, Local: c.mr.Local(c.resumeOff()+resumeLen-8, 8),
				RAddr: c.orderAddr, RKey: c.orderKey, Op: verbs.OpRead, Flags: verbs.SendSignaled})
			if err != nil {
				c.posted--
			} else {
				c.wait(ctx, c.posted, 0)
			}
		}
		c.mu.Unlock()
	}
}

// touch posts a READ of the server's byte-order word, which fails if the
// connection did (complete); mu is held.
func (c *Client) touch() {
	c.post(verbs.SendWR{WRID: keepTag, Local: c.mr.Local(c.resumeOff()+resumeLen-8, 8),
		RAddr: c.orderAddr, RKey: c.orderKey, Op: verbs.OpRead, Flags: verbs.SendSignaled})
}

// locking reports whether the client holds or waits for a lock; mu is
// held.
func (c *Client) locking() bool {
	if len(c.waits) > 0 {
		return true
	}
	for _, w := range c.wins {
		if w.lock != 0 {
			return true
		}
	}
	return false
}

// mendIdle resumes the session of a client that no call is using when
// its connection fails (watch saw the server's disconnect): the server
// holds the session only for its ResumeWithin.
func (c *Client) mendIdle() {
	if !c.mu.TryLock() {
		return // the holder of mu resumes it
	}
	defer c.mu.Unlock()
	if !c.closed {
		c.mend(context.Background())
	}
}

var errLetGo = errors.New("the server let the session go")

// refused reports whether err, a try's, says that no later try would do
// better: the server's host answered that nothing listens there (the
// server closed), or the server refused the connection for a reason of
// this protocol other than being full (which a failed connection it
// still counts may cause). A cut wire answers nothing.
func refused(err error) bool {
	var ce *verbs.CMError
	if errors.Is(err, verbs.ErrNoListener) {
		return true
	}
	if !errors.As(err, &ce) || ce.Event != verbs.CMRejected {
		return false
	}
	r := parseReject(ce.PrivateData)
	return r != 0 && r != rejectFull
}

// handshake connects again, resumes the session and opens the windows
// again; mu is held.
func (c *Client) handshake(ctx context.Context) error {
	c.hsOn, c.hsErr = true, false
	defer func() { c.hsOn = false }()
	cNonce, sNonce, err := c.reconnect(ctx)
	if err != nil {
		return err
	}
	if err := c.postRecvs(); err != nil {
		return err
	}
	b := c.buf[c.resumeOff():]
	n := putAuth(b, handshakeSeq, c.cfg.Secret, &sNonce, &cNonce, c.probeAddr, c.probeKey, &c.session, c.cfg.Name)
	if err := c.ask(ctx, n); err != nil {
		return err
	}
	if c.hs[0] == msgAuthFail {
		return fmt.Errorf("%w: the server refused the client's proof (the secrets differ)", ErrAuth)
	}
	r, ok := parseAuthOK(c.hs[:c.hsLen], c.cfg.Secret, &cNonce, &sNonce)
	if !ok || c.hs[0] != msgAuthOK {
		return fmt.Errorf("%w: the server's proof is wrong (the secrets differ)", ErrAuth)
	}
	if !r.resumed {
		return errLetGo
	}
	if c.hasOrder && r.rkey != 0 {
		c.orderAddr, c.rkeys[c.orderKey] = r.addr, r.rkey
	}
	for _, w := range c.wins {
		if err := c.ask(ctx, putOpen(b, handshakeSeq, w.name)); err != nil {
			return err
		}
		r, err := parseOpenOK(c.hs[:c.hsLen])
		if c.hs[0] != msgOpenOK || err != nil || r.id != w.id {
			return fmt.Errorf("%w: window %q could not be opened again", errLetGo, w.name)
		}
		c.rkeys[w.rkey] = r.rkey
	}
	return nil
}

// ask sends the n-byte message at resumeOff and waits for its reply (in
// hs); mu is held.
func (c *Client) ask(ctx context.Context, n int) error {
	c.hsLen = 0
	c.one[0] = verbs.SendWR{WRID: resumeTag, Local: c.mr.Local(c.resumeOff(), n), Op: verbs.OpSend, Flags: verbs.SendSignaled}
	if _, err := c.qp.PostList(c.one[:]); err != nil {
		return err
	}
	if err := c.pollFor(ctx, func() bool { return c.hsLen > 0 || c.hsErr }); err != nil {
		return err
	}
	if c.hsLen == 0 {
		return errors.New("the new connection failed")
	}
	return nil
}

// handshakeReply takes msg if it answers a resumption's message; mu is
// held.
func (c *Client) handshakeReply(seq uint32, msg []byte) bool {
	if seq != handshakeSeq || !c.broken {
		return false
	}
	c.hsLen = copy(c.hs[:], msg)
	return true
}

// pollFor polls the CQ until cond holds or ctx ends; mu is held.
func (c *Client) pollFor(ctx context.Context, cond func() bool) error {
	for spins := 0; ; spins++ {
		n, err := c.cq.Poll(c.wcs[:])
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			c.complete(&c.wcs[i])
		}
		if cond() {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if c.closing.Load() {
			return ErrClosed
		}
		if n == 0 && spins > spinPolls {
			time.Sleep(20 * time.Microsecond << min(spins-spinPolls, 10))
		}
	}
}

// replay carries on, on the new QP, what the failed one did not carry
// out (see the comment above); mu is held.
func (c *Client) replay() error {
	var sends uint32 // lanes whose engine message the failed QP may not have sent
	for n := c.flen; n > 0; n-- {
		wr := c.pop()
		lane := wr.WRID&laneTag != 0
		i := int(wr.WRID &^ laneTag)
		if wr.WRID&keepTag != 0 {
			continue // a keepalive's READ: done its work
		}
		switch wr.Op {
		case verbs.OpFetchAdd, verbs.OpCompareSwap:
			if lane {
				l := &c.lanes[i]
				l.posted, l.list = false, 0
				l.err = fmt.Errorf("service: the connection failed before the NIC atomic's completion: %w", verbs.ErrOutcomeUnknown)
				c.laneEvent(i)
			} else {
				c.done, c.unknown = wr.WRID, wr.WRID
			}
		case verbs.OpSend:
			if lane {
				sends |= 1 << i
				c.lanes[i].posted, c.lanes[i].list = false, 0
			} else {
				c.done = wr.WRID // sent again below if its reply has not come
			}
		default:
			if lane {
				c.lanes[i].list = 0
			}
			wr.Flags |= verbs.SendSignaled
			if err := c.post(wr); err != nil {
				return err
			}
		}
	}
	// The engine messages of lanes whose reply has not come.
	for i := range c.lanes {
		l := &c.lanes[i]
		if l.seq.Load() == 0 || l.isDone() || (sends&(1<<i) == 0 && l.events.Load() != 1) {
			continue // none, done, or not posted yet
		}
		if l.replyLen != 0 { // its reply came: its send was carried out
			c.laneEvent(i)
			continue
		}
		l.events.Store(2)
		l.posted = true
		wr := c.wrs[i]
		wr.Flags = verbs.SendSignaled
		if err := c.post(wr); err != nil {
			return err
		}
	}
	// The serialized path's request and the lock requests waiting.
	if typ, seq, ok := header(c.buf[sendOff:]); ok && typ != msgLock && (seq == c.seq || seq == c.awaiting) && c.replySeq != seq && c.sentLen > 0 {
		c.posted++
		if err := c.post(verbs.SendWR{WRID: c.posted, Local: c.mr.Local(sendOff, c.sentLen), Op: verbs.OpSend, Flags: verbs.SendSignaled}); err != nil {
			return err
		}
	}
	off := c.resumeOff() + recvSize
	for _, lw := range c.waits {
		if lw.done {
			continue
		}
		c.posted++
		n := putLock(c.buf[off:], msgLock, lw.seq, lw.win, lw.lt)
		if err := c.post(verbs.SendWR{WRID: c.posted, Local: c.mr.Local(off, n), Op: verbs.OpSend, Flags: verbs.SendSignaled}); err != nil {
			return err
		}
		off += lockLen
	}
	return nil
}
