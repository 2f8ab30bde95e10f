// Package win provides MPI windows: memory every process of a group exposes
// for one-sided access, and the RMA calls on it.
//
// Allocate creates a window (collective; MPI_Win_allocate) of memory that is
// page aligned, off the Go heap and registered with the NIC. Access happens
// in a passive-target epoch: LockAll, then Put, Get, FetchAndOp and
// CompareAndSwap to any rank, Flush/FlushAll to complete them at the
// targets, UnlockAll to end the epoch. Free (collective) releases the window.
//
// Put returns as soon as its origin buffer may be reused; Flush completes it
// at the target. Get, FetchAndOp and CompareAndSwap return when their result
// is in the caller's buffer.
//
// Routing: FetchAndOp(SUM) on int64/uint64 is a NIC fetch-and-add,
// CompareAndSwap on int64/uint64 a NIC compare-and-swap, and FetchAndOp(NO_OP)
// on a 64-bit type an aligned 8-byte RDMA READ, all without the target's
// CPU. RouteFetchAndOp and RouteCompareAndSwap tell which path a call takes.
// NIC atomics need an 8-byte aligned target.
//
// Concurrency: the RMA calls are safe from many goroutines at once;
// Allocate, Free and the epoch calls are made by one goroutine per process.
//
// Errors (errors.Is): ErrRank, ErrOutOfWindow, ErrAlignment, ErrInvalid,
// ErrEpoch, ErrFreed, ErrNotSupported; op.ErrOpDatatype for an op MPI does
// not define on a datatype; verbs.ErrPeerLost and verbs.ErrRemoteAccess from
// the network. A call never panics on bad input and leaves the window usable.
package win
