package coll

import (
	"context"

	"github.com/onesided/rma/op"
)

// combine folds in, a piece of another rank's partial result, into acc, the
// same piece of this rank's: acc = in o acc if in comes from lower ranks
// (inLeft), else acc = acc o in. in is an inbox slot, which may be
// overwritten. With a commutative op and !strict the order is not kept
// (no copy); strict keeps it anyway, so that two ranks combining the same
// two operands get the same bits whatever the op.
func (t *call) combine(acc, in []byte, inLeft, strict bool) error {
	if inLeft || t.commute && !strict {
		return op.Apply(t.o, t.dt, acc, in) // fn(in, inout=acc)
	}
	if err := op.Apply(t.o, t.dt, in, acc); err != nil { // in = acc o in
		return err
	}
	copy(acc, in)
	return nil
}

// treeReduce reduces acc, which holds this rank's vector, over the group
// along a binomial tree: at step k a rank whose k-th bit is set sends its
// partial result to the rank without that bit, and is done. The root of
// the tree ends with the result in acc. If ordered, the tree is over the
// ranks in order and its root is rank 0 (root is ignored): each partial
// result covers a contiguous range of ranks, and a rank combines its own
// (the lower range) as the left operand with the one it receives. If not,
// the ranks are rotated so that root is the tree's root, and the op must be
// commutative. ceil(log2 n) steps.
func (t *call) treeReduce(ctx context.Context, acc []byte, root int, ordered bool) error {
	c := t.c
	n := c.size
	if ordered {
		root = 0
	}
	vr := mod(c.rank-root, n)
	for mask := 1; mask < n; mask <<= 1 {
		if vr&mask != 0 {
			return c.run(ctx, t, sendX(mod(vr&^mask+root, n), acc))
		}
		if src := vr | mask; src < n {
			x := recvX(mod(src+root, n), len(acc), func(off int, in []byte) error {
				return t.combine(acc[off:off+len(in)], in, false, false)
			})
			if err := c.run(ctx, t, x); err != nil {
				return err
			}
		}
	}
	return nil
}

// recursiveDoubling is the allreduce of short vectors and of
// non-commutative ops (MPICH's recursive doubling), in place in acc. With
// p the largest power of two <= n and r = n-p, ranks 0 to 2r-1 first fold
// in pairs (the even rank sends to the odd one, which combines, and later
// sends the result back), leaving p participants in rank order; then for
// each bit, partners exchange their partial results and combine them, the
// lower one's as the left operand. log2(p) steps (+2 when n is not a power
// of two), each moving the whole vector.
func (t *call) recursiveDoubling(ctx context.Context, acc []byte) error {
	c := t.c
	n, me := c.size, c.rank
	p := 1
	for p*2 <= n {
		p *= 2
	}
	rem := n - p
	newRank := -1
	switch {
	case me < 2*rem && me%2 == 0:
		if err := c.run(ctx, t, sendX(me+1, acc)); err != nil {
			return err
		}
	case me < 2*rem:
		x := recvX(me-1, len(acc), func(off int, in []byte) error {
			return t.combine(acc[off:off+len(in)], in, true, true)
		})
		if err := c.run(ctx, t, x); err != nil {
			return err
		}
		newRank = me / 2
	default:
		newRank = me - rem
	}
	if newRank >= 0 {
		for mask := 1; mask < p; mask <<= 1 {
			nd := newRank ^ mask
			dst := nd + rem
			if nd < rem {
				dst = nd*2 + 1
			}
			inLeft := nd < newRank
			sx := sendX(dst, acc)
			rx := recvX(dst, len(acc), func(off int, in []byte) error {
				return t.combine(acc[off:off+len(in)], in, inLeft, true)
			})
			rx.after = sx // acc is sent before it is overwritten
			if err := c.run(ctx, t, sx, rx); err != nil {
				return err
			}
		}
	}
	if me < 2*rem {
		if me%2 == 1 {
			return c.run(ctx, t, sendX(me-1, acc))
		}
		return c.run(ctx, t, recvInto(me+1, acc))
	}
	return nil
}

