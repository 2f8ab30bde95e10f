package service

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/onesided/rma"
	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/fallback"
	"github.com/onesided/rma/internal/procs"
	"github.com/onesided/rma/verbs"
)

// Server exposes memory to clients. See Listen.
type Server struct {
	cfg  ServerConfig
	addr netip.AddrPort

	ch    *verbs.EventChannel
	lid   *verbs.CMID
	dev   *verbs.Context
	pd    *verbs.PD
	cc    *verbs.CompChannel
	rcq   *verbs.CQ // receives of every connection, through srq
	scq   *verbs.CQ // sends (replies) of every connection
	srq   *verbs.SRQ
	rbuf  []byte // the receive buffers
	rmr   *verbs.MR
	sendN int // send CQ entries

	// The words on which clients check that the NIC atomics between them
	// and the server work in host byte order (atomics.Probe), one per
	// authenticated connection, each reached through a memory window
	// bound to its QP; nil when the device has no atomics.
	orderMem  []byte
	orderMR   *verbs.MR
	orderFree chan int // the free words, by index

	ctx    context.Context
	cancel context.CancelFunc
	stop   atomic.Bool // tells the control loop to leave
	kick   chan struct{}
	wg     sync.WaitGroup

	closeOnce sync.Once
	closeErr  error

	mu      sync.Mutex // guards what follows
	closed  bool
	windows map[string]*exposed
	byID    []*exposed        // windows[name].id indexes it
	target  *fallback.Target  // applies the accumulates to the windows (engine.go)
	conns   map[uint32]*sconn // by QP number
	// The sessions of authenticated connections, those held for a
	// connection that failed on the transport included (resume.go).
	sessions map[session]*sconn
	unauth   []*sconn // connections not authenticated yet, oldest first (MaxPending)
	secrets  []secret // accepted, the current one first
	serial   uint32
	victims  []*sconn // scratch of the watch loop
	probed   time.Time
	flags    uint8 // of msgOpenOK
	stats    ServerStats
}

// exposed is one window. Its MR grants no remote access: clients reach
// it through memory windows bound to their own QPs (grant).
type exposed struct {
	name  string
	id    uint32
	mem   []byte
	mr    *verbs.MR
	locks lockState
	stats WindowStats
}

// grant is what one connection may do to one window, and its key.
type grant struct {
	access Access
	mw     *verbs.MW
	rkey   uint32
}

// secret is a secret the server accepts, until retire if that is set.
type secret struct {
	key    []byte
	gen    uint32
	retire time.Time
}

// sconn is one connection at the server. Its flags are under Server.mu.
type sconn struct {
	id        *verbs.CMID
	qp        *verbs.QP
	out       replier // qp; the unit tests' record of replies
	qpn       uint32
	serial    uint32
	cNonce    [nonceLen]byte
	sNonce    [nonceLen]byte
	abort     context.CancelFunc // ends its handshake (accept) early
	pending   bool               // in Server.unauth
	evicted   bool               // dropped for a newer connection request (MaxPending)
	accepted  bool               // Accept returned: the watch loop owns the id's events
	authed    bool
	gen       uint32 // the generation of the secret it proved
	failing   bool   // its proof was refused; it goes when the refusal is sent
	kill      bool   // to be torn down by the watch loop
	dead      bool   // torn down, or about to be
	deadline  time.Time
	sends     int // sends outstanding, replies and probes
	probing   bool
	probeAddr uint64 // the client's memory its probes READ
	probeRKey uint32
	info      ClientInfo
	grants    map[uint32]*grant // by window id: the windows it opened
	orderMW   *verbs.MW         // its key to its byte-order word (Server.orderMem)
	orderWord int
	locks     map[uint32]byte // by window id: the lock held or waited for (lockWaiting)
	stats     ConnStats

	// Its session (resume.go): the replies recorded for a resumption;
	// broken, its QP failed on the transport (the session is then held
	// for ServerConfig.ResumeWithin); held, it is (until then); moved,
	// a new connection resumed its session.
	session session
	replies *replyRing
	resumed bool
	broken  bool
	held    bool
	moved   bool
	until   time.Time
}

