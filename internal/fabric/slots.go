package fabric

import (
	"context"
	"sync/atomic"
	"time"
	"unsafe"
)

// Slots and staging chunks. A slot is one work request in flight: its
// completion finds it by the work request id. Slots and chunks are freed by
// completions and by the goroutines that waited for them; whoever frees one
// wakes a poller asleep on the completion channel, since it may be waiting
// for exactly that (no completion event would wake it).

const (
	slotFree uint32 = iota
	slotBusy
	slotDone
	slotAbandoned
	slotReserved // a credit taken, its request not yet sent
)

type slot struct {
	state atomic.Uint32
	async bool // nobody waits: the completion releases it
	// redo: a WRITE that is posted again if its connection fails (its data
	// stays in its staging chunk, or in its scratch if inline): n bytes to
	// raddr with rkey.
	redo  bool
	n     int32
	raddr uint64
	rkey  uint32
	msg   bool  // an active message or reply: its error is not a Flush's
	peer  int32 // rank
	chunk int32 // staging chunk held, or -1
	reply int32 // active-message reply buffer held until sent, or -1
	conn  *conn // the connection it was posted on
	err   error
	wake  chan struct{}
	timer *time.Timer
	// sleeping: the waiter blocks on wake (the poller signals it only
	// then); slept: it did, so a stale signal may have to be drained.
	sleeping atomic.Bool
	slept    bool
}

// acquireSlot takes a slot for a request to rank, waiting first (without a
// slot) if rank's connection is being re-established, then for a free slot.
func (f *Fabric) acquireSlot(ctx context.Context, rank int, async bool) (uint32, error) {
	if err := f.peerErr(rank); err != nil {
		return 0, err
	}
	if err := f.awaitUsable(ctx, rank); err != nil {
		return 0, err
	}
	return f.takeSlot(ctx, rank, async)
}

// takeSlot waits for a free slot and takes it.
func (f *Fabric) takeSlot(ctx context.Context, rank int, async bool) (uint32, error) {
	for {
		if id, ok := f.tryAcquireSlot(rank, async); ok {
			return id, nil
		}
		if err := f.progressUntil(ctx, func() bool { return f.nfree.Load() > 0 }, nil); err != nil {
			return 0, err
		}
	}
}

// tryAcquireSlot takes a free slot if there is one.
func (f *Fabric) tryAcquireSlot(rank int, async bool) (uint32, bool) {
	id, ok := f.popSlot()
	if !ok {
		return 0, false
	}
	s := &f.slots[id]
	s.state.Store(slotBusy)
	s.async, s.msg, s.redo, s.peer, s.chunk, s.reply, s.conn, s.err = async, false, false, int32(rank), -1, -1, nil, nil
	return id, true
}

func (f *Fabric) releaseSlot(id uint32) {
	s := &f.slots[id]
	if s.chunk >= 0 {
		f.putChunk(s.chunk)
		s.chunk = -1
	}
	if s.reply >= 0 {
		f.putReplyBuf(uint16(s.reply))
		s.reply = -1
	}
	s.conn = nil
	s.state.Store(slotFree)
	f.pushSlot(id)
	f.wakePoller()
}

// popSlot takes the free slot on top of the stack, if there is one.
func (f *Fabric) popSlot() (uint32, bool) {
	for {
		h := f.freeHead.Load()
		top := uint32(h)
		if top == 0 {
			return 0, false
		}
		next := f.freeNext[top-1].Load()
		if f.freeHead.CompareAndSwap(h, (h>>32+1)<<32|uint64(next)) {
			f.nfree.Add(-1)
			return top - 1, true
		}
	}
}

// pushSlot puts slot id on top of the stack of free slots.
func (f *Fabric) pushSlot(id uint32) {
	for {
		h := f.freeHead.Load()
		f.freeNext[id].Store(uint32(h))
		if f.freeHead.CompareAndSwap(h, (h>>32+1)<<32|uint64(id+1)) {
			f.nfree.Add(1)
			return
		}
	}
}

// posting records that slot id is about to be posted on c to p's rank.
func (f *Fabric) posting(id uint32, p *peer, c *conn) {
	f.slots[id].conn = c
	c.posted.Add(1)
	p.posted.Add(1)
}

// unpost undoes posting for a request the provider refused, and frees
// the slot.
func (f *Fabric) unpost(id uint32, p *peer, c *conn) {
	c.completed.Add(1)
	p.completed.Add(1)
	f.releaseSlot(id)
}

// wakePoller wakes the goroutine asleep on the completion channel, if one
// is: it may be waiting for the slot or chunk just freed.
func (f *Fabric) wakePoller() {
	if f.sleeping.Load() {
		f.ch.Wake()
	}
}

func (f *Fabric) acquireChunk(ctx context.Context) (int32, error) {
	for {
		if c, ok := f.tryAcquireChunk(); ok {
			return c, nil
		}
		if err := f.progressUntil(ctx, func() bool { return len(f.freeChunks) > 0 }, nil); err != nil {
			return 0, err
		}
	}
}

func (f *Fabric) tryAcquireChunk() (int32, bool) {
	select {
	case c := <-f.freeChunks:
		return int32(c), true
	default:
		return 0, false
	}
}

// putChunk frees a staging chunk.
func (f *Fabric) putChunk(c int32) {
	f.freeChunks <- uint32(c)
	f.wakePoller()
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

func (f *Fabric) scratch(id uint32) []byte {
	off := int(id) * slotScratch
	return f.mem[off : off+slotScratch : off+slotScratch]
}

func (f *Fabric) atomicResult(id uint32) uint64 {
	return *(*uint64)(unsafe.Pointer(&f.mem[int(id)*slotScratch]))
}

// initSlots makes the tables of n slots and chunks chunks, all free.
// Request-based reads hold at most half of each, so that requests nobody
// waits on yet cannot starve the blocking calls.
func (f *Fabric) initSlots(n, chunks int) {
	f.slots = make([]slot, n)
	f.freeNext = make([]atomic.Uint32, n)
	for i := range f.slots {
		f.slots[i].wake = make(chan struct{}, 1)
		f.slots[i].chunk = -1
		f.slots[i].reply = -1
		f.pushSlot(uint32(i))
	}
	f.freeChunks = make(chan uint32, chunks)
	for i := 0; i < chunks; i++ {
		f.freeChunks <- uint32(i)
	}
	f.reads.f, f.reads.maxSlots, f.reads.maxChunks = f, max(1, n/2), max(1, chunks/2)
}
