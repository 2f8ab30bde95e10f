package verbs

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// Context is an open RDMA device (C: struct ibv_context).
type Context struct {
	p      unsafe.Pointer
	name   string
	cmList unsafe.Pointer // OpenCM: librdmacm's device list holding the context
	tr     tracked
}

// Open opens the RDMA device with the given name, or the first one if name is "".
func Open(name string) (*Context, error) {
	if !haveVerbs {
		return nil, ErrNotSupported
	}
	p, err := openDevice(name)
	if err != nil {
		return nil, openError(name, err) // a *LimitError when its device file is missing or refused
	}
	c := &Context{p: p, name: deviceName(p)}
	c.tr.track("device " + c.name)
	return c, nil
}

// Name is the device's name (e.g. "rxe0", "mlx5_0").
func (c *Context) Name() string { return c.name }

// Close closes the device. Every object made from it must be closed first.
func (c *Context) Close() error {
	if c == nil || c.p == nil {
		return ErrClosed
	}
	var err error
	if c.cmList != nil {
		cmFreeDevices(c.cmList) // librdmacm's context stays open: release the reference
	} else {
		err = closeDevice(c.p)
	}
	c.p = nil
	c.tr.untrack()
	return err
}

// QueryDevice returns the device's attributes.
func (c *Context) QueryDevice() (DeviceAttr, error) {
	if c == nil || c.p == nil {
		return DeviceAttr{}, ErrClosed
	}
	return queryDevice(c.p)
}

// QueryPort returns the attributes of a port (numbered from 1).
func (c *Context) QueryPort(port int) (PortAttr, error) {
	if c == nil || c.p == nil {
		return PortAttr{}, ErrClosed
	}
	if port < 1 || port > 255 {
		return PortAttr{}, fmt.Errorf("%w: port %d", ErrInvalid, port)
	}
	return queryPort(c.p, port)
}

// QueryGID returns one entry of a port's GID table.
func (c *Context) QueryGID(port, index int) (GIDEntry, error) {
	if c == nil || c.p == nil {
		return GIDEntry{}, ErrClosed
	}
	e, ifindex, err := queryGID(c.p, port, index)
	if err != nil {
		return e, err
	}
	if ifindex != 0 {
		if ifc, err := net.InterfaceByIndex(int(ifindex)); err == nil {
			e.Netdev = ifc.Name
		}
	}
	return e, nil
}

// GIDTable returns the populated entries of a port's GID table.
func (c *Context) GIDTable(port int) ([]GIDEntry, error) {
	pa, err := c.QueryPort(port)
	if err != nil {
		return nil, err
	}
	var out []GIDEntry
	for i := 0; i < pa.GIDTableLen; i++ {
		e, err := c.QueryGID(port, i)
		if err != nil || e.GID.IsZero() {
			continue // unpopulated entries fail with EINVAL on RoCE
		}
		out = append(out, e)
	}
	return out, nil
}

// PD is a protection domain (C: struct ibv_pd).
type PD struct {
	p  unsafe.Pointer
	tr tracked
}

// AllocPD allocates a protection domain.
func (c *Context) AllocPD() (*PD, error) {
	if c == nil || c.p == nil {
		return nil, ErrClosed
	}
	p, err := allocPD(c.p)
	if err != nil {
		return nil, err
	}
	pd := &PD{p: p}
	pd.tr.track("PD")
	return pd, nil
}

// Close deallocates the protection domain.
func (pd *PD) Close() error {
	if pd == nil || pd.p == nil {
		return ErrClosed
	}
	err := deallocPD(pd.p)
	pd.p = nil
	pd.tr.untrack()
	return err
}

// MR is a registered memory region (C: struct ibv_mr).
type MR struct {
	p          unsafe.Pointer
	buf        []byte
	lkey, rkey uint32
	tr         tracked
}

// RegisterMR registers buf for the given access. buf must stay where it is
// until the MR is closed: memory from Alloc, or Go memory pinned by the caller.
func (pd *PD) RegisterMR(buf []byte, access Access) (*MR, error) {
	if pd == nil || pd.p == nil {
		return nil, ErrClosed
	}
	if len(buf) == 0 {
		return nil, fmt.Errorf("%w: empty memory region", ErrInvalid)
	}
	p, lkey, rkey, err := regMR(pd.p, unsafe.Pointer(&buf[0]), len(buf), access)
	if err != nil {
		// A *LimitError when RLIMIT_MEMLOCK is what refused it.
		return nil, registerError(err, uintptr(unsafe.Pointer(&buf[0])), len(buf))
	}
	mr := &MR{p: p, buf: buf, lkey: lkey, rkey: rkey}
	mr.tr.track("MR of " + strconv.Itoa(len(buf)) + " bytes")
	return mr, nil
}

