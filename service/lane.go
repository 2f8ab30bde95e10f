package service

import (
	"context"
	"encoding/binary"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/onesided/rma/fallback"
	"github.com/onesided/rma/internal/procs"
	"github.com/onesided/rma/verbs"
)

// Lanes: many calls in flight on a client's one connection.
//
// A call that is one work request (a FetchAndOp or CompareAndSwap the NIC
// carries out, a Put or Get of at most laneData bytes) or one message to
// the server's engine (an accumulate-family call whose message fits
// the lane's slot; at most engineLanes at once, the server's bound) takes
// a free lane, writes its work request with the lane's slot of the
// registered buffer as source or destination and the lane in its id (an
// engine message's sequence number names the lane too, so that its reply
// finds it), enqueues it (toPost), and waits without holding the
// client's mu: any number of lanes are in flight at once, up to maxLanes,
// as many as the connection's send queue has room for beside the other
// calls. The holder of mu posts every work request enqueued with one
// PostList, one doorbell for all, only the last one signalled (laneDone),
// then polls the client's one CQ; complete marks the lanes done and wakes
// their callers, and the poller yields its P to them. A lane caller that
// finds mu free takes it, posts and polls (spinning a while, then
// sleeping on the completion channel, as the other calls do, woken by a
// work request enqueued) until its own lane is done; one that finds mu
// taken parks until its lane is done or mu's holder, leaving, hands it
// the polling (callMu.Unlock).
//
// A lane call does not wait for the calls under mu, nor they for it: calls
// of different goroutines are not ordered, as on a group window. It takes
// the serialized path (mu) when the client has a request-based call
// pending or a reply awaited, so that the calls of one goroutine stay in
// order, and when every lane is in flight. A lane whose caller's context
// ended stays in flight until its completion comes; Flush and Unlock wait
// for it.

const (
	maxLanes  = 16
	laneData  = 256     // bytes of a lane's slot
	laneTag   = 1 << 62 // marks the work request ids of lanes
	sendDepth = maxLanes + 16

	// engineLanes bounds the engine messages of lanes in flight: the
	// server takes maxConnSends replies outstanding on a connection.
	engineLanes = 8
	// laneSeqTag marks the sequence numbers of lanes' engine messages
	// (the others never have it): the low 4 bits are the lane, the rest
	// count.
	laneSeqTag = 1 << 31
)

// lane is one work request in flight.
type lane struct {
	done      atomic.Bool // its completion came (err then holds its status)
	err       error       // written under mu before done is set; read once it is
	abandoned bool        // under mu: its caller left; laneDone frees it
	ch        chan struct{}

	// An engine message: its sequence number (0 for the other calls),
	// the completions still to come (its send's and its reply's; the lane
	// is done when both came), and the reply, written under mu before
	// done is set.
	seq    atomic.Uint32
	events atomic.Int32
	// Under mu: its work request is posted and its completion not
	// counted yet; and, for the signalled last of a list, the list's
	// other lanes (laneDone).
	posted   bool
	list     uint32
	replyLen int
	reply    [maxReply]byte
}

func (c *Client) initLanes() {
	c.mu.c = c
	for i := range c.lanes {
		c.lanes[i].ch = make(chan struct{}, 1)
	}
	c.free.Store(1<<maxLanes - 1)
	c.quiet.Store(true)
}

// laneOff is the offset in buf of lane 0's slot.
func (c *Client) laneOff() int { return stagingOff + c.cfg.StagingSize }

// nextSeq gives the serialized path's next request its sequence number
// (never 0, never with laneSeqTag); mu is held.
func (c *Client) nextSeq() {
	c.seq = (c.seq + 1) &^ laneSeqTag
	if c.seq == 0 {
		c.seq = 1
	}
}

// setQuiet records whether a lane call may pass the calls under mu; mu is held.
func (c *Client) setQuiet() { c.quiet.Store(c.pend == nil && c.awaiting == 0) }

// callMu is Client.mu. Unlock hands the polling of the CQ to a lane
// caller parked waiting for it.
type callMu struct {
	sync.Mutex
	c *Client
}