// maxConnSends bounds a connection's outstanding sends: a client has one
// request outstanding on its serialized path and engineLanes on its
// lanes, besides at most maxLockWaits lock requests waiting, each of which
// may be granted as the request comes; one more for a probe.
const maxConnSends = 1 + engineLanes + maxLockWaits + 1

// maxConnBinds bounds the windows one connection opens, each a memory
// window bound by an unsignaled work request on its send queue (which
// the signaled reply after it frees).
const maxConnBinds = 64

// Listen listens for clients on addr, an IP address and port of an RDMA
// device's network interface ("10.0.0.1:7471"; port 0 picks one, see
// Addr; a host name is looked up first). The device is the one the
// connection manager binds that address to; an unspecified address
// (0.0.0.0, ::) is not supported in this version. cfg.Secret is required.
//
// The server runs three goroutines until Close: one takes connection
// requests (and accepts them), one watches the connections' events and
// the authentication deadlines, one answers the control messages. All
// connections share one receive queue (cfg.RecvBuffers buffers), one
// receive CQ and one send CQ (sized for cfg.MaxConns), so the server's
// memory does not grow with its clients beyond one QP each.
func Listen(ctx context.Context, addr string, cfg ServerConfig) (s *Server, err error) {
	procs.Ensure()
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	ap, err := resolve(ctx, addr)
	if err != nil {
		return nil, err
	}
	if ap.Addr().IsUnspecified() {
		return nil, fmt.Errorf("%w: listen on a specific address, not %v", verbs.ErrInvalid, ap.Addr())
	}
	s = newServer(cfg)
	made := s
	defer func() {
		if err != nil {
			made.release()
			s = nil
		}
	}()
	if s.ch, err = verbs.NewEventChannel(); err != nil {
		return nil, err
	}
	if s.lid, err = s.ch.CreateID(); err != nil {
		return nil, err
	}
	if err = s.lid.SetReuseAddr(true); err != nil {
		return nil, err
	}
	if err = s.lid.Listen(ap, 0); err != nil {
		return nil, fmt.Errorf("service: listen on %v: %w", ap, err)
	}
	s.addr = s.lid.LocalAddr()
	route, err := s.lid.Route()
	if err != nil {
		return nil, err
	}
	if s.dev, err = verbs.OpenCM(route.Device); err != nil {
		return nil, err
	}
	if err = s.setUp(); err != nil {
		return nil, err
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(3)
	go s.acceptLoop()
	go s.watchLoop()
	go s.controlLoop()
	return s, nil
}

// newServer is a Server with nothing opened yet.
func newServer(cfg ServerConfig) *Server {
	return &Server{cfg: cfg, kick: make(chan struct{}, 1), windows: map[string]*exposed{}, conns: map[uint32]*sconn{}, sessions: map[session]*sconn{}, target: fallback.NewTarget(),
		secrets: []secret{{key: cfg.Secret, gen: 1}}}
}

// setUp makes, on s.dev, what every connection shares: the CQs, the
// shared receive queue with its buffers posted, the byte-order words.
func (s *Server) setUp() error {
	attr, err := s.dev.QueryDevice()
	if err != nil {
		return err
	}
	if attr.AtomicCap != verbs.AtomicNone {
		s.flags |= flagAtomics
	}
	if !attr.MemWindowType2 {
		return fmt.Errorf("%w: device %s has no type 2 memory windows, which the server's per-client keys need", verbs.ErrNotSupported, s.dev.Name())
	}
	if s.pd, err = s.dev.AllocPD(); err != nil {
		return err
	}
	if s.cc, err = s.dev.CreateCompChannel(); err != nil {
		return err
	}
	if s.rcq, err = s.dev.CreateCQ(s.cfg.RecvBuffers, s.cc); err != nil {
		return err
	}
	// Each connection has at most maxConnSends replies outstanding, and a
	// connection torn down leaves at most as many (flushed) behind, which
	// the control loop drains at once.
	s.sendN = 2*maxConnSends*s.cfg.MaxConns + 64
	if attr.MaxCQE > 0 && s.sendN > attr.MaxCQE {
		return fmt.Errorf("%w: MaxConns %d needs a send CQ of %d entries, and device %s allows %d (at most %d connections)",
			verbs.ErrInvalid, s.cfg.MaxConns, s.sendN, s.dev.Name(), attr.MaxCQE, (attr.MaxCQE-64)/(2*maxConnSends))
	}
	if s.scq, err = s.dev.CreateCQ(s.sendN, s.cc); err != nil {
		return err
	}
	if s.srq, err = s.pd.CreateSRQ(verbs.SRQConfig{MaxWR: s.cfg.RecvBuffers}); err != nil {
		return err
	}
	if s.flags&flagAtomics != 0 {
		if s.orderMem, err = verbs.Alloc((8*s.cfg.MaxConns + 4095) &^ 4095); err != nil {
			return err
		}
		if s.orderMR, err = s.pd.RegisterMR(s.orderMem, verbs.AccessLocalWrite|verbs.AccessMWBind); err != nil {
			return err
		}
		s.orderFree = make(chan int, s.cfg.MaxConns)
		for i := range s.cfg.MaxConns {
			s.orderFree <- i
		}
	}
	// The receive buffers, then where probes land.
	if s.rbuf, err = verbs.Alloc(s.cfg.RecvBuffers*recvSize + recvSize); err != nil {
		return err
	}
	if s.rmr, err = s.pd.RegisterMR(s.rbuf, verbs.AccessLocalWrite); err != nil {
		return err
	}
	for i := 0; i < s.cfg.RecvBuffers; i++ {
		if err := s.srq.PostRecv(uint64(i), s.rmr.Local(i*recvSize, recvSize)); err != nil {
			return err
		}
	}
	return nil
}

// Addr is the address the server listens on (with the port picked, for
// port 0).
func (s *Server) Addr() netip.AddrPort { return s.addr }

// Conns is the number of connections the server holds, authenticated or not.
func (s *Server) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Expose makes mem a window that authenticated clients may open by name
// and read, write and update with atomics (as ServerConfig.Authorize
// lets each), until Close. mem must be
// 8-byte aligned (memory from verbs.Alloc is page aligned), must not be
// empty, and must stay valid until Close returns; the server registers
// it (it is pinned until Close). Clients' NIC atomics, reads and writes
// reach mem without the server's code, and its engine applies their other
// accumulates to it; neither is atomic with the process's own loads and
// stores on mem. name is 1 to MaxNameLen bytes.
func (s *Server) Expose(name string, mem []byte) error {
	if len(name) == 0 || len(name) > MaxNameLen {
		return fmt.Errorf("%w: window name of %d bytes (1 to %d)", rma.ErrInvalid, len(name), MaxNameLen)
	}
	if len(mem) == 0 || uintptr(unsafe.Pointer(&mem[0]))%8 != 0 {
		return fmt.Errorf("%w: window memory must be non-empty and 8-byte aligned", rma.ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if _, ok := s.windows[name]; ok {
		return fmt.Errorf("%w: %q", ErrExists, name)
	}
	// No remote access of its own: only the memory windows bound to
	// authenticated clients' QPs reach it.
	mr, err := s.pd.RegisterMR(mem, verbs.AccessLocalWrite|verbs.AccessMWBind)
	if err != nil {
		return err
	}
	w := &exposed{name: name, id: uint32(len(s.byID)), mem: mem, mr: mr}
	if err := s.target.AddWindow(w.id, mem); err != nil {
		mr.Close()
		return err
	}
	s.windows[name] = w
	s.byID = append(s.byID, w)
	return nil
}

// Close disconnects every client, stops the server's goroutines and
// releases everything it holds (the windows' memory stays the caller's).
// Clients' calls then fail with errors matching verbs.ErrPeerLost.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.cancel()
		s.stop.Store(true)
		s.cc.Wake()
		s.wg.Wait()
		s.mu.Lock()
		conns := make([]*sconn, 0, len(s.conns))
		for _, c := range s.conns {
			c.dead = true
			conns = append(conns, c)
		}
		clear(s.conns)
		s.mu.Unlock()
		for _, c := range conns {
			s.teardown(c)
		}
		s.closeErr = s.release()
	})
	return s.closeErr
}