// LKey is the local key.
func (mr *MR) LKey() uint32 { return mr.lkey }

// RKey is the remote key a peer uses to reach this region.
func (mr *MR) RKey() uint32 { return mr.rkey }

// Addr is the address of the region's first byte, as the NIC sees it.
func (mr *MR) Addr() uint64 { return uint64(uintptr(unsafe.Pointer(&mr.buf[0]))) }

// Bytes is the registered memory.
func (mr *MR) Bytes() []byte { return mr.buf }

// Local returns the scatter/gather element for buf[off:off+n].
func (mr *MR) Local(off, n int) Local {
	return Local{Addr: mr.Addr() + uint64(off), Len: uint32(n), LKey: mr.lkey}
}

// Close deregisters the region.
func (mr *MR) Close() error {
	if mr == nil || mr.p == nil {
		return ErrClosed
	}
	err := deregMR(mr.p)
	mr.p = nil
	mr.tr.untrack()
	return err
}

// MW is a type 2 memory window (C: struct ibv_mw): a remote key for part
// of an MR, bound by a work request on one QP and usable only on that QP.
// Its rights are those of its binding, so the MR itself may have none
// (AccessMWBind and AccessLocalWrite alone); closing it revokes the key at
// once. Windows give a peer access that ends with its connection.
type MW struct {
	p    unsafe.Pointer
	rkey uint32
	tr   tracked
}

// AllocMW allocates a type 2 memory window, unbound (see
// DeviceAttr.MemWindowType2; a device without ErrNotSupported).
func (pd *PD) AllocMW() (*MW, error) {
	if pd == nil || pd.p == nil {
		return nil, ErrClosed
	}
	p, rkey, err := allocMW(pd.p)
	if err != nil {
		return nil, err
	}
	mw := &MW{p: p, rkey: rkey}
	mw.tr.track("MW")
	return mw, nil
}

// RKey is the window's remote key: after a PostBindMW, the key that bind
// gave it.
func (mw *MW) RKey() uint32 { return mw.rkey }

// Close deallocates the window; its key stops working.
func (mw *MW) Close() error {
	if mw == nil || mw.p == nil {
		return ErrClosed
	}
	err := deallocMW(mw.p)
	mw.p = nil
	mw.tr.untrack()
	return err
}

// PostBindMW posts the binding of mw, unbound, to mr's bytes [off,
// off+n) with the given remote access (AccessRemoteRead, Write, Atomic),
// on qp, the only QP on which the key will then work. key is the low byte
// of the new remote key (the rest is the window's); the key is usable
// once the bind has completed, which work requests posted after it on qp
// see. It returns the new remote key. mr needs AccessMWBind, and
// AccessLocalWrite for a window that grants writes or atomics.
func (qp *QP) PostBindMW(wrID uint64, mw *MW, key byte, mr *MR, off, n int, access Access, flags SendFlags) (uint32, error) {
	if mw == nil || mw.p == nil || mr == nil || mr.p == nil {
		return 0, ErrClosed
	}
	if off < 0 || n <= 0 || off > len(mr.buf) || n > len(mr.buf)-off {
		return 0, fmt.Errorf("%w: bind of [%d, %d) of an MR of %d bytes", ErrInvalid, off, off+n, len(mr.buf))
	}
	rkey := mw.rkey&^0xff | uint32(key)
	if err := postBindMW(qp.p, wrID, flags, mw.p, rkey, mr.p, mr.Addr()+uint64(off), uint64(n), access); err != nil {
		return 0, err
	}
	mw.rkey = rkey
	return rkey, nil
}

