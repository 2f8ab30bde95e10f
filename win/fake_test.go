package win

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/onesided/rma/fallback"
	"github.com/onesided/rma/internal/fabric"
	"github.com/onesided/rma/verbs"
)

// fakeNet is an in-process transport between n ranks of one test, the
// model of RDMA the window code is written against (transport):
//   - a WRITE lands only when its origin flushes the target (Flush), and
//     the WRITEs a flush lands land in random order;
//   - READs and the NIC atomics act at once on the target's memory, the
//     atomics with sync/atomic (so the race detector sees them as atomic);
//   - an active message waits until its origin waits for replies from its
//     target (WaitMessages, FlushMessages, ProgressMessages) or runs out of
//     credits; then the target's fallback.Target applies the messages of
//     that origin in the order they were sent, and their replies go to the
//     origin's fallback.Client.
//
// kill makes a rank lost: calls to it fail with ErrPeerLost, and it is
// fenced off (Fenced true), as the group's liveness does for a dead host.
type fakeNet struct {
	n       int
	credits int
	msgSize int

	mu      sync.Mutex
	rng     *rand.Rand
	regs    map[uint32]*fakeReg
	nextKey uint32
	writes  map[[2]int][]fakeWrite // (origin, target): WRITEs not yet landed
	queue   map[[2]int][]fakeMsg   // (origin, target): messages not yet applied
	free    map[[2]int][]int       // (origin, target): free credits
	bufs    map[[3]int][]byte      // (origin, target, credit): send buffers
	lost    []atomic.Bool

	targets []*fallback.Target
	clients []*fallback.Client
	stats   fakeStats
}

// fakeStats counts what went through the fake, for tests of routing.
type fakeStats struct {
	writes, reads, fetchAdds, compareSwaps, messages atomic.Int64
}

type fakeReg struct {
	owner int
	mem   []byte
	addr  uint64
}

type fakeWrite struct {
	reg  *fakeReg
	off  int
	data []byte
}

type fakeMsg struct {
	credit int
	data   []byte
}

func newFakeNet(n int, seed int64) *fakeNet {
	f := &fakeNet{
		n: n, credits: 4, msgSize: 256,
		rng:     rand.New(rand.NewSource(seed)),
		regs:    map[uint32]*fakeReg{},
		nextKey: 0x100,
		writes:  map[[2]int][]fakeWrite{},
		queue:   map[[2]int][]fakeMsg{},
		free:    map[[2]int][]int{},
		bufs:    map[[3]int][]byte{},
		lost:    make([]atomic.Bool, n),
	}
	for r := 0; r < n; r++ {
		f.targets = append(f.targets, fallback.NewTarget())
		f.clients = append(f.clients, fallback.NewClient(n, f.credits))
		for t := 0; t < n; t++ {
			for c := f.credits - 1; c >= 0; c-- {
				f.free[[2]int{r, t}] = append(f.free[[2]int{r, t}], c)
				f.bufs[[3]int{r, t, c}] = make([]byte, f.msgSize)
			}
		}
	}
	return f
}

// kill makes rank lost to every other rank.
func (f *fakeNet) kill(rank int) { f.lost[rank].Store(true) }

// end is rank's transport.
func (f *fakeNet) end(rank int) *fakeEnd { return &fakeEnd{f: f, me: rank} }

// fakeEnd is one rank's transport on a fakeNet.
type fakeEnd struct {
	f  *fakeNet
	me int
}

var _ transport = (*fakeEnd)(nil)

func (e *fakeEnd) check(rank int) error {
	if rank < 0 || rank >= e.f.n {
		return fmt.Errorf("fake: rank %d of %d", rank, e.f.n)
	}
	if e.f.lost[rank].Load() || e.f.lost[e.me].Load() {
		return fmt.Errorf("fake: rank %d: %w", rank, ErrPeerLost)
	}
	return nil
}

// locate finds n bytes at raddr in rank's memory registered as rkey.
func (e *fakeEnd) locate(rank int, raddr uint64, rkey uint32, n int) (*fakeReg, int, error) {
	if err := e.check(rank); err != nil {
		return nil, 0, err
	}
	e.f.mu.Lock()
	reg := e.f.regs[rkey]
	e.f.mu.Unlock()
	if reg == nil || reg.owner != rank || raddr < reg.addr || raddr+uint64(n) > reg.addr+uint64(len(reg.mem)) {
		return nil, 0, fmt.Errorf("fake: %d bytes at %#x rkey %#x of rank %d: remote access error", n, raddr, rkey, rank)
	}
	return reg, int(raddr - reg.addr), nil
}

