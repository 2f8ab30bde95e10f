package fabric

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/onesided/rma/verbs"
)

// Request-based reads: an RDMA READ that is started by one call and
// completed later by whoever makes progress on it (its owner's Test or
// Wait, a flush, the end of an epoch), with no goroutine of its own.
//
// A read is cut into pieces: up to slotScratch bytes land in the slot's own
// scratch area, larger ones in a staging chunk. A piece holds its slot (and
// chunk) from its post until it is harvested: its bytes copied into the
// destination by a goroutine that holds the read's lock. So that pieces
// left unharvested (a request nobody waits on yet) cannot starve the
// blocking calls, request reads together hold at most half of the fabric's
// slots and half of its chunks: the Reads record of the fabric counts them,
// and a read that finds the budget spent harvests the others' finished
// pieces before it waits. At most readRing pieces of one read are in flight;
// the rest are posted as earlier ones are harvested.

// readRing is the number of pieces of one read in flight at once.
const readRing = 8

// Read states.
const (
	readActive uint32 = iota
	readDone
	readAbandoned
)

// Reads is a fabric's record of its request-based reads that hold slots or
// chunks, shared by every window of the fabric (Fabric.Reads).
type Reads struct {
	f *Fabric

	mu        sync.Mutex
	head      *ReadOp // reads holding pieces, a list
	slots     int     // slots held by them
	chunks    int     // chunks held by them
	maxSlots  int
	maxChunks int
}

// Reads returns the fabric's record of request-based reads.
func (f *Fabric) Reads() *Reads { return &f.reads }

// ReadOp is one request-based read. Its zero value is ready for
// Reads.Start; it must not be copied or reused once started. Its methods
// are safe for concurrent use: a flush and the owner's Wait may drive one
// read at the same time.
type ReadOp struct {
	mu     sync.Mutex
	rs     *Reads
	rank   int
	rkey   uint32
	dst    []byte
	segs   []Segment
	one    [1]Segment // segs of a single-range read
	seg    int        // next segment to post
	segOff int        // bytes of segs[seg] posted
	got    int        // bytes of dst harvested
	ring   [readRing]readPiece
	head   int // ring[head%readRing] is the oldest piece in flight
	tail   int
	err    error
	listed bool // in rs's list (under rs.mu)
	prev   *ReadOp
	next   *ReadOp

	// headID is the slot of the oldest piece in flight, -1 if none: what
	// a waiter watches without the lock.
	headID atomic.Int64
	state  atomic.Uint32
}

type readPiece struct {
	id    uint32
	n     int32
	chunk bool // staged in a chunk (else in the slot's scratch)
}

// tryCtx is an ended context: acquireSlot and acquireChunk given it take a
// free resource if there is one and never wait.
var tryCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// Start starts reading len(dst) bytes at raddr of rank's memory into dst.
// It posts what the budget and the free resources allow, without waiting;
// Test or Complete post the rest. dst must not be touched until the read
// is done (Test true or Complete nil), and is not written once Abandon
// returned.
func (rs *Reads) Start(op *ReadOp, rank int, dst []byte, raddr uint64, rkey uint32) {
	op.one[0] = Segment{Addr: raddr, Len: len(dst)}
	rs.StartV(op, rank, rkey, dst, op.one[:])
}

// StartV is Start for a list of remote segments read one after the other
// into dst, whose length must be their total. segs is kept until the read
// is done.
func (rs *Reads) StartV(op *ReadOp, rank int, rkey uint32, dst []byte, segs []Segment) {
	op.rs, op.rank, op.rkey, op.dst, op.segs = rs, rank, rkey, dst, segs
	op.headID.Store(-1)
	op.mu.Lock()
	defer op.mu.Unlock()
	if err := rs.f.enter(); err != nil {
		op.fail(err)
		op.settleLocked()
		return
	}
	defer rs.f.exit()
	total := 0
	for _, s := range segs {
		if s.Len < 0 {
			total = -1
			break
		}
		total += s.Len
	}
	switch {
	case total != len(dst):
		op.fail(fmt.Errorf("fabric: read of %d bytes into a %d-byte buffer", total, len(dst)))
	case rank < 0 || rank >= len(rs.f.peers):
		op.fail(fmt.Errorf("fabric: read from rank %d of %d", rank, len(rs.f.peers)))
	default:
		op.postLocked()
	}
	op.settleLocked()
}

// Finish completes, with err, a read that was not started: one that a
// transport other than the fabric did itself (a unit test's fake).
func (op *ReadOp) Finish(err error) {
	op.err = err
	op.state.Store(readDone)
}

// Done reports whether the read has completed, failed or been abandoned.
func (op *ReadOp) Done() bool { return op.state.Load() != readActive }