// CompChannel delivers completion events (C: struct ibv_comp_channel). Its
// file descriptor is non-blocking and waited on through Go's poller, so a
// waiting goroutine holds no thread.
type CompChannel struct {
	p  unsafe.Pointer
	f  *os.File // a dup of the channel's descriptor, registered with the poller
	rc syscall.RawConn
	tr tracked
	// woken: Wake was called and no Wait has returned for it yet; the
	// descriptor's read deadline is then in the past (under mu).
	mu    sync.Mutex
	woken bool
	// waits counts the Waits given a context that can end; inWait says
	// that the last of them has not returned (under mu). The function that
	// ends such a Wait when its context ends checks both, so that one
	// running late cannot leave a past deadline for the next Wait.
	waits  uint64
	inWait bool
	// ready is what Wait hands the poller, made once so that a Wait
	// allocates nothing; it leaves getCQEvent's error in readErr.
	ready   func(uintptr) bool
	readErr error
}

// CreateCompChannel creates a completion channel.
func (c *Context) CreateCompChannel() (*CompChannel, error) {
	if c == nil || c.p == nil {
		return nil, ErrClosed
	}
	p, fd, err := createCompChannel(c.p)
	if err != nil {
		return nil, err
	}
	dup, err := syscall.Dup(fd)
	if err != nil {
		destroyCompChannel(p)
		return nil, fmt.Errorf("verbs: dup completion channel: %w", err)
	}
	syscall.CloseOnExec(dup)
	f := os.NewFile(uintptr(dup), "ibv-comp-channel")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		destroyCompChannel(p)
		return nil, fmt.Errorf("verbs: completion channel: %w", err)
	}
	ch := &CompChannel{p: p, f: f, rc: rc}
	ch.ready = func(uintptr) bool {
		var got bool
		got, ch.readErr = getCQEvent(ch.p)
		return got || ch.readErr != nil
	}
	ch.tr.track("completion channel")
	return ch, nil
}

// Wait blocks until the channel delivers an event (which it acknowledges),
// Wake is called, or ctx ends. Re-arm the CQ with ReqNotify before waiting.
// It returns nil for an event or a wake-up. One goroutine at a time may
// wait on a channel. Given a context that cannot end (Done is nil), it
// allocates nothing: a waiter that has another way to be stopped uses Wake.
func (ch *CompChannel) Wait(ctx context.Context) error {
	if ch == nil || ch.p == nil {
		return ErrClosed
	}
	if ch.consumeWake() {
		return nil
	}
	if got, err := getCQEvent(ch.p); got || err != nil {
		return err
	}
	if ctx.Done() != nil {
		ch.mu.Lock()
		ch.waits++
		this := ch.waits
		ch.inWait = true
		ch.mu.Unlock()
		// stop returning false means the function has started, not that
		// it is done: it may run after this Wait returned, and must then
		// do nothing.
		stop := context.AfterFunc(ctx, func() {
			ch.mu.Lock()
			if ch.inWait && ch.waits == this && ch.p != nil {
				ch.f.SetReadDeadline(time.Unix(1, 0))
			}
			ch.mu.Unlock()
		})
		defer func() {
			stop()
			ch.mu.Lock()
			ch.inWait = false
			if !ch.woken && ch.p != nil {
				ch.f.SetReadDeadline(time.Time{})
			}
			ch.mu.Unlock()
		}()
	}
	ch.readErr = nil
	err := ch.rc.Read(ch.ready)
	if gerr := ch.readErr; gerr != nil {
		return gerr
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if ch.consumeWake() {
			return nil
		}
		return fmt.Errorf("verbs: wait for completion event: %w", err)
	}
	return nil
}

// Wake makes the Wait in progress return nil at once, or, if none is in
// progress, the next one. It is safe to call from any goroutine, at any
// time before Close. A process waiting for something other than a
// completion (a resource another goroutine frees) uses it to stop sleeping.
func (ch *CompChannel) Wake() {
	ch.mu.Lock()
	if ch.p != nil && !ch.woken {
		ch.woken = true
		ch.f.SetReadDeadline(time.Unix(1, 0))
	}
	ch.mu.Unlock()
}

// consumeWake reports whether Wake was called since the last Wait that
// saw it, and clears it.
func (ch *CompChannel) consumeWake() bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if !ch.woken {
		return false
	}
	ch.woken = false
	ch.f.SetReadDeadline(time.Time{})
	return true
}

// Close destroys the channel. Its CQs must be closed first.
func (ch *CompChannel) Close() error {
	if ch == nil || ch.p == nil {
		return ErrClosed
	}
	ch.mu.Lock()
	ch.f.Close()
	err := destroyCompChannel(ch.p)
	ch.p = nil
	ch.mu.Unlock()
	ch.tr.untrack()
	return err
}