// ringReduceScatter reduces acc over the group in a ring, block by block
// (commutative ops only): at step s = 0 .. n-2 rank i sends block i-s-1 to
// rank i+1 and combines block i-s-2, received from rank i-1, into its own
// copy. Afterwards rank i's block i is the full reduction. Each rank sends
// and receives (n-1)/n of the vector.
func (t *call) ringReduceScatter(ctx context.Context, acc []byte, blocks []span) error {
	c := t.c
	n, me := c.size, c.rank
	right, left := mod(me+1, n), mod(me-1, n)
	for s := 0; s < n-1; s++ {
		sb, rb := blocks[mod(me-s-1, n)], blocks[mod(me-s-2, n)]
		sx := sendX(right, acc[sb.lo:sb.hi])
		rx := recvX(left, rb.len(), func(off int, in []byte) error {
			return op.Apply(t.o, t.dt, acc[rb.lo+off:rb.lo+off+len(in)], in)
		})
		if err := c.run(ctx, t, sx, rx); err != nil {
			return err
		}
	}
	return nil
}

// ringAllgather completes buf, whose block i rank i holds, on every rank:
// at step s rank i sends block i-s to rank i+1 and receives block i-s-1
// from rank i-1.
func (t *call) ringAllgather(ctx context.Context, buf []byte, blocks []span) error {
	c := t.c
	n, me := c.size, c.rank
	right, left := mod(me+1, n), mod(me-1, n)
	for s := 0; s < n-1; s++ {
		sb, rb := blocks[mod(me-s, n)], blocks[mod(me-s-1, n)]
		if err := c.run(ctx, t, sendX(right, buf[sb.lo:sb.hi]), recvInto(left, buf[rb.lo:rb.hi])); err != nil {
			return err
		}
	}
	return nil
}

// scan is Scan (or Exscan) by recursive doubling (MPICH): partial holds the
// combination of a block of 2^k ranks around this one; at step k partners
// rank^2^k exchange their partial results; the one from lower ranks is
// combined as the left operand into partial and into the result, the one
// from higher ranks into partial only. ceil(log2 n) steps.
func (t *call) scan(ctx context.Context, send, recv []byte, exclusive bool) error {
	c := t.c
	n, me := c.size, c.rank
	partial := c.work(len(send))
	copy(partial, send)
	if !exclusive {
		copy(recv, send)
	}
	have := !exclusive // recv holds a value
	for mask := 1; mask < n; mask <<= 1 {
		dst := me ^ mask
		if dst >= n {
			continue
		}
		sx := sendX(dst, partial)
		var rx *xfer
		if dst < me {
			first := !have
			rx = recvX(dst, len(send), func(off int, in []byte) error {
				r := recv[off : off+len(in)]
				if first {
					copy(r, in)
				} else if err := op.Apply(t.o, t.dt, r, in); err != nil { // recv = in o recv
					return err
				}
				return op.Apply(t.o, t.dt, partial[off:off+len(in)], in) // partial = in o partial
			})
			have = true
		} else {
			rx = recvX(dst, len(send), func(off int, in []byte) error {
				return t.combine(partial[off:off+len(in)], in, false, false)
			})
		}
		rx.after = sx // partial is sent before it is overwritten
		if err := c.run(ctx, t, sx, rx); err != nil {
			return err
		}
	}
	return nil
}

// The pipelined chain: rank i receives the combination of ranks 0 to i-1
// from rank i-1 piece by piece (slot-sized chunks), combines its own
// vector into each piece (acc = in o acc) and passes the piece on to rank
// i+1 at once. Every link carries the vector once and the pieces flow
// through all ranks together, so a long vector takes about its transfer
// time plus one piece per rank, in rank order whatever the op: the long-
// vector algorithm of Scan, Exscan and of the non-commutative reductions,
// which the ring cannot do in rank order.

// chain returns the transfers of this rank's link of a chain over acc
// (nil where there is none: no receive at rank 0, no send at rank n-1).
func (t *call) chain(acc []byte) (rx, sx *xfer) {
	c := t.c
	if c.rank > 0 {
		rx = recvX(c.rank-1, len(acc), func(off int, in []byte) error {
			return op.Apply(t.o, t.dt, acc[off:off+len(in)], in) // acc = in o acc
		})
	}
	if c.rank < c.size-1 {
		sx = sendX(c.rank+1, acc)
		sx.after = rx
	}
	return rx, sx
}

