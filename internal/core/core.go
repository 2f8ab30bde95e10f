// Package core holds what the two front doors of the library, group
// windows (package win) and service windows (package service), do the
// same way on the origin side: carrying out an accumulate-family call on
// one 64-bit word by the route package atomics chose for it. Each front
// door gives its connection to the target as a NIC; the engine's wire
// format and target code are package fallback's, shared the same way.
package core

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/internal/errs"
	"github.com/onesided/rma/op"
)

// NIC is the NIC atomics of a connection to one target, on 8-byte
// aligned words of its registered memory.
type NIC interface {
	Read8(ctx context.Context, addr uint64, rkey uint32) (uint64, error)
	FetchAdd(ctx context.Context, addr uint64, rkey uint32, add uint64) (uint64, error)
	CompareSwap(ctx context.Context, addr uint64, rkey uint32, compare, swap uint64) (uint64, error)
}

// Scratch is the memory a compare-and-swap loop computes in (op's kernels
// take slices, which a stack array given to them would not stay on).
type Scratch [16]byte

// Element applies o on dt with operand v to the word at addr by route,
// one of the NIC routes of atomics.Policy.FetchAndOp or Accumulate, and
// returns the word's old value:
//   - NICFetchAdd: one fetch-and-add of v;
//   - NICRead: one 8-byte read (NO_OP);
//   - NICCompareSwapLoop: read the word, compute o's result with op's
//     kernel, and swap it in unless another update came in between, in
//     which case compute again from the value the swap found. A result
//     equal to the word's value changes nothing and needs no swap: the
//     read was the atomic step.
func Element(ctx context.Context, nic NIC, route atomics.Route, o op.Op, dt datatype.Basic, addr uint64, rkey uint32, v uint64, s *Scratch) (uint64, error) {
	switch route {
	case atomics.NICFetchAdd:
		return nic.FetchAdd(ctx, addr, rkey, v)
	case atomics.NICRead:
		return nic.Read8(ctx, addr, rkey)
	case atomics.NICCompareSwapLoop:
	default:
		return 0, fmt.Errorf("%w: %v is not a route of an accumulate op", errs.ErrInvalid, route)
	}
	cur, err := nic.Read8(ctx, addr, rkey)
	if err != nil {
		return 0, err
	}
	t, b := s[:8], s[8:]
	for {
		binary.NativeEndian.PutUint64(t, cur)
		binary.NativeEndian.PutUint64(b, v)
		if err := op.Apply(o, dt, t, b); err != nil {
			return 0, err
		}
		next := binary.NativeEndian.Uint64(t)
		if next == cur {
			return cur, nil
		}
		old, err := nic.CompareSwap(ctx, addr, rkey, cur, next)
		if err != nil || old == cur {
			return old, err
		}
		cur = old
	}
}
