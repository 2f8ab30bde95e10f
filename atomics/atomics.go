// Package atomics decides which accumulate operations a window sends to the
// NIC's atomics and which to the target process's engine, and probes that the
// NIC's atomics work in host byte order.
//
// NIC atomics on most devices (and on rxe) are ATOMIC_HCA: atomic only among
// themselves, not against the target CPU. A NIC atomic and a CPU
// read-modify-write on one location could lose an update, so a window's
// routing never lets both paths update one location:
//
//   - By default (MPI's accumulate_ops = same_op_no_op) every predefined
//     accumulate-family operation on a 64-bit integer goes to the NIC: SUM
//     as fetch-and-add, CompareAndSwap as compare-and-swap, NO_OP as an
//     aligned 8-byte RDMA READ (atomic with the NIC's atomics, the only
//     writers of the word), and REPLACE, MIN, MAX, PROD, the logical and
//     bitwise ops and user-defined ops (op.Register) as compare-and-swap
//     loops. Programs mix ops on one word (an MCS lock mixes
//     CompareAndSwap and FetchAndOp(REPLACE)); all of them stay atomic with
//     each other. Every other datatype goes to the target's engine, NO_OP included: the
//     engine may write an element of another type in more than one store
//     (a value-index pair, a complex number), which a READ could see half
//     done, and such an element need not be 8-byte aligned.
//   - A window may declare the (op, datatype) pairs it will use. If every
//     declared pair is NIC-capable, they go to the NIC as above. If any is
//     not, every accumulate on the window goes to the engine, so that mixing
//     ops on one location is safe. A window declared "any op" does the same.
//   - The ranks of a window agree on its routing when it is created: if one
//     rank's device has no usable remote atomics, every rank sends
//     everything to the engine.
//
// ATOMIC_GLOB devices could relax the rule; this package does not assume so.
package atomics

import (
	"fmt"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/verbs"
)

// Route is the path an operation takes.
type Route uint8

const (
	// Engine: the target process applies the operation (active message).
	Engine Route = iota
	// NICFetchAdd: IBV_WR_ATOMIC_FETCH_AND_ADD on an aligned 8-byte word.
	NICFetchAdd
	// NICCompareSwap: IBV_WR_ATOMIC_CMP_AND_SWP on an aligned 8-byte word.
	NICCompareSwap
	// NICRead: an aligned 8-byte RDMA READ (NO_OP on a 64-bit type).
	NICRead
	// NICCompareSwapLoop: READ, then IBV_WR_ATOMIC_CMP_AND_SWP until the
	// word did not change in between (REPLACE, MIN, MAX, bitwise ops).
	NICCompareSwapLoop
)

// String returns the route's name, as the routing tables and benchmarks
// print it ("nic-fetch-add").
func (r Route) String() string {
	switch r {
	case Engine:
		return "engine"
	case NICFetchAdd:
		return "nic-fetch-add"
	case NICCompareSwap:
		return "nic-compare-swap"
	case NICRead:
		return "nic-read"
	case NICCompareSwapLoop:
		return "nic-compare-swap-loop"
	}
	return fmt.Sprintf("Route(%d)", uint8(r))
}

// NIC reports whether the route uses the NIC without the target CPU.
func (r Route) NIC() bool { return r != Engine }

// Pair is an (op, datatype) pair a window declares it will use.
type Pair struct {
	Op    op.Op          // the accumulate op
	Basic datatype.Basic // the datatype it is applied to
}

// Policy is a window's routing, fixed when the window is created.
type Policy struct {
	nic    bool // the device has usable remote atomics
	mode   uint8
	pairs  []Pair
	engine bool // declared pairs include one the NIC cannot do
}

const (
	modeSameOpNoOp uint8 = iota
	modeDeclared
	modeAnyOp
)

// Usable reports whether a device with the given atomic capability, whose
// Probe returned probeErr, has remote atomics a window may use. The ranks of
// a window combine their answers: the window uses NIC atomics only if every
// rank's device can.
func Usable(cap verbs.AtomicCap, probeErr error) bool {
	return cap != verbs.AtomicNone && probeErr == nil
}

// DefaultPolicy is MPI's same_op_no_op routing; nic says whether every
// rank of the window has usable NIC atomics (see Usable).
func DefaultPolicy(nic bool) Policy {
	return Policy{nic: nic}
}

