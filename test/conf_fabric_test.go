//go:build integration

package test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/internal/fabric"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/verbs"
	"github.com/onesided/rma/win"
)

func init() {
	workers["reconnect"] = workReconnect
	workers["wakeup"] = workWakeup
	workers["replywake"] = workReplyWake
	workers["words"] = workWords
}

// stacks prints every goroutine's stack: what a stalled call waits for.
func stacks() {
	buf := make([]byte, 1<<20)
	fmt.Printf("goroutines:\n%s\n", buf[:runtime.Stack(buf, true)])
}

// exposed is memory of each rank registered through the fabric, with its
// address and key known to every rank: what the fabric-level calls use.
type exposed struct {
	mem  []byte
	mr   *verbs.MR
	addr []uint64
	rkey []uint32
}

const (
	exposedPattern = 256  // bytes [0, 256): byte(7*i + rank)
	exposedWords   = 1024 // 8-byte words for NIC atomics, one per writer
)

// wordStart is the value rank's word for writer starts at.
func wordStart(rank, writer int) uint64 { return uint64(1000*(rank+1) + 100*writer) }

func expose(ctx context.Context, g *group.Group) (*exposed, error) {
	e := &exposed{}
	var err error
	if e.mem, err = verbs.Alloc(4096); err != nil {
		return nil, err
	}
	for i := 0; i < exposedPattern; i++ {
		e.mem[i] = byte(7*i + g.Rank())
	}
	for w := 0; w < g.Size(); w++ {
		binary.NativeEndian.PutUint64(e.mem[exposedWords+8*w:], wordStart(g.Rank(), w))
	}
	if e.mr, err = fabric.OfGroup(g).Register(e.mem, verbs.AccessRemoteRead|verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic); err != nil {
		verbs.Free(e.mem)
		return nil, err
	}
	mine := binary.LittleEndian.AppendUint64(nil, e.mr.Addr())
	mine = binary.LittleEndian.AppendUint32(mine, e.mr.RKey())
	all, err := g.AllGather(ctx, mine)
	if err != nil {
		e.close()
		return nil, err
	}
	for _, b := range all {
		e.addr = append(e.addr, binary.LittleEndian.Uint64(b))
		e.rkey = append(e.rkey, binary.LittleEndian.Uint32(b[8:]))
	}
	return e, nil
}

func (e *exposed) close() {
	e.mr.Close()
	verbs.Free(e.mem)
}

// exposedBytes is rank's exposed pattern.
func exposedBytes(rank, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(7*i + rank)
	}
	return b
}

// badKey is a key rank's memory does not answer to: the key of its region
// with the low (key) byte changed, then one no region of a fresh process
// has.
func (e *exposed) badKey(rank, i int) uint32 {
	if i%2 == 0 {
		return e.rkey[rank] ^ 0x5a
	}
	return 0xdeadbe00 | uint32(i&0xff)
}

// checkTarget checks, with exact values, that window calls from this rank
// to t work: a Put read back by a Get, a NIC FetchAndOp on an int64 whose
// only writer is this rank, and an Accumulate with PROD on an int32 (the
// target engine's path) read back by a Get. Each writer has its own 32
// bytes of every window: [32*rank, 32*rank+32).
func checkTarget(ctx context.Context, w *win.Window, me, t, round int, adds []int64) error {
	base := 32 * me
	v := uint64(round)*1000 + uint64(me)*100 + uint64(t)
	if err := w.Put(ctx, u64(v), t, base); err != nil {
		return fmt.Errorf("round %d: put to rank %d: %w", round, t, err)
	}
	if err := w.Flush(ctx, t); err != nil {
		return fmt.Errorf("round %d: flush of the put to rank %d: %w", round, t, err)
	}
	var b [8]byte
	if err := w.Get(ctx, b[:], t, base); err != nil {
		return fmt.Errorf("round %d: get from rank %d: %w", round, t, err)
	}
	if got := binary.NativeEndian.Uint64(b[:]); got != v {
		return fmt.Errorf("round %d: get from rank %d read %d, want the %d put", round, t, got, v)
	}
	old, err := win.FetchAndOp(ctx, w, int64(1), t, base+16, op.Sum)
	if err != nil {
		return fmt.Errorf("round %d: fetch-and-op to rank %d: %w", round, t, err)
	}
	if old != adds[t] {
		return fmt.Errorf("round %d: fetch-and-op to rank %d returned %d, want %d", round, t, old, adds[t])
	}
	adds[t]++
	three := binary.NativeEndian.AppendUint32(nil, 3)
	if err := w.Put(ctx, three, t, base+8); err != nil {
		return err
	}
	if err := w.Flush(ctx, t); err != nil {
		return err
	}
	five := binary.NativeEndian.AppendUint32(nil, uint32(5+round))
	if err := w.Accumulate(ctx, five, datatype.Int32, t, base+8, op.Prod); err != nil {
		return fmt.Errorf("round %d: accumulate PROD to rank %d: %w", round, t, err)
	}
	if err := w.Flush(ctx, t); err != nil {
		return fmt.Errorf("round %d: flush of the accumulate to rank %d: %w", round, t, err)
	}
	if err := w.Get(ctx, b[:4], t, base+8); err != nil {
		return err
	}
	if got, want := int32(binary.NativeEndian.Uint32(b[:4])), int32(3*(5+round)); got != want {
		return fmt.Errorf("round %d: int32 3 PROD %d at rank %d gave %d, want %d", round, 5+round, t, got, want)
	}
	return nil
}

