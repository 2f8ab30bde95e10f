package service

import (
	"time"

	"github.com/onesided/rma/fallback"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/verbs"
)

// The server's side of the calls that need its CPU: the accumulates the
// NIC cannot do, and the locks. Both run in the control loop, s.mu held.

// maxReply is the longest reply: msgOK with a fallback reply of the old
// elements of a fetching accumulate. Replies are sent inline.
const maxReply = headerLen + fallback.ReplyHeaderSize + maxFetchData

// probeTag marks a probe's work request id.
const probeTag = 1 << 31

// lockWaiting marks, in sconn.locks, a lock request not granted yet.
const lockWaiting = 0x80

// lockState is one window's lock: its holders and, in order, the
// requests waiting for it.
type lockState struct {
	excl   *sconn
	shared int
	queue  []lockReq
}

type lockReq struct {
	c   *sconn
	lt  byte
	seq uint32
}

func (l *lockState) free(lt byte) bool {
	return l.excl == nil && (lt == lockShared || l.shared == 0)
}

// waiting returns the sequence number of c's request in the queue (0 if
// none).
func (l *lockState) waiting(c *sconn) uint32 {
	for _, q := range l.queue {
		if q.c == c {
			return q.seq
		}
	}
	return 0
}

// reply sends a reply of n bytes from reply; a connection that cannot take
// it is dropped.
func (s *Server) reply(c *sconn, reply []byte) {
	if !s.send(c, reply) {
		s.drop(c)
	}
}

func (s *Server) fail(c *sconn, seq uint32, reason byte, reply []byte) {
	putHeader(reply, msgErr, seq)
	reply[headerLen] = reason
	s.reply(c, reply[:errLen])
}

// accumulate applies a msgAcc to its window and answers it: the window
// must be one c opened, with a grant that covers the request; then the
// server's fallback.Target checks and applies it, as a group rank's engine
// does, and its reply (the old elements, or why it refused) follows the
// header of msgOK. A request that cannot be decoded goes to the Target
// too, which refuses it.
func (s *Server) accumulate(c *sconn, msg []byte, seq uint32, reply []byte) {
	var r fallback.Request
	var w *exposed
	if fallback.DecodeRequest(msg[headerLen:], &r) == nil {
		g := c.grants[r.Window]
		if g == nil {
			c.stats.EngineRejects++
			s.fail(c, seq, errUnknownWin, reply)
			return
		}
		w = s.byID[r.Window]
		if g.access&needs(&r) == 0 {
			c.stats.EngineRejects++
			w.stats.EngineRejects++
			s.fail(c, seq, errDenied, reply)
			return
		}
	}
	out := s.target.Handle(msg[headerLen:], reply[headerLen:headerLen:maxReply])
	putHeader(reply, msgOK, seq)
	var rep fallback.Reply
	if fallback.DecodeReply(out, &rep) != nil || rep.Status != fallback.StatusOK {
		c.stats.EngineRejects++
		if w != nil {
			w.stats.EngineRejects++
		}
	} else {
		c.stats.EngineOps++
		w.stats.EngineOps++
		w.stats.EngineBytes += uint64(r.Count) * uint64(r.Type.Size())
	}
	s.reply(c, reply[:headerLen+len(out)])
}

// needs returns the rights of which a grant needs one for r: a fetch of
// NO_OP only reads.
func needs(r *fallback.Request) Access {
	if r.Kind == fallback.KindGetAccumulate && r.Op == op.NoOp {
		return AccessRead | AccessAtomic
	}
	return AccessAtomic
}