// release frees what Listen made, in reverse order.
func (s *Server) release() error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if s.lid != nil {
		add(s.lid.Close())
	}
	for _, w := range s.windows {
		add(w.mr.Close())
	}
	if s.srq != nil {
		add(s.srq.Close())
	}
	if s.orderMR != nil {
		add(s.orderMR.Close())
	}
	if s.orderMem != nil {
		add(verbs.Free(s.orderMem))
	}
	if s.rmr != nil {
		add(s.rmr.Close())
	}
	if s.rbuf != nil {
		add(verbs.Free(s.rbuf))
	}
	if s.scq != nil {
		add(s.scq.Close())
	}
	if s.rcq != nil {
		add(s.rcq.Close())
	}
	if s.cc != nil {
		add(s.cc.Close())
	}
	if s.pd != nil {
		add(s.pd.Close())
	}
	if s.dev != nil {
		add(s.dev.Close())
	}
	if s.ch != nil {
		add(s.ch.Close())
	}
	return errors.Join(errs...)
}

// teardown disconnects and destroys a connection already taken out of
// the table: its keys die with their memory windows, before its QP.
func (s *Server) teardown(c *sconn) {
	c.id.Disconnect()
	for _, g := range c.grants {
		if g.mw != nil {
			g.mw.Close()
		}
	}
	if c.orderMW != nil {
		c.orderMW.Close()
		c.orderMW = nil
		s.orderFree <- c.orderWord
	}
	if c.qp != nil {
		c.qp.Close()
	}
	c.id.Close()
}