// CQ is a completion queue (C: struct ibv_cq).
type CQ struct {
	p  unsafe.Pointer
	tr tracked
}

// CreateCQ creates a completion queue of at least n entries, delivering
// events to ch if ch is not nil.
func (c *Context) CreateCQ(n int, ch *CompChannel) (*CQ, error) {
	if c == nil || c.p == nil {
		return nil, ErrClosed
	}
	if n < 1 {
		return nil, fmt.Errorf("%w: CQ of %d entries", ErrInvalid, n)
	}
	var chp unsafe.Pointer
	if ch != nil {
		chp = ch.p
	}
	p, err := createCQ(c.p, n, chp)
	if err != nil {
		return nil, err
	}
	cq := &CQ{p: p}
	cq.tr.track("CQ of " + strconv.Itoa(n) + " entries")
	return cq, nil
}

// Poll fills wcs with up to len(wcs) completions (at most 32 per call) and
// returns how many it filled. It does not allocate.
func (cq *CQ) Poll(wcs []WC) (int, error) {
	if len(wcs) == 0 {
		return 0, nil
	}
	return pollCQ(cq.p, wcs)
}

// ReqNotify arms the CQ: its next completion sends an event to its channel.
func (cq *CQ) ReqNotify() error { return reqNotify(cq.p, false) }

// ReqNotifySolicited arms the CQ for solicited completions only: the next
// receive of a message its sender posted with SendSolicited sends an event
// to its channel (the verbs specification lets a failed completion send
// one too). Other completions enter the CQ without an event. An arming by
// ReqNotify that is still pending takes precedence (ibv_req_notify_cq with
// solicited_only set).
func (cq *CQ) ReqNotifySolicited() error { return reqNotify(cq.p, true) }

// Close destroys the CQ. Its QPs must be closed first.
func (cq *CQ) Close() error {
	if cq == nil || cq.p == nil {
		return ErrClosed
	}
	err := destroyCQ(cq.p)
	cq.p = nil
	cq.tr.untrack()
	return err
}

// QPState (C: enum ibv_qp_state).
type QPState int

const (
	QPReset QPState = 0 // IBV_QPS_RESET
	QPInit  QPState = 1 // IBV_QPS_INIT
	QPRTR   QPState = 2 // IBV_QPS_RTR
	QPRTS   QPState = 3 // IBV_QPS_RTS
	QPSQD   QPState = 4 // IBV_QPS_SQD
	QPSQE   QPState = 5 // IBV_QPS_SQE
	QPErr   QPState = 6 // IBV_QPS_ERR
)

// String returns the C name without its IBV_QPS_ prefix (RTS).
func (s QPState) String() string {
	names := [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}
	if s >= 0 && int(s) < len(names) {
		return names[s]
	}
	return "QPState(" + strconv.Itoa(int(s)) + ")"
}

// QP is a reliable-connected queue pair (C: struct ibv_qp, IBV_QPT_RC).
// Posting from several goroutines at once is safe (the provider locks).
type QP struct {
	p         unsafe.Pointer
	num       uint32
	maxInline int
	cmID      unsafe.Pointer // CMID.CreateQP: the rdma_cm id that owns the QP
	tr        tracked
}

// CreateQP creates an RC QP in the RESET state.
func (pd *PD) CreateQP(cfg QPConfig) (*QP, error) {
	if pd == nil || pd.p == nil {
		return nil, ErrClosed
	}
	if cfg.SendCQ == nil || cfg.RecvCQ == nil || cfg.SendCQ.p == nil || cfg.RecvCQ.p == nil {
		return nil, fmt.Errorf("%w: QP needs a send and a receive CQ", ErrInvalid)
	}
	if cfg.SRQ != nil && cfg.SRQ.p == nil {
		return nil, ErrClosed
	}
	if cfg.MaxSendSGE == 0 {
		cfg.MaxSendSGE = 1
	}
	if cfg.MaxRecvSGE == 0 {
		cfg.MaxRecvSGE = 1
	}
	p, num, inl, err := createQP(pd.p, &cfg)
	if err != nil {
		return nil, err
	}
	qp := &QP{p: p, num: num, maxInline: inl}
	qp.tr.track("QP " + strconv.Itoa(int(num)))
	return qp, nil
}

// Num is the QP number.
func (qp *QP) Num() uint32 { return qp.num }

// MaxInline is the largest payload the QP sends inline.
func (qp *QP) MaxInline() int { return qp.maxInline }

