// Package atomics decides which accumulate operations a window sends to the
// NIC's atomics and which to the target process's engine, and probes that the
// NIC's atomics work in host byte order.
//
// NIC atomics on most devices (and on rxe) are ATOMIC_HCA: atomic only among
// themselves, not against the target CPU. A NIC atomic and a CPU
// read-modify-write on one location could lose an update, so a window's
// routing never lets both paths touch one location at once:
//
//   - By default (MPI's accumulate_ops = same_op_no_op) FetchAndOp SUM on 64-bit
//     integers and CompareAndSwap on 64-bit integers go to the NIC; NO_OP on a
//     64-bit type is an aligned 8-byte RDMA READ, safe against both paths;
//     every other (op, datatype) pair goes to the target's engine.
//   - A device without remote atomics sends everything to the engine.
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
)

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
	}
	return fmt.Sprintf("Route(%d)", uint8(r))
}

// NIC reports whether the route uses the NIC without the target CPU.
func (r Route) NIC() bool { return r != Engine }

// Policy is a window's routing, fixed when the window is created.
type Policy struct {
	nic bool // the device has usable remote atomics
}

// DefaultPolicy is MPI's same_op_no_op routing for a device with the given
// atomic capability; probeErr is the result of Probe (nil: atomics work).
func DefaultPolicy(cap verbs.AtomicCap, probeErr error) Policy {
	return Policy{nic: cap != verbs.AtomicNone && probeErr == nil}
}

func is64(b datatype.Basic) bool { return b == datatype.Int64 || b == datatype.Uint64 }

// FetchAndOp returns the route of FetchAndOp(o) on b.
func (p Policy) FetchAndOp(o op.Op, b datatype.Basic) Route {
	switch {
	case !p.nic:
		return Engine
	case o == op.Sum && is64(b):
		return NICFetchAdd
	case o == op.NoOp && b.Size() == 8:
		return NICRead
	}
	return Engine
}

// CompareAndSwap returns the route of CompareAndSwap on b.
func (p Policy) CompareAndSwap(b datatype.Basic) Route {
	if p.nic && is64(b) {
		return NICCompareSwap
	}
	return Engine
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