// lock handles a msgLock or a msgUnlock.
func (s *Server) lock(c *sconn, msg []byte, seq uint32, reply []byte) {
	id, lt, ok := parseLock(msg)
	if !ok {
		s.fail(c, seq, errBadRequest, reply)
		return
	}
	if c.grants[id] == nil {
		s.fail(c, seq, errUnknownWin, reply)
		return
	}
	w := s.byID[id]
	l := &w.locks
	have := c.locks[id]
	if lt != 0 { // Lock
		if have != 0 {
			if have&lockWaiting != 0 && l.waiting(c) == seq {
				return // sent again after a resumption: the grant comes when it comes
			}
			s.fail(c, seq, errLockState, reply)
			return
		}
		if c.locks == nil {
			c.locks = map[uint32]byte{}
		}
		if len(l.queue) == 0 && l.free(lt) {
			s.take(w, c, lt)
			putHeader(reply, msgOK, seq)
			s.reply(c, reply[:headerLen])
			return
		}
		c.locks[id] = lt | lockWaiting
		l.queue = append(l.queue, lockReq{c: c, lt: lt, seq: seq})
		w.stats.LockWaits++
		c.stats.LockWaits++
		return
	}
	// Unlock, or the withdrawal of a request still waiting.
	if have == 0 {
		s.fail(c, seq, errLockState, reply)
		return
	}
	s.unlock(w, c)
	putHeader(reply, msgOK, seq)
	s.reply(c, reply[:headerLen])
	s.grant(w, reply)
}

// take records that c holds w's lock of type lt.
func (s *Server) take(w *exposed, c *sconn, lt byte) {
	if lt == lockExclusive {
		w.locks.excl = c
	} else {
		w.locks.shared++
	}
	c.locks[w.id] = lt
	w.stats.LockGrants++
}

// unlock gives up what c holds of w's lock or withdraws its request; the
// caller then grants what it can.
func (s *Server) unlock(w *exposed, c *sconn) {
	l := &w.locks
	have := c.locks[w.id]
	delete(c.locks, w.id)
	switch {
	case have&lockWaiting != 0:
		for i := range l.queue {
			if l.queue[i].c == c {
				l.queue = append(l.queue[:i], l.queue[i+1:]...)
				break
			}
		}
	case have == lockExclusive:
		l.excl = nil
	case have == lockShared:
		l.shared--
	}
}

// grant grants w's lock to the requests at the head of its queue while
// they are compatible with its holders, telling each.
func (s *Server) grant(w *exposed, reply []byte) {
	l := &w.locks
	for len(l.queue) > 0 && l.free(l.queue[0].lt) {
		q := l.queue[0]
		l.queue[0] = lockReq{}
		l.queue = l.queue[1:]
		s.take(w, q.c, q.lt)
		putHeader(reply, msgOK, q.seq)
		s.reply(q.c, reply[:headerLen])
	}
	if len(l.queue) == 0 {
		l.queue = nil
	}
}

// gone releases what a connection being torn down held or waited for: a
// client that died holding a lock frees it.
func (s *Server) gone(c *sconn) {
	if c.authed {
		s.stats.Disconnects++
	}
	if s.sessions[c.session] == c {
		delete(s.sessions, c.session)
	}
	if len(c.locks) == 0 {
		return
	}
	var reply [maxReply]byte
	for id, lt := range c.locks {
		w := s.byID[id]
		if lt&lockWaiting == 0 {
			w.stats.LockRecoveries++
			s.stats.LockRecoveries++
		}
		s.unlock(w, c)
		s.grant(w, reply[:])
	}
}

// probe checks, every ProbeInterval, that the clients holding or waiting
// for a lock are still there: an RDMA READ of the 8 bytes the client
// registered for it (msgAuth), which the client's NIC answers without its
// CPU, fails after the transport's retries when the client's host is gone
// (a client process that dies is seen at once: its kernel disconnects).
// A READ of real memory with its real key is answered again when it comes
// twice (a duplicated frame, a retransmission), as every READ is. s.mu is
// not held.
func (s *Server) probe(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Sub(s.probed) < s.cfg.ProbeInterval {
		return
	}
	s.probed = now
	land := s.rmr.Local(s.cfg.RecvBuffers*recvSize, 8)
	for _, c := range s.conns {
		if len(c.locks) == 0 || c.probing || c.dead || c.kill || c.sends >= maxConnSends {
			continue
		}
		if err := c.qp.PostRead(uint64(c.qpn)<<32|uint64(c.serial)|probeTag, land, c.probeAddr, c.probeRKey, verbs.SendSignaled); err != nil {
			s.drop(c)
			continue
		}
		c.probing = true
		c.sends++
	}
}