// badRead reads from rank with a key it does not answer to: the call must
// fail with ErrRemoteAccess.
func badRead(ctx context.Context, g *group.Group, e *exposed, rank, i, n int) error {
	dst := make([]byte, n)
	err := fabric.OfGroup(g).Read(ctx, rank, dst, e.addr[rank], e.badKey(rank, i))
	if !errors.Is(err, verbs.ErrRemoteAccess) {
		return fmt.Errorf("read of %d bytes from rank %d with a bad key (%#x): %v, want ErrRemoteAccess", n, rank, e.badKey(rank, i), err)
	}
	if errors.Is(err, verbs.ErrPeerLost) {
		return fmt.Errorf("read with a bad key from rank %d: %v: the peer is reported lost", rank, err)
	}
	return nil
}

// goodFabric reads rank's pattern through the fabric, small and staged,
// and checks it.
func goodFabric(ctx context.Context, g *group.Group, e *exposed, rank int) error {
	f := fabric.OfGroup(g)
	want := exposedBytes(rank, exposedPattern)
	dst := make([]byte, exposedPattern)
	if err := f.Read(ctx, rank, dst, e.addr[rank], e.rkey[rank]); err != nil {
		return fmt.Errorf("read of %d bytes from rank %d: %w", len(dst), rank, err)
	}
	if !bytes.Equal(dst, want) {
		return fmt.Errorf("read from rank %d: %x, want %x", rank, dst, want)
	}
	if err := f.Read(ctx, rank, dst[:5], e.addr[rank]+3, e.rkey[rank]); err != nil {
		return fmt.Errorf("read of 5 bytes from rank %d: %w", rank, err)
	}
	if !bytes.Equal(dst[:5], want[3:8]) {
		return fmt.Errorf("5-byte read from rank %d: %x, want %x", rank, dst[:5], want[3:8])
	}
	return nil
}