func (s *Server) signal() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// acceptLoop takes connection requests. Each handshake runs in a
// goroutine of its own with its own deadline; beyond MaxPending
// connections not authenticated yet, the oldest is dropped, so a flood of
// requests that never finish cannot keep a client out.
func (s *Server) acceptLoop() {
	defer s.wg.Done()
	for {
		ev, err := s.lid.Event(s.ctx)
		if err != nil {
			if s.ctx.Err() != nil || errors.Is(err, verbs.ErrClosed) {
				return
			}
			continue
		}
		if ev.Type != verbs.CMConnectRequest || ev.ID == nil {
			continue
		}
		c := &sconn{id: ev.ID, deadline: time.Now().Add(s.cfg.AuthTimeout), stats: ConnStats{Peer: ev.ID.PeerAddr()}}
		hctx, cancel := context.WithDeadline(s.ctx, c.deadline)
		c.abort = cancel
		s.mu.Lock()
		s.stats.Requests++
		for len(s.unauth) >= s.cfg.MaxPending {
			s.stats.Evicted++
			s.evict(s.unauth[0])
		}
		c.pending = true
		s.unauth = append(s.unauth, c)
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer cancel()
			s.request(hctx, c, ev.PrivateData)
		}()
	}
}

// evict ends a connection that has not authenticated; s.mu is held.
func (s *Server) evict(c *sconn) {
	s.unlist(c)
	c.evicted = true
	if c.accepted {
		s.drop(c)
	} else {
		c.abort() // its handshake gives up
	}
}

// unlist takes c out of the unauthenticated connections; s.mu is held.
func (s *Server) unlist(c *sconn) {
	if !c.pending {
		return
	}
	c.pending = false
	if i := slices.Index(s.unauth, c); i >= 0 {
		s.unauth = slices.Delete(s.unauth, i, i+1)
	}
}

