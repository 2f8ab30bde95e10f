package win

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
)

// Option configures a window at creation, like MPI's info keys.
type Option func(*config)

type config struct {
	pairs   []atomics.Pair // declared (op, datatype) pairs; nil: same_op_no_op
	anyOp   bool
	ordered bool
	pack    bool // PackSmallBlocks
}

// digest summarises the options every rank of a window must agree on:
// those that decide how accumulates are routed (the declared pairs as a
// set: their order does not matter).
func (c *config) digest() uint64 {
	keys := make([]string, len(c.pairs))
	for i, p := range c.pairs {
		keys[i] = fmt.Sprintf("%d:%d", p.Op, p.Basic)
	}
	slices.Sort(keys)
	h := fnv.New64a()
	fmt.Fprintf(h, "any=%v declared=%v %v", c.anyOp, c.pairs != nil, slices.Compact(keys))
	return h.Sum64()
}

// AccumulateOps declares the (op, datatype) pairs the window's accumulate
// calls will use (like MPICH's which_accumulate_ops). If the NIC can do
// every one of them, all go to the NIC; otherwise every accumulate on the
// window goes through the target's engine, so that they may be mixed on one
// location. Calls with an undeclared pair fail with ErrUndeclared. NO_OP is
// always allowed. With no pairs it declares nothing: the window keeps the
// default (MPI's same_op_no_op), as an info key left unset would.
func AccumulateOps(pairs ...atomics.Pair) Option {
	return func(c *config) { c.pairs = append(c.pairs[:0:0], pairs...); c.anyOp = false }
}

// AnyOp declares that accumulates with any op may hit one location at once
// (MPI's accumulate_ops = any_op... in spirit): every accumulate, NIC-capable
// or not, goes through the target's engine.
func AnyOp() Option { return func(c *config) { c.anyOp = true; c.pairs = nil } }

// AccumulateOrdering sets MPI's accumulate_ordering. With true (the default,
// "rar,raw,war,waw") accumulates from one origin to one target are applied
// in program order, and a Get or NIC atomic waits for the origin's earlier
// engine accumulates to that target. With false ("none") that wait is skipped.
func AccumulateOrdering(ordered bool) Option { return func(c *config) { c.ordered = ordered } }

// PackSmallBlocks has this rank's PutTo, GetTo, RPutTo and RGetTo whose
// target layout has many small blocks (more than one, averaging under
// 1 KiB for a Put and 4 KiB for a Get) send their data packed to the
// target's engine, in as few active messages as hold it, instead of one
// RDMA WRITE or READ per block: the engine applies a Put as an Accumulate
// with REPLACE and a Get as a GetAccumulate with NO_OP, each element
// whole, as MPICH sends noncontiguous RMA that its network cannot describe
// as active messages. On Soft-RoCE a Put of 30000 blocks of 12 bytes then
// took 12 ms against 575 ms (a Get 11 ms against 1.04 s), and across two
// hosts one of 5000 such blocks 8 ms against 515 ms. The price is that of
// the accumulates: the target's CPU takes part (its engine goroutine
// applies the data), where an RDMA Put or Get needs none. Completion is
// unchanged (a flush or the end of the epoch completes a Put at the
// target), and a Put whose target layout overlaps itself stays on RDMA.
// Off by default: Put and Get are RDMA WRITEs and READs. Each rank
// chooses for its own calls.
func PackSmallBlocks() Option { return func(c *config) { c.pack = true } }

// Info describes the window's settings, as MPI_Win_get_info would.
type Info struct {
	AccumulateOps      string // "same_op_no_op", "any_op", or the declared pairs
	AccumulateOrdering string // "rar,raw,war,waw" or "none"
	PackSmallBlocks    bool   // PackSmallBlocks was given (this rank)
	Size, DispUnit     int    // this rank's window size in bytes and displacement unit
}

// Info returns the window's settings.
func (w *Window) Info() Info {
	i := Info{AccumulateOps: "same_op_no_op", AccumulateOrdering: "rar,raw,war,waw", PackSmallBlocks: w.cfg.pack,
		Size: w.size, DispUnit: w.dispUnit}
	switch {
	case w.cfg.anyOp:
		i.AccumulateOps = "any_op"
	case w.cfg.pairs != nil:
		var s []string
		for _, p := range w.cfg.pairs {
			s = append(s, fmt.Sprintf("%v:%v", p.Op, p.Basic))
		}
		i.AccumulateOps = strings.Join(s, ",")
	}
	if !w.cfg.ordered {
		i.AccumulateOrdering = "none"
	}
	return i
}

// Route says which path an accumulate-family call with o on dt takes on
// this window (FetchAndOp, GetAccumulate and Accumulate share it).
func (w *Window) Route(o op.Op, dt datatype.Basic) atomics.Route { return w.policy.FetchAndOp(o, dt) }
