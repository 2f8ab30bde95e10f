// Package fabric owns a process's RDMA resources for a group: the device, a
// protection domain, one completion queue with its channel, an RC queue pair
// to every rank it talks to (made on first use; to itself through a
// loopback pair), a shared receive queue for active messages, and a
// registered scratch area for atomic results and staging. It posts work
// requests for the packages above it and completes them without a
// background goroutine: the goroutine that waits polls the CQ (one at a
// time), spins for a short while, then sleeps on the completion channel.
//
// A failed work completion (a bad rkey, a misaligned atomic, ...) moves an
// RC queue pair, and usually its peer's, to the error state: the call that
// hit it returns its typed error, the NIC atomics queued behind it on that
// pair fail (with an error matching verbs.ErrFlushed and
// verbs.ErrOutcomeUnknown: they may or may not have been performed), the
// other requests are sent again on the new pair (a READ by its caller, a
// WRITE by the next Flush, an active message by whoever waits for replies
// from that rank; the target applies an active message at most once), and
// a manager goroutine
// re-creates the pair on both sides, swapping endpoints out of band (see
// Signaller), so that the next call to that rank works. The transport's
// giving up is such a failure too. Only a peer known gone (Fabric.MarkLost,
// or a pair not re-established within ReconnectTimeout) is lost for good:
// calls to it fail with ErrPeerLost.
//
// Files: fabric.go sets up and closes; conn.go holds the connections and
// what is known of the peers' liveness; reconnect.go the manager and its
// re-establishment protocol; slots.go the work-request slots and staging
// chunks; progress.go completion handling; ops.go the RDMA operations;
// request.go request-based reads; msg.go the active-message setup and
// protocol; engine.go the target side (the engine goroutine); credits.go
// the origin side (credits, sending, waiting for replies).
package fabric

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/onesided/rma/verbs"
)

// Exchanger is the out-of-band all-gather used to swap QP endpoints.
type Exchanger interface {
	AllGather(ctx context.Context, mine []byte) ([][]byte, error)
}

// Options tune the fabric. A zero field picks its default, except
// GIDIndex, whose automatic choice is -1.
type Options struct {
	Device    string        // RDMA device name; "" = the first one
	Port      int           // port number; 0 = 1
	GIDIndex  int           // source GID index; -1 = the RoCE v2 IPv4 GID (or the first usable one)
	MTU       verbs.MTU     // path MTU; 0 = the port's active MTU
	Slots     int           // work requests in flight per process; 0 = 256
	ChunkSize int           // staging chunk size; 0 = 64 KiB
	Chunks    int           // staging chunks; 0 = 32
	Spin      time.Duration // how long a waiter polls for an RDMA completion before it sleeps; 0 = 50us
	// EngineSpin is how long the engine polls for further active messages
	// after one arrives (0 = 2ms); ReplySpin how long a caller polls for a
	// reply (0 = 5ms). Polling yields the CPU between polls.
	EngineSpin time.Duration
	ReplySpin  time.Duration
	Credits    int // active messages in flight per peer; 0 = 8
	MsgSize    int // active-message buffer size; 0 = 64 KiB
	// RecvBuffers is how many active-message receive buffers the shared
	// receive queue holds, for every rank at once; 0 = 8 x Credits (or
	// fewer in a group too small to fill them: see MsgMemory).
	RecvBuffers int
	// PeerTimeout bounds how long a peer may stay silent before calls to it
	// fail with ErrPeerLost; 0 = DefaultPeerTimeout. It sets the ACK timeout
	// when no round trip is measured (ackTimeout), how long a caller waits for an active
	// message's reply before it checks that the peer is alive, and how long
	// a failed connection may take to be re-established (ReconnectTimeout).
	PeerTimeout time.Duration
}