// request answers one connection request: a reject, or an accept with
// the server's nonce, the connection then waiting for its proof. ctx ends
// at the connection's authentication deadline, or when it is evicted.
func (s *Server) request(ctx context.Context, c *sconn, hello []byte) {
	id := c.id
	refuse := func(reason byte) {
		s.mu.Lock()
		s.unlist(c)
		s.mu.Unlock()
		id.Reject(rejectData(reason))
		id.Close()
	}
	cNonce, err := parseHello(hello)
	if err != nil {
		refuse(rejectProtocol)
		return
	}
	c.cNonce = cNonce
	s.mu.Lock()
	full, closed := len(s.conns) >= s.cfg.MaxConns, s.closed
	if full && !closed {
		s.stats.Refused++
	}
	s.mu.Unlock()
	if closed {
		refuse(rejectClosing)
		return
	}
	if full {
		refuse(rejectFull)
		return
	}
	if _, err := rand.Read(c.sNonce[:]); err != nil {
		refuse(rejectClosing)
		return
	}
	id.SetAckTimeout(14)
	c.qp, err = id.CreateQP(s.pd, verbs.QPConfig{SendCQ: s.scq, RecvCQ: s.rcq, SRQ: s.srq,
		MaxSendWR: maxConnSends + 4, MaxInlineData: maxReply})
	if err != nil {
		refuse(rejectClosing)
		return
	}
	if c.qp.MaxInline() < maxReply {
		c.qp.Close()
		c.qp = nil
		refuse(rejectClosing)
		return
	}
	c.qpn, c.out = c.qp.Num(), c.qp
	s.mu.Lock()
	s.serial = (s.serial + 1) &^ probeTag
	c.serial = s.serial
	s.conns[c.qpn] = c
	s.mu.Unlock()

	_, err = id.Accept(ctx, verbs.ConnParam{PrivateData: appendHello(nil, &c.sNonce)})
	if err == nil {
		// Before the watch loop owns the connection: a QP on an SRQ that
		// runs dry should stall its sender briefly, not 655 ms.
		c.qp.SetMinRNRTimer(12)
	}
	s.mu.Lock()
	if err != nil || c.dead || c.evicted {
		if !c.dead {
			c.dead = true
			delete(s.conns, c.qpn)
			if c.pending && !s.closed {
				s.stats.AuthTimeouts++ // not evicted: its deadline passed
			}
			s.unlist(c)
			if c.authed { // it proved the secret before Accept returned
				s.gone(c)
			}
		}
		s.mu.Unlock()
		s.teardown(c)
		return
	}
	c.accepted = true
	s.mu.Unlock()
	s.signal()
}

// watchLoop reads the connections' events (disconnects) and drops the
// connections that disconnected, failed, or did not authenticate in time.
func (s *Server) watchLoop() {
	defer s.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.ch.Queued():
		case <-s.kick:
		case <-timer.C:
		}
		now := time.Now()
		s.mu.Lock()
		next := s.expire(now)
		if t := s.letGo(now); !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
		victims := s.victims[:0]
		for qpn, c := range s.conns {
			if !c.accepted {
				continue
			}
			for {
				ev, ok := c.id.TryEvent()
				if !ok {
					break
				}
				if ev.Type == verbs.CMDisconnected || ev.Type == verbs.CMDeviceRemoval {
					c.kill = true
				}
			}
			if !c.authed && !c.kill && !now.Before(c.deadline) {
				s.stats.AuthTimeouts++
				c.kill = true
			}
			if c.authed && !c.kill && s.retired(c.gen) {
				s.revoke(c) // it proved a secret the server no longer takes
			}
			if c.kill {
				c.dead = true
				delete(s.conns, qpn)
				s.unlist(c)
				if !c.moved && !s.hold(c, now) {
					s.gone(c)
				}
				victims = append(victims, c)
			} else if !c.authed && (next.IsZero() || c.deadline.Before(next)) {
				next = c.deadline
			}
		}
		s.mu.Unlock()
		for i, c := range victims {
			s.teardown(c)
			victims[i] = nil
		}
		s.victims = victims[:0]
		s.probe(now)
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), time.Millisecond)
		}
		timer.Reset(min(wait, s.cfg.ProbeInterval))
	}
}