// workReconnect (2 ranks): a remote error (a bad key, a misaligned NIC
// atomic) to a peer or to the rank itself fails only that call; the next
// calls to the same rank work and give exact values, from both sides, and
// while many goroutines call into the fabric as both ranks keep faulting.
func workReconnect(ctx context.Context, g *group.Group) error {
	me, peer := g.Rank(), 1-g.Rank()
	f := fabric.OfGroup(g)
	e, err := expose(ctx, g)
	if err != nil {
		return err
	}
	defer e.close()
	w, err := win.Allocate(ctx, g, 136, 1)
	if err != nil {
		return err
	}
	// Bytes [64, 128) of every window: a constant, read by the concurrent phase;
	// [128, 136): the int64 its NIC FetchAndOps add to.
	for i := 64; i < 128; i++ {
		w.Bytes()[i] = byte(3*i + me)
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	adds := make([]int64, 2)                              // this rank's FetchAndOp increments, per target
	words := []uint64{wordStart(0, me), wordStart(1, me)} // this rank's words at each rank
	round := 0
	check := func(targets ...int) error {
		for _, t := range targets {
			if err := checkTarget(ctx, w, me, t, round, adds); err != nil {
				return err
			}
			if err := goodFabric(ctx, g, e, t); err != nil {
				return fmt.Errorf("round %d: %w", round, err)
			}
		}
		round++
		return nil
	}
	if err := check(0, 1); err != nil {
		return fmt.Errorf("before any fault: %w", err)
	}

	// Phase 1: each rank in turn faults, to the peer and to itself, while
	// the other waits; after each fault the faulting rank's calls work.
	for active := 0; active < 2; active++ {
		if err := g.Barrier(ctx); err != nil {
			return err
		}
		if me == active {
			for i := 0; i < 3; i++ {
				for _, t := range []int{peer, me} {
					start := time.Now()
					if err := badRead(ctx, g, e, t, i, 8<<(4*i)); err != nil {
						return err
					}
					if err := check(t); err != nil {
						return fmt.Errorf("after a bad key to rank %d: %w", t, err)
					}
					fmt.Printf("fault %d to rank %d: failed, then calls worked again in %v\n", i, t, time.Since(start).Round(time.Millisecond))
				}
			}
			// A misaligned NIC atomic: an error; then aligned ones work.
			for _, t := range []int{peer, me} {
				word := e.addr[t] + exposedWords + 8*uint64(me)
				_, err := f.FetchAdd(ctx, t, word+1, e.rkey[t], 1)
				// Refused when posted (ErrInvalid: Soft-RoCE checks), or by
				// the responder (ErrRemoteOp: an invalid request).
				if !errors.Is(err, verbs.ErrInvalid) && !errors.Is(err, verbs.ErrRemoteOp) {
					return fmt.Errorf("fetch-add at an odd address of rank %d: %v, want ErrInvalid or ErrRemoteOp", t, err)
				}
				fmt.Printf("misaligned fetch-add to rank %d: %v\n", t, err)
				for k := 0; k < 3; k++ {
					old, err := f.FetchAdd(ctx, t, word, e.rkey[t], 1)
					if err != nil {
						return fmt.Errorf("fetch-add to rank %d after a misaligned one: %w", t, err)
					}
					if old != words[t] {
						return fmt.Errorf("fetch-add to rank %d after a misaligned one returned %d, want %d", t, old, words[t])
					}
					words[t]++
				}
				if err := check(t); err != nil {
					return fmt.Errorf("after a misaligned fetch-add to rank %d: %w", t, err)
				}
			}
		}
		if err := g.Barrier(ctx); err != nil {
			return err
		}
		// Both ranks' calls to everyone work.
		if err := check(peer, me); err != nil {
			return fmt.Errorf("after rank %d's faults: %w", active, err)
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}

	// Phase 2: both ranks fault repeatedly while 6 goroutines each call
	// into the fabric and the window. A READ caught by a fault is posted
	// again on the re-established connection and succeeds, and so does an
	// engine call (its request is sent again); a NIC atomic so caught fails
	// with an error matching ErrFlushed and ErrOutcomeUnknown; none hangs,
	// none reports the peer lost, and what succeeds reads exact values. A
	// NIC FetchAndOp so cut short may have been applied, never twice: each
	// counter ends between the successful adds to it and those plus the
	// unknown ones.
	const workers, duration = 6, 3 * time.Second
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		first  error
		calls  atomic.Int64
		failed atomic.Int64
		faults atomic.Int64
		// added and unknown: this rank's NIC FetchAndOps per target that
		// succeeded, and that failed with ErrOutcomeUnknown.
		added, unknown [2]atomic.Int64
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
	}
	stop := time.Now().Add(duration)
	constant := func(rank int) []byte {
		b := make([]byte, 8)
		for i := range b {
			b[i] = byte(3*(64+i) + rank)
		}
		return b
	}
	// tolerate: a NIC atomic cut short by a fault.
	tolerate := func(what string, err error, nic bool) bool {
		if err == nil {
			return false
		}
		if !nic {
			fail(fmt.Errorf("%s: %v, want success (a READ or an active message cut short is sent again)", what, err))
			return true
		}
		if errors.Is(err, verbs.ErrFlushed) && errors.Is(err, win.ErrOutcomeUnknown) && !errors.Is(err, verbs.ErrPeerLost) {
			failed.Add(1)
			return true
		}
		fail(fmt.Errorf("%s: %v, want success or an error matching ErrFlushed and ErrOutcomeUnknown", what, err))
		return true
	}
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; time.Now().Before(stop); k++ {
				t := (me + i + k) % 2
				cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				var err error
				var what string
				switch (i + k) % 5 {
				case 0:
					what = "fabric read"
					dst := make([]byte, exposedPattern)
					if err = f.Read(cctx, t, dst, e.addr[t], e.rkey[t]); err == nil && !bytes.Equal(dst, exposedBytes(t, exposedPattern)) {
						fail(fmt.Errorf("fabric read from rank %d: %x", t, dst))
					}
				case 1:
					what = "window get"
					var b [8]byte
					if err = w.Get(cctx, b[:], t, 64); err == nil && !bytes.Equal(b[:], constant(t)) {
						fail(fmt.Errorf("get from rank %d: %x, want %x", t, b, constant(t)))
					}
				case 2:
					what = "fetch-and-op NO_OP int32 (engine)"
					var v int32
					v, err = win.FetchAndOp(cctx, w, int32(0), t, 64, op.NoOp)
					if want := int32(binary.NativeEndian.Uint32(constant(t))); err == nil && v != want {
						fail(fmt.Errorf("fetch-and-op NO_OP at rank %d: %d, want %d", t, v, want))
					}
				case 4:
					what = "fetch-and-op SUM int64 (NIC)"
					if _, err = win.FetchAndOp(cctx, w, int64(1), t, 128, op.Sum); err == nil {
						added[t].Add(1)
					} else if errors.Is(err, win.ErrOutcomeUnknown) {
						unknown[t].Add(1)
					}
				case 3:
					what = "fabric read8"
					var v uint64
					v, err = f.Read8(cctx, t, e.addr[t], e.rkey[t])
					if want := binary.NativeEndian.Uint64(exposedBytes(t, 8)); err == nil && v != want {
						fail(fmt.Errorf("read8 from rank %d: %#x, want %#x", t, v, want))
					}
				}
				if cctx.Err() != nil {
					fail(fmt.Errorf("%s to rank %d did not return within 20 s", what, t))
					stacks()
				}
				cancel()
				calls.Add(1)
				tolerate(fmt.Sprintf("%s to rank %d", what, t), err, (i+k)%5 == 4)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; time.Now().Before(stop); i++ {
			t := (me + i) % 2
			cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			err := fabric.OfGroup(g).Read(cctx, t, make([]byte, 16), e.addr[t], e.badKey(t, i))
			cancel()
			// A bad read may itself be flushed by the other rank's fault.
			if !errors.Is(err, verbs.ErrRemoteAccess) && !errors.Is(err, verbs.ErrFlushed) {
				fail(fmt.Errorf("bad read %d to rank %d: %v, want ErrRemoteAccess", i, t, err))
			}
			faults.Add(1)
			time.Sleep(time.Duration(20+me*7) * time.Millisecond)
		}
	}()
	wg.Wait()
	if first != nil {
		return first
	}
	fmt.Printf("concurrent: %d calls, %d cut short by %d faults\n", calls.Load(), failed.Load(), faults.Load())
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	var mine []byte // this rank's adds and unknowns to rank 0, then to rank 1
	for t := range 2 {
		mine = binary.LittleEndian.AppendUint64(mine, uint64(added[t].Load()))
		mine = binary.LittleEndian.AppendUint64(mine, uint64(unknown[t].Load()))
	}
	all, err := g.AllGather(ctx, mine)
	if err != nil {
		return err
	}
	var lo, hi uint64
	for _, b := range all {
		a, u := binary.LittleEndian.Uint64(b[16*me:]), binary.LittleEndian.Uint64(b[16*me+8:])
		lo, hi = lo+a, hi+a+u
	}
	got := binary.NativeEndian.Uint64(w.Bytes()[128:])
	fmt.Printf("NIC counter at rank %d: %d, from %d adds that succeeded and %d of unknown outcome\n", me, got, lo, hi-lo)
	if got < lo || got > hi {
		return fmt.Errorf("NIC counter at rank %d: %d, want between %d and %d", me, got, lo, hi)
	}
	if err := check(peer, me); err != nil {
		return fmt.Errorf("after the concurrent faults: %w", err)
	}
	for t := 0; t < 2; t++ {
		if err := f.PeerErr(t); err != nil {
			return fmt.Errorf("rank %d reported lost: %w", t, err)
		}
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	fmt.Println("reconnect=ok")
	return w.Free(ctx)
}

func TestReconnectAfterRemoteError(t *testing.T) {
	l := newLaunch(t, "reconnect", 2)
	outs := l.run(3 * time.Minute)
	for r, out := range outs {
		if v := value(t, out, "reconnect"); v != "ok" {
			t.Errorf("rank %d: reconnect=%s", r, v)
		}
	}
}

// Stress of the progress engine with a handful of work-request slots and
// staging chunks: many goroutines per rank take them in turn, so waiters
// for a slot or a chunk often sleep on the completion channel when the one
// they wait for is freed by another waiter (no completion event), and the
// target engine's replies compete for the same slots. A poller that is not
// woken then stalls its rank (its engine too, so the other rank's
// accumulates to it): a call's timeout ends the test, or the engine's
// bounded wait for a slot fails an accumulate.
const (
	wakeLocalRounds = 50
	wakeRounds      = 100
	wakeWorkers     = 12
	wakeBig         = 3*64<<10 + 1000 // four staging chunks
	wakeBase        = 4096            // the pattern read by the gets
)

func wakePattern(rank, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(13*i + 5*rank + i>>10)
	}
	return b
}

// workWakeup (2 ranks, RMA_SLOTS=2, RMA_CHUNKS=2): rounds of wakeWorkers
// goroutines reading and adding to the rank's own window; then rounds of
// goroutines doing accumulates through the engine (to the rank itself and
// to the peer), small and large gets and puts, each bounded by a timeout;
// then every count and byte is checked exactly.
func workWakeup(ctx context.Context, g *group.Group) error {
	me, size := g.Rank(), g.Size()
	w, err := win.Allocate(ctx, g, wakeBase+wakeBig, 1)
	if err != nil {
		return err
	}
	copy(w.Bytes()[wakeBase:], wakePattern(me, wakeBig))
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	one := binary.NativeEndian.AppendUint64(nil, math.Float64bits(1))
	var (
		mu    sync.Mutex
		first error
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
			stacks()
		}
		mu.Unlock()
	}
	start := time.Now()
	// Phase 1: each rank alone (no traffic between the ranks, so no
	// completion event comes from anywhere else): rounds of workers that
	// each read a word of the rank's own window, or add to one with a NIC
	// atomic, through the loopback pair. The last of a round to wait for a
	// slot may be the one polling for everyone, asleep on the channel when
	// the slot it wants is freed by a worker that then finishes.
	// One thread runs Go code meanwhile: the poller then spins until it
	// sleeps before the worker whose completion it handed over can run
	// and free its slot.
	procs := runtime.GOMAXPROCS(1)
	var adds atomic.Int64
	for round := 0; round < wakeLocalRounds && first == nil; round++ {
		var wg sync.WaitGroup
		for i := 0; i < wakeWorkers; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				var err error
				if i%3 == 0 {
					_, err = win.FetchAndOp(cctx, w, int64(1), me, 8, op.Sum)
					adds.Add(1)
				} else {
					var b [8]byte
					if err = w.Get(cctx, b[:], me, wakeBase+8*i); err == nil && !bytes.Equal(b[:], wakePattern(me, wakeBig)[8*i:8*i+8]) {
						err = fmt.Errorf("got %x", b)
					}
				}
				if err != nil {
					fail(fmt.Errorf("local round %d, worker %d: %w", round, i, err))
				}
			}()
		}
		wg.Wait()
	}
	runtime.GOMAXPROCS(procs)
	if first != nil {
		return first
	}
	if got := int64(binary.NativeEndian.Uint64(w.Bytes()[8:])); got != adds.Load() {
		return fmt.Errorf("local fetch-and-ops: the word holds %d, want %d", got, adds.Load())
	}
	fmt.Printf("local rounds: %v\n", time.Since(start).Round(time.Millisecond))
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	// Phase 2: both ranks, through the engine too.
	for round := 0; round < wakeRounds && first == nil; round++ {
		var wg sync.WaitGroup
		for i := 0; i < wakeWorkers; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				defer cancel()
				t := (me + i/4) % size
				var err error
				switch i % 4 {
				case 0: // through the target's engine, then wait for its reply
					if err = w.Accumulate(cctx, one, datatype.Float64, t, 0, op.Sum); err == nil {
						err = w.Flush(cctx, t)
					}
				case 1:
					var b [8]byte
					if err = w.Get(cctx, b[:], t, wakeBase+8*i); err == nil && !bytes.Equal(b[:], wakePattern(t, wakeBig)[8*i:8*i+8]) {
						err = fmt.Errorf("got %x", b)
					}
				case 2:
					b := make([]byte, wakeBig)
					if err = w.Get(cctx, b, t, wakeBase); err == nil && !bytes.Equal(b, wakePattern(t, wakeBig)) {
						err = errors.New("large get: wrong bytes")
					}
				case 3: // this worker's own word at the target
					err = w.Put(cctx, u64(uint64(round*100+me*10+i)), t, 64+8*(i+wakeWorkers*me))
				}
				if err != nil {
					fail(fmt.Errorf("round %d, worker %d (kind %d) to rank %d: %w", round, i, i%4, t, err))
				}
			}()
		}
		wg.Wait()
	}
	if first != nil {
		return first
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	// Workers 0, 4 and 8 of every rank r sent one accumulate a round, to
	// rank r, r+1 and r+2.
	senders := 0
	for r := 0; r < size; r++ {
		for i := 0; i < wakeWorkers; i += 4 {
			if (r+i/4)%size == me {
				senders++
			}
		}
	}
	sum := math.Float64frombits(binary.NativeEndian.Uint64(w.Bytes()))
	if want := float64(wakeRounds * senders); sum != want {
		return fmt.Errorf("accumulated %v, want %v", sum, want)
	}
	for r := 0; r < size; r++ {
		for _, i := range []int{3, 7, 11} {
			if (r+i/4)%size != me {
				continue
			}
			off := 64 + 8*(i+wakeWorkers*r)
			want := uint64((wakeRounds-1)*100 + r*10 + i)
			if got := binary.NativeEndian.Uint64(w.Bytes()[off:]); got != want {
				return fmt.Errorf("rank %d worker %d's word: %d, want %d", r, i, got, want)
			}
		}
	}
	fmt.Printf("wakeup=ok in %v\n", time.Since(start).Round(time.Millisecond))
	return w.Free(ctx)
}