// Fabric is one process's connected RDMA resources. Its methods are safe for
// concurrent use, Close included: the calls that use its resources, in
// progress when Close begins or made after it, fail with an error matching
// verbs.ErrClosed (Close waits for those in progress, at most the reconnect
// timeout plus the peer timeout).
type Fabric struct {
	rank, size int

	// calls is twice the number of calls in progress (enter), plus one
	// once Close has begun; closed is closed then.
	calls  atomic.Int64
	closed chan struct{}

	dev  *verbs.Context
	pd   *verbs.PD
	ch   *verbs.CompChannel
	cq   *verbs.CQ
	path verbs.Path
	qpc  verbs.QPConfig // how every QP is made, at start and on reconnects

	DevAttr  verbs.DeviceAttr
	PortAttr verbs.PortAttr
	GID      verbs.GIDEntry

	peers []peer

	mem       []byte // scratch: 8 bytes per slot, then the staging chunks
	mr        *verbs.MR
	chunkSize int
	chunkOff  int
	maxInline int

	slots []slot
	// The free slots, a stack (the last freed is reused first) without a
	// lock: freeHead holds the top slot's index + 1 (0: empty) in its low
	// 32 bits and, above, a count of its changes, so that a stale top
	// cannot be swapped back in (ABA); freeNext[i] is the index + 1 of
	// the slot under slot i. nfree counts them, a hint for waiters.
	freeHead atomic.Uint64
	freeNext []atomic.Uint32
	nfree    atomic.Int32
	// failReply: a test's count of replies to lose (FailReplies).
	failReply  atomic.Int32
	freeChunks chan uint32

	pollMu sync.Mutex
	woke   bool       // under pollMu: a completion woke its waiter (takeWoke)
	wcs    []verbs.WC // 32, in f.mem: off the Go heap, so cgo's pointer checks are cheap
	spin   time.Duration
	// sleeping: the poller sleeps on the completion channel; whoever frees
	// a slot or a chunk then wakes it (its wait may be for one).
	sleeping atomic.Bool
	// peerTimeout: see Options.PeerTimeout; reconnectTimeout: how long a
	// pair may take to be re-established before its peer is deemed lost.
	peerTimeout      time.Duration
	reconnectTimeout time.Duration
	// probe: a word every peer may read, to tell whether this rank is
	// alive, then one word per rank: 1 once this rank has fenced it off
	// (see Fenced).
	probeMem []byte
	probeMR  *verbs.MR
	// engineSpin: how long the engine polls for more work after the last
	// message before it sleeps; replySpin: how long a caller waiting for a
	// reply polls before it sleeps. Waking a sleeping process costs far more
	// than a round trip on some hosts (a millisecond under emulation).
	engineSpin time.Duration
	replySpin  time.Duration
	opTime     atomic.Int64  // nanoseconds: see learnOpTime
	waits      atomic.Uint32 // synchronous waits, one in 16 of which is timed

	lostCtx    context.Context // see Lost
	lostCancel context.CancelCauseFunc

	m     messaging // active messages
	mgr   manager   // re-establishes failed connections
	reads Reads     // request-based reads
}

// OfGroup returns the fabric of a *group.Group (package group sets it).
var OfGroup func(g any) *Fabric

// ErrPeerLost is returned when a peer's connection fails.
var ErrPeerLost = verbs.ErrPeerLost

// ErrPeerLeft is the cause MarkLost is given for a peer that closed the
// group: calls to it fail with ErrPeerLost, but Lost does not fire (a
// member leaves only once it has completed every collective).
var ErrPeerLeft = errors.New("it closed the group")

// DefaultPeerTimeout is how long a peer may stay silent before calls to it
// fail with ErrPeerLost, unless Options.PeerTimeout says otherwise.
const DefaultPeerTimeout = time.Second

// transportRetries is the QP's transport retry count: the most the 3-bit
// field holds. Soft-RoCE (rxe) then retries without end (it decrements the
// count only when it is not 7), and hardware 7 times. Either way the
// transport's giving up is not taken for the peer's death: the failed pair
// is re-established, and a peer is lost only on the evidence of its
// liveness connection with an unanswered RDMA probe (MarkLost), or when
// the pair cannot be re-established within ReconnectTimeout.
const transportRetries = 7

// minACKTimeout is the least ACK timeout exponent (4.096us*2^12, about
// 17 ms): below it a slow responder's acknowledgement (rxe acknowledges a
// long WRITE every 64 packets) would be resent for nothing.
const minACKTimeout = 12

