package fabric

import (
	"context"
	"errors"

	"github.com/onesided/rma/verbs"
)

// RDMA operations. Each takes a slot (and staging chunks for large
// transfers), then the connection to post on (use), and posts while holding
// the connection's read lock.

// Write copies src to raddr at rank. It returns once the data is handed to
// the NIC (src may be reused); Flush reports its completion.
func (f *Fabric) Write(ctx context.Context, rank int, src []byte, raddr uint64, rkey uint32) error {
	if err := f.enter(); err != nil {
		return err
	}
	defer f.exit()
	p := &f.peers[rank]
	if len(src) <= f.maxInline {
		id, err := f.acquireSlot(ctx, rank, true)
		if err != nil {
			return err
		}
		data := f.scratch(id)[:len(src)]
		copy(data, src)
		s := &f.slots[id]
		s.redo, s.n, s.raddr, s.rkey = true, int32(len(src)), raddr, rkey
		c, err := f.use(ctx, rank)
		if err != nil {
			f.releaseSlot(id)
			return err
		}
		f.posting(id, p, c)
		err = f.postWrite(c, id)
		p.qmu.RUnlock()
		if err != nil {
			f.unpost(id, p, c)
			return err
		}
		return nil
	}
	// A staging chunk is taken before the slot that checks on rank: a
	// call to a lost rank (or after Close) must not wait for one.
	if err := f.peerErr(rank); err != nil {
		return err
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
		s := &f.slots[id]
		s.chunk, s.redo, s.n, s.raddr, s.rkey = ch, true, int32(n), raddr, rkey
		c, err := f.use(ctx, rank)
		if err != nil {
			f.releaseSlot(id)
			return err
		}
		f.posting(id, p, c)
		err = f.postWrite(c, id)
		p.qmu.RUnlock()
		if err != nil {
			f.unpost(id, p, c)
			return err
		}
		src, raddr = src[n:], raddr+uint64(n)
	}
	return nil
}

// postWrite posts slot id's WRITE on c: from its staging chunk, or inline
// from its scratch.
func (f *Fabric) postWrite(c *conn, id uint32) error {
	s := &f.slots[id]
	if s.chunk < 0 {
		return c.qp.PostWriteInline(uint64(id), f.scratch(id)[:s.n], s.raddr, s.rkey, verbs.SendSignaled)
	}
	return c.qp.PostWrite(uint64(id), f.mr.Local(f.chunkOff+int(s.chunk)*f.chunkSize, int(s.n)), s.raddr, s.rkey, verbs.SendSignaled)
}

// reissue posts again the WRITEs to rank whose connection failed, on the
// re-established one (use waits for it). If rank is lost they complete
// with its error; if ctx ends first they stay for the next Flush.
func (f *Fabric) reissue(ctx context.Context, rank int) error {
	p := &f.peers[rank]
	c, err := f.use(ctx, rank)
	if err != nil && !errors.Is(err, ErrPeerLost) {
		return err
	}
	p.mu.Lock()
	ids := p.redo
	p.redo = nil
	p.redoing.Store(false)
	p.mu.Unlock()
	for _, id := range ids {
		if err == nil {
			f.slots[id].conn, f.slots[id].err = c, nil
			c.posted.Add(1)
			perr := f.postWrite(c, id)
			if perr == nil {
				continue
			}
			c.completed.Add(1)
			f.slots[id].err = perr
		} else {
			f.slots[id].err = err
		}
		p.mu.Lock()
		if p.err == nil {
			p.err = f.slots[id].err
		}
		p.mu.Unlock()
		p.completed.Add(1)
		f.releaseSlot(id)
	}
	if err == nil {
		p.qmu.RUnlock()
	}
	return nil
}

// Read copies len(dst) bytes from raddr at rank into dst and returns when
// they are there.
func (f *Fabric) Read(ctx context.Context, rank int, dst []byte, raddr uint64, rkey uint32) error {
	if err := f.enter(); err != nil {
		return err
	}
	defer f.exit()
	if n := len(dst); n > 0 && n <= 8 {
		// Small: into the slot's own 8 bytes, no staging chunk.
		id, err := f.readSmall(ctx, rank, wordRead, raddr, rkey, n)
		if err != nil {
			return err
		}
		off := int(id) * slotScratch
		copy(dst, f.mem[off:off+n])
		f.releaseSlot(id)
		return nil
	}
	return f.readV(ctx, rank, rkey, dst, []Segment{{Addr: raddr, Len: len(dst)}})
}

