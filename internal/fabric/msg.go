package fabric

import (
	"context"
	"sync"
	"sync/atomic"

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
	m.initTables(f.size, nreq, nrep)
	m.repost = make([]verbs.RecvWR, 0, min(8, nrecv/4))
	for id := 0; id < nrecv; id++ {
		if err := m.srq.PostRecv(uint64(id), m.mr.Local(id*m.size, m.size)); err != nil {
			return err
		}
	}
	return nil
}

// initTables makes the tables of messaging to size ranks, with nreq
// request and nrep reply buffers, every buffer and credit free; m.credits
// is set.
func (m *messaging) initTables(size, nreq, nrep int) {
	m.qps = make(map[uint32]qpSide)
	m.reqFree = make(chan uint16, nreq)
	for i := 0; i < nreq; i++ {
		m.reqFree <- uint16(i)
	}
	m.repFree = make(chan uint16, nrep)
	for i := 0; i < nrep; i++ {
		m.repFree <- uint16(i)
	}
	m.peers = make([]msgPeer, size)
	for r := range m.peers {
		p := &m.peers[r]
		p.free = make(chan uint16, m.credits)
		p.credits = make([]credit, m.credits)
		p.wake = make(chan struct{}, 1)
		p.applied = make([]applied, m.credits)
		for c := range p.credits {
			p.credits[c].buf = -1
			p.free <- uint16(c)
		}
	}
	m.deferred = make([]deferredReq, 0, size*m.credits)
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