func (e *fakeEnd) word(rank int, raddr uint64, rkey uint32) (*uint64, error) {
	reg, off, err := e.locate(rank, raddr, rkey, 8)
	if err != nil {
		return nil, err
	}
	if raddr%8 != 0 {
		return nil, fmt.Errorf("fake: atomic at %#x: misaligned", raddr)
	}
	return (*uint64)(unsafe.Pointer(&reg.mem[off])), nil
}

func (e *fakeEnd) Write(ctx context.Context, rank int, src []byte, raddr uint64, rkey uint32) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	reg, off, err := e.locate(rank, raddr, rkey, len(src))
	if err != nil {
		return err
	}
	e.f.stats.writes.Add(1)
	e.f.mu.Lock()
	k := [2]int{e.me, rank}
	e.f.writes[k] = append(e.f.writes[k], fakeWrite{reg, off, append([]byte(nil), src...)})
	e.f.mu.Unlock()
	return nil
}

// copyWords copies src to dst, 8-byte words that are aligned in both with
// sync/atomic, as the NIC's DMA is atomic per word to the atomics.
func copyWords(dst, src []byte) {
	i := 0
	for ; i+8 <= len(src); i += 8 {
		d, s := unsafe.Pointer(&dst[i]), unsafe.Pointer(&src[i])
		if uintptr(d)%8 != 0 || uintptr(s)%8 != 0 {
			break
		}
		atomic.StoreUint64((*uint64)(d), atomic.LoadUint64((*uint64)(s)))
	}
	copy(dst[i:], src[i:])
}

func (e *fakeEnd) Read(ctx context.Context, rank int, dst []byte, raddr uint64, rkey uint32) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	reg, off, err := e.locate(rank, raddr, rkey, len(dst))
	if err != nil {
		return err
	}
	e.f.stats.reads.Add(1)
	copyWords(dst, reg.mem[off:off+len(dst)])
	return nil
}

func (e *fakeEnd) ReadV(ctx context.Context, rank int, rkey uint32, dst []byte, segs []fabric.Segment) error {
	pos := 0
	for _, s := range segs {
		if err := e.Read(ctx, rank, dst[pos:pos+s.Len], s.Addr, rkey); err != nil {
			return err
		}
		pos += s.Len
	}
	if pos != len(dst) {
		return fmt.Errorf("fake: read of %d bytes into %d", pos, len(dst))
	}
	return nil
}

func (e *fakeEnd) StartRead(rd *fabric.ReadOp, rank int, rkey uint32, dst []byte, segs []fabric.Segment) {
	rd.Finish(e.ReadV(context.Background(), rank, rkey, dst, segs))
}

func (e *fakeEnd) Read8(ctx context.Context, rank int, raddr uint64, rkey uint32) (uint64, error) {
	p, err := e.word(rank, raddr, rkey)
	if err != nil {
		return 0, err
	}
	e.f.stats.reads.Add(1)
	return atomic.LoadUint64(p), nil
}

func (e *fakeEnd) FetchAdd(ctx context.Context, rank int, raddr uint64, rkey uint32, add uint64) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	p, err := e.word(rank, raddr, rkey)
	if err != nil {
		return 0, err
	}
	e.f.stats.fetchAdds.Add(1)
	return atomic.AddUint64(p, add) - add, nil
}

func (e *fakeEnd) CompareSwap(ctx context.Context, rank int, raddr uint64, rkey uint32, compare, swap uint64) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	p, err := e.word(rank, raddr, rkey)
	if err != nil {
		return 0, err
	}
	e.f.stats.compareSwaps.Add(1)
	for {
		old := atomic.LoadUint64(p)
		if old != compare {
			return old, nil
		}
		if atomic.CompareAndSwapUint64(p, old, swap) {
			return old, nil
		}
	}
}

