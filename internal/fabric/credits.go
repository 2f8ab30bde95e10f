package fabric

import (
	"context"
	"time"

	"github.com/onesided/rma/internal/procs"
	"github.com/onesided/rma/verbs"
)

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