// DeclaredPolicy routes a window that will use only the given pairs (and
// NO_OP, and CompareAndSwap on 64-bit integers).
func DeclaredPolicy(nic bool, pairs []Pair) Policy {
	p := DefaultPolicy(nic)
	p.mode = modeDeclared
	p.pairs = append([]Pair(nil), pairs...)
	for _, pr := range pairs {
		if nicRoute(pr.Op, pr.Basic) == Engine {
			p.engine = true
		}
	}
	return p
}

// AnyOpPolicy routes every accumulate through the engine: any op may be
// mixed with any other on one location.
func AnyOpPolicy() Policy { return Policy{mode: modeAnyOp, engine: true} }

func is64(b datatype.Basic) bool { return b == datatype.Int64 || b == datatype.Uint64 }

// nicRoute is how the NIC would do o on b, or Engine if it cannot.
func nicRoute(o op.Op, b datatype.Basic) Route {
	switch {
	case o == op.NoOp && is64(b):
		return NICRead
	case !is64(b):
		return Engine
	case o == op.Sum:
		return NICFetchAdd
	case o == op.Replace, o == op.Min, o == op.Max, o == op.Prod,
		o == op.Land, o == op.Lor, o == op.Lxor, o == op.Band, o == op.Bor, o == op.Bxor,
		o >= op.FirstUser: // applied by the origin, op.Register says
		return NICCompareSwapLoop
	}
	return Engine // ops MPI does not define on integers (refused by op.Check)
}

// FetchAndOp returns the route of FetchAndOp, GetAccumulate or Accumulate
// with o on elements of type b.
func (p Policy) FetchAndOp(o op.Op, b datatype.Basic) Route {
	if !p.nic || p.engine {
		return Engine
	}
	return nicRoute(o, b)
}

// Accumulate is FetchAndOp's route for the non-fetching form.
func (p Policy) Accumulate(o op.Op, b datatype.Basic) Route {
	r := p.FetchAndOp(o, b)
	if r == NICRead {
		return Engine // NO_OP is not an Accumulate op; the caller refuses it
	}
	return r
}

// CompareAndSwap returns the route of CompareAndSwap on b.
func (p Policy) CompareAndSwap(b datatype.Basic) Route {
	if p.nic && !p.engine && is64(b) {
		return NICCompareSwap
	}
	return Engine
}

// UsesNIC reports whether some operation on the window may be a NIC atomic
// (so its memory needs the remote-atomic access right).
func (p Policy) UsesNIC() bool { return p.nic && !p.engine }

// Declared reports whether o on b is among the declared pairs (always true
// for a default or any-op window). NO_OP is always allowed.
func (p Policy) Declared(o op.Op, b datatype.Basic) bool {
	if p.mode != modeDeclared || o == op.NoOp {
		return true
	}
	for _, pr := range p.pairs {
		if pr.Op == o && pr.Basic == b {
			return true
		}
	}
	return false
}

// String describes the policy (for debugging and tests).
func (p Policy) String() string {
	var mode string
	switch p.mode {
	case modeSameOpNoOp:
		mode = "same_op_no_op"
	case modeDeclared:
		mode = fmt.Sprintf("declared %v", p.pairs)
	default:
		mode = "any_op"
	}
	return fmt.Sprintf("%s, nic atomics %v, all through engine %v", mode, p.nic, p.engine)
}

// ProbeValue is the word Probe starts from: its bytes differ pairwise, so a
// byte-swapped result cannot pass.
const ProbeValue = 0x0102030405060708

// Probe checks that a NIC fetch-and-add works in host byte order. fetchAdd
// must add 1 to an aligned word holding ProbeValue and return the old value
// it fetched and the value the word holds afterwards.
func Probe(fetchAdd func(add uint64) (old, after uint64, err error)) error {
	old, after, err := fetchAdd(1)
	if err != nil {
		return fmt.Errorf("atomics: probe: %w", err)
	}
	if old != ProbeValue || after != ProbeValue+1 {
		return fmt.Errorf("atomics: %w: NIC fetch-and-add is not in host byte order (fetched %#x, left %#x)",
			verbs.ErrNotSupported, old, after)
	}
	return nil
}