func (e *fakeEnd) Words(ctx context.Context, rank int, rkey uint32, fadd bool, addrs, vals, olds []uint64) error {
	for i, a := range addrs {
		var old uint64
		var err error
		if fadd {
			old, err = e.FetchAdd(ctx, rank, a, rkey, vals[i])
		} else {
			old, err = e.Read8(ctx, rank, a, rkey)
		}
		if err != nil {
			return err
		}
		if olds != nil {
			olds[i] = old
		}
	}
	return nil
}

// Flush lands this rank's WRITEs to rank, in random order.
func (e *fakeEnd) Flush(ctx context.Context, rank int) error {
	if err := e.check(rank); err != nil {
		return err
	}
	e.f.mu.Lock()
	k := [2]int{e.me, rank}
	ws := e.f.writes[k]
	delete(e.f.writes, k)
	e.f.rng.Shuffle(len(ws), func(i, j int) { ws[i], ws[j] = ws[j], ws[i] })
	e.f.mu.Unlock()
	for _, w := range ws {
		copyWords(w.reg.mem[w.off:w.off+len(w.data)], w.data)
	}
	return nil
}

func (e *fakeEnd) Acquire(ctx context.Context, rank int) (int, []byte, error) {
	for {
		if err := e.check(rank); err != nil {
			return 0, nil, err
		}
		if err := ctx.Err(); err != nil {
			return 0, nil, err
		}
		e.f.mu.Lock()
		k := [2]int{e.me, rank}
		if free := e.f.free[k]; len(free) > 0 {
			c := free[len(free)-1]
			e.f.free[k] = free[:len(free)-1]
			e.f.mu.Unlock()
			return c, e.f.bufs[[3]int{e.me, rank, c}], nil
		}
		e.f.mu.Unlock()
		e.deliver(rank) // replies give credits back
	}
}

func (e *fakeEnd) Send(ctx context.Context, rank, credit, n int) error {
	if err := e.check(rank); err != nil {
		e.Release(rank, credit)
		return err
	}
	e.f.stats.messages.Add(1)
	e.f.mu.Lock()
	k := [2]int{e.me, rank}
	msg := append([]byte(nil), e.f.bufs[[3]int{e.me, rank, credit}][:n]...)
	e.f.queue[k] = append(e.f.queue[k], fakeMsg{credit, msg})
	e.f.mu.Unlock()
	return nil
}

func (e *fakeEnd) Release(rank, credit int) {
	e.f.mu.Lock()
	k := [2]int{e.me, rank}
	e.f.free[k] = append(e.f.free[k], credit)
	e.f.mu.Unlock()
}

func (e *fakeEnd) slot(rank int) int { return rank }

// deliver has rank's engine apply this rank's messages to it, in order,
// and hands their replies to this rank's client.
func (e *fakeEnd) deliver(rank int) {
	e.f.mu.Lock()
	defer e.f.mu.Unlock()
	k := [2]int{e.me, rank}
	reply := make([]byte, e.f.msgSize)
	for _, m := range e.f.queue[k] {
		out := e.f.targets[rank].Handle(m.data, reply)
		e.f.clients[e.me].OnReply(rank, m.credit, out)
		e.f.free[k] = append(e.f.free[k], m.credit)
	}
	delete(e.f.queue, k)
}

func (e *fakeEnd) FlushMessages(ctx context.Context, rank int) error {
	return e.WaitMessages(ctx, rank, func() bool { return !e.Pending(rank) })
}

func (e *fakeEnd) WaitMessages(ctx context.Context, rank int, done func() bool) error {
	for i := 0; !done(); i++ {
		if err := e.check(rank); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		e.deliver(rank)
		if i > 0 {
			time.Sleep(10 * time.Microsecond)
		}
	}
	return nil
}

func (e *fakeEnd) WaitOp(ctx context.Context, rank int, op *fallback.Op) error {
	return e.WaitMessages(ctx, rank, op.Done)
}

func (e *fakeEnd) ProgressMessages(rank int) {
	if e.check(rank) == nil {
		e.deliver(rank)
	}
}

func (e *fakeEnd) Pending(rank int) bool {
	e.f.mu.Lock()
	defer e.f.mu.Unlock()
	return len(e.f.free[[2]int{e.me, rank}]) != e.f.credits
}

func (e *fakeEnd) MsgSize() int { return e.f.msgSize }

func (e *fakeEnd) SyncEngine() {
	e.f.mu.Lock()
	//lint:ignore SA2001 taking and releasing the lock is the synchronisation
	e.f.mu.Unlock()
}