// ackTimeout is the ACK timeout exponent of a connection to rank: the
// transport resends what it has not seen acknowledged after 4.096us*2^t.
// With a round-trip measurement from the Signaller (RoundTripper), t is the
// least that covers the least round trip plus four mean deviations (the
// path's delay and its jitter), and minACKTimeout; without one, the peer
// timeout over the transport's retries. The deviations count for no more
// than that: a probe (Probe) must be resent several times within a peer
// timeout, and a deviation measured on a young or disturbed connection can
// be far larger than the path's.
func (f *Fabric) ackTimeout(rank int) int {
	tries := f.peerTimeout / (transportRetries + 1)
	want := tries
	f.mgr.mu.Lock()
	rt, ok := f.mgr.sig.(RoundTripper)
	f.mgr.mu.Unlock()
	if ok {
		if least, dev, ok := rt.RoundTrip(rank); ok {
			want = min(least+4*dev, max(tries, 2*least))
		}
	}
	t := minACKTimeout
	for t < 31 && 4096*time.Nanosecond<<t < want {
		t++
	}
	return t
}

// defaults fills in the options left zero.
func (o *Options) defaults() {
	if o.Port == 0 {
		o.Port = 1
	}
	if o.Slots <= 0 {
		o.Slots = 256
	}
	if o.ChunkSize <= 0 {
		o.ChunkSize = 64 << 10
	}
	if o.Chunks <= 0 {
		o.Chunks = 32
	}
	if o.Credits <= 0 {
		o.Credits = 8
	}
	if o.MsgSize <= 0 {
		o.MsgSize = 64 << 10
	}
	if o.Spin <= 0 {
		o.Spin = 50 * time.Microsecond
	}
	if o.EngineSpin <= 0 {
		o.EngineSpin = 2 * time.Millisecond
	}
	if o.ReplySpin <= 0 {
		o.ReplySpin = 5 * time.Millisecond
	}
	if o.PeerTimeout <= 0 {
		o.PeerTimeout = DefaultPeerTimeout
	}
}

