package fabric

import (
	"context"

	"github.com/onesided/rma/verbs"
)

// RDMA operations. Each takes a slot (and staging chunks for large
// transfers), then the connection to post on (use), and posts while holding
// the connection's read lock.

// Write copies src to raddr at rank. It returns once the data is handed to
// the NIC (src may be reused); Flush reports its completion.
func (f *Fabric) Write(ctx context.Context, rank int, src []byte, raddr uint64, rkey uint32) error {
	p := &f.peers[rank]
	if len(src) <= f.maxInline {
		id, err := f.acquireSlot(ctx, rank, true)
		if err != nil {
			return err
		}
		data := f.scratch(id)[:len(src)]
		copy(data, src)
		c, err := f.use(ctx, rank)
		if err != nil {
			f.releaseSlot(id)
			return err
		}
		f.posting(id, p, c)
		err = c.qp.PostWriteInline(uint64(id), data, raddr, rkey, verbs.SendSignaled)
		p.qmu.RUnlock()
		if err != nil {
			f.unpost(id, p, c)
			return err
		}
		return nil
	}
	for len(src) > 0 {
		n := min(len(src), f.chunkSize)
		ch, err := f.acquireChunk(ctx)
		if err != nil {
			return err
		}
		copy(f.chunk(ch), src[:n])
		id, err := f.acquireSlot(ctx, rank, true)
		if err != nil {
			f.putChunk(ch)
			return err
		}
		f.slots[id].chunk = ch
		c, err := f.use(ctx, rank)
		if err != nil {
			f.releaseSlot(id)
			return err
		}
		f.posting(id, p, c)
		l := f.mr.Local(f.chunkOff+int(ch)*f.chunkSize, n)
		err = c.qp.PostWrite(uint64(id), l, raddr, rkey, verbs.SendSignaled)
		p.qmu.RUnlock()
		if err != nil {
			f.unpost(id, p, c)
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
	c, err := f.use(ctx, rank)
	if err != nil {
		f.releaseSlot(id)
		return 0, err
	}
	f.posting(id, p, c)
	l := f.mr.Local(int(id)*slotScratch, n)
	if f.pollMu.TryLock() {
		// Post and poll in one call to C.
		var k int
		k, err = c.qp.PostReadPoll(uint64(id), l, raddr, rkey, verbs.SendSignaled, f.cq, f.wcs[:])
		p.qmu.RUnlock()
		if k > 0 {
			f.dispatchLocked(k)
		}
		f.pollMu.Unlock()
	} else {
		err = c.qp.PostRead(uint64(id), l, raddr, rkey, verbs.SendSignaled)
		p.qmu.RUnlock()
	}
	if err != nil {
		f.unpost(id, p, c)
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
// is their total), with several READs in flight. When no slot or chunk is
// free it completes its own pending reads first, so that concurrent calls
// never hold every slot while each waits for one more.
func (f *Fabric) ReadV(ctx context.Context, rank int, rkey uint32, dst []byte, segs []Segment) error {
	p := &f.peers[rank]
	type pending struct {
		id  uint32
		off int
		n   int
	}
	if err := f.awaitUsable(ctx, rank); err != nil {
		return err
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
			if tail-head == len(ring) {
				finish()
				continue
			}
			ch, ok := f.tryAcquireChunk()
			if !ok {
				if tail > head {
					finish()
					continue
				}
				var err error
				if ch, err = f.acquireChunk(ctx); err != nil {
					firstErr = err
					break
				}
			}
			id, ok := f.tryAcquireSlot(rank, false)
			if !ok {
				if tail > head {
					f.putChunk(ch)
					finish()
					continue
				}
				var err error
				if id, err = f.acquireSlot(ctx, rank, false); err != nil {
					f.putChunk(ch)
					firstErr = err
					break
				}
			}
			f.slots[id].chunk = ch
			c, err := f.use(ctx, rank)
			if err != nil {
				f.releaseSlot(id)
				firstErr = err
				break
			}
			f.posting(id, p, c)
			l := f.mr.Local(f.chunkOff+int(ch)*f.chunkSize, n)
			err = c.qp.PostRead(uint64(id), l, sg.Addr+uint64(done), rkey, verbs.SendSignaled)
			p.qmu.RUnlock()
			if err != nil {
				f.unpost(id, p, c)
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
	c, err := f.use(ctx, rank)
	if err != nil {
		f.releaseSlot(id)
		return 0, err
	}
	f.posting(id, p, c)
	l := f.mr.Local(int(id)*slotScratch, 8)
	if f.pollMu.TryLock() {
		// Post and poll in one call to C: the completion is often there
		// already (always on rxe, which does the work in the post).
		var n int
		n, err = c.qp.PostAtomicPoll(uint64(id), l, raddr, rkey, fadd, a, b, verbs.SendSignaled, f.cq, f.wcs[:])
		p.qmu.RUnlock()
		if n > 0 {
			f.dispatchLocked(n)
		}
		f.pollMu.Unlock()
	} else {
		if fadd {
			err = c.qp.PostFetchAdd(uint64(id), l, raddr, rkey, a, verbs.SendSignaled)
		} else {
			err = c.qp.PostCompareSwap(uint64(id), l, raddr, rkey, a, b, verbs.SendSignaled)
		}
		p.qmu.RUnlock()
	}
	if err != nil {
		f.unpost(id, p, c)
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
	return f.settled(ctx, rank, err)
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