func (m *callMu) Unlock() {
	m.Mutex.Unlock()
	if c := m.c; c != nil {
		// The first parked caller whose lane is still in flight: one
		// whose completion came returns without polling.
		for p := c.parked.Load(); p != 0; p &= p - 1 {
			if i := bits.TrailingZeros32(p); !c.lanes[i].isDone() {
				c.nudge(i)
				return
			}
		}
	}
}

// setParked sets or clears bit in c.parked.
func (c *Client) setParked(bit uint32, on bool) {
	for {
		p := c.parked.Load()
		q := p &^ bit
		if on {
			q = p | bit
		}
		if c.parked.CompareAndSwap(p, q) {
			return
		}
	}
}

// nudge wakes lane i's caller, if it is parked.
func (c *Client) nudge(i int) {
	select {
	case c.lanes[i].ch <- struct{}{}:
	default:
	}
}

// nudgeAll wakes every parked lane caller (Close).
func (c *Client) nudgeAll() {
	for i := range c.lanes {
		c.nudge(i)
	}
}

// laneKind is what a lane call posts.
type laneKind uint8

const (
	laneFetchAdd laneKind = iota
	laneCompareSwap
	laneRead8
	laneWrite // a Put of data
	laneRead  // a Get into data
)

// laneAtomic carries out one NIC atomic on a lane: a fetch-and-add of a,
// a compare-and-swap of a (compare) and b (swap), or an 8-byte read. ok
// false says it did not, and the caller takes the serialized path.
func (c *Client) laneAtomic(ctx context.Context, kind laneKind, raddr uint64, rkey uint32, a, b uint64) (old uint64, ok bool, err error) {
	return c.laneCall(ctx, kind, raddr, rkey, a, b, nil)
}

// lanePut writes src (at most laneData bytes) to raddr on a lane; ok as
// for laneAtomic.
func (c *Client) lanePut(ctx context.Context, src []byte, raddr uint64, rkey uint32) (ok bool, err error) {
	_, ok, err = c.laneCall(ctx, laneWrite, raddr, rkey, 0, 0, src)
	return ok, err
}

// laneGet reads len(dst) bytes (at most laneData) at raddr into dst on a
// lane; ok as for laneAtomic.
func (c *Client) laneGet(ctx context.Context, dst []byte, raddr uint64, rkey uint32) (ok bool, err error) {
	_, ok, err = c.laneCall(ctx, laneRead, raddr, rkey, 0, 0, dst)
	return ok, err
}

// laneCall is laneAtomic, lanePut and laneGet.
func (c *Client) laneCall(ctx context.Context, kind laneKind, raddr uint64, rkey uint32, a, b uint64, data []byte) (old uint64, ok bool, err error) {
	i, ok, err := c.laneStart(ctx)
	if !ok || err != nil {
		return 0, ok, err
	}
	defer c.use.RUnlock()
	l := &c.lanes[i]
	off, n := c.laneOff()+laneData*i, 8
	if kind == laneWrite || kind == laneRead {
		n = len(data)
	}
	wr := &c.wrs[i]
	*wr = verbs.SendWR{WRID: laneTag | uint64(i), Local: c.mr.Local(off, n), RAddr: raddr, RKey: rkey, A: a, B: b,
		Flags: verbs.SendSignaled}
	switch kind {
	case laneFetchAdd:
		wr.Op = verbs.OpFetchAdd
	case laneCompareSwap:
		wr.Op = verbs.OpCompareSwap
	case laneWrite:
		copy(c.buf[off:off+n], data)
		wr.Op = verbs.OpWrite
	default:
		wr.Op = verbs.OpRead
	}
	switch kind {
	case laneRead8, laneRead:
		c.stats.reads.Add(1)
		c.stats.bytesRead.Add(uint64(n))
	case laneWrite:
		c.stats.writes.Add(1)
		c.stats.bytesWritten.Add(uint64(n))
	default:
		c.stats.nicAtomics.Add(1)
	}
	if err := c.laneWait(ctx, l, i); err != nil {
		return 0, true, err
	}
	if kind == laneRead {
		copy(data, c.buf[off:off+n])
	} else {
		old = binary.NativeEndian.Uint64(c.buf[off:])
	}
	c.putLane(i)
	return old, true, nil
}

