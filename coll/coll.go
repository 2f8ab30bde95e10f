package coll

import (
	"context"
	"fmt"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
)

// call is one collective in progress.
type call struct {
	c       *Comm
	o       op.Op
	dt      datatype.Basic
	es      int
	commute bool
	tag     uint64
}

// do runs a collective: it checks the communicator, the op and the
// arguments (check, given the element size), then runs body. An error of
// body leaves the message streams out of step, so it breaks the
// communicator; an error of the checks, found before anything is sent,
// does not.
func (c *Comm) do(ctx context.Context, k kind, arg int, o op.Op, dt datatype.Basic, check func(es int) error, body func(t *call) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return ErrClosed
	case c.broken != nil:
		return fmt.Errorf("%w (%w)", ErrBroken, c.broken)
	}
	if err := op.Check(o, dt, op.Collective); err != nil {
		return err
	}
	if err := check(dt.Size()); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	c.seq++
	t := &call{c: c, o: o, dt: dt, es: dt.Size(), commute: o.Commutative(), tag: uint64(k) | uint64(arg)<<8}
	if err := body(t); err != nil {
		c.broken = err
		return err
	}
	return nil
}

func whole(name string, b []byte, es int) error {
	if len(b)%es != 0 {
		return fmt.Errorf("%w: %s buffer of %d bytes is not a whole number of %d-byte elements", ErrInvalid, name, len(b), es)
	}
	return nil
}

func sameLen(send, recv []byte, es int) error {
	if err := whole("send", send, es); err != nil {
		return err
	}
	if len(recv) != len(send) {
		return fmt.Errorf("%w: send buffer of %d bytes, receive buffer of %d", ErrInvalid, len(send), len(recv))
	}
	return nil
}

// ring reports whether a vector of n bytes takes the ring algorithms.
func (t *call) ring(n int) bool {
	th := t.c.cfg.threshold
	return t.commute && th >= 0 && n >= th && n/t.es >= t.c.size
}

// Reduce combines the send vectors of every rank element by element with
// o and leaves the result in root's recv (MPI_Reduce). len(recv) must be
// len(send) at root; recv is not used elsewhere (it may be nil). send and
// recv may overlap (recv == send is MPI_IN_PLACE).
func (c *Comm) Reduce(ctx context.Context, send, recv []byte, dt datatype.Basic, o op.Op, root int) error {
	check := func(es int) error {
		if root < 0 || root >= c.size {
			return fmt.Errorf("%w: root %d of a group of %d", ErrInvalid, root, c.size)
		}
		if c.rank == root {
			return sameLen(send, recv, es)
		}
		return whole("send", send, es)
	}
	return c.do(ctx, kindReduce, root, o, dt, check, func(t *call) error {
		n, last := len(send), c.size-1
		_, lg := log2(c.size)
		ring := t.ring(n)
		chain := !ring && !t.commute && t.pipelined(n, lg, 1, c.size-1)
		acc := recv // this rank's partial result
		if c.rank != root || chain && root != last {
			acc = c.work(n) // the chain delivers the result to recv meanwhile
		}
		copy(acc, send)
		switch {
		case c.size == 1:
			return nil
		case ring:
			blocks := equalBlocks(n/t.es, c.size, t.es)
			if err := t.ringReduceScatter(ctx, acc, blocks); err != nil {
				return err
			}
			if c.rank != root {
				b := blocks[c.rank]
				return c.run(ctx, t, sendX(root, acc[b.lo:b.hi]))
			}
			xs := make([]*xfer, 0, c.size-1)
			for p, b := range blocks {
				if p != root {
					xs = append(xs, recvInto(p, acc[b.lo:b.hi]))
				}
			}
			return c.run(ctx, t, xs...)
		case t.commute:
			return t.treeReduce(ctx, acc, root, false)
		case chain:
			return t.chainReduce(ctx, acc, recv, root)
		}
		// In rank order the tree's root is rank 0, which then passes the
		// result to root.
		if err := t.treeReduce(ctx, acc, 0, true); err != nil {
			return err
		}
		switch {
		case root == 0:
		case c.rank == 0:
			return c.run(ctx, t, sendX(root, acc))
		case c.rank == root:
			return c.run(ctx, t, recvInto(0, recv))
		}
		return nil
	})
}