func (e *fakeEnd) PeerErr(rank int) error {
	if e.f.lost[rank].Load() {
		return ErrPeerLost
	}
	return nil
}

func (e *fakeEnd) Settled(ctx context.Context, rank int, err error) error { return err }

func (e *fakeEnd) Fenced(ctx context.Context, target, holder int) (bool, error) {
	if err := e.check(target); err != nil {
		return false, err
	}
	return e.f.lost[holder].Load(), nil
}

func (e *fakeEnd) Register(mem []byte, access verbs.Access) (registration, error) {
	if len(mem) == 0 {
		return nil, fmt.Errorf("%w: empty memory region", verbs.ErrInvalid)
	}
	e.f.mu.Lock()
	defer e.f.mu.Unlock()
	e.f.nextKey++
	reg := &fakeReg{owner: e.me, mem: mem, addr: uint64(uintptr(unsafe.Pointer(&mem[0])))}
	e.f.regs[e.f.nextKey] = reg
	return &fakeMR{f: e.f, key: e.f.nextKey, reg: reg}, nil
}

type fakeMR struct {
	f   *fakeNet
	key uint32
	reg *fakeReg
}

func (m *fakeMR) Addr() uint64 { return m.reg.addr }
func (m *fakeMR) RKey() uint32 { return m.key }
func (m *fakeMR) Close() error {
	m.f.mu.Lock()
	delete(m.f.regs, m.key)
	m.f.mu.Unlock()
	return nil
}

// fakeGather is an all-gather among n goroutines, one per rank.
type fakeGather struct {
	mu   sync.Mutex
	cond *sync.Cond
	n    int
	got  [][]byte
	in   int
	gen  int
	out  [][]byte
}

func newFakeGather(n int) *fakeGather {
	g := &fakeGather{n: n, got: make([][]byte, n)}
	g.cond = sync.NewCond(&g.mu)
	return g
}

func (g *fakeGather) of(rank int) func(context.Context, []byte) ([][]byte, error) {
	return func(ctx context.Context, mine []byte) ([][]byte, error) {
		g.mu.Lock()
		defer g.mu.Unlock()
		gen := g.gen
		g.got[rank] = append([]byte(nil), mine...)
		if g.in++; g.in == g.n {
			g.out, g.got, g.in = g.got, make([][]byte, g.n), 0
			g.gen++
			g.cond.Broadcast()
		}
		for g.gen == gen {
			g.cond.Wait()
		}
		return g.out, nil
	}
}

// fakeWindows makes a window of size bytes (displacement unit 1) on each
// of n ranks of a fakeNet, as Allocate does on a group; nic says whether
// their devices have NIC atomics. The windows are freed at the test's end.
func fakeWindows(t testing.TB, n, size int, nic bool, opts ...Option) (*fakeNet, []*Window) {
	t.Helper()
	seed := time.Now().UnixNano()
	t.Logf("fake transport seed %d", seed)
	net := newFakeNet(n, seed)
	ws, err := net.windows(context.Background(), 1, size, nic, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		each(len(ws), func(r int) error {
			if net.lost[r].Load() {
				ws[r].release()
				return nil
			}
			if err := ws[r].Free(ctx); err != nil && !errors.Is(err, ErrFreed) && !errors.Is(err, ErrPeerLost) {
				t.Errorf("rank %d: Free: %v", r, err)
			}
			return nil
		})
	})
	return net, ws
}

// windows makes window id on every rank of net.
func (net *fakeNet) windows(ctx context.Context, id uint32, size int, nic bool, opts ...Option) ([]*Window, error) {
	ws := make([]*Window, net.n)
	gather := newFakeGather(net.n)
	err := each(net.n, func(r int) error {
		mem, err := verbs.Alloc(max(size, 8))
		if err != nil {
			return err
		}
		w := &Window{f: net.end(r), rank: r, flavor: FlavorAllocate, mem: mem, size: size, dispUnit: 1, id: id,
			target: net.targets[r], client: net.clients[r]}
		if err := w.build(ctx, net.n, nic, opts, nil, gather.of(r)); err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
		ws[r] = w
		return nil
	})
	return ws, err
}

// each runs f(r) for r in [0, n) on n goroutines and joins their errors.
func each(n int, f func(r int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(r)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