// laneStart takes a lane for a call, and read-holds c.use (the caller
// releases it); ok false says the call takes the serialized path instead.
func (c *Client) laneStart(ctx context.Context) (i int, ok bool, err error) {
	if !c.quiet.Load() || c.failed.Load() || c.closing.Load() {
		return 0, false, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, true, err // a call whose context has ended sends nothing
	}
	if i = c.takeLane(); i < 0 {
		return 0, false, nil
	}
	if !c.use.TryRLock() { // Close is under way
		c.putLane(i)
		return 0, true, ErrClosed
	}
	l := &c.lanes[i]
	l.done.Store(false)
	l.err = nil
	return i, true, nil
}

// laneEngine sends one accumulate message (see Window.engine) on a lane
// and waits for its reply; ok false says the call takes the serialized
// path instead (every lane or every engine lane in flight, or the message
// larger than a lane's slot).
func (c *Client) laneEngine(ctx context.Context, req *fallback.Request, result []byte) (ok bool, err error) {
	if headerLen+fallback.RequestHeaderSize+len(req.Data) > laneData {
		return false, nil
	}
	// An engine lane counts from before its post to its last completion
	// (laneEvent), whether its caller waited for it or not.
	if c.engines.Add(1) > engineLanes {
		c.engines.Add(-1)
		return false, nil
	}
	i, ok, err := c.laneStart(ctx)
	if !ok || err != nil {
		c.engines.Add(-1)
		return ok, err
	}
	defer c.use.RUnlock()
	l := &c.lanes[i]
	seq := laneSeqTag | c.laneSeq.Add(1)<<4&^laneSeqTag | uint32(i)
	off := c.laneOff() + laneData*i
	b := c.buf[off : off+laneData]
	putHeader(b, msgAcc, seq)
	req.Tag = seq
	msg, err := fallback.AppendRequest(b[:headerLen], req)
	if err != nil {
		c.engines.Add(-1)
		c.putLane(i)
		return true, err
	}
	l.replyLen = 0
	l.events.Store(2)
	l.seq.Store(seq)
	c.wrs[i] = verbs.SendWR{WRID: laneTag | uint64(i), Local: c.mr.Local(off, len(msg)), Op: verbs.OpSend, Flags: verbs.SendSignaled}
	if err := c.laneWait(ctx, l, i); err != nil {
		return true, err // abandoned, or the connection failed
	}
	err, bad := c.accResult(l.reply[:l.replyLen], result)
	if bad {
		c.mu.Lock()
		c.fail(err)
		err = c.err
		c.mu.Unlock()
	}
	l.seq.Store(0)
	c.putLane(i)
	return true, err
}

// takeLane takes a free lane, or returns -1 if every lane is in flight.
func (c *Client) takeLane() int {
	for {
		f := c.free.Load()
		if f == 0 {
			return -1
		}
		i := bits.TrailingZeros32(f)
		if c.free.CompareAndSwap(f, f&^(1<<i)) {
			return i
		}
	}
}

// putLane gives lane i back.
func (c *Client) putLane(i int) {
	for {
		f := c.free.Load()
		if c.free.CompareAndSwap(f, f|1<<i) {
			return
		}
	}
}

// isDone reports whether the lane's completion came.
func (l *lane) isDone() bool { return l.done.Load() }

// laneWait waits for lane i's completion: see the comment at the top.
// On an error other than its completion's it leaves the lane in flight,
// abandoned (laneDone frees it).
func (c *Client) laneWait(ctx context.Context, l *lane, i int) error {
	bit := uint32(1) << i
	c.enqueue(bit)
	for {
		if l.isDone() {
			err := c.laneResult(l)
			if err != nil {
				l.seq.Store(0)
				c.putLane(i)
			}
			return err
		}
		if c.closing.Load() {
			return c.abandon(l, i, ErrClosed)
		}
		if !c.mu.TryLock() {
			// Park until the lane is done or mu's holder hands over;
			// try mu once more after registering, so that a holder
			// that left meanwhile is not missed.
			c.setParked(bit, true)
			if l.isDone() || !c.mu.TryLock() {
				if !l.isDone() {
					select {
					case <-l.ch:
					case <-ctx.Done():
					}
				}
				c.setParked(bit, false)
				if err := ctx.Err(); err != nil && !l.isDone() {
					return c.abandon(l, i, err)
				}
				continue
			}
			c.setParked(bit, false)
		}
		// mu is held: poll, as wait does, until the lane is done (it may
		// be already); then hand the polling on.
		var err error
		spins, armed := 0, false
		for err == nil && !l.isDone() && !c.closing.Load() {
			err = c.pollLane(ctx, l, &spins, &armed)
		}
		c.mu.Unlock()
		if err != nil && !l.isDone() {
			return c.abandon(l, i, err)
		}
	}
}