// controlSpin is how long the control loop keeps polling after the last
// completion before it sleeps on the channel: a client's next message
// within it is answered without the wake-up of a sleeping thread (which
// costs more than the round trip), as a group's engine does (EngineSpin).
const controlSpin = 200 * time.Microsecond

// controlLoop answers the control messages: it polls both CQs, and sleeps
// on their completion channel once there was nothing to do for
// controlSpin.
func (s *Server) controlLoop() {
	defer s.wg.Done()
	var wcs [16]verbs.WC
	var reply [maxReply]byte
	armed := false
	var idle time.Time // the first empty poll since the last completion, read every 64
	for empty := 0; !s.stop.Load(); {
		n, _ := s.rcq.Poll(wcs[:])
		for i := 0; i < n; i++ {
			s.received(&wcs[i], reply[:])
		}
		m, _ := s.scq.Poll(wcs[:])
		procs.Polled()
		if m > 0 {
			s.mu.Lock()
			for i := 0; i < m; i++ {
				s.sent(&wcs[i])
			}
			s.mu.Unlock()
		}
		if n+m > 0 {
			armed, empty, idle = false, 0, time.Time{}
			continue
		}
		if empty++; empty&63 != 0 {
			continue
		}
		if idle.IsZero() {
			idle = time.Now()
		}
		if time.Since(idle) < controlSpin {
			continue
		}
		if !armed {
			s.rcq.ReqNotify()
			s.scq.ReqNotify()
			armed = true
			continue // poll once more: a completion may have come before the arming
		}
		s.cc.Wait(context.Background())
		armed = false
	}
}

// received handles one receive completion and reposts its buffer.
func (s *Server) received(wc *verbs.WC, reply []byte) {
	i := int(wc.WRID)
	if i < 0 || i >= s.cfg.RecvBuffers {
		return
	}
	if wc.Err() == nil && wc.ByteLen <= recvSize {
		msg := s.rbuf[i*recvSize : i*recvSize+int(wc.ByteLen)]
		s.mu.Lock()
		if c := s.conns[wc.QPNum]; c != nil && !c.dead && !c.kill {
			s.message(c, msg, reply)
		}
		s.mu.Unlock()
	}
	if !s.stop.Load() {
		s.srq.PostRecv(uint64(i), s.rmr.Local(i*recvSize, recvSize))
	}
}

// message handles a message from c; s.mu is held.
func (s *Server) message(c *sconn, msg, reply []byte) {
	typ, seq, ok := header(msg)
	if !ok {
		s.drop(c)
		return
	}
	if !c.authed {
		if !c.failing {
			s.authenticate(c, msg, seq, reply)
		}
		return
	}
	c.stats.Requests++
	if c.resumed && typ != msgOpen && c.replies.resend(s, c, seq) {
		return
	}
	switch typ {
	case msgOpen:
		s.open(c, msg, seq, reply)
	case msgAcc:
		s.accumulate(c, msg, seq, reply)
	case msgLock, msgUnlock:
		s.lock(c, msg, seq, reply)
	default:
		s.drop(c)
	}
}

// authenticate checks c's proof against the secrets the server takes,
// and answers with its own; s.mu is held.
func (s *Server) authenticate(c *sconn, msg []byte, seq uint32, reply []byte) {
	a, ok := parseAuth(msg)
	var key *secret
	for i := range s.secrets {
		if ok && checkAuth(&a, s.secrets[i].key, &c.sNonce, &c.cNonce) {
			key = &s.secrets[i]
			break
		}
	}
	if key == nil {
		c.failing = true
		s.stats.AuthFailures++
		putHeader(reply, msgAuthFail, seq)
		if !s.send(c, reply[:headerLen]) {
			s.drop(c)
		}
		return
	}
	c.authed, c.gen = true, key.gen
	c.probeAddr, c.probeRKey = a.probeAddr, a.probeRKey
	c.info = ClientInfo{Addr: c.stats.Peer, Name: a.name}
	s.unlist(c)
	s.stats.Connects++
	ok = a.resume != session{} && s.resume(c, &a.resume)
	if !ok {
		s.newSession(c)
	}
	r := authOK{resumed: ok, session: c.session}
	if s.orderMR != nil {
		var ok bool
		if r.addr, r.rkey, ok = s.bindOrder(c); !ok {
			s.drop(c)
			return
		}
	}
	putAuthOK(reply, seq, key.key, &c.cNonce, &c.sNonce, r)
	if !s.send(c, reply[:authOKLen]) {
		s.drop(c)
	}
}

