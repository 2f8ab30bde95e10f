// Package win provides MPI windows: memory every process of a group exposes
// for one-sided access, and the RMA calls on it (MPI-4.1 chapter 12).
//
// # Windows
//
// Allocate (MPI_Win_allocate) gives page-aligned memory off the Go heap;
// Create and CreateSlice expose the caller's memory, pinned until Free;
// CreateDynamic starts empty and each rank exposes memory with Attach,
// addressed by Address. Creation and Free are collective. Options declare
// the accumulate ops a window uses (AccumulateOps, AnyOp) and its ordering
// (AccumulateOrdering); Info reads them back.
//
// # Calls
//
// Put, Get, Accumulate, GetAccumulate, FetchAndOp, CompareAndSwap, their
// datatype forms (PutTo, GetTo, AccumulateTo, GetAccumulateTo with Buffer
// and Region) and the request forms RPut, RGet, RAccumulate and
// RGetAccumulate (Request.Wait, Request.Test). Put and Accumulate return as
// soon as the origin buffer may be reused (their data is copied); a flush
// or the end of the epoch completes them at the target. Get and the
// fetching calls return when their result is in the caller's buffer.
//
// # Synchronisation
//
// Every RMA call must be made in an access epoch to its target: between
// Fences (collective), between Lock and Unlock of the target (shared or
// exclusive), between LockAll and UnlockAll, or between Start and Complete
// with the target in Start's group (the target exposing its window between
// Post and Wait). Flush, FlushAll, FlushLocal and FlushLocalAll complete
// calls inside a passive-target epoch. A call outside a matching epoch
// returns ErrEpoch. Locks and post/start counters live in a small page of
// each rank's memory and are driven by NIC atomics only: the target's CPU
// takes no part, and a waiting writer holds off new readers.
//
// # Local memory
//
// A rank may load and store its own window memory (Bytes, or the memory
// given to Create, CreateSlice and Attach) as MPI allows for the window's
// local copy: the updates other ranks made and completed before a
// synchronisation are visible after it, and stores made before it are seen
// by their accesses after it. The synchronising calls are Fence, Free, the
// group's Barrier and AllGather, Lock and Unlock of the own rank, LockAll
// and UnlockAll, Post, Wait, a Test that returns true, and Sync. Each also
// orders the caller with the goroutine that applies active messages, so
// these loads and stores are not data races in Go's memory model.
//
// # Routing
//
// NIC atomics are atomic only among themselves on most devices, so a
// window never lets them and the target's CPU update one location at once.
// By default (MPI's same_op_no_op) FetchAndOp and Accumulate with SUM on
// int64/uint64 are NIC fetch-and-adds, CompareAndSwap on int64/uint64 is a
// NIC compare-and-swap, NO_OP on a 64-bit type an aligned 8-byte READ; all
// other pairs are applied by the target's engine from active messages.
// Route and RouteCompareAndSwap tell which path a call takes. NIC atomics
// need an 8-byte aligned target.
//
// # Concurrency
//
// The RMA calls are safe from many goroutines at once. Creation, Free and
// the epoch calls are made by one goroutine per window at a time.
//
// # Cancellation and failures
//
// Every call that waits takes a context. When it ends, the call returns its
// error promptly and the window stays usable: a cancelled Lock or LockAll
// undoes what it had taken; a cancelled fetching call (Get, GetAccumulate,
// FetchAndOp, CompareAndSwap, Request.Wait) never writes its result buffer
// afterwards, and the target may or may not have applied it. A cancelled
// Fence or Free leaves the group's bootstrap broken: later collective calls
// fail. When a peer process dies, calls to it fail with ErrPeerLost within
// the group's peer timeout (group.Options.PeerTimeout) and calls among the
// others go on; Free then returns an error.
//
// # Errors
//
// Match with errors.Is: ErrRank, ErrOutOfWindow, ErrAlignment, ErrInvalid,
// ErrEpoch, ErrFreed, ErrUndeclared, ErrNotSupported, ErrPeerLost;
// op.ErrOpDatatype and op.ErrOpUse for an op MPI does not allow there;
// fallback.ErrRemoteRejected (and its reasons) when a target refuses an
// active message; verbs.ErrRemoteAccess from the network. A call never
// panics on bad input.
package win