// pollLane polls the CQ once for laneWait, or sleeps on the completion
// channel once it has spun long enough; mu is held.
func (c *Client) pollLane(ctx context.Context, l *lane, spins *int, armed *bool) error {
	if err := c.mend(ctx); err != nil {
		return err
	}
	posted := c.postPending()
	n, err := c.cq.Poll(c.wcs[:])
	procs.Polled()
	if err != nil {
		c.fail(err)
		return c.err
	}
	for k := 0; k < n; k++ {
		c.complete(&c.wcs[k])
	}
	c.yieldToNudged()
	switch {
	case n > 0 || posted || l.isDone():
		*spins, *armed = 0, false
	case *spins < spinPolls:
		*spins++
	case !*armed:
		if err := c.cq.ReqNotify(); err != nil {
			c.fail(err)
			return c.err
		}
		*armed = true // poll once more: a completion may have come before the arming
	default:
		if err := c.sleep(ctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			c.fail(err)
			return c.err
		}
		*armed = false
	}
	return nil
}

// yieldToNudged lets the lane callers that the completions just polled
// woke run now, on this P, where the runtime queued them: while the
// poller spins they would wait for another P to steal them; mu is held.
func (c *Client) yieldToNudged() {
	if c.nudged {
		c.nudged = false
		runtime.Gosched()
	}
}

// enqueue hands the work requests of the lanes in bits (c.wrs) to the
// holder of mu, who posts them with the others enqueued at the time: one
// call to the provider, one doorbell, for all the calls in flight. A
// holder asleep on the completion channel is woken for it.
func (c *Client) enqueue(bits uint32) {
	for p := c.toPost.Load(); !c.toPost.CompareAndSwap(p, p|bits); p = c.toPost.Load() {
	}
	if c.sleeping.Load() {
		c.cc.Wake()
	}
}

// postPending posts the work requests enqueued, reporting whether there
// were any; mu is held. A lane whose work request was not posted (the
// connection failed, or the provider refused it) is done with the error.
func (c *Client) postPending() bool {
	pending := c.toPost.Swap(0)
	if pending == 0 {
		return false
	}
	n := 0
	for b := pending; b != 0; b &= b - 1 {
		c.posting[n] = c.wrs[bits.TrailingZeros32(b)]
		n++
	}
	posted, err := 0, c.err
	if err == nil && c.broken {
		// Posted once the session is resumed.
		c.enqueue(pending)
		return false
	}
	if err == nil {
		last := int(c.posting[n-1].WRID &^ laneTag)
		for k := range c.posting[:n-1] {
			c.posting[k].Flags &^= verbs.SendSignaled
		}
		for b := pending; b != 0; b &= b - 1 {
			c.lanes[bits.TrailingZeros32(b)].posted = true
		}
		c.lanes[last].list = pending &^ (1 << last)
		for k := range c.posting[:n] {
			c.posting[k].RKey = c.rkey(&c.posting[k])
		}
		posted, err = c.qp.PostList(c.posting[:n])
		for b, k := pending, 0; k < posted; b, k = b&(b-1), k+1 {
			wr := c.wrs[bits.TrailingZeros32(b)]
			wr.Flags = c.posting[k].Flags
			c.record(wr)
		}
		if posted > 0 && posted < n {
			// The list's signalled request was not posted: nothing
			// would report the ones that were.
			c.fail(err)
			err = c.err
		}
	}
	for _, wr := range c.posting[posted:n] {
		l := &c.lanes[wr.WRID&^laneTag]
		l.posted, l.list = false, 0
		c.laneFailed(int(wr.WRID&^laneTag), err)
	}
	return true
}