// State queries the QP's current state.
func (qp *QP) State() (QPState, error) { return qpState(qp.p) }

// Init moves the QP from RESET to INIT.
func (qp *QP) Init(path *Path) error { return qpInit(qp.p, path.Port, path.Access) }

// ReadyToReceive moves the QP from INIT to RTR, connected to remote, with
// the smaller of path's MTU and remote's (Path.To).
func (qp *QP) ReadyToReceive(path *Path, remote Endpoint) error {
	return qpRTR(qp.p, path.To(remote), remote)
}

// ReadyToSend moves the QP from RTR to RTS; psn is this side's first PSN.
func (qp *QP) ReadyToSend(path *Path, psn uint32) error { return qpRTS(qp.p, path, psn) }

// Connect runs RESET -> INIT -> RTR -> RTS.
func (qp *QP) Connect(path *Path, local, remote Endpoint) error {
	if err := qp.Init(path); err != nil {
		return err
	}
	if err := qp.ReadyToReceive(path, remote); err != nil {
		return err
	}
	return qp.ReadyToSend(path, local.PSN)
}

// SetError moves the QP to the error state: its outstanding work requests
// complete with ErrFlushed.
func (qp *QP) SetError() error { return qpToError(qp.p) }

// Close destroys the QP.
func (qp *QP) Close() error {
	if qp == nil || qp.p == nil {
		return ErrClosed
	}
	var err error
	if qp.cmID != nil {
		cmDestroyQP(qp.cmID)
	} else {
		err = destroyQP(qp.p)
	}
	qp.p = nil
	qp.tr.untrack()
	return err
}

// PostWrite posts an RDMA WRITE of l to raddr.
func (qp *QP) PostWrite(wrID uint64, l Local, raddr uint64, rkey uint32, flags SendFlags) error {
	return postSend(qp.p, wrID, opWrite, flags, l, raddr, rkey, 0, 0, 0)
}

// PostWriteInline posts an RDMA WRITE whose payload is copied from data
// during the call; data may be reused at once. len(data) <= MaxInline.
func (qp *QP) PostWriteInline(wrID uint64, data []byte, raddr uint64, rkey uint32, flags SendFlags) error {
	return postSendInline(qp.p, wrID, opWrite, flags, data, raddr, rkey, 0)
}

// PostWriteImm posts an RDMA WRITE with immediate data, which consumes a
// receive at the peer.
func (qp *QP) PostWriteImm(wrID uint64, l Local, raddr uint64, rkey uint32, imm uint32, flags SendFlags) error {
	return postSend(qp.p, wrID, opWriteImm, flags, l, raddr, rkey, 0, 0, imm)
}

// PostRead posts an RDMA READ from raddr into l.
func (qp *QP) PostRead(wrID uint64, l Local, raddr uint64, rkey uint32, flags SendFlags) error {
	return postSend(qp.p, wrID, opRead, flags, l, raddr, rkey, 0, 0, 0)
}

// PostSend posts a SEND of l.
func (qp *QP) PostSend(wrID uint64, l Local, flags SendFlags) error {
	return postSend(qp.p, wrID, opSend, flags, l, 0, 0, 0, 0, 0)
}

// PostSendInline posts a SEND whose payload is copied from data during the call.
func (qp *QP) PostSendInline(wrID uint64, data []byte, flags SendFlags) error {
	return postSendInline(qp.p, wrID, opSend, flags, data, 0, 0, 0)
}

// PostSendImm posts a SEND of l carrying 32 bits of immediate data.
func (qp *QP) PostSendImm(wrID uint64, l Local, imm uint32, flags SendFlags) error {
	return postSend(qp.p, wrID, opSendImm, flags, l, 0, 0, 0, 0, imm)
}

// PostSendInlineImm posts a SEND with immediate data whose payload is copied
// from data during the call.
func (qp *QP) PostSendInlineImm(wrID uint64, data []byte, imm uint32, flags SendFlags) error {
	return postSendInline(qp.p, wrID, opSendImm, flags, data, 0, 0, imm)
}

// PostRecv posts a receive buffer.
func (qp *QP) PostRecv(wrID uint64, l Local) error { return postRecv(qp.p, wrID, l) }