func TestProgressWakeup(t *testing.T) {
	// With two slots, a reply may wait long for one when the host is
	// loaded (the race detector, other guests): the engine gives up on a
	// peer after the peer timeout, so it is raised from 1s. A lost wake-up
	// still fails the test (each call is bounded by 20s).
	l := newLaunch(t, "wakeup", 2, "RMA_SLOTS=2", "RMA_CHUNKS=2", "RMA_SPIN=1us", "RMA_PEER_TIMEOUT=5s")
	outs := l.run(5 * time.Minute) // about 100 s under the race detector on a busy host
	for r, out := range outs {
		if v := value(t, out, "wakeup"); len(v) < 2 || v[:2] != "ok" {
			t.Errorf("rank %d: wakeup=%s", r, v)
		}
	}
}

const (
	replyWakeCalls = 100
	replyWakeElems = 4096 // 32 KiB a call each way: a reply that takes a while
)

// workReplyWake (2 ranks, RMA_REPLY_SPIN=1us, RMA_ENGINE_SPIN=1us): rank 1
// calls GetAccumulate(SUM) of replyWakeElems float64s (the engine's, not
// the NIC's) on rank 0 every 2 ms, so
// that each request finds rank 0's engine asleep (woken only by a
// solicited completion: a request) and each call sleeps before its reply
// comes (its own engine, asleep too, must be woken by the reply). Every
// old value of call i must be i; it prints how the reply waits ended.
func workReplyWake(ctx context.Context, g *group.Group) error {
	w, err := win.Allocate(ctx, g, 8*replyWakeElems, 1)
	if err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if g.Rank() == 1 {
		if err := w.Lock(ctx, win.LockShared, 0, 0); err != nil {
			return err
		}
		ones := make([]byte, 8*replyWakeElems)
		for k := 0; k < replyWakeElems; k++ {
			binary.NativeEndian.PutUint64(ones[8*k:], math.Float64bits(1))
		}
		old := make([]byte, 8*replyWakeElems)
		for i := 0; i < replyWakeCalls; i++ {
			time.Sleep(2 * time.Millisecond)
			cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			err := w.GetAccumulate(cctx, ones, old, datatype.Float64, 0, 0, op.Sum)
			cancel()
			if err != nil {
				return fmt.Errorf("call %d: %w", i, err)
			}
			for k := 0; k < replyWakeElems; k++ {
				if got := math.Float64frombits(binary.NativeEndian.Uint64(old[8*k:])); got != float64(i) {
					return fmt.Errorf("call %d: old value of element %d: %v, want %d", i, k, got, i)
				}
			}
		}
		if err := w.Unlock(ctx, 0); err != nil {
			return err
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if g.Rank() == 0 {
		for k := 0; k < replyWakeElems; k++ {
			if got := math.Float64frombits(binary.NativeEndian.Uint64(w.Bytes()[8*k:])); got != replyWakeCalls {
				return fmt.Errorf("rank 0's element %d: %v, want %d", k, got, replyWakeCalls)
			}
		}
	}
	slept, woken := fabric.OfGroup(g).ReplyWaits()
	fmt.Printf("replywake=ok slept=%d woken=%d\n", slept, woken)
	return w.Free(ctx)
}

// TestReplyWake: requests wake an idle engine (they are sent solicited,
// and the engine arms its CQ for solicited completions), and a caller that
// sleeps waiting for a reply is woken by it through its own engine rather
// than by the 1 ms re-check: at least a quarter of the sleeps must end so.
// A reply that wakes nobody leaves none; a working one most, but on an
// emulated CPU the reply of a sleep that began late often comes after the
// re-check (60 of 132 in one run, 36 of 74 in another). A request that
// failed to wake the target would fail its call (20 s bound).
func TestReplyWake(t *testing.T) {
	l := newLaunch(t, "replywake", 2, "RMA_REPLY_SPIN=1us", "RMA_ENGINE_SPIN=1us")
	outs := l.run(2 * time.Minute)
	for r, out := range outs {
		if v := value(t, out, "replywake"); !strings.HasPrefix(v, "ok") {
			t.Errorf("rank %d: replywake=%s", r, v)
		}
	}
	var slept, woken int
	if _, err := fmt.Sscanf(value(t, outs[1], "replywake"), "ok slept=%d woken=%d", &slept, &woken); err != nil {
		t.Fatalf("rank 1's counts: %v", err)
	}
	t.Logf("rank 1: %d calls, %d reply waits slept, %d of them woken by their reply", replyWakeCalls, slept, woken)
	if slept < replyWakeCalls/4 {
		t.Errorf("only %d of %d calls slept waiting for their reply: the test did not reach the path it checks (RMA_REPLY_SPIN=1us)", slept, replyWakeCalls)
	}
	if woken < slept/4 {
		t.Errorf("%d of %d sleeps ended by their reply, want at least a quarter: the reply did not wake the caller's engine", woken, slept)
	}
}

const (
	wordsN    = 1000 // 64-bit words each rank updates in its peer's window
	wordsBase = 1000 // the peer's word i starts at wordsBase*(rank+1) + i
)

// workWords (2 ranks, RMA_SLOTS=4: fewer slots than a call keeps in
// flight): multi-element accumulates on 64-bit integers, which go to the
// NIC one word each, several in flight. Each rank, on its peer's words:
// Accumulate(SUM) of i+1 to word i; GetAccumulate(SUM) of 1 through a
// strided target type (every third word, pairs); GetAccumulate(NO_OP) of
// every word; then an Accumulate(SUM) whose context ends at once (it may
// fail part way: every word must then hold its old value or its new one)
// and a GetAccumulate(NO_OP) after it. Every value is checked exactly.
func workWords(ctx context.Context, g *group.Group) error {
	me := g.Rank()
	peer := 1 - me
	w, err := win.Allocate(ctx, g, 8*wordsN, 8)
	if err != nil {
		return err
	}
	if r := w.Route(op.Sum, datatype.Int64); r != atomics.NICFetchAdd {
		return fmt.Errorf("route of SUM on int64: %v, want %v", r, atomics.NICFetchAdd)
	}
	words := make([]int64, wordsN)
	for i := range words {
		words[i] = int64(wordsBase*(me+1) + i)
	}
	copy(w.Bytes(), datatype.AsBytes(words))
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	start := func(i int) int64 { return int64(wordsBase*(peer+1) + i) }
	want := make([]int64, wordsN)
	adds := make([]int64, wordsN)
	for i := range adds {
		adds[i] = int64(i + 1)
		want[i] = start(i) + adds[i]
	}
	if err := w.Accumulate(ctx, datatype.AsBytes(adds), datatype.Int64, peer, 0, op.Sum); err != nil {
		return fmt.Errorf("accumulate: %w", err)
	}
	// Pairs of words 0-1, 3-4, 6-7, ...: a vector of blocks of 2, stride 3.
	pairs := wordsN / 3
	vec, err := datatype.Vector(pairs, 2, 3, datatype.Int64.Type())
	if err != nil {
		return err
	}
	ones := make([]int64, 2*pairs)
	for i := range ones {
		ones[i] = 1
	}
	olds := make([]int64, 2*pairs)
	if err := w.GetAccumulateTo(ctx, win.Contiguous(datatype.AsBytes(ones), datatype.Int64),
		win.Contiguous(datatype.AsBytes(olds), datatype.Int64),
		win.Region{Rank: peer, Disp: 0, Type: vec, Count: 1}, op.Sum); err != nil {
		return fmt.Errorf("strided get-accumulate: %w", err)
	}
	for k := range olds {
		i := 3*(k/2) + k%2
		if olds[k] != want[i] {
			return fmt.Errorf("strided get-accumulate: old value of word %d: %d, want %d", i, olds[k], want[i])
		}
		want[i]++
	}
	got := make([]int64, wordsN)
	if err := w.GetAccumulate(ctx, nil, datatype.AsBytes(got), datatype.Int64, peer, 0, op.NoOp); err != nil {
		return fmt.Errorf("get-accumulate NO_OP: %w", err)
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("word %d: %d, want %d", i, got[i], want[i])
		}
	}
	// A call cut short (a thousand words take about 20 ms on one host):
	// each word is updated whole or not at all.
	cctx, cancel := context.WithTimeout(ctx, 3*time.Millisecond)
	cerr := w.Accumulate(cctx, datatype.AsBytes(adds), datatype.Int64, peer, 0, op.Sum)
	cancel()
	if cerr != nil && !errors.Is(cerr, context.DeadlineExceeded) {
		return fmt.Errorf("accumulate with an ended context: %v, want nil or %v", cerr, context.DeadlineExceeded)
	}
	if err := w.GetAccumulate(ctx, nil, datatype.AsBytes(got), datatype.Int64, peer, 0, op.NoOp); err != nil {
		return fmt.Errorf("get-accumulate NO_OP after the cut call: %w", err)
	}
	applied := 0
	for i := range got {
		switch got[i] {
		case want[i]:
		case want[i] + adds[i]:
			applied++
		default:
			return fmt.Errorf("after the cut call, word %d: %d, want %d or %d", i, got[i], want[i], want[i]+adds[i])
		}
	}
	if cerr == nil && applied != wordsN {
		return fmt.Errorf("the cut call succeeded but %d of %d words were updated", applied, wordsN)
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	fmt.Printf("words=ok cut call: %v, %d of %d words updated\n", cerr, applied, wordsN)
	return w.Free(ctx)
}

// TestNICWords: accumulate-family calls of many 64-bit integers, each word
// a NIC atomic with several in flight, with fewer slots than that.
func TestNICWords(t *testing.T) {
	l := newLaunch(t, "words", 2, "RMA_SLOTS=4")
	for r, out := range l.run(2 * time.Minute) {
		if v := value(t, out, "words"); !strings.HasPrefix(v, "ok") {
			t.Errorf("rank %d: words=%s", r, v)
		}
	}
}