// readAgain reports whether a READ that failed with err is to be posted
// again: its connection failed with the peer alive, and ctx goes on.
func readAgain(ctx context.Context, err error) bool {
	return err != nil && reissuable(err) && ctx.Err() == nil
}

// readSmall reads n <= 8 bytes at raddr into slot id's scratch word (kind
// wordRead, or wordProbe) and waits; the caller reads the word, then releases the slot. A READ cut
// short by a connection failure is posted again.
func (f *Fabric) readSmall(ctx context.Context, rank, kind int, raddr uint64, rkey uint32, n int) (uint32, error) {
	for {
		id, err := f.postSmall(ctx, rank, kind, raddr, rkey, 0, 0, n)
		if err != nil {
			return 0, err
		}
		abandoned, err := f.wait(ctx, id)
		if abandoned {
			return 0, err
		}
		if err == nil {
			return id, nil
		}
		f.releaseSlot(id)
		if !readAgain(ctx, err) {
			return 0, err
		}
	}
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
	if err := f.enter(); err != nil {
		return err
	}
	defer f.exit()
	return f.readV(ctx, rank, rkey, dst, segs)
}

// readV is ReadV, posted again whole while a connection failure cuts it
// short.
func (f *Fabric) readV(ctx context.Context, rank int, rkey uint32, dst []byte, segs []Segment) error {
	for {
		if err := f.readVOnce(ctx, rank, rkey, dst, segs); !readAgain(ctx, err) {
			return err
		}
	}
}

func (f *Fabric) readVOnce(ctx context.Context, rank int, rkey uint32, dst []byte, segs []Segment) error {
	if err := f.peerErr(rank); err != nil {
		return err
	}
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
	if err := f.enter(); err != nil {
		return 0, err
	}
	defer f.exit()
	return f.atomic(ctx, rank, raddr, rkey, true, add, 0)
}

// CompareSwap atomically replaces the 8-byte word at raddr by swap if it
// equals compare, and returns its old value.
func (f *Fabric) CompareSwap(ctx context.Context, rank int, raddr uint64, rkey uint32, compare, swap uint64) (uint64, error) {
	if err := f.enter(); err != nil {
		return 0, err
	}
	defer f.exit()
	return f.atomic(ctx, rank, raddr, rkey, false, compare, swap)
}

func (f *Fabric) atomic(ctx context.Context, rank int, raddr uint64, rkey uint32, fadd bool, a, b uint64) (uint64, error) {
	kind := wordCompareSwap
	if fadd {
		kind = wordFetchAdd
	}
	id, err := f.postSmall(ctx, rank, kind, raddr, rkey, a, b, 8)
	if err != nil {
		return 0, err
	}
	return f.waitWord(ctx, id)
}

// The operations of postSmall.
const (
	wordRead        = iota // RDMA READ of n bytes
	wordFetchAdd           // fetch-and-add a
	wordCompareSwap        // compare with a, swap in b
	wordProbe              // RDMA READ of n bytes on the connection's probe QP
)