// Allreduce combines the send vectors of every rank element by element with
// o and leaves the result in every rank's recv (MPI_Allreduce). send and
// recv have the same length and may overlap (recv == send is
// MPI_IN_PLACE). Every rank gets the same bits.
func (c *Comm) Allreduce(ctx context.Context, send, recv []byte, dt datatype.Basic, o op.Op) error {
	check := func(es int) error { return sameLen(send, recv, es) }
	return c.do(ctx, kindAllreduce, 0, o, dt, check, func(t *call) error {
		n, last := len(send), c.size-1
		lo, _ := log2(c.size)
		rounds := lo // of recursive doubling, with the folding steps
		if 1<<lo != c.size {
			rounds += 2
		}
		if !t.ring(n) && !t.commute && t.pipelined(n, rounds, 2, 2*last) {
			acc := recv
			if c.rank != last {
				acc = c.work(n)
			}
			copy(acc, send)
			return t.chainAllreduce(ctx, acc, recv)
		}
		copy(recv, send)
		switch {
		case c.size == 1:
			return nil
		case t.ring(n):
			blocks := equalBlocks(n/t.es, c.size, t.es)
			if err := t.ringReduceScatter(ctx, recv, blocks); err != nil {
				return err
			}
			return t.ringAllgather(ctx, recv, blocks)
		}
		return t.recursiveDoubling(ctx, recv)
	})
}

// ReduceScatter combines the send vectors of every rank element by element
// with o and scatters the result: rank i gets counts[i] elements, those
// after the counts[0]+...+counts[i-1] first, in recv
// (MPI_Reduce_scatter). Every rank passes the same counts; send holds
// their sum of elements, recv counts[rank]. send and recv may overlap.
func (c *Comm) ReduceScatter(ctx context.Context, send, recv []byte, counts []int, dt datatype.Basic, o op.Op) error {
	var blocks []span
	check := func(es int) error {
		if len(counts) != c.size {
			return fmt.Errorf("%w: %d counts for a group of %d", ErrInvalid, len(counts), c.size)
		}
		blocks = make([]span, c.size)
		lo := 0
		for i, k := range counts {
			if k < 0 || k > (len(send)-lo)/es {
				return fmt.Errorf("%w: counts %v do not add up to the %d elements of the send buffer", ErrInvalid, counts, len(send)/es)
			}
			blocks[i] = span{lo, lo + k*es}
			lo += k * es
		}
		if err := whole("send", send, es); err != nil {
			return err
		}
		if lo != len(send) {
			return fmt.Errorf("%w: counts %v add up to %d elements, the send buffer holds %d", ErrInvalid, counts, lo/es, len(send)/es)
		}
		if len(recv) != counts[c.rank]*es {
			return fmt.Errorf("%w: receive buffer of %d bytes for %d elements of %d bytes", ErrInvalid, len(recv), counts[c.rank], es)
		}
		return nil
	}
	return c.do(ctx, kindReduceScatter, 0, o, dt, check, func(t *call) error {
		return t.reduceScatter(ctx, send, recv, blocks)
	})
}

// ReduceScatterBlock is ReduceScatter with the same count on every rank
// (MPI_Reduce_scatter_block): send holds Size() times the elements of recv,
// and rank i gets the i-th block of the result.
func (c *Comm) ReduceScatterBlock(ctx context.Context, send, recv []byte, dt datatype.Basic, o op.Op) error {
	var blocks []span
	check := func(es int) error {
		if err := whole("receive", recv, es); err != nil {
			return err
		}
		if len(send)/c.size != len(recv) || len(send)%c.size != 0 {
			return fmt.Errorf("%w: send buffer of %d bytes for %d blocks of %d bytes", ErrInvalid, len(send), c.size, len(recv))
		}
		blocks = make([]span, c.size)
		for i := range blocks {
			blocks[i] = span{i * len(recv), (i + 1) * len(recv)}
		}
		return nil
	}
	return c.do(ctx, kindReduceScatter, 0, o, dt, check, func(t *call) error {
		return t.reduceScatter(ctx, send, recv, blocks)
	})
}