// PostAtomicPoll posts a fetch-and-add (fadd) or compare-and-swap like
// PostFetchAdd and PostCompareSwap, then polls cq once into wcs, in one call
// to C. It returns the number of completions polled.
func (qp *QP) PostAtomicPoll(wrID uint64, l Local, raddr uint64, rkey uint32, fadd bool, a, b uint64, flags SendFlags, cq *CQ, wcs []WC) (int, error) {
	op := opCmpSwap
	if fadd {
		op = opFetchAdd
	}
	return postSendPoll(qp.p, wrID, op, flags, l, raddr, rkey, a, b, cq.p, wcs)
}

// PostReadPoll posts an RDMA READ like PostRead, then polls cq once into
// wcs, in one call to C. It returns the number of completions polled.
func (qp *QP) PostReadPoll(wrID uint64, l Local, raddr uint64, rkey uint32, flags SendFlags, cq *CQ, wcs []WC) (int, error) {
	return postSendPoll(qp.p, wrID, opRead, flags, l, raddr, rkey, 0, 0, cq.p, wcs)
}

// SendWR is one work request of PostList.
type SendWR struct {
	WRID  uint64 // reported by its completion
	Local Local  // the source of a WRITE or SEND, where a READ or an atomic's old value lands
	RAddr uint64 // the remote address of a WRITE, READ or atomic
	// A is a fetch-and-add's addend, or a compare-and-swap's compare
	// value, with B its swap value.
	A, B  uint64
	RKey  uint32    // the remote key of a WRITE, READ or atomic
	Op    SendOp    // what it does
	Flags SendFlags // SendSignaled: it completes with a completion of its own
}

// SendOp is what a SendWR does (C: enum ibv_wr_opcode).
type SendOp int32

// The operations of a SendWR.
const (
	OpWrite       SendOp = opWrite
	OpSend        SendOp = opSend
	OpRead        SendOp = opRead
	OpCompareSwap SendOp = opCmpSwap
	OpFetchAdd    SendOp = opFetchAdd
)

// MaxPostList is the most work requests one PostList posts.
const MaxPostList = 32

// PostList posts wrs (at most MaxPostList) with one call to the provider,
// one doorbell for all, then, if cq is not nil, polls cq once into wcs:
// one call to C. It returns how many work requests were posted (on an
// error, those before the one refused) and how many completions were
// polled.
func (qp *QP) PostList(wrs []SendWR, cq *CQ, wcs []WC) (posted, polled int, err error) {
	var cp unsafe.Pointer
	if cq != nil {
		cp = cq.p
	}
	return postList(qp.p, wrs, cp, wcs)
}

// PostFetchAdd posts an 8-byte atomic fetch-and-add at raddr (8-byte
// aligned); the old value lands in l (8 bytes).
func (qp *QP) PostFetchAdd(wrID uint64, l Local, raddr uint64, rkey uint32, add uint64, flags SendFlags) error {
	return postSend(qp.p, wrID, opFetchAdd, flags, l, raddr, rkey, add, 0, 0)
}

// PostCompareSwap posts an 8-byte atomic compare-and-swap at raddr (8-byte
// aligned): if the value equals compare it becomes swap; the old value lands in l.
func (qp *QP) PostCompareSwap(wrID uint64, l Local, raddr uint64, rkey uint32, compare, swap uint64, flags SendFlags) error {
	return postSend(qp.p, wrID, opCmpSwap, flags, l, raddr, rkey, compare, swap, 0)
}

// OpenObjects lists the verbs objects not yet closed, with the stack that
// made each one when tracking is on (see TrackObjects).
func OpenObjects() []string {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	out := make([]string, 0, len(reg.open))
	for _, s := range reg.open {
		out = append(out, s)
	}
	return out
}

// TrackObjects turns on recording the creation stack of every object, for
// leak reports in tests. Objects are always counted; stacks cost time.
func TrackObjects(on bool) {
	reg.mu.Lock()
	reg.stacks = on
	reg.mu.Unlock()
}

var reg struct {
	mu     sync.Mutex
	next   uint64
	stacks bool
	open   map[uint64]string
}

type tracked struct{ id uint64 }

func (t *tracked) track(what string) {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if reg.open == nil {
		reg.open = make(map[uint64]string)
	}
	reg.next++
	t.id = reg.next
	if reg.stacks {
		what += "\n" + stack()
	}
	reg.open[t.id] = what
}

func (t *tracked) untrack() {
	reg.mu.Lock()
	delete(reg.open, t.id)
	reg.mu.Unlock()
}