// runAll runs the non-nil transfers of xs.
func (t *call) runAll(ctx context.Context, xs ...*xfer) error {
	k := 0
	for _, x := range xs {
		if x != nil {
			xs[k] = x
			k++
		}
	}
	return t.c.run(ctx, t, xs[:k]...)
}

// pipelined reports whether the chain beats the logarithmic algorithm on a
// vector of n bytes: the latter moves the vector treeRounds times one
// after the other, the chain chainRounds times plus one piece per hop.
func (t *call) pipelined(n, treeRounds, chainRounds, hops int) bool {
	th := t.c.cfg.threshold
	cs := t.c.cfg.slotSize
	pieces := max(1, (n+cs-1)/cs)
	return th >= 0 && n >= th && pieces*treeRounds > pieces*chainRounds+hops
}

// log2 returns floor(log2 n) and ceil(log2 n).
func log2(n int) (lo, hi int) {
	for 1<<(lo+1) <= n {
		lo++
	}
	hi = lo
	if 1<<lo < n {
		hi++
	}
	return lo, hi
}

// chainReduce is Reduce along the chain, to rank n-1, which passes each
// piece on to root as soon as it is complete. acc holds this rank's vector
// (at root, unless root is n-1, acc is not recv).
func (t *call) chainReduce(ctx context.Context, acc, recv []byte, root int) error {
	c := t.c
	last := c.size - 1
	rx, sx := t.chain(acc)
	var fx *xfer
	switch {
	case root == last:
	case c.rank == last:
		fx = sendX(root, acc)
		fx.after = rx
	case c.rank == root:
		fx = recvInto(last, recv)
	}
	return t.runAll(ctx, rx, sx, fx)
}

// chainAllreduce is Allreduce along the chain to rank n-1, then a pipelined
// broadcast of the pieces along the ring n-1, 0, 1, ..., n-2. acc holds this
// rank's vector; at rank n-1 it is recv, elsewhere it is not.
func (t *call) chainAllreduce(ctx context.Context, acc, recv []byte) error {
	c := t.c
	me, last := c.rank, c.size-1
	rx, sx := t.chain(acc)
	var br, bs *xfer
	if me == last {
		bs = sendX(0, recv)
		bs.after = rx
	} else {
		br = recvInto(mod(me-1, c.size), recv)
		if me < last-1 {
			bs = sendX(me+1, recv)
			bs.after = br
		}
	}
	return t.runAll(ctx, rx, sx, br, bs) // sx before bs: both go to me+1
}

// chainReduceScatter is ReduceScatter along the chain to rank n-1, which
// sends each rank its block as soon as the block is complete.
func (t *call) chainReduceScatter(ctx context.Context, acc, recv []byte, blocks []span) error {
	c := t.c
	last := c.size - 1
	rx, sx := t.chain(acc)
	xs := []*xfer{rx, sx}
	if c.rank != last {
		xs = append(xs, recvInto(last, recv))
	} else {
		for p, b := range blocks[:last] {
			x := sendX(p, acc[b.lo:b.hi])
			x.after, x.base = rx, b.lo
			xs = append(xs, x)
		}
	}
	if err := t.runAll(ctx, xs...); err != nil {
		return err
	}
	if c.rank == last {
		copy(recv, acc[blocks[last].lo:blocks[last].hi])
	}
	return nil
}

// chainScan is Scan (Exscan) along the chain: rank i receives the
// combination of ranks 0 to i-1, keeps it (Exscan) or its combination with
// its own vector (Scan) in recv, and passes the latter on.
func (t *call) chainScan(ctx context.Context, send, recv []byte, exclusive bool) error {
	c := t.c
	me, last := c.rank, c.size-1
	if !exclusive {
		copy(recv, send)
		rx, sx := t.chain(recv)
		return t.runAll(ctx, rx, sx)
	}
	var next []byte // what this rank passes on: the ranks 0..me
	if me < last {
		next = c.work(len(send))
		copy(next, send)
	}
	var rx, sx *xfer
	if me > 0 {
		rx = recvX(me-1, len(send), func(off int, in []byte) error {
			if next != nil {
				if err := op.Apply(t.o, t.dt, next[off:off+len(in)], in); err != nil { // next = in o send
					return err
				}
			}
			copy(recv[off:], in)
			return nil
		})
	}
	if me < last {
		sx = sendX(me+1, next)
		sx.after = rx
	}
	return t.runAll(ctx, rx, sx)
}