// New opens the device, creates the resources and the loopback pair, and
// swaps with every rank, through ex, the address of the word it probes to
// tell whether this rank lives. It is collective: every rank must call it.
// The RC connection to another rank is made when first used.
func New(ctx context.Context, rank, size int, ex Exchanger, o Options) (f *Fabric, err error) {
	o.defaults()
	// Before anything is opened or pinned: the device's file must open and
	// RLIMIT_MEMLOCK must hold what New registers below (the scratch area
	// with its staging chunks, the active-message buffers of initMessaging,
	// the probe word) and the page group.Join's atomics probe registers, or
	// the caller gets a *verbs.LimitError naming the fix.
	scratch := (o.Slots*slotScratch+2*32*int(unsafe.Sizeof(verbs.WC{}))+4095)&^4095 + o.Chunks*o.ChunkSize
	if err := verbs.CheckAccess(o.Device, fmt.Sprintf("joining a %d-rank group", size),
		scratch, MsgMemory(size, o), 8, 4096); err != nil {
		return nil, err
	}
	fab := &Fabric{rank: rank, size: size, spin: o.Spin, engineSpin: o.EngineSpin, replySpin: o.ReplySpin,
		chunkSize: o.ChunkSize, peerTimeout: o.PeerTimeout, reconnectTimeout: ReconnectTimeout(o.PeerTimeout)}
	fab.lostCtx, fab.lostCancel = context.WithCancelCause(context.Background())
	fab.closed = make(chan struct{})
	f = fab
	defer func() {
		if err != nil {
			fab.Close()
		}
	}()
	if f.dev, err = verbs.Open(o.Device); err != nil {
		return nil, err
	}
	if f.DevAttr, err = f.dev.QueryDevice(); err != nil {
		return nil, err
	}
	if f.PortAttr, err = f.dev.QueryPort(o.Port); err != nil {
		return nil, err
	}
	if f.PortAttr.State != verbs.PortActive {
		return nil, fmt.Errorf("fabric: %s port %d is %s, not ACTIVE", f.dev.Name(), o.Port, f.PortAttr.State)
	}
	gidIndex := o.GIDIndex
	if gidIndex < 0 {
		table, err := f.dev.GIDTable(o.Port)
		if err != nil {
			return nil, err
		}
		if gidIndex, err = verbs.DefaultGIDIndex(table); err != nil && f.PortAttr.LinkLayer == verbs.LinkLayerEthernet {
			return nil, err
		}
	}
	if f.GID, err = f.dev.QueryGID(o.Port, gidIndex); err != nil && f.PortAttr.LinkLayer == verbs.LinkLayerEthernet {
		return nil, err
	}
	mtu := o.MTU
	if mtu == 0 || mtu > f.PortAttr.ActiveMTU {
		mtu = f.PortAttr.ActiveMTU
	}
	rd := min(f.DevAttr.MaxQPRdAtom, f.DevAttr.MaxQPInitRdAtom, 16)
	if rd < 1 {
		rd = 1
	}
	f.path = verbs.Path{
		Port: o.Port, LinkLayer: f.PortAttr.LinkLayer, GIDIndex: gidIndex, MTU: mtu,
		MaxRdAtomic: rd, Timeout: minACKTimeout, RetryCount: transportRetries, RNRRetry: 7, MinRNRTimer: 12,
		Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic,
	}

	if f.pd, err = f.dev.AllocPD(); err != nil {
		return nil, err
	}
	if f.ch, err = f.dev.CreateCompChannel(); err != nil {
		return nil, err
	}
	if f.cq, err = f.dev.CreateCQ(o.Slots+16, f.ch); err != nil {
		return nil, err
	}
	wcBytes := 32 * int(unsafe.Sizeof(verbs.WC{}))
	f.chunkOff = (o.Slots*slotScratch + 2*wcBytes + 4095) &^ 4095
	if f.mem, err = verbs.Alloc(f.chunkOff + o.Chunks*o.ChunkSize); err != nil {
		return nil, err
	}
	if f.mr, err = f.pd.RegisterMR(f.mem, verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	f.wcs = unsafe.Slice((*verbs.WC)(unsafe.Pointer(&f.mem[o.Slots*slotScratch])), 32)
	f.m.wcs = unsafe.Slice((*verbs.WC)(unsafe.Pointer(&f.mem[o.Slots*slotScratch+wcBytes])), 32)
	f.initSlots(o.Slots, o.Chunks)

	// A connection per rank (see conn); for itself, a loopback pair (A
	// posts, B responds).
	if err = f.initMessaging(o.Credits, o.MsgSize, o.RecvBuffers); err != nil {
		return nil, err
	}
	f.qpc = verbs.QPConfig{SendCQ: f.cq, RecvCQ: f.m.cq, SRQ: f.m.srq, MaxSendWR: o.Slots, MaxInlineData: 256}
	// The loopback pair now; the connection to another rank on first use
	// (see use), through the reconnect protocol's exchange.
	f.peers = make([]peer, size)
	me := &f.peers[rank]
	if me.cur, err = f.newConn(rank, 1); err != nil {
		return nil, err
	}
	if err = f.connectLoopback(me.cur); err != nil {
		return nil, fmt.Errorf("fabric: connect the loopback pair: %w", err)
	}
	me.cur.connected, me.up = true, true
	for r := range f.peers {
		if r != rank {
			f.peers[r].ready = make(chan struct{})
			f.peers[r].unready.Store(true)
		}
	}
	f.maxInline = min(me.cur.qp.MaxInline(), slotScratch)
	// The probe word, then a fence word per rank (see Fenced).
	if f.probeMem, err = verbs.Alloc(8 * (1 + f.size)); err != nil {
		return nil, err
	}
	if f.probeMR, err = f.pd.RegisterMR(f.probeMem[:8*(1+f.size)], verbs.AccessRemoteRead); err != nil {
		return nil, err
	}
	mine := binary.LittleEndian.AppendUint64(nil, f.probeMR.Addr())
	mine = binary.LittleEndian.AppendUint32(mine, f.probeMR.RKey())
	all, err := ex.AllGather(ctx, mine)
	if err != nil {
		return nil, fmt.Errorf("fabric: exchange probe words: %w", err)
	}
	for r := range f.peers {
		if len(all[r]) != 12 {
			return nil, fmt.Errorf("fabric: rank %d sent %d bytes of its probe word, want 12", r, len(all[r]))
		}
		f.peers[r].probeAddr = binary.LittleEndian.Uint64(all[r])
		f.peers[r].probeRKey = binary.LittleEndian.Uint32(all[r][8:])
	}
	f.startManager()
	return f, nil
}

// ReconnectTimeout is how long a failed connection may take to be
// re-established, for a given peer timeout, before its peer is deemed lost:
// twice the peer timeout, plus a second for the out-of-band round trips.
func ReconnectTimeout(peerTimeout time.Duration) time.Duration {
	return 2*peerTimeout + time.Second
}

func (f *Fabric) endpoint(qp *verbs.QP) verbs.Endpoint {
	var psn [4]byte
	rand.Read(psn[:])
	return verbs.Endpoint{QPN: qp.Num(), PSN: binary.LittleEndian.Uint32(psn[:]) & 0xffffff, LID: f.PortAttr.LID, GID: f.GID.GID,
		MTU: f.path.MTU}
}

// Rank and Size of the group the fabric connects.
func (f *Fabric) Rank() int { return f.rank }
func (f *Fabric) Size() int { return f.size }

// DeviceName is the RDMA device in use.
func (f *Fabric) DeviceName() string { return f.dev.Name() }

// Path is the QP path in use.
func (f *Fabric) Path() verbs.Path { return f.path }

// MaxInline is the largest write sent inline.
func (f *Fabric) MaxInline() int { return f.maxInline }

// PeerTimeout is the peer timeout in use (Options.PeerTimeout).
func (f *Fabric) PeerTimeout() time.Duration { return f.peerTimeout }

// Register registers memory of a window for remote access.
func (f *Fabric) Register(mem []byte, access verbs.Access) (*verbs.MR, error) {
	if err := f.enter(); err != nil {
		return nil, err
	}
	defer f.exit()
	return f.pd.RegisterMR(mem, access|verbs.AccessLocalWrite)
}

// enter starts a call that uses the fabric's resources, unless Close has
// begun (errClosed); exit ends it. Close releases nothing until every
// call has ended.
func (f *Fabric) enter() error {
	if f.calls.Add(2)&1 != 0 {
		f.exit()
		return errClosed
	}
	return nil
}

func (f *Fabric) exit() { f.calls.Add(-2) }

// isClosing reports whether Close has begun: a call that waits gives up.
func (f *Fabric) isClosing() bool { return f.calls.Load()&1 != 0 }

// Close releases every resource. Calls in progress fail with errClosed:
// Close wakes those that wait and waits for them to return (at most the
// reconnect timeout plus the peer timeout, the longest a call waits
// without looking) before it releases anything; later calls fail at once.
// Closing again does nothing.
func (f *Fabric) Close() error {
	for {
		n := f.calls.Load()
		if n&1 != 0 {
			return nil
		}
		if f.calls.CompareAndSwap(n, n|1) {
			break
		}
	}
	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	// Every peer reads as gone, which every call checks before anything
	// else; the waiters wake.
	for i := range f.peers {
		f.peers[i].lost.Store(&errClosed)
	}
	close(f.closed)
	f.wakeAll()
	f.stopEngine()
	f.stopManager()
	for deadline := time.Now().Add(f.reconnectTimeout + f.peerTimeout); f.calls.Load() != 1 && time.Now().Before(deadline); {
		f.wakeAll()
		time.Sleep(100 * time.Microsecond)
	}
	for i := range f.peers {
		p := &f.peers[i]
		closed := map[*conn]bool{}
		for _, c := range append([]*conn{p.cur, p.next}, p.retired...) {
			if c != nil && !closed[c] {
				closed[c] = true
				keep(c.close())
			}
		}
	}
	keep(f.closeMessaging())
	if f.probeMR != nil {
		keep(f.probeMR.Close())
	}
	if f.probeMem != nil {
		keep(verbs.Free(f.probeMem))
	}
	if f.mr != nil {
		keep(f.mr.Close())
	}
	if f.mem != nil {
		keep(verbs.Free(f.mem))
	}
	keep(f.closeMessagingCQ())
	if f.cq != nil {
		keep(f.cq.Close())
	}
	if f.ch != nil {
		keep(f.ch.Close())
	}
	if f.pd != nil {
		keep(f.pd.Close())
	}
	if f.dev != nil {
		keep(f.dev.Close())
	}
	return errors.Join(errs...)
}

// wakeAll wakes the goroutines asleep on the completion channels.
func (f *Fabric) wakeAll() {
	if f.ch != nil {
		f.ch.Wake()
	}
	if f.m.ch != nil {
		f.m.ch.Wake()
	}
}

// errClosed is what every call to a peer returns once the fabric is closed.
var errClosed = fmt.Errorf("fabric: the group is closed: %w", verbs.ErrClosed)

// FailReplies is a test hook: the next n requests this rank's engine
// serves are applied, and instead of sending their replies it fails their
// connections, as a connection that fails while the reply is on the wire
// would. Their origins send them again once the pair is re-established.
func (f *Fabric) FailReplies(n int) { f.failReply.Add(int32(n)) }

// RepliesToFail is how many of the replies FailReplies was told to lose
// are still to come.
func (f *Fabric) RepliesToFail() int { return int(max(f.failReply.Load(), 0)) }
