// Package fabric owns a process's RDMA resources for a group: the device, a
// protection domain, one completion queue with its channel, an RC queue pair
// to every rank (itself included, through a loopback pair), and a registered
// scratch area for atomic results and staging. It posts work requests for the
// packages above it and completes them without a background goroutine: the
// goroutine that waits polls the CQ (one at a time), spins for a short while,
// then sleeps on the completion channel.
package fabric

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
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

// Options tune the fabric. The zero value picks defaults.
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
	// PeerTimeout bounds how long a peer may stay silent before calls to it
	// fail with ErrPeerLost; 0 = DefaultPeerTimeout. It sets the transport's
	// ACK timeout and retry count, and how long a caller waits for an active
	// message's reply before it checks that the peer is alive.
	PeerTimeout time.Duration
}

// Fabric is one process's connected RDMA resources. Its methods are safe for
// concurrent use, except Close.
type Fabric struct {
	rank, size int

	dev  *verbs.Context
	pd   *verbs.PD
	ch   *verbs.CompChannel
	cq   *verbs.CQ
	path verbs.Path

	DevAttr  verbs.DeviceAttr
	PortAttr verbs.PortAttr
	GID      verbs.GIDEntry

	peers []peer
	selfB *verbs.QP // the responder half of the loopback pair

	mem       []byte // scratch: 8 bytes per slot, then the staging chunks
	mr        *verbs.MR
	chunkSize int
	chunkOff  int
	maxInline int

	slots      []slot
	slotMu     sync.Mutex
	freeList   []uint32     // free slots, a stack (the last freed is reused first)
	nfree      atomic.Int32 // len(freeList), readable without slotMu
	freeChunks chan uint32

	pollMu sync.Mutex
	wcs    []verbs.WC // 32, in f.mem: off the Go heap, so cgo's pointer checks are cheap
	spin   time.Duration
	// peerTimeout: see Options.PeerTimeout.
	peerTimeout time.Duration
	// probe: a word every peer may read, to tell whether this rank is alive.
	probeMem []byte
	probeMR  *verbs.MR
	// engineSpin: how long the engine polls for more work after the last
	// message before it sleeps; replySpin: how long a caller waiting for a
	// reply polls before it sleeps. Waking a sleeping process costs far more
	// than a round trip on some hosts (a millisecond under emulation).
	engineSpin time.Duration
	replySpin  time.Duration

	m messaging // active messages
}

type peer struct {
	qp        *verbs.QP
	lost      atomic.Pointer[error] // set once the peer is known gone
	probeAddr uint64
	probeRKey uint32
	posted    atomic.Uint64
	completed atomic.Uint64
	mu        sync.Mutex
	err       error // first error of a fire-and-forget request since the last Flush
}

const (
	slotFree uint32 = iota
	slotBusy
	slotDone
	slotAbandoned
	slotReserved // a credit taken, its request not yet sent
)

type slot struct {
	state atomic.Uint32
	async bool  // nobody waits: the completion releases it
	peer  int32 // rank
	chunk int32 // staging chunk held, or -1
	err   error
	wake  chan struct{}
	timer *time.Timer
	// sleeping: the waiter blocks on wake (the poller signals it only
	// then); slept: it did, so a stale signal may have to be drained.
	sleeping atomic.Bool
	slept    bool
}

// ErrPeerLost is returned when a peer's connection fails.
var ErrPeerLost = verbs.ErrPeerLost

// DefaultPeerTimeout is how long a peer may stay silent before calls to it
// fail with ErrPeerLost, unless Options.PeerTimeout says otherwise.
const DefaultPeerTimeout = time.Second

