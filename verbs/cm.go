package verbs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"
	"unsafe"
)

// The RDMA connection manager (librdmacm, C: rdma_cm) connects reliable
// QPs by IP address and port, on InfiniBand and RoCE alike: resolving the
// peer's address picks the local device, port and GID that route to it, and
// the connection handshake (REQ, REP, RTU over the CM's management
// datagrams) moves both QPs through INIT, RTR and RTS.
//
// An EventChannel carries the events of the ids made on it (CreateID) and of
// the ids that connection requests to its listeners create. Events are read
// by whichever goroutine is waiting on one of the channel's ids (Event,
// ResolveAddr, Connect, Accept, ...) and handed to the id each is for, so
// several goroutines may wait on different ids of one channel at once; one
// goroutine at a time should wait on a given id. Every event is acknowledged
// as soon as it is read, so Close never blocks on an unacknowledged event.
//
// Contexts: librdmacm opens every RDMA device itself, once per process, and
// binds each id to that context. A QP on an id must be created on a PD of
// the same context (ibv_context), so a PD from Open, which opens a context
// of its own, cannot be used with CreateQP on an id: allocate the PD, the
// CQs, the SRQ and the memory regions on the Context that OpenCM returns
// for the device that Route().Device names. Every id bound to that device
// shares that one context.

// Errors of the connection manager. A failed connection step returns a
// *CMError, which errors.Is matches against one of these (and, for a
// status that is an errno, against that syscall.Errno).
var (
	// ErrRejected: the peer rejected the connection request (CMError.PrivateData
	// holds the reject's private data), or nothing listens on the peer's port
	// (then ErrNoListener matches too).
	ErrRejected = errors.New("verbs: connection rejected")
	// ErrNoListener: the peer's connection manager answered that nothing
	// listens on that port (IB CM reject reason 8, invalid service ID).
	ErrNoListener = errors.New("verbs: nothing listens on that address and port")
	// ErrUnreachable: the peer did not answer the connection request
	// (UNREACHABLE), or the handshake failed (CONNECT_ERROR).
	ErrUnreachable = errors.New("verbs: peer unreachable")
	// ErrNoRoute: address or route resolution failed (no RDMA device routes
	// to the address, ARP or the path query timed out).
	ErrNoRoute = errors.New("verbs: no RDMA route to the address")
)

// Private data limits of the connection manager for reliable connections
// on InfiniBand and RoCE (RDMA_PS_TCP): the IB CM's REQ carries 92 bytes of
// private data, of which rdma_cm keeps 36 for its own header; a REP carries
// 196 and a REJ 148 (rdma_connect(3), rdma_accept(3)). The receiver may see
// more bytes than were sent, zero-padded: a protocol over private data
// carries its own length.
const (
	MaxConnectPrivateData = 56
	MaxAcceptPrivateData  = 196
	MaxRejectPrivateData  = 148
)

// ConnParam is what one side of a reliable connection offers in its
// connection request or accept (C: struct rdma_conn_param). The zero value
// asks for the defaults.
type ConnParam struct {
	// PrivateData is sent to the peer with the request (at most
	// MaxConnectPrivateData bytes) or the accept (MaxAcceptPrivateData).
	PrivateData []byte
	// ResponderResources is how many RDMA READ and atomic requests from the
	// peer this side accepts in flight; InitiatorDepth how many this side
	// sends in flight. 0 means as many as the device allows (and, when
	// accepting, no more than the peer asked for).
	ResponderResources int
	InitiatorDepth     int
	// RetryCount bounds the transport retries of this side's requests
	// (1..7; 0 means 6). Soft-RoCE retries forever at 7, so a peer that
	// dies would go unnoticed. Ignored when accepting: the requester's
	// count applies to both sides.
	RetryCount int
	// RNRRetryCount bounds the retries of a SEND that finds no receive
	// posted at the peer (0..7, 7 = forever; 0 means 7).
	RNRRetryCount int
}