// sleep sleeps on the completion channel, unless work requests are
// enqueued (or come meanwhile: enqueue wakes the sleeper); mu is held.
func (c *Client) sleep(ctx context.Context) error {
	c.sleeping.Store(true)
	defer c.sleeping.Store(false)
	if c.toPost.Load() != 0 {
		return nil
	}
	return c.cc.Wait(ctx)
}

// laneResult is the error of a lane whose completion came: its own, or
// the connection's failure it caused (both written before done was).
func (c *Client) laneResult(l *lane) error {
	if l.err != nil && c.failed.Load() {
		return c.err
	}
	return l.err
}

// abandon leaves lane i in flight for laneDone to free, and returns err.
//
// A lane whose work request is still enqueued is taken back instead, and
// freed: the call sends nothing, as one whose context ended before it
// began. Posted later, after its caller's next call, it could overwrite
// what that call wrote.
func (c *Client) abandon(l *lane, i int, err error) error {
	c.mu.Lock()
	switch {
	case l.isDone():
	case c.unqueue(uint32(1) << i):
		if l.seq.Load() != 0 {
			c.engines.Add(-1)
		}
	default:
		l.abandoned = true
		c.mu.Unlock()
		return err
	}
	l.seq.Store(0)
	c.putLane(i)
	c.mu.Unlock()
	return err
}

// unqueue takes bit out of toPost, reporting whether it was there (its
// work request not posted); mu is held, so no poster takes it meanwhile.
func (c *Client) unqueue(bit uint32) bool {
	for {
		p := c.toPost.Load()
		if p&bit == 0 {
			return false
		}
		if c.toPost.CompareAndSwap(p, p&^bit) {
			return true
		}
	}
}

// laneDone records the completion of lane i's work request; mu is held.
//
// Only the last work request of each list postPending posts is
// signalled: its completion is the completion of the list's others too,
// which an RC QP completes in order (a failed one, and those after it,
// complete with an error of their own). A lane counts its work request's
// completion once, whichever completion reports it.
func (c *Client) laneDone(i int, err error) {
	if i >= maxLanes {
		return
	}
	if err != nil {
		c.fail(err) // the QP is in the error state: the connection is lost
	}
	list := c.lanes[i].list
	c.lanes[i].list = 0
	for b := list | 1<<i; b != 0; b &= b - 1 {
		k := bits.TrailingZeros32(b)
		l := &c.lanes[k]
		if !l.posted {
			continue
		}
		l.posted = false
		if err != nil {
			l.err = err
			l.events.Store(1) // no reply comes after a failed send
		}
		c.laneEvent(k)
	}
}

// laneFailed records that lane i's work request was not posted: the lane
// is done with err, and the connection is not failed for it; mu is held.
func (c *Client) laneFailed(i int, err error) {
	l := &c.lanes[i]
	l.err = err
	l.events.Store(1)
	c.laneEvent(i)
}

// laneReply takes msg, a reply to an engine message of a lane, reporting
// whether it was one in flight; mu is held.
func (c *Client) laneReply(seq uint32, msg []byte) bool {
	i := int(seq & (maxLanes - 1))
	l := &c.lanes[i]
	if seq&laneSeqTag == 0 || l.seq.Load() != seq || l.replyLen != 0 || len(msg) > len(l.reply) {
		return false
	}
	l.replyLen = copy(l.reply[:], msg)
	c.laneEvent(i)
	return true
}

// laneEvent counts one completion of lane i: its work request's, or the
// reply to its engine message. The lane is done when the last has come.
// mu is held.
func (c *Client) laneEvent(i int) {
	l := &c.lanes[i]
	if l.seq.Load() != 0 {
		if l.events.Add(-1) > 0 {
			return
		}
		c.engines.Add(-1)
	}
	l.done.Store(true)
	if l.abandoned {
		l.abandoned = false
		l.seq.Store(0)
		c.putLane(i)
		return
	}
	if c.parked.Load()&(1<<i) != 0 {
		c.nudge(i) // its caller set its bit before it last looked at done
		c.nudged = true
	}
}

// lanesIdle reports whether no abandoned lane is in flight; mu is held.
func (c *Client) lanesIdle() bool {
	for i := range c.lanes {
		if c.lanes[i].abandoned {
			return false
		}
	}
	return true
}
