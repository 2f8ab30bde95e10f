// Package rma is the contract that the library's two front doors share:
// a Window is one target's memory seen from an origin, whether it is a
// group window's view of one rank (win.Window.Target) or a window a
// service client opened (service.Client.Open). Code written against it,
// and the typed helpers here (FetchAndOp, CompareAndSwap, PutSlice, ...),
// run unchanged in both modes.
//
// The calls are MPI's one-sided calls on one target: Put and Get
// (MPI_Put, MPI_Get), Accumulate, GetAccumulate, FetchAndOp and
// CompareAndSwap (MPI_Accumulate, MPI_Get_accumulate, MPI_Fetch_and_op,
// MPI_Compare_and_swap), their request forms (MPI_Rput, MPI_Rget,
// MPI_Raccumulate, MPI_Rget_accumulate), Lock and Unlock (MPI_Win_lock,
// MPI_Win_unlock) and Flush (MPI_Win_flush). disp is in bytes for a
// service window and in the target's displacement units for a group
// window (bytes unless the window was made with another unit). What each
// call may take, how it is routed (a NIC atomic or the target's engine)
// and what it guarantees are the same in both modes: see package win,
// which owns those rules, and package service for what a service window
// adds (grants, the server's locks).
//
// Errors match the same sentinels whichever mode raised them: those
// below (package win and package service re-export them), op.ErrOpDatatype
// and op.ErrOpUse, and package fallback's errors for a target engine's
// refusal.
package rma

import (
	"context"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/internal/errs"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/verbs"
)

// The errors of both modes; match them with errors.Is.
var (
	// ErrInvalid: a bad argument. The ErrInvalid of packages verbs,
	// datatype, op, coll and win match it.
	ErrInvalid = errs.ErrInvalid
	// ErrOutOfWindow: the target region is not inside the window.
	ErrOutOfWindow = errs.ErrOutOfWindow
	// ErrAlignment: a NIC atomic's target is not 8-byte aligned.
	ErrAlignment = errs.ErrAlignment
	// ErrEpoch: the call needs a synchronisation epoch (a lock) that is
	// not open, or opens one that conflicts with an open one.
	ErrEpoch = errs.ErrEpoch
	// ErrUnknownWindow: the target has no such window.
	ErrUnknownWindow = errs.ErrUnknownWindow
	// ErrPeerLost: the target process is gone.
	ErrPeerLost = verbs.ErrPeerLost
	// ErrOutcomeUnknown: the connection to a live target failed before a
	// NIC atomic's completion told whether the target applied it.
	ErrOutcomeUnknown = verbs.ErrOutcomeUnknown
)

// Window is one target's window memory, as an origin reaches it. See the
// package documentation; win.Window and service.Window document each call.
type Window interface {
	// Put writes origin at disp; it returns once origin may be reused,
	// and Flush (or Unlock) completes it at the target.
	Put(ctx context.Context, origin []byte, disp int) error
	// Get reads len(result) bytes at disp into result.
	Get(ctx context.Context, result []byte, disp int) error
	// Accumulate applies o with origin, elements of dt, at disp.
	Accumulate(ctx context.Context, origin []byte, dt datatype.Basic, disp int, o op.Op) error
	// GetAccumulate is Accumulate that returns the old elements in result.
	GetAccumulate(ctx context.Context, origin, result []byte, dt datatype.Basic, disp int, o op.Op) error
	// PutTo, GetTo, AccumulateTo and GetAccumulateTo are Put, Get,
	// Accumulate and GetAccumulate with datatypes: origin and result are
	// Buffers, the target a Layout, and their type signatures must match
	// (the elements are taken and placed in type-map order). A result's
	// entries must not overlap.
	PutTo(ctx context.Context, origin Buffer, t Layout) error
	GetTo(ctx context.Context, result Buffer, t Layout) error
	AccumulateTo(ctx context.Context, origin Buffer, t Layout, o op.Op) error
	GetAccumulateTo(ctx context.Context, origin, result Buffer, t Layout, o op.Op) error
	// FetchAndOp is GetAccumulate of one element.
	FetchAndOp(ctx context.Context, origin, result []byte, dt datatype.Basic, disp int, o op.Op) error
	// CompareAndSwap stores origin at disp if the element there equals
	// compare, and returns the old element in result.
	CompareAndSwap(ctx context.Context, origin, compare, result []byte, dt datatype.Basic, disp int) error

	// RPut, RGet, RAccumulate and RGetAccumulate start the call and
	// return its Request.
	RPut(ctx context.Context, origin []byte, disp int) (Request, error)
	RGet(ctx context.Context, result []byte, disp int) (Request, error)
	RAccumulate(ctx context.Context, origin []byte, dt datatype.Basic, disp int, o op.Op) (Request, error)
	RGetAccumulate(ctx context.Context, origin, result []byte, dt datatype.Basic, disp int, o op.Op) (Request, error)

	// Lock takes the target's lock, shared or exclusive; Unlock releases
	// it, once every call made under it is complete at the target.
	Lock(ctx context.Context, lt LockType) error
	Unlock(ctx context.Context) error
	// Flush completes at the target every call made so far.
	Flush(ctx context.Context) error
}

// Buffer is origin or result memory described by an MPI datatype: Count
// instances of Type, each Type.Extent() bytes after the previous, the first
// starting at Data[0] (plus Type's lower bound): MPI's buffer, count and
// datatype.
type Buffer struct {
	Data  []byte        // the memory; the elements Type selects must lie in it
	Type  datatype.Type // the layout of one instance
	Count int           // the number of instances
}

// Contiguous describes b as len(b)/dt.Size() consecutive elements of dt.
func Contiguous(b []byte, dt datatype.Basic) Buffer {
	return Buffer{Data: b, Type: dt.Type(), Count: len(b) / max(dt.Size(), 1)}
}

// Layout is a target layout: Count instances of Type from displacement
// Disp (MPI's target_disp, target_count and target_datatype).
type Layout struct {
	Disp  int           // where instance 0 of Type begins (see Window for the unit)
	Type  datatype.Type // the layout of one instance
	Count int           // the number of instances
}

// Request is a call started by a request form (MPI_Request).
type Request interface {
	// Wait returns when the call is complete (for RGet and
	// RGetAccumulate, when result holds the data), with its error. If ctx
	// ends first, Wait returns ctx's error and the call is abandoned: its
	// result buffer is not written afterwards, and the request is complete
	// with that error (the target may or may not apply an abandoned
	// accumulate; Flush still waits for it).
	Wait(ctx context.Context) error
	// Test reports whether the call is complete, and its error if so.
	Test() (bool, error)
}

// LockType is a passive-target lock's kind.
type LockType int

const (
	LockShared    LockType = iota + 1 // MPI_LOCK_SHARED
	LockExclusive                     // MPI_LOCK_EXCLUSIVE
)