// defaultRetryCount is ConnParam.RetryCount's default: finite, so that a
// dead peer ends in ErrPeerLost, as the fabric's own QPs do.
const defaultRetryCount = 6

// rdmaMax is RDMA_MAX_RESP_RES and RDMA_MAX_INIT_DEPTH: "the device's maximum".
const rdmaMax = 0xff

// conn checks p against a private data limit and fills in the defaults.
func (p ConnParam) conn(maxPrivate int) (ConnParam, error) {
	if len(p.PrivateData) > maxPrivate {
		return p, fmt.Errorf("%w: %d bytes of private data, at most %d", ErrInvalid, len(p.PrivateData), maxPrivate)
	}
	if p.ResponderResources < 0 || p.ResponderResources >= rdmaMax || p.InitiatorDepth < 0 || p.InitiatorDepth >= rdmaMax {
		return p, fmt.Errorf("%w: responder resources %d, initiator depth %d", ErrInvalid, p.ResponderResources, p.InitiatorDepth)
	}
	if p.RetryCount < 0 || p.RetryCount > 7 || p.RNRRetryCount < 0 || p.RNRRetryCount > 7 {
		return p, fmt.Errorf("%w: retry count %d, RNR retry count %d (3 bits each)", ErrInvalid, p.RetryCount, p.RNRRetryCount)
	}
	if p.ResponderResources == 0 {
		p.ResponderResources = rdmaMax
	}
	if p.InitiatorDepth == 0 {
		p.InitiatorDepth = rdmaMax
	}
	if p.RetryCount == 0 {
		p.RetryCount = defaultRetryCount
	}
	if p.RNRRetryCount == 0 {
		p.RNRRetryCount = 7
	}
	return p, nil
}

// defaultCMTimeout bounds address and route resolution when the context
// has no deadline.
const defaultCMTimeout = 5 * time.Second

// timeoutMS is how long the kernel may take to resolve: until ctx's
// deadline (at least 1 ms, at most a minute), else defaultCMTimeout.
func timeoutMS(ctx context.Context) int {
	d := defaultCMTimeout
	if dl, ok := ctx.Deadline(); ok {
		d = min(max(time.Until(dl), time.Millisecond), time.Minute)
	}
	return int(d / time.Millisecond)
}

// sockAddr is an IPv4 or IPv6 socket address as the C helpers take it.
type sockAddr struct {
	family int // 4 or 6; 0 for none
	ip     [16]byte
	port   uint16
	scope  uint32 // IPv6 zone index
}

func toSockAddr(ap netip.AddrPort) (sockAddr, error) {
	a := ap.Addr()
	if !a.IsValid() {
		return sockAddr{}, fmt.Errorf("%w: no IP address", ErrInvalid)
	}
	s := sockAddr{port: ap.Port()}
	if a.Is4() || a.Is4In6() {
		s.family = 4
		b := a.Unmap().As4()
		copy(s.ip[:], b[:])
		return s, nil
	}
	s.family = 6
	s.ip = a.As16()
	if z := a.Zone(); z != "" {
		if n, err := strconv.Atoi(z); err == nil {
			s.scope = uint32(n)
		} else if ifc, err := net.InterfaceByName(z); err == nil {
			s.scope = uint32(ifc.Index)
		} else {
			return sockAddr{}, fmt.Errorf("%w: IPv6 zone %q: %v", ErrInvalid, z, err)
		}
	}
	return s, nil
}

func (s sockAddr) addrPort() netip.AddrPort {
	switch s.family {
	case 4:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(s.ip[:4])), s.port)
	case 6:
		a := netip.AddrFrom16(s.ip)
		if s.scope != 0 {
			a = a.WithZone(strconv.Itoa(int(s.scope)))
		}
		return netip.AddrPortFrom(a, s.port)
	}
	return netip.AddrPort{}
}

