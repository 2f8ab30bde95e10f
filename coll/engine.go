package coll

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
)

// kind names a collective in message headers.
type kind uint8

const (
	kindReduce kind = iota + 1
	kindAllreduce
	kindReduceScatter
	kindScan
	kindExscan
)

func (k kind) String() string {
	switch k {
	case kindReduce:
		return "Reduce"
	case kindAllreduce:
		return "Allreduce"
	case kindReduceScatter:
		return "ReduceScatter"
	case kindScan:
		return "Scan"
	case kindExscan:
		return "Exscan"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// header heads every chunk in its slot: which collective it belongs to,
// and where the chunk lies in its message. The receiver checks every field
// against what it expects, so ranks that disagree get ErrMismatch instead
// of wrong results.
type header struct {
	seq   uint64 // the collective's number on the communicator
	tag   uint64 // kind | arg<<8 (the root of a Reduce)
	total uint64 // the message's length in bytes
	off   uint64 // the chunk's offset in the message
	len   uint64 // the chunk's length
}

func (h *header) encode(b []byte) {
	binary.NativeEndian.PutUint64(b[0:], h.seq)
	binary.NativeEndian.PutUint64(b[8:], h.tag)
	binary.NativeEndian.PutUint64(b[16:], h.total)
	binary.NativeEndian.PutUint64(b[24:], h.off)
	binary.NativeEndian.PutUint64(b[32:], h.len)
}

func (h *header) decode(b []byte) {
	h.seq = binary.NativeEndian.Uint64(b[0:])
	h.tag = binary.NativeEndian.Uint64(b[8:])
	h.total = binary.NativeEndian.Uint64(b[16:])
	h.off = binary.NativeEndian.Uint64(b[24:])
	h.len = binary.NativeEndian.Uint64(b[32:])
}

// The channel from rank s to rank d: s writes chunk number q (from 1) into
// slot (q-1) mod slots of its inbox at d: header and data, then (after a
// flush, so that they are in place) the flag word q. d polls the flag,
// consumes the chunk and writes q into the ack word for d in s's memory.
// s writes chunk q only once the ack says d consumed chunk q-slots, so a
// slot is never overwritten before it is read.

func (c *Comm) flagAt(src, slot int) int { return c.flagOff + 8*(src*c.cfg.slots+slot) }
func (c *Comm) slotAt(src, slot int) int { return c.slotOff + (src*c.cfg.slots+slot)*c.slotStride }

// trySend writes the next chunk to peer if the flow control allows it.
func (c *Comm) trySend(ctx context.Context, peer int, h *header, chunk []byte) (bool, error) {
	q := c.sent[peer] + 1
	slots := uint64(c.cfg.slots)
	if q > slots && c.acked[peer]+slots < q {
		// The ack word is written by the NIC; only accept values in the
		// range it can hold, so that no read of a half-written word can
		// pass for a credit.
		a := atomic.LoadUint64(c.word(c.ackOff + 8*peer))
		if a > c.acked[peer] && a <= c.sent[peer] {
			c.acked[peer] = a
		}
		if c.acked[peer]+slots < q {
			return false, nil
		}
	}
	k := int((q - 1) % slots)
	off := c.slotAt(c.rank, k)
	h.encode(c.hdr)
	if err := c.mem.put(ctx, c.hdr, peer, off); err != nil {
		return false, err
	}
	if len(chunk) > 0 {
		if err := c.mem.put(ctx, chunk, peer, off+hdrSize); err != nil {
			return false, err
		}
	}
	if err := c.mem.flush(ctx, peer); err != nil {
		return false, err
	}
	if err := c.mem.putWord(ctx, q, peer, c.flagAt(c.rank, k)); err != nil {
		return false, err
	}
	c.sent[peer] = q
	return true, nil
}

// tryRecv returns the next chunk from peer, if it has arrived. The chunk
// lies in this rank's inbox and may be modified until release.
func (c *Comm) tryRecv(peer int, h *header) ([]byte, bool) {
	q := c.recvd[peer] + 1
	k := int((q - 1) % uint64(c.cfg.slots))
	if atomic.LoadUint64(c.word(c.flagAt(peer, k))) != q {
		return nil, false
	}
	off := c.slotAt(peer, k)
	h.decode(c.buf[off : off+hdrSize])
	n := min(h.len, uint64(c.cfg.slotSize))
	return c.buf[off+hdrSize : off+hdrSize+int(n)], true
}

// release gives the slot of the chunk tryRecv returned back to peer.
func (c *Comm) release(ctx context.Context, peer int) error {
	c.recvd[peer]++
	return c.mem.putWord(ctx, c.recvd[peer], peer, c.ackOff+8*c.rank)
}

// xfer is one message being sent or received by a collective step.
type xfer struct {
	peer    int
	send    bool
	data    []byte // the message, for a send
	n       int    // its length
	off     int    // bytes done
	started bool   // a chunk was done (a message of 0 bytes is one empty chunk)
	// For a receive: fn consumes each chunk, at offset off of the message;
	// the chunk may be modified.
	fn func(off int, chunk []byte) error
	// If after is not nil, the bytes [off, off+l) are sent or received
	// only once after has done the bytes up to base+off+l of its message:
	// a receive then does not overwrite memory that after has still to
	// send, a send does not send what after has still to produce.
	after *xfer
	base  int
}

func (x *xfer) done() bool { return x.started && x.off >= x.n }

func sendX(peer int, data []byte) *xfer {
	return &xfer{peer: peer, send: true, data: data, n: len(data)}
}

func recvX(peer, n int, fn func(off int, chunk []byte) error) *xfer {
	return &xfer{peer: peer, n: n, fn: fn}
}

// recvInto receives a message into dst.
func recvInto(peer int, dst []byte) *xfer {
	return recvX(peer, len(dst), func(off int, chunk []byte) error {
		copy(dst[off:], chunk)
		return nil
	})
}

// step advances x by one chunk if it can.
func (c *Comm) step(ctx context.Context, t *call, x *xfer) (bool, error) {
	cs := c.cfg.slotSize
	l := min(cs, x.n-x.off)
	h := header{seq: c.seq, tag: t.tag, total: uint64(x.n), off: uint64(x.off), len: uint64(l)}
	if a := x.after; a != nil && !a.done() && a.off < x.base+x.off+l {
		return false, nil
	}
	if x.send {
		ok, err := c.trySend(ctx, x.peer, &h, x.data[x.off:x.off+l])
		if ok {
			x.off += l
			x.started = true
		}
		return ok, err
	}
	var got header
	chunk, ok := c.tryRecv(x.peer, &got)
	if !ok {
		return false, nil
	}
	if got != h {
		return false, fmt.Errorf("%w: rank %d sent piece [%d, +%d) of %d bytes of collective #%d (%v, arg %d); rank %d expected [%d, +%d) of %d bytes of #%d (%v, arg %d)",
			ErrMismatch, x.peer, got.off, got.len, got.total, got.seq, kind(got.tag), got.tag>>8,
			c.rank, h.off, h.len, h.total, h.seq, kind(h.tag), h.tag>>8)
	}
	if err := x.fn(x.off, chunk); err != nil {
		return false, err
	}
	if err := c.release(ctx, x.peer); err != nil {
		return false, err
	}
	x.off += l
	x.started = true
	return true, nil
}

// run drives the transfers until all are done. Sends and receives progress
// together, so two ranks sending each other long messages do not deadlock
// on the flow control. Transfers in the same direction with the same peer
// go one after the other, in the order given (a channel carries one
// message at a time).
func (c *Comm) run(ctx context.Context, t *call, xs ...*xfer) error {
	var b backoff
	for {
		active, progress := false, false
		for i, x := range xs {
			if queued(xs[:i], x) {
				active = true
				continue
			}
			for !x.done() {
				ok, err := c.step(ctx, t, x)
				if err != nil {
					return err
				}
				if !ok {
					break
				}
				progress = true
			}
			if !x.done() {
				active = true
			}
		}
		if !active {
			return nil
		}
		if progress {
			b.reset()
			continue
		}
		// Any member lost fails the call, not only a peer this rank
		// waits for: a live peer may have failed its own part because of
		// the loss, and would then never send.
		for r := 0; r < c.size; r++ {
			if err := c.mem.alive(r); err != nil {
				return fmt.Errorf("coll: rank %d in %v: %w", c.rank, kind(t.tag), err)
			}
		}
		if err := b.wait(ctx); err != nil {
			return fmt.Errorf("coll: rank %d waiting in %v: %w", c.rank, kind(t.tag), err)
		}
	}
}

// queued reports whether one of earlier, not done, uses x's channel.
func queued(earlier []*xfer, x *xfer) bool {
	for _, e := range earlier {
		if e.peer == x.peer && e.send == x.send && !e.done() {
			return true
		}
	}
	return false
}

// backoff paces a poll loop that made no progress: first it lets other
// goroutines run, then other threads of the host (with more polling
// processes than cores, spinning would delay the very peer, or the
// soft-RoCE kernel work, it waits for), then it sleeps a little.
type backoff struct {
	n     int
	start time.Time
}

const (
	spinPolls = 64
	yieldTime = 200 * time.Microsecond
	sleepTime = 50 * time.Microsecond
)

func (b *backoff) reset() { b.n = 0 }

func (b *backoff) wait(ctx context.Context) error {
	b.n++
	if b.n&15 == 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	switch {
	case b.n < spinPolls:
		runtime.Gosched()
	case b.n == spinPolls:
		b.start = time.Now()
		osYield()
	case time.Since(b.start) < yieldTime:
		osYield()
	default:
		time.Sleep(sleepTime)
	}
	return nil
}