// Err is the read's error once Done: nil when dst holds the data, or
// when the read was abandoned.
func (op *ReadOp) Err() error {
	if !op.Done() {
		return nil
	}
	return op.err // written before the state changed
}

// Test makes progress on the read without waiting and reports whether it
// is done.
func (op *ReadOp) Test() bool {
	if op.Done() {
		return true
	}
	f := op.rs.f
	if err := f.enter(); err != nil {
		op.failClosed(err)
		return true
	}
	defer f.exit()
	f.Progress()
	op.mu.Lock()
	op.harvestLocked()
	op.postLocked()
	op.settleLocked()
	op.mu.Unlock()
	return op.Done()
}

// Complete drives the read until it is done and returns nil (Err then
// says whether it failed), or until ctx ends and returns its error; the
// read then goes on (Abandon stops it). If the fabric is closed meanwhile,
// the read fails with errClosed, which Complete returns when it was
// waiting for a piece in flight (and otherwise Err does).
func (op *ReadOp) Complete(ctx context.Context) error {
	if op.Done() {
		return nil
	}
	f := op.rs.f
	if err := f.enter(); err != nil {
		op.failClosed(err)
		return err
	}
	defer f.exit()
	headReady := func() bool {
		id := op.headID.Load()
		return id < 0 || op.state.Load() != readActive || f.slots[id].state.Load() != slotBusy
	}
	for i := 0; ; {
		if op.Done() {
			return nil
		}
		op.mu.Lock()
		op.harvestLocked()
		op.postLocked()
		op.settleLocked()
		inflight := op.tail > op.head
		op.mu.Unlock()
		switch {
		case op.Done():
			return nil
		case inflight:
			// The oldest piece's completion comes on the CQ, which
			// progressUntil polls and sleeps on.
			i = 0
			if err := f.progressUntil(ctx, headReady, nil); err != nil {
				if err == errClosed {
					op.failClosed(err)
				}
				return err
			}
		case f.isClosing():
			op.failClosed(errClosed)
			return errClosed
		default:
			// Nothing could be posted: the budget is held by other reads
			// (harvested as their pieces finish) or the fabric's slots or
			// chunks are all in use. Poll and retry.
			f.Progress()
			if err := Backoff(ctx, i); err != nil {
				return err
			}
			i++
		}
	}
}

// Abandon stops the read unless it is already done, and reports whether it
// did: pieces in flight are released when they complete, and dst is never
// written again.
func (op *ReadOp) Abandon() bool {
	op.mu.Lock()
	defer op.mu.Unlock()
	if op.Done() {
		return false
	}
	f := op.rs.f
	slots, chunks := 0, 0
	for ; op.head < op.tail; op.head++ {
		p := op.ring[op.head%readRing]
		if !f.slots[p.id].state.CompareAndSwap(slotBusy, slotAbandoned) {
			f.releaseSlot(p.id) // done: nobody else will
		}
		slots++
		if p.chunk {
			chunks++
		}
	}
	op.headID.Store(-1)
	op.rs.give(op, slots, chunks)
	op.state.Store(readAbandoned)
	return true
}

// failClosed ends the read with err, the fabric's being closed: what is
// in flight never completes, and dst is not written again.
func (op *ReadOp) failClosed(err error) {
	op.mu.Lock()
	if op.state.Load() == readActive {
		op.fail(err)
		op.head = op.tail
		op.settleLocked()
	}
	op.mu.Unlock()
}

func (op *ReadOp) fail(err error) {
	if op.err == nil {
		op.err = err
	}
}

// settleLocked marks the read done once nothing is in flight and nothing
// is left to post (or it failed).
func (op *ReadOp) settleLocked() {
	if op.state.Load() == readActive && op.head == op.tail && (op.err != nil || op.seg == len(op.segs)) {
		op.state.Store(readDone)
	}
}

// harvestLocked copies the finished pieces, oldest first, into dst and
// releases their slots and chunks.
func (op *ReadOp) harvestLocked() {
	if op.head == op.tail {
		return
	}
	f := op.rs.f
	slots, chunks := 0, 0
	for op.head < op.tail {
		p := op.ring[op.head%readRing]
		s := &f.slots[p.id]
		if s.state.Load() != slotDone {
			break
		}
		n := int(p.n)
		if s.err != nil {
			op.fail(s.err)
		} else if op.err == nil {
			var src []byte
			if p.chunk {
				src = f.chunk(s.chunk)[:n]
			} else {
				off := int(p.id) * slotScratch
				src = f.mem[off : off+n]
			}
			copy(op.dst[op.got:op.got+n], src)
		}
		f.releaseSlot(p.id)
		op.got += n
		op.head++
		slots++
		if p.chunk {
			chunks++
		}
	}
	if slots == 0 {
		return
	}
	if op.head < op.tail {
		op.headID.Store(int64(op.ring[op.head%readRing].id))
	} else {
		op.headID.Store(-1)
	}
	op.rs.give(op, slots, chunks)
}