// CMID is a connection manager identifier (C: struct rdma_cm_id) in the
// TCP port space, for reliable-connected QPs: an active side that resolves
// and connects, a listener, or a connection a listener was asked for.
type CMID struct {
	p      unsafe.Pointer
	ch     *EventChannel
	handle uint64
	tr     tracked

	// Under ch.mu:
	q         []CMEvent
	closed    bool
	listening bool
	backlog   int
	sig       chan struct{} // a token whenever q grows or the id closes
}

// CreateID creates an id on the channel (RDMA_PS_TCP: reliable connections).
func (ch *EventChannel) CreateID() (*CMID, error) {
	if ch == nil {
		return nil, ErrClosed
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.closed {
		return nil, ErrClosed
	}
	id := &CMID{ch: ch, handle: cmHandles.Add(1), sig: make(chan struct{}, 1)}
	p, err := cmCreateID(ch.p, id.handle)
	if err != nil {
		return nil, err
	}
	id.p = p
	ch.ids[id.handle] = id
	id.tr.track("rdma_cm id")
	return id, nil
}

// Close destroys the id. Its QP must be closed first. A listener's
// connection requests not yet taken with Event are rejected and their ids
// destroyed. A goroutine waiting on the id returns ErrClosed.
func (id *CMID) Close() error {
	if id == nil || id.ch == nil {
		return ErrClosed
	}
	ch := id.ch
	ch.mu.Lock()
	if id.closed || id.p == nil {
		ch.mu.Unlock()
		return ErrClosed
	}
	if cmHasQP(id.p) {
		ch.mu.Unlock()
		return fmt.Errorf("%w: the rdma_cm id's QP must be closed first", ErrInvalid)
	}
	id.closed = true
	pending := id.q
	id.q = nil
	delete(ch.ids, id.handle)
	for _, ev := range pending {
		if ev.Type == CMConnectRequest && ev.ID != nil {
			ev.ID.closed = true
			delete(ch.ids, ev.ID.handle)
		}
	}
	p := id.p
	id.p = nil
	ch.mu.Unlock()
	id.notify()
	for _, ev := range pending {
		if ev.Type == CMConnectRequest && ev.ID != nil {
			cmReject(ev.ID.p, nil)
			cmDestroyID(ev.ID.p)
			ev.ID.p = nil
			ev.ID.tr.untrack()
		}
	}
	err := cmDestroyID(p)
	id.tr.untrack()
	return err
}

func (id *CMID) notify() {
	select {
	case id.sig <- struct{}{}:
	default:
	}
}

// usable returns the id's C pointer, or ErrClosed.
func (id *CMID) usable() (unsafe.Pointer, error) {
	if id == nil || id.ch == nil {
		return nil, ErrClosed
	}
	id.ch.mu.Lock()
	defer id.ch.mu.Unlock()
	if id.closed || id.p == nil {
		return nil, ErrClosed
	}
	return id.p, nil
}

// pop takes the id's next event; done reports a closed id with none left.
func (id *CMID) pop() (ev CMEvent, ok, done bool) {
	id.ch.mu.Lock()
	defer id.ch.mu.Unlock()
	if len(id.q) > 0 {
		ev = id.q[0]
		id.q[0] = CMEvent{}
		id.q = id.q[1:]
		return ev, true, false
	}
	return ev, false, id.closed
}

func (id *CMID) ready() bool {
	id.ch.mu.Lock()
	defer id.ch.mu.Unlock()
	return len(id.q) > 0 || id.closed
}

// await waits for the id's next event, which must be want; any other
// (except hints that need no answer) becomes an error.
func (id *CMID) await(ctx context.Context, op string, want CMEventType) (CMEvent, error) {
	for {
		ev, err := id.Event(ctx)
		if err != nil {
			return ev, fmt.Errorf("verbs: %s: %w", op, err)
		}
		if ev.Type == want && ev.Status == 0 {
			return ev, nil
		}
		if ev.Type == CMAddrChange || ev.Type == CMTimewaitExit {
			continue
		}
		if err := ev.err(op); err != nil {
			return ev, err
		}
		return ev, fmt.Errorf("verbs: %s: unexpected rdma_cm event %v", op, ev.Type)
	}
}

// ResolveAddr resolves dst (an IP address and port) to an RDMA address and
// binds the id to the local device and port that route to it, from src if
// src is valid (else as the routing table says). It waits for the answer
// until ctx's deadline (defaultCMTimeout without one). Failures match
// ErrNoRoute.
func (id *CMID) ResolveAddr(ctx context.Context, src netip.Addr, dst netip.AddrPort) error {
	p, err := id.usable()
	if err != nil {
		return err
	}
	d, err := toSockAddr(dst)
	if err != nil {
		return err
	}
	var s *sockAddr
	if src.IsValid() {
		sa, err := toSockAddr(netip.AddrPortFrom(src, 0))
		if err != nil {
			return err
		}
		s = &sa
	}
	if err := cmResolveAddr(p, s, d, timeoutMS(ctx)); err != nil {
		return noRoute(err)
	}
	_, err = id.await(ctx, "resolve address "+dst.String(), CMAddrResolved)
	return err
}

// noRoute makes a failure to start resolving, for want of a route or of an
// RDMA device on it, match ErrNoRoute.
func noRoute(err error) error {
	for _, e := range []error{syscall.ENETUNREACH, syscall.EHOSTUNREACH, syscall.EADDRNOTAVAIL, syscall.ENODEV} {
		if errors.Is(err, e) {
			return fmt.Errorf("%w: %w", ErrNoRoute, err)
		}
	}
	return err
}

// ResolveRoute resolves the route to the address ResolveAddr resolved (on
// InfiniBand, a path record query; on RoCE, from the IP route), waiting
// until ctx's deadline (defaultCMTimeout without one). Failures match
// ErrNoRoute.
func (id *CMID) ResolveRoute(ctx context.Context) error {
	p, err := id.usable()
	if err != nil {
		return err
	}
	if err := cmResolveRoute(p, timeoutMS(ctx)); err != nil {
		return noRoute(err)
	}
	_, err = id.await(ctx, "resolve route", CMRouteResolved)
	return err
}

// Listen binds the id to addr and listens there for connection requests,
// which Event returns. An unspecified address (0.0.0.0 or ::) listens on
// every RDMA device; port 0 picks a free port, which LocalAddr reports.
// At most backlog requests wait to be taken (0 means 128); more are
// rejected.
func (id *CMID) Listen(addr netip.AddrPort, backlog int) error {
	p, err := id.usable()
	if err != nil {
		return err
	}
	if backlog <= 0 {
		backlog = 128
	}
	s, err := toSockAddr(addr)
	if err != nil {
		return err
	}
	if err := cmBind(p, s); err != nil {
		return err
	}
	id.ch.mu.Lock()
	id.listening, id.backlog = true, backlog
	id.ch.mu.Unlock()
	if err := cmListen(p, backlog); err != nil {
		id.ch.mu.Lock()
		id.listening = false
		id.ch.mu.Unlock()
		return err
	}
	return nil
}

// LocalAddr is the id's local IP address and port (a listener's port once
// it listens; an active side's after ResolveAddr), or the zero AddrPort.
func (id *CMID) LocalAddr() netip.AddrPort {
	p, err := id.usable()
	if err != nil {
		return netip.AddrPort{}
	}
	l, _ := cmAddrs(p)
	return l.addrPort()
}

// PeerAddr is the peer's IP address and port, or the zero AddrPort.
func (id *CMID) PeerAddr() netip.AddrPort {
	p, err := id.usable()
	if err != nil {
		return netip.AddrPort{}
	}
	_, r := cmAddrs(p)
	return r.addrPort()
}

// CMRoute says where an id is bound: the RDMA device (by name, for OpenCM),
// its port and the GIDs of both ends.
type CMRoute struct {
	// Device is the RDMA device's name and Port its port, from 1.
	Device string
	Port   int
	// SrcGID and DstGID are the local and remote GIDs of the route (on
	// RoCE, IPv4-mapped or IPv6 addresses).
	SrcGID GID
	DstGID GID
	// MTU is the path MTU of the resolved route, 0 if not known.
	MTU MTU
}

// Route returns where the id is bound: known after ResolveAddr (the
// device and port; the path after ResolveRoute), for a listener bound to
// a specific address, and for the id of a connection request. It returns
// ErrInvalid-matching errors for an id bound to no device yet.
func (id *CMID) Route() (CMRoute, error) {
	p, err := id.usable()
	if err != nil {
		return CMRoute{}, err
	}
	r, ok := cmRoute(p)
	if !ok {
		return CMRoute{}, fmt.Errorf("%w: the rdma_cm id is bound to no device yet", ErrInvalid)
	}
	return r, nil
}

// SetAckTimeout sets the local ACK timeout of the id's QP, 4.096 us *
// 2^exp (exp 1..31), instead of the one rdma_cm computes from the packet
// lifetime; with ConnParam.RetryCount it bounds how long a request to a
// dead peer retries. Call it before Connect or Accept.
func (id *CMID) SetAckTimeout(exp int) error {
	p, err := id.usable()
	if err != nil {
		return err
	}
	if exp < 1 || exp > 31 {
		return fmt.Errorf("%w: ACK timeout exponent %d", ErrInvalid, exp)
	}
	return cmSetAckTimeout(p, exp)
}

// SetReuseAddr lets a listener bind a port still held by connections in
// their timewait state (RDMA_OPTION_ID_REUSEADDR). Call it before Listen.
func (id *CMID) SetReuseAddr(on bool) error {
	p, err := id.usable()
	if err != nil {
		return err
	}
	return cmSetReuseAddr(p, on)
}

// CreateQP creates the id's reliable-connected QP on pd, with cfg's CQs
// (and SRQ, if cfg.SRQ is set: its receives then come from the SRQ). pd
// must be of the id's device context (OpenCM; see Route). The connection
// manager moves the QP through its states: Connect and Accept leave it in
// RTS, Disconnect and a reject in ERR. Close the QP before the id.
func (id *CMID) CreateQP(pd *PD, cfg QPConfig) (*QP, error) {
	p, err := id.usable()
	if err != nil {
		return nil, err
	}
	if pd == nil || pd.p == nil {
		return nil, ErrClosed
	}
	if cfg.SendCQ == nil || cfg.RecvCQ == nil || cfg.SendCQ.p == nil || cfg.RecvCQ.p == nil {
		return nil, fmt.Errorf("%w: QP needs a send and a receive CQ", ErrInvalid)
	}
	if cfg.SRQ != nil && cfg.SRQ.p == nil {
		return nil, ErrClosed
	}
	if cmHasQP(p) {
		return nil, fmt.Errorf("%w: the rdma_cm id has a QP already", ErrInvalid)
	}
	if r, ok := cmRoute(p); !ok {
		return nil, fmt.Errorf("%w: the rdma_cm id is bound to no device yet (resolve the address first)", ErrInvalid)
	} else if !cmSameContext(p, pd.p) {
		return nil, fmt.Errorf("%w: the PD is not of the rdma_cm id's context of %s (allocate it on OpenCM(%q))", ErrInvalid, r.Device, r.Device)
	}
	if cfg.MaxSendSGE == 0 {
		cfg.MaxSendSGE = 1
	}
	if cfg.MaxRecvSGE == 0 {
		cfg.MaxRecvSGE = 1
	}
	qpp, num, inl, err := cmCreateQP(p, pd.p, &cfg)
	if err != nil {
		return nil, err
	}
	qp := &QP{p: qpp, num: num, maxInline: inl, cmID: p}
	qp.tr.track("QP " + strconv.Itoa(int(num)) + " of an rdma_cm id")
	return qp, nil
}

// SetMinRNRTimer sets the RNR NAK timer code that the QP, as a receiver,
// sends a peer whose SEND finds no receive posted (IB encoding, 1..31:
// 12 is 0.64 ms, 14 is 1.28 ms, 31 is 491.52 ms; 0 is 655.36 ms), in
// RTR or RTS. The connection manager leaves it at 0, so a QP on an SRQ
// that runs dry stalls its senders 655 ms per retry: call it after
// Accept or Connect.
func (qp *QP) SetMinRNRTimer(code int) error {
	if qp == nil || qp.p == nil {
		return ErrClosed
	}
	if code < 0 || code > 31 {
		return fmt.Errorf("%w: RNR timer code %d", ErrInvalid, code)
	}
	return qpSetMinRNRTimer(qp.p, code)
}

// Connect sends a connection request with p (at most
// MaxConnectPrivateData bytes of private data) to the address resolved by
// ResolveAddr and ResolveRoute, and waits until the connection is
// established: the id's QP (CreateQP) is then in RTS. The returned event
// holds the peer's accept private data. A reject matches ErrRejected (its
// private data in the *CMError), a port nobody listens on ErrNoListener,
// no answer ErrUnreachable.
func (id *CMID) Connect(ctx context.Context, p ConnParam) (CMEvent, error) {
	c, err := id.usable()
	if err != nil {
		return CMEvent{}, err
	}
	if p, err = p.conn(MaxConnectPrivateData); err != nil {
		return CMEvent{}, err
	}
	if !cmHasQP(c) {
		return CMEvent{}, fmt.Errorf("%w: connect needs the id's QP (CreateQP)", ErrInvalid)
	}
	if err := cmConnect(c, &p, false); err != nil {
		return CMEvent{}, err
	}
	return id.await(ctx, "connect to "+id.PeerAddr().String(), CMEstablished)
}

// Accept accepts the connection request that created the id (from a
// listener's CMConnectRequest event), with p (at most
// MaxAcceptPrivateData bytes of private data), and waits until the
// connection is established: the id's QP (CreateQP) is in RTS when the
// accept is sent, so receives may complete before Accept returns.
func (id *CMID) Accept(ctx context.Context, p ConnParam) (CMEvent, error) {
	c, err := id.usable()
	if err != nil {
		return CMEvent{}, err
	}
	if p, err = p.conn(MaxAcceptPrivateData); err != nil {
		return CMEvent{}, err
	}
	if !cmHasQP(c) {
		return CMEvent{}, fmt.Errorf("%w: accept needs the id's QP (CreateQP)", ErrInvalid)
	}
	if err := cmConnect(c, &p, true); err != nil {
		return CMEvent{}, err
	}
	return id.await(ctx, "accept from "+id.PeerAddr().String(), CMEstablished)
}

// Reject rejects the connection request that created the id, sending
// privateData (at most MaxRejectPrivateData bytes) to the requester, whose
// Connect fails with a *CMError matching ErrRejected. Close the id after.
func (id *CMID) Reject(privateData []byte) error {
	c, err := id.usable()
	if err != nil {
		return err
	}
	if len(privateData) > MaxRejectPrivateData {
		return fmt.Errorf("%w: %d bytes of reject private data, at most %d", ErrInvalid, len(privateData), MaxRejectPrivateData)
	}
	return cmReject(c, privateData)
}

// Disconnect moves the id's QP to the error state (its outstanding work
// requests complete with ErrFlushed) and tells the peer, which receives
// CMDisconnected, as this side does.
func (id *CMID) Disconnect() error {
	c, err := id.usable()
	if err != nil {
		return err
	}
	return cmDisconnect(c)
}

// OpenCM returns the connection manager's context of the RDMA device with
// the given name (or the first device for ""): the context every id bound
// to that device uses, on which the PD, CQs and SRQ for those ids' QPs
// must be made. It is shared by the whole process and stays open while
// librdmacm is loaded; Close releases this reference to it.
func OpenCM(name string) (*Context, error) {
	if !haveCM {
		return nil, ErrNotSupported
	}
	p, list, err := cmOpenDevice(name)
	if err != nil {
		return nil, err
	}
	c := &Context{p: p, name: deviceName(p), cmList: list}
	c.tr.track("rdma_cm context of " + c.name)
	return c, nil
}