// bindOrder gives c a byte-order word, set to atomics.ProbeValue, and a
// key to it bound to c's QP (msgAuthOK, posted after the bind, goes out
// once it is bound); s.mu is held.
func (s *Server) bindOrder(c *sconn) (addr uint64, rkey uint32, ok bool) {
	var i int
	select {
	case i = <-s.orderFree:
	default:
		return 0, 0, false
	}
	mw, err := s.pd.AllocMW()
	if err != nil {
		s.orderFree <- i
		return 0, 0, false
	}
	binary.NativeEndian.PutUint64(s.orderMem[8*i:], atomics.ProbeValue)
	var key [1]byte
	rand.Read(key[:])
	rkey, err = c.qp.PostBindMW(uint64(c.qpn)<<32|uint64(c.serial), mw, key[0], s.orderMR, 8*i, 8,
		verbs.AccessRemoteRead|verbs.AccessRemoteAtomic, 0)
	if err != nil {
		mw.Close()
		s.orderFree <- i
		return 0, 0, false
	}
	c.orderMW, c.orderWord = mw, i
	return s.orderMR.Addr() + uint64(8*i), rkey, true
}

// open answers a msgOpen: the window's key for this connection, a memory
// window bound to its QP with the rights ServerConfig.Authorize gives
// (the same key if it opened the window before); s.mu is held.
func (s *Server) open(c *sconn, msg []byte, seq uint32, reply []byte) {
	refuse := func(reason byte) {
		putHeader(reply, msgOpenErr, seq)
		reply[headerLen] = reason
		s.reply(c, reply[:openErrLen])
	}
	name, ok := parseOpen(msg)
	if !ok {
		refuse(openBad)
		return
	}
	w := s.windows[string(name)]
	if w == nil {
		refuse(openUnknown)
		return
	}
	g := c.grants[w.id]
	if g == nil || g.mw == nil {
		access := AccessAll
		switch {
		case g != nil: // a resumed session's: bound again to this QP
			access = g.access
		case s.cfg.Authorize != nil:
			access = s.cfg.Authorize(c.info, w.name) & AccessAll
		}
		if access == 0 {
			w.stats.Denied++
			refuse(openDenied)
			return
		}
		var err error
		if g, err = s.bind(c, w, access); err != nil {
			refuse(openNoKey)
			return
		}
	}
	n := putOpenOK(reply, seq, openOK{addr: w.mr.Addr(), rkey: g.rkey, id: w.id, size: uint64(len(w.mem)),
		flags: s.flags | uint8(g.access)<<accessShift})
	w.stats.Opens++
	s.reply(c, reply[:n])
}

// bind makes c's key for w: a type 2 memory window bound to c's QP (the
// reply posted after it goes out once it is bound); s.mu is held.
func (s *Server) bind(c *sconn, w *exposed, access Access) (*grant, error) {
	if len(c.grants) >= maxConnBinds && c.grants[w.id] == nil {
		return nil, fmt.Errorf("%w: more than %d windows opened on one connection", verbs.ErrInvalid, maxConnBinds)
	}
	mw, err := s.pd.AllocMW()
	if err != nil {
		return nil, err
	}
	var key [1]byte
	rand.Read(key[:])
	var va verbs.Access
	if access&(AccessRead|AccessAtomic) != 0 {
		va |= verbs.AccessRemoteRead
	}
	if access&AccessWrite != 0 {
		va |= verbs.AccessRemoteWrite
	}
	if access&AccessAtomic != 0 {
		va |= verbs.AccessRemoteAtomic
	}
	rkey, err := c.qp.PostBindMW(uint64(c.qpn)<<32|uint64(c.serial), mw, key[0], w.mr, 0, len(w.mem), va, 0)
	if err != nil {
		mw.Close()
		return nil, err
	}
	if c.grants == nil {
		c.grants = map[uint32]*grant{}
	}
	g := &grant{access: access, mw: mw, rkey: rkey}
	c.grants[w.id] = g
	return g, nil
}