// postSmall takes a slot and posts one operation on at most slotScratch
// bytes of rank's memory at raddr, whose result lands in the slot's
// scratch. It polls the CQ in the same call to C when nobody else is: the
// completion is often there already (always on rxe, which does the work in
// the post). Wait for the slot (wait, waitWord) unless it fails.
func (f *Fabric) postSmall(ctx context.Context, rank, kind int, raddr uint64, rkey uint32, a, b uint64, n int) (uint32, error) {
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
	qp := c.qp
	if kind == wordProbe {
		if c.probe != nil {
			qp = c.probe
		}
		kind = wordRead
	}
	if f.pollMu.TryLock() {
		var k int
		if kind == wordRead {
			k, err = qp.PostReadPoll(uint64(id), l, raddr, rkey, verbs.SendSignaled, f.cq, f.wcs[:])
		} else {
			k, err = qp.PostAtomicPoll(uint64(id), l, raddr, rkey, kind == wordFetchAdd, a, b, verbs.SendSignaled, f.cq, f.wcs[:])
		}
		p.qmu.RUnlock()
		if k > 0 {
			f.dispatchLocked(k)
		}
		f.pollMu.Unlock()
	} else {
		switch kind {
		case wordRead:
			err = qp.PostRead(uint64(id), l, raddr, rkey, verbs.SendSignaled)
		case wordFetchAdd:
			err = qp.PostFetchAdd(uint64(id), l, raddr, rkey, a, verbs.SendSignaled)
		default:
			err = qp.PostCompareSwap(uint64(id), l, raddr, rkey, a, b, verbs.SendSignaled)
		}
		p.qmu.RUnlock()
	}
	if err != nil {
		f.unpost(id, p, c)
		return 0, err
	}
	return id, nil
}

// wordRing is how many operations of one Words call are in flight at once.
const wordRing = 16

// Words applies a NIC fetch-and-add of vals[i] (fadd), or reads the word
// (!fadd, vals unused), at each aligned 8-byte address addrs[i] of rank's
// memory, posted in order on one connection and so applied in that order,
// with up to wordRing of them in flight. If olds is not nil, olds[i] gets
// the word's old value. It returns when every operation has completed, or
// at the first failure, or when ctx ends (those posted are applied, the
// others not; those still in flight then complete without touching olds).
func (f *Fabric) Words(ctx context.Context, rank int, rkey uint32, fadd bool, addrs, vals, olds []uint64) error {
	if err := f.enter(); err != nil {
		return err
	}
	defer f.exit()
	kind := wordRead
	if fadd {
		kind = wordFetchAdd
	}
	var ring [wordRing]uint32
	head, tail := 0, 0 // ring[head%wordRing] is the oldest in flight: element head
	// abandon stops waiting for the operations still in flight.
	abandon := func() {
		for ; head < tail; head++ {
			f.waitWord(tryCtx, ring[head%wordRing])
		}
	}
	for head < len(addrs) {
		if err := ctx.Err(); err != nil {
			abandon()
			return err
		}
		if tail < len(addrs) && tail-head < wordRing {
			// With operations in flight, take a slot (and the connection)
			// only if one is free at once: waiting for one could wait for
			// the slots this call holds.
			pctx := ctx
			if tail > head {
				pctx = tryCtx
			}
			var v uint64
			if fadd {
				v = vals[tail]
			}
			id, err := f.postSmall(pctx, rank, kind, addrs[tail], rkey, v, 0, 8)
			if err == nil {
				ring[tail%wordRing] = id
				tail++
				continue
			}
			if tail == head {
				return err
			}
			// Nothing free: harvest the oldest first.
		}
		v, err := f.waitWord(ctx, ring[head%wordRing])
		if err != nil {
			head++ // waitWord abandoned or released it
			abandon()
			return err
		}
		if olds != nil {
			olds[head] = v
		}
		head++
	}
	return nil
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
	if err := f.enter(); err != nil {
		return 0, err
	}
	defer f.exit()
	id, err := f.readSmall(ctx, rank, wordRead, raddr, rkey, 8)
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
	if err := f.enter(); err != nil {
		return err
	}
	defer f.exit()
	p := &f.peers[rank]
	target := p.posted.Load()
	for {
		if err := f.progressUntil(ctx, func() bool { return p.completed.Load() >= target || p.redoing.Load() }, nil); err != nil {
			return err
		}
		if !p.redoing.Load() {
			break
		}
		if err := f.reissue(ctx, rank); err != nil {
			return err
		}
	}
	p.mu.Lock()
	err := p.err
	p.err = nil
	p.mu.Unlock()
	return f.settled(ctx, rank, err)
}

// FlushAll flushes every rank.
func (f *Fabric) FlushAll(ctx context.Context) error {
	if err := f.enter(); err != nil {
		return err
	}
	defer f.exit()
	var first error
	for r := range f.peers {
		if err := f.Flush(ctx, r); err != nil && first == nil {
			first = err
		}
	}
	return first
}