func (t *call) reduceScatter(ctx context.Context, send, recv []byte, blocks []span) error {
	c := t.c
	n := len(send)
	acc := c.work(n)
	copy(acc, send)
	me := blocks[c.rank]
	if c.size == 1 {
		copy(recv, acc)
		return nil
	}
	if t.ring(n) {
		if err := t.ringReduceScatter(ctx, acc, blocks); err != nil {
			return err
		}
		copy(recv, acc[me.lo:me.hi])
		return nil
	}
	if _, lg := log2(c.size); !t.commute && t.pipelined(n, lg+1, 2, c.size-1) {
		return t.chainReduceScatter(ctx, acc, recv, blocks)
	}
	// Reduce to rank 0 (in rank order), which sends each rank its block.
	if err := t.treeReduce(ctx, acc, 0, !t.commute); err != nil {
		return err
	}
	if c.rank != 0 {
		return c.run(ctx, t, recvInto(0, recv))
	}
	xs := make([]*xfer, 0, c.size-1)
	for p := 1; p < c.size; p++ {
		xs = append(xs, sendX(p, acc[blocks[p].lo:blocks[p].hi]))
	}
	copy(recv, acc[me.lo:me.hi])
	return c.run(ctx, t, xs...)
}

// Scan leaves in rank i's recv the combination of the send vectors of ranks
// 0 to i, in rank order (MPI_Scan, an inclusive prefix reduction). send and
// recv have the same length and may overlap.
func (c *Comm) Scan(ctx context.Context, send, recv []byte, dt datatype.Basic, o op.Op) error {
	check := func(es int) error { return sameLen(send, recv, es) }
	return c.do(ctx, kindScan, 0, o, dt, check, func(t *call) error {
		if _, lg := log2(c.size); t.pipelined(len(send), lg, 1, c.size-2) {
			return t.chainScan(ctx, send, recv, false)
		}
		return t.scan(ctx, send, recv, false)
	})
}

// Exscan leaves in rank i's recv the combination of the send vectors of
// ranks 0 to i-1, in rank order (MPI_Exscan, an exclusive prefix
// reduction). Rank 0's recv, whose value MPI leaves undefined, is not
// modified (it may be nil there). send and recv have the same length and
// may overlap.
func (c *Comm) Exscan(ctx context.Context, send, recv []byte, dt datatype.Basic, o op.Op) error {
	check := func(es int) error {
		if c.rank == 0 && len(recv) == 0 {
			recv = nil
			return whole("send", send, es)
		}
		return sameLen(send, recv, es)
	}
	return c.do(ctx, kindExscan, 0, o, dt, check, func(t *call) error {
		if _, lg := log2(c.size); t.pipelined(len(send), lg, 1, c.size-2) {
			return t.chainScan(ctx, send, recv, true)
		}
		return t.scan(ctx, send, recv, true)
	})
}

// span is a block [lo, hi) of a vector, in bytes.
type span struct{ lo, hi int }

func (s span) len() int { return s.hi - s.lo }

// equalBlocks splits count elements of es bytes into n blocks whose sizes
// differ by at most one element, the larger first.
func equalBlocks(count, n, es int) []span {
	b := make([]span, n)
	q, r := count/n, count%n
	lo := 0
	for i := range b {
		k := q
		if i < r {
			k++
		}
		b[i] = span{lo, lo + k*es}
		lo += k * es
	}
	return b
}

func mod(a, n int) int { return ((a % n) + n) % n }