// SetSecret makes secret the one clients must prove from now on. The
// previous secrets are still taken for grace, for new connections and
// for those that proved them; then those connections are dropped, and
// their keys die with them (their calls fail with verbs.ErrPeerLost, and
// they Dial again with the new secret). A grace of 0 drops them at once.
func (s *Server) SetSecret(key []byte, grace time.Duration) error {
	if len(key) == 0 || grace < 0 {
		return fmt.Errorf("%w: an empty secret or a negative grace", verbs.ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	until := time.Now().Add(grace)
	for i := range s.secrets {
		if s.secrets[i].retire.IsZero() || s.secrets[i].retire.After(until) {
			s.secrets[i].retire = until
		}
	}
	s.secrets = append([]secret{{key: bytes.Clone(key), gen: s.secrets[0].gen + 1}}, s.secrets...)
	if grace == 0 {
		// The old keys die before SetSecret returns.
		s.expire(time.Now())
		for _, c := range s.conns {
			if c.authed && !c.kill && s.retired(c.gen) {
				s.revoke(c)
			}
		}
	}
	s.signal()
	return nil
}

// revoke ends c's access at once (its QP, and so every key bound to it,
// stops working) and has the watch loop tear it down; s.mu is held.
func (s *Server) revoke(c *sconn) {
	c.qp.SetError()
	s.drop(c)
}

// expire forgets the secrets whose grace has passed and returns when the
// next one's ends (zero if none); s.mu is held.
func (s *Server) expire(now time.Time) (next time.Time) {
	keep := s.secrets[:0]
	for _, k := range s.secrets {
		if !k.retire.IsZero() && !now.Before(k.retire) {
			continue
		}
		keep = append(keep, k)
		if !k.retire.IsZero() && (next.IsZero() || k.retire.Before(next)) {
			next = k.retire
		}
	}
	clear(s.secrets[len(keep):])
	s.secrets = keep
	return next
}

// retired reports whether the secret of generation gen is no longer
// taken; s.mu is held.
func (s *Server) retired(gen uint32) bool {
	for _, k := range s.secrets {
		if k.gen == gen {
			return false
		}
	}
	return true
}

// send posts a reply to c (inline, so b may be reused at once); s.mu is
// held. It reports false if c has too many outstanding or the post failed.
func (s *Server) send(c *sconn, b []byte) bool {
	if c.replies != nil {
		c.replies.record(b)
	}
	if c.held {
		return true // sent again if the client resumes and asks
	}
	if c.sends >= maxConnSends {
		return false
	}
	if err := c.out.PostSendInline(uint64(c.qpn)<<32|uint64(c.serial), b, verbs.SendSignaled); err != nil {
		return false
	}
	c.sends++
	return true
}

// sent handles one send completion (a reply's or a probe's); s.mu is
// held.
func (s *Server) sent(wc *verbs.WC) {
	c := s.conns[uint32(wc.WRID>>32)]
	if c == nil || c.serial != uint32(wc.WRID)&^probeTag {
		return
	}
	if c.sends > 0 {
		c.sends--
	}
	if wc.WRID&probeTag != 0 {
		c.probing = false
	}
	if wc.Err() != nil && !c.kill {
		c.broken = true
	}
	if wc.Err() != nil || (c.failing && c.sends == 0) {
		s.drop(c)
	}
}

// replier sends a connection's replies (a *verbs.QP).
type replier interface {
	PostSendInline(wrID uint64, data []byte, flags verbs.SendFlags) error
}

// drop marks c for the watch loop to tear down; s.mu is held.
func (s *Server) drop(c *sconn) {
	if !c.kill {
		c.kill = true
		s.signal()
	}
}