// postLocked posts pieces while the ring has room, the budget allows and a
// slot (and chunk) is free, without waiting.
func (op *ReadOp) postLocked() {
	f := op.rs.f
	harvested := false
	for op.err == nil && op.tail-op.head < readRing && op.seg < len(op.segs) {
		sg := op.segs[op.seg]
		if sg.Len == 0 {
			op.seg++
			continue
		}
		if err := f.peerErr(op.rank); err != nil {
			op.fail(err)
			return
		}
		n := min(sg.Len-op.segOff, f.chunkSize)
		staged := n > slotScratch
		if !op.rs.take(op, staged) {
			if harvested {
				return
			}
			harvested = true
			op.rs.harvestOthers(op)
			continue
		}
		id, err := f.acquireSlot(tryCtx, op.rank, false)
		if err != nil {
			op.rs.give(op, 1, b2i(staged))
			if f.peerErr(op.rank) != nil {
				op.fail(err)
			}
			return
		}
		p := &f.peers[op.rank]
		var l verbs.Local
		if staged {
			c, err := f.acquireChunk(tryCtx)
			if err != nil {
				f.releaseSlot(id)
				op.rs.give(op, 1, 1)
				return
			}
			f.slots[id].chunk = c
			l = f.mr.Local(f.chunkOff+int(c)*f.chunkSize, n)
		} else {
			l = f.mr.Local(int(id)*slotScratch, n)
		}
		// The connection, without waiting if it is being re-established.
		c, err := f.use(tryCtx, op.rank)
		if err != nil {
			f.releaseSlot(id)
			op.rs.give(op, 1, b2i(staged))
			if f.peerErr(op.rank) != nil {
				op.fail(err)
			}
			return
		}
		f.posting(id, p, c)
		err = c.qp.PostRead(uint64(id), l, sg.Addr+uint64(op.segOff), op.rkey, verbs.SendSignaled)
		p.qmu.RUnlock()
		if err != nil {
			f.unpost(id, p, c)
			op.rs.give(op, 1, b2i(staged))
			op.fail(fmt.Errorf("rank %d: %w", op.rank, err))
			return
		}
		op.ring[op.tail%readRing] = readPiece{id: id, n: int32(n), chunk: staged}
		if op.tail == op.head {
			op.headID.Store(int64(id))
		}
		op.tail++
		if op.segOff += n; op.segOff == sg.Len {
			op.seg, op.segOff = op.seg+1, 0
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// take reserves a slot (and a chunk if staged) of the budget for op and
// lists op among the reads holding pieces.
func (rs *Reads) take(op *ReadOp, staged bool) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.slots >= rs.maxSlots || (staged && rs.chunks >= rs.maxChunks) {
		return false
	}
	rs.slots++
	if staged {
		rs.chunks++
	}
	if !op.listed {
		op.listed, op.prev, op.next = true, nil, rs.head
		if rs.head != nil {
			rs.head.prev = op
		}
		rs.head = op
	}
	return true
}

// give returns budget; op's lock is held, and op leaves the list once it
// holds no piece.
func (rs *Reads) give(op *ReadOp, slots, chunks int) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.slots -= slots
	rs.chunks -= chunks
	if op.listed && op.head == op.tail {
		if op.prev != nil {
			op.prev.next = op.next
		} else {
			rs.head = op.next
		}
		if op.next != nil {
			op.next.prev = op.prev
		}
		op.listed, op.prev, op.next = false, nil, nil
	}
}

// harvestOthers harvests the finished pieces of the reads other than op
// (whose lock is held) that nobody else is handling right now.
func (rs *Reads) harvestOthers(op *ReadOp) {
	var found [32]*ReadOp
	n := 0
	f := rs.f
	rs.mu.Lock()
	for o := rs.head; o != nil && n < len(found); o = o.next {
		if id := o.headID.Load(); o != op && id >= 0 && f.slots[id].state.Load() != slotBusy {
			found[n] = o
			n++
		}
	}
	rs.mu.Unlock()
	for _, o := range found[:n] {
		if o.mu.TryLock() { // never wait for another read's lock while holding op's
			o.harvestLocked()
			o.settleLocked()
			o.mu.Unlock()
		}
	}
}

// Backoff paces a goroutine that polls for something other goroutines
// complete (a read waiting for resources, Waitany over several requests):
// it yields the CPU 64 times, then sleeps a little longer each time, up to
// 128us. It returns ctx's error once ctx has ended.
func Backoff(ctx context.Context, i int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if i < 64 {
		runtime.Gosched()
		return nil
	}
	t := time.NewTimer(time.Microsecond << min((i-64)/8, 7))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