// New opens the device, creates the resources and connects an RC QP to every
// rank through ex. It is collective: every rank must call it.
func New(ctx context.Context, rank, size int, ex Exchanger, o Options) (f *Fabric, err error) {
	if o.Port == 0 {
		o.Port = 1
	}
	if o.Slots == 0 {
		o.Slots = 256
	}
	if o.ChunkSize == 0 {
		o.ChunkSize = 64 << 10
	}
	if o.Chunks == 0 {
		o.Chunks = 32
	}
	if o.Credits == 0 {
		o.Credits = 8
	}
	if o.MsgSize == 0 {
		o.MsgSize = 64 << 10
	}
	if o.Spin == 0 {
		o.Spin = 50 * time.Microsecond
	}
	if o.EngineSpin == 0 {
		o.EngineSpin = 2 * time.Millisecond
	}
	if o.ReplySpin == 0 {
		o.ReplySpin = 5 * time.Millisecond
	}
	if o.PeerTimeout <= 0 {
		o.PeerTimeout = DefaultPeerTimeout
	}
	// The transport gives up after (retries+1) ACK timeouts of 4.096us*2^t.
	const retries = 7
	timeout := 1
	for timeout < 31 && (retries+1)*4096*time.Nanosecond<<timeout < o.PeerTimeout {
		timeout++
	}
	fab := &Fabric{rank: rank, size: size, spin: o.Spin, engineSpin: o.EngineSpin, replySpin: o.ReplySpin,
		chunkSize: o.ChunkSize, peerTimeout: o.PeerTimeout}
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
		MaxRdAtomic: rd, Timeout: timeout, RetryCount: retries, RNRRetry: 7, MinRNRTimer: 12,
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
	f.slots = make([]slot, o.Slots)
	f.freeList = make([]uint32, 0, o.Slots)
	for i := range f.slots {
		f.slots[i].wake = make(chan struct{}, 1)
		f.slots[i].chunk = -1
		f.freeList = append(f.freeList, uint32(i))
		f.nfree.Add(1)
	}
	f.freeChunks = make(chan uint32, o.Chunks)
	for i := 0; i < o.Chunks; i++ {
		f.freeChunks <- uint32(i)
	}

	// One QP per rank; for itself, a loopback pair (A posts, B responds).
	if err = f.initMessaging(o.Credits, o.MsgSize); err != nil {
		return nil, err
	}
	qpc := verbs.QPConfig{SendCQ: f.cq, RecvCQ: f.m.cq, MaxSendWR: o.Slots, MaxRecvWR: 2 * o.Credits, MaxInlineData: 256}
	f.peers = make([]peer, size)
	for r := range f.peers {
		if f.peers[r].qp, err = f.pd.CreateQP(qpc); err != nil {
			return nil, err
		}
	}
	f.maxInline = min(f.peers[rank].qp.MaxInline(), slotScratch)
	if f.selfB, err = f.pd.CreateQP(qpc); err != nil {
		return nil, err
	}
	if f.probeMem, err = verbs.Alloc(8); err != nil {
		return nil, err
	}
	if f.probeMR, err = f.pd.RegisterMR(f.probeMem, verbs.AccessRemoteRead); err != nil {
		return nil, err
	}
	local := make([]verbs.Endpoint, size)
	mine := make([]byte, 0, size*verbs.EndpointSize+12)
	for r := range f.peers {
		local[r] = f.endpoint(f.peers[r].qp)
		mine = local[r].AppendBinary(mine)
	}
	mine = binary.LittleEndian.AppendUint64(mine, f.probeMR.Addr())
	mine = binary.LittleEndian.AppendUint32(mine, f.probeMR.RKey())
	all, err := ex.AllGather(ctx, mine)
	if err != nil {
		return nil, fmt.Errorf("fabric: exchange endpoints: %w", err)
	}
	for r := range f.peers {
		if len(all[r]) != size*verbs.EndpointSize+12 {
			return nil, fmt.Errorf("fabric: rank %d sent %d bytes of endpoints, want %d", r, len(all[r]), size*verbs.EndpointSize+12)
		}
		tail := all[r][size*verbs.EndpointSize:]
		f.peers[r].probeAddr = binary.LittleEndian.Uint64(tail)
		f.peers[r].probeRKey = binary.LittleEndian.Uint32(tail[8:])
		var remote verbs.Endpoint
		if r == rank {
			b := f.endpoint(f.selfB)
			if err := f.selfB.Connect(&f.path, b, local[r]); err != nil {
				return nil, err
			}
			remote = b
		} else {
			off := rank * verbs.EndpointSize
			if remote, err = verbs.DecodeEndpoint(all[r][off : off+verbs.EndpointSize]); err != nil {
				return nil, fmt.Errorf("fabric: endpoint from rank %d: %w", r, err)
			}
		}
		if err := f.peers[r].qp.Connect(&f.path, local[r], remote); err != nil {
			return nil, fmt.Errorf("fabric: connect to rank %d: %w", r, err)
		}
	}
	// Receives need a QP past RESET; a peer's first message cannot come
	// before the caller's next barrier (RNR retries cover the gap anyway).
	if err = f.postReceives(); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *Fabric) endpoint(qp *verbs.QP) verbs.Endpoint {
	var psn [4]byte
	rand.Read(psn[:])
	return verbs.Endpoint{QPN: qp.Num(), PSN: binary.LittleEndian.Uint32(psn[:]) & 0xffffff, LID: f.PortAttr.LID, GID: f.GID.GID}
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

// Register registers memory of a window for remote access.
func (f *Fabric) Register(mem []byte, access verbs.Access) (*verbs.MR, error) {
	return f.pd.RegisterMR(mem, access|verbs.AccessLocalWrite)
}

// Close releases every resource. Nothing may be in flight.
func (f *Fabric) Close() error {
	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	f.stopEngine()
	for i := range f.peers {
		if f.peers[i].qp != nil {
			keep(f.peers[i].qp.Close())
		}
	}
	if f.selfB != nil {
		keep(f.selfB.Close())
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
	*f = Fabric{}
	return errors.Join(errs...)
}

// --- slots and chunks ---

func (f *Fabric) acquireSlot(ctx context.Context, rank int, async bool) (uint32, error) {
	if err := f.peerErr(rank); err != nil {
		return 0, err
	}
	for {
		f.slotMu.Lock()
		if k := len(f.freeList); k > 0 {
			id := f.freeList[k-1]
			f.freeList = f.freeList[:k-1]
			f.nfree.Add(-1)
			f.slotMu.Unlock()
			s := &f.slots[id]
			s.state.Store(slotBusy)
			s.async, s.peer, s.chunk, s.err = async, int32(rank), -1, nil
			return id, nil
		}
		f.slotMu.Unlock()
		if err := f.progressUntil(ctx, func() bool { return f.nfree.Load() > 0 }, nil); err != nil {
			return 0, err
		}
	}
}

func (f *Fabric) releaseSlot(id uint32) {
	s := &f.slots[id]
	if s.chunk >= 0 {
		f.freeChunks <- uint32(s.chunk)
		s.chunk = -1
	}
	s.state.Store(slotFree)
	f.slotMu.Lock()
	f.freeList = append(f.freeList, id)
	f.nfree.Add(1)
	f.slotMu.Unlock()
}

func (f *Fabric) acquireChunk(ctx context.Context) (int32, error) {
	for {
		select {
		case c := <-f.freeChunks:
			return int32(c), nil
		default:
		}
		if err := f.progressUntil(ctx, func() bool { return len(f.freeChunks) > 0 }, nil); err != nil {
			return 0, err
		}
	}
}

func (f *Fabric) chunk(c int32) []byte {
	off := f.chunkOff + int(c)*f.chunkSize
	return f.mem[off : off+f.chunkSize : off+f.chunkSize]
}

// slotScratch is each slot's part of the scratch area: an atomic's result,
// or a small write's payload. Inline payloads are copied there first so
// that C never sees the caller's memory (which may sit in a Go object that
// holds pointers, which cgo refuses to pass).
const slotScratch = 256

func (f *Fabric) atomicLocal(id uint32) verbs.Local { return f.mr.Local(int(id)*slotScratch, 8) }

func (f *Fabric) scratch(id uint32) []byte {
	off := int(id) * slotScratch
	return f.mem[off : off+slotScratch : off+slotScratch]
}

func (f *Fabric) atomicResult(id uint32) uint64 {
	return *(*uint64)(unsafe.Pointer(&f.mem[int(id)*slotScratch]))
}

// --- completion ---

// pollLocked polls one batch and dispatches it; pollMu is held.
func (f *Fabric) pollLocked() int {
	n, err := f.cq.Poll(f.wcs[:])
	if err != nil {
		return 0
	}
	return f.dispatchLocked(n)
}

// dispatchLocked handles the n completions in f.wcs; pollMu is held.
func (f *Fabric) dispatchLocked(n int) int {
	for i := 0; i < n; i++ {
		wc := &f.wcs[i]
		id := uint32(wc.WRID)
		if int(id) >= len(f.slots) {
			continue
		}
		s := &f.slots[id]
		p := &f.peers[s.peer]
		if werr := wc.Err(); werr != nil {
			s.err = fmt.Errorf("rank %d: %w", s.peer, werr)
			if errors.Is(werr, verbs.ErrPeerLost) || errors.Is(werr, verbs.ErrFlushed) {
				f.markLost(int(s.peer), werr)
				s.err = f.peerErr(int(s.peer))
			}
		}
		if s.async {
			if s.err != nil {
				p.mu.Lock()
				if p.err == nil {
					p.err = s.err
				}
				p.mu.Unlock()
			}
			p.completed.Add(1)
			f.releaseSlot(id)
			continue
		}
		p.completed.Add(1)
		if !s.state.CompareAndSwap(slotBusy, slotDone) {
			f.releaseSlot(id) // the waiter gave up
			continue
		}
		if s.sleeping.Load() {
			select {
			case s.wake <- struct{}{}:
			default:
			}
		}
	}
	return n
}

// progressUntil drives completions until done reports true or ctx ends.
// wake, if not nil, is signalled when the condition may have become true.
func (f *Fabric) progressUntil(ctx context.Context, done func() bool, s *slot) error {
	var spinStart time.Time
	empty := 0 // polls that found nothing; the clock is read every 64th
	for i := 0; ; i++ {
		if done() {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if f.pollMu.TryLock() {
			n := f.pollLocked()
			if n == 0 && !done() {
				empty++
				if empty&63 != 0 {
					// keep polling: reading the clock can cost more than a poll
				} else if spinStart.IsZero() {
					spinStart = time.Now()
				} else if time.Since(spinStart) > f.spin {
					err := f.sleepLocked(ctx, done)
					spinStart = time.Time{}
					if err != nil {
						f.pollMu.Unlock()
						return err
					}
				}
			} else {
				spinStart, empty = time.Time{}, 0
			}
			f.pollMu.Unlock()
			continue
		}
		// Another goroutine polls for everyone; wait to be woken or to take over.
		if i < 64 {
			runtime.Gosched()
			continue
		}
		if s == nil {
			if i < 4096 {
				runtime.Gosched()
			} else {
				time.Sleep(50 * time.Microsecond)
			}
			continue
		}
		s.sleeping.Store(true)
		s.slept = true
		if done() {
			s.sleeping.Store(false)
			return nil
		}
		if s.timer == nil {
			s.timer = time.NewTimer(time.Millisecond)
		} else {
			s.timer.Reset(time.Millisecond)
		}
		select {
		case <-s.wake:
		case <-s.timer.C:
		case <-ctx.Done():
		}
		s.timer.Stop()
		s.sleeping.Store(false)
	}
}

// sleepLocked arms the CQ and sleeps on the channel until an event comes.
func (f *Fabric) sleepLocked(ctx context.Context, done func() bool) error {
	if err := f.cq.ReqNotify(); err != nil {
		return err
	}
	if f.pollLocked() > 0 || done() {
		return nil
	}
	return f.ch.Wait(ctx)
}

// wait waits for a synchronous slot and releases it, unless ctx ended first:
// then the slot is abandoned (its completion releases it) and abandoned is
// true. Call release after reading the slot's results.
func (f *Fabric) wait(ctx context.Context, id uint32) (abandoned bool, err error) {
	s := &f.slots[id]
	if err := f.progressUntil(ctx, func() bool { return s.state.Load() == slotDone }, s); err != nil {
		if s.state.CompareAndSwap(slotBusy, slotAbandoned) {
			return true, err
		}
	}
	if s.slept {
		s.slept = false
		select {
		case <-s.wake:
		default:
		}
	}
	return false, s.err
}

// markLost records that rank is gone; calls to it fail from now on. Its QP
// is moved to the error state, so every request in flight to it completes
// (with ErrFlushed) even if the transport would never time it out.
func (f *Fabric) markLost(rank int, cause error) {
	err := fmt.Errorf("fabric: %w: rank %d: %v", ErrPeerLost, rank, cause)
	p := &f.peers[rank]
	if p.lost.CompareAndSwap(nil, &err) && rank != f.rank {
		p.qp.SetError()
	}
}

// MarkLost records that rank is gone (its process died): calls to it fail
// with ErrPeerLost from now on, including those in flight.
func (f *Fabric) MarkLost(rank int, cause error) { f.markLost(rank, cause) }

// peerErr is the error of calls to a rank known to be gone, or nil.
func (f *Fabric) peerErr(rank int) error {
	if e := f.peers[rank].lost.Load(); e != nil {
		return *e
	}
	return nil
}

// PeerErr reports whether rank is known to be gone (an error wrapping
// ErrPeerLost) or not (nil).
func (f *Fabric) PeerErr(rank int) error { return f.peerErr(rank) }

// probe reads rank's probe word: it fails, within the peer timeout, if
// rank is gone, and marks it lost.
func (f *Fabric) probe(ctx context.Context, rank int) error {
	p := &f.peers[rank]
	_, err := f.Read8(ctx, rank, p.probeAddr, p.probeRKey)
	if err != nil && ctx.Err() == nil {
		f.markLost(rank, err)
		return f.peerErr(rank)
	}
	return err
}

// --- operations ---

// Write copies src to raddr at rank. It returns once the data is handed to
// the NIC (src may be reused); Flush reports its completion.
func (f *Fabric) Write(ctx context.Context, rank int, src []byte, raddr uint64, rkey uint32) error {
	p := &f.peers[rank]
	if len(src) <= f.maxInline {
		id, err := f.acquireSlot(ctx, rank, true)
		if err != nil {
			return err
		}
		p.posted.Add(1)
		data := f.scratch(id)[:len(src)]
		copy(data, src)
		if err := p.qp.PostWriteInline(uint64(id), data, raddr, rkey, verbs.SendSignaled); err != nil {
			p.completed.Add(1)
			f.releaseSlot(id)
			return err
		}
		return nil
	}
	for len(src) > 0 {
		n := min(len(src), f.chunkSize)
		c, err := f.acquireChunk(ctx)
		if err != nil {
			return err
		}
		copy(f.chunk(c), src[:n])
		id, err := f.acquireSlot(ctx, rank, true)
		if err != nil {
			f.freeChunks <- uint32(c)
			return err
		}
		f.slots[id].chunk = c
		p.posted.Add(1)
		l := f.mr.Local(f.chunkOff+int(c)*f.chunkSize, n)
		if err := p.qp.PostWrite(uint64(id), l, raddr, rkey, verbs.SendSignaled); err != nil {
			p.completed.Add(1)
			f.releaseSlot(id)
			return err
		}
		src, raddr = src[n:], raddr+uint64(n)
	}
	return nil
}

// Read copies len(dst) bytes from raddr at rank into dst and returns when
// they are there.
func (f *Fabric) Read(ctx context.Context, rank int, dst []byte, raddr uint64, rkey uint32) error {
	if n := len(dst); n > 0 && n <= 8 {
		// Small: into the slot's own 8 bytes, no staging chunk.
		id, err := f.readSmall(ctx, rank, raddr, rkey, n)
		if err != nil {
			return err
		}
		off := int(id) * slotScratch
		copy(dst, f.mem[off:off+n])
		f.releaseSlot(id)
		return nil
	}
	return f.ReadV(ctx, rank, rkey, dst, []Segment{{Addr: raddr, Len: len(dst)}})
}

// readSmall reads n <= 8 bytes at raddr into slot id's scratch word and
// waits; the caller reads the word, then releases the slot.
func (f *Fabric) readSmall(ctx context.Context, rank int, raddr uint64, rkey uint32, n int) (uint32, error) {
	p := &f.peers[rank]
	id, err := f.acquireSlot(ctx, rank, false)
	if err != nil {
		return 0, err
	}
	p.posted.Add(1)
	l := f.mr.Local(int(id)*slotScratch, n)
	if f.pollMu.TryLock() {
		var k int
		k, err = p.qp.PostReadPoll(uint64(id), l, raddr, rkey, verbs.SendSignaled, f.cq, f.wcs[:])
		if k > 0 {
			f.dispatchLocked(k)
		}
		f.pollMu.Unlock()
	} else {
		err = p.qp.PostRead(uint64(id), l, raddr, rkey, verbs.SendSignaled)
	}
	if err != nil {
		p.completed.Add(1)
		f.releaseSlot(id)
		return 0, err
	}
	abandoned, err := f.wait(ctx, id)
	if abandoned {
		return 0, err
	}
	if err != nil {
		f.releaseSlot(id)
		return 0, err
	}
	return id, nil
}

// Segment is a remote range.
type Segment struct {
	Addr uint64
	Len  int
}

// ReadV reads the segments, one after the other, into dst (whose length
// is their total), with several READs in flight.
func (f *Fabric) ReadV(ctx context.Context, rank int, rkey uint32, dst []byte, segs []Segment) error {
	p := &f.peers[rank]
	type pending struct {
		id  uint32
		off int
		n   int
	}
	var ring [8]pending
	head, tail := 0, 0
	var firstErr error
	finish := func() {
		pd := ring[head%len(ring)]
		head++
		abandoned, err := f.wait(ctx, pd.id)
		if err == nil {
			copy(dst[pd.off:pd.off+pd.n], f.chunk(f.slots[pd.id].chunk)[:pd.n])
		} else if firstErr == nil {
			firstErr = err
		}
		if !abandoned {
			f.releaseSlot(pd.id)
		}
	}
	off := 0
	for _, sg := range segs {
		for done := 0; done < sg.Len && firstErr == nil; {
			n := min(sg.Len-done, f.chunkSize)
			if tail-head == len(ring) || (len(f.freeChunks) == 0 && tail > head) {
				finish()
				continue
			}
			c, err := f.acquireChunk(ctx)
			if err != nil {
				firstErr = err
				break
			}
			id, err := f.acquireSlot(ctx, rank, false)
			if err != nil {
				f.freeChunks <- uint32(c)
				firstErr = err
				break
			}
			f.slots[id].chunk = c
			p.posted.Add(1)
			l := f.mr.Local(f.chunkOff+int(c)*f.chunkSize, n)
			if err := p.qp.PostRead(uint64(id), l, sg.Addr+uint64(done), rkey, verbs.SendSignaled); err != nil {
				p.completed.Add(1)
				f.releaseSlot(id)
				firstErr = err
				break
			}
			ring[tail%len(ring)] = pending{id, off, n}
			tail++
			off += n
			done += n
		}
	}
	for head < tail {
		finish()
	}
	return firstErr
}

// FetchAdd atomically adds add to the 8-byte word at raddr and returns its
// old value.
func (f *Fabric) FetchAdd(ctx context.Context, rank int, raddr uint64, rkey uint32, add uint64) (uint64, error) {
	return f.atomic(ctx, rank, raddr, rkey, true, add, 0)
}

// CompareSwap atomically replaces the 8-byte word at raddr by swap if it
// equals compare, and returns its old value.
func (f *Fabric) CompareSwap(ctx context.Context, rank int, raddr uint64, rkey uint32, compare, swap uint64) (uint64, error) {
	return f.atomic(ctx, rank, raddr, rkey, false, compare, swap)
}

func (f *Fabric) atomic(ctx context.Context, rank int, raddr uint64, rkey uint32, fadd bool, a, b uint64) (uint64, error) {
	p := &f.peers[rank]
	id, err := f.acquireSlot(ctx, rank, false)
	if err != nil {
		return 0, err
	}
	p.posted.Add(1)
	if f.pollMu.TryLock() {
		// Post and poll in one call to C: the completion is often there
		// already (always on rxe, which does the work in the post).
		var n int
		n, err = p.qp.PostAtomicPoll(uint64(id), f.atomicLocal(id), raddr, rkey, fadd, a, b, verbs.SendSignaled, f.cq, f.wcs[:])
		if n > 0 {
			f.dispatchLocked(n)
		}
		f.pollMu.Unlock()
	} else if fadd {
		err = p.qp.PostFetchAdd(uint64(id), f.atomicLocal(id), raddr, rkey, a, verbs.SendSignaled)
	} else {
		err = p.qp.PostCompareSwap(uint64(id), f.atomicLocal(id), raddr, rkey, a, b, verbs.SendSignaled)
	}
	if err != nil {
		p.completed.Add(1)
		f.releaseSlot(id)
		return 0, err
	}
	return f.waitWord(ctx, id)
}

// waitWord waits for an 8-byte result.
func (f *Fabric) waitWord(ctx context.Context, id uint32) (uint64, error) {
	abandoned, err := f.wait(ctx, id)
	if abandoned {
		return 0, err
	}
	v := f.atomicResult(id)
	f.releaseSlot(id)
	return v, err
}

// Read8 reads the aligned 8-byte word at raddr with one RDMA READ, which is
// atomic with respect to NIC atomics and to the target CPU's aligned stores.
func (f *Fabric) Read8(ctx context.Context, rank int, raddr uint64, rkey uint32) (uint64, error) {
	id, err := f.readSmall(ctx, rank, raddr, rkey, 8)
	if err != nil {
		return 0, err
	}
	v := f.atomicResult(id)
	f.releaseSlot(id)
	return v, nil
}

// Flush waits until every request posted to rank so far has completed and
// returns the first error of a fire-and-forget request among them.
func (f *Fabric) Flush(ctx context.Context, rank int) error {
	p := &f.peers[rank]
	target := p.posted.Load()
	if err := f.progressUntil(ctx, func() bool { return p.completed.Load() >= target }, nil); err != nil {
		return err
	}
	p.mu.Lock()
	err := p.err
	p.err = nil
	p.mu.Unlock()
	return err
}

// FlushAll flushes every rank.
func (f *Fabric) FlushAll(ctx context.Context) error {
	var first error
	for r := range f.peers {
		if err := f.Flush(ctx, r); err != nil && first == nil {
			first = err
		}
	}
	return first
}
