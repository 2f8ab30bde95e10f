// Package win provides MPI windows: memory every process of a group exposes
// for one-sided access, and the RMA calls on it (MPI-4.1 chapter 12).
//
// # Windows
//
// Allocate (MPI_Win_allocate) gives page-aligned memory off the Go heap;
// Create and CreateSlice expose the caller's memory, pinned until Free;
// CreateDynamic starts empty and each rank exposes memory with Attach,
// addressed by Address. Creation and Free are collective. A creation that
// fails on one rank (memory it cannot register, a bad size or displacement
// unit) fails on every rank, there with its own error and elsewhere with
// ErrNotCreated, and the group stays usable. Options declare
// the accumulate ops a window uses (AccumulateOps, AnyOp) and its ordering
// (AccumulateOrdering), and whether this rank's Puts and Gets of many small
// blocks go to the target's engine (PackSmallBlocks); Info reads them back.
//
// # Calls
//
// Put, Get, Accumulate, GetAccumulate, FetchAndOp, CompareAndSwap, their
// datatype forms (PutTo, GetTo, AccumulateTo, GetAccumulateTo with Buffer
// and Region) and the request forms RPut, RGet, RAccumulate,
// RGetAccumulate, RPutTo and RGetTo (Request.Wait, Request.Test, Waitall,
// Waitany, Waitsome, Testall, Testany, Testsome; a flush or the end of the
// epoch completes them too), which MPI allows only in Lock and LockAll
// epochs. Put and Accumulate return as soon as the origin buffer may be
// reused (their data is copied); a flush or the end of the epoch completes
// them at the target. Get and the fetching calls return when their result
// is in the caller's buffer. The generic functions FetchAndOp and
// CompareAndSwap (on a Go value) and PutSlice, GetSlice, AccumulateSlice
// and GetAccumulateSlice (on a Go slice) take Go values instead of bytes
// and a datatype.
//
// # Synchronisation
//
// Every RMA call must be made in an access epoch to its target: between
// Fences (collective), between Lock and Unlock of the target (shared or
// exclusive), between LockAll and UnlockAll, or between Start and Complete
// with the target in Start's group (the target exposing its window between
// Post and Wait). Flush, FlushAll, FlushLocal and FlushLocalAll complete
// calls inside a passive-target epoch. A call outside a matching epoch
// returns ErrEpoch, and so does Free inside an epoch other than a fence
// epoch (unless a peer is lost: see Free). Locks and post/start counters live in a small page of
// each rank's memory and are driven by NIC atomics only: the target's CPU
// takes no part, and a writer waiting for the readers to leave holds off
// new ones. Each epoch
// call takes only the assertions MPI lists for it (see Assert; Lock and
// LockAll take only NoCheck, and then take no lock); any other returns
// ErrInvalid, as in MPICH. As in MPICH too, a Start epoch and Lock epochs
// exclude each other, whatever their ranks (ErrEpoch).
//
// Fence and Free synchronise through a barrier of the window's own (NIC
// atomics on the same page), not the group's: windows of one group may be
// fenced and freed concurrently from different goroutines, each goroutine
// driving its own window, and their fences never pair with each other.
//
// A Fence opens an epoch that starts only if RMA calls follow it (MPI-4.1
// 12.5.1): after a Fence and before any RMA call, Lock, LockAll, Post and
// Start may begin another kind of epoch instead, as in MPICH (whose rmazero
// test does Fence then Lock).
//
// A call with the target rank ProcNull (MPI_PROC_NULL) does nothing and
// succeeds inside the epoch a call to any rank would need (ErrEpoch
// outside it, as in MPICH): an access epoch of any kind for an RMA call, a
// passive-target one for a request-based call or a Flush. What MPI
// forbids whatever the target is refused first, as MPICH does: an op or
// datatype an accumulate-family call does not take, buffers of
// FetchAndOp and CompareAndSwap that do not hold one element. Lock and Unlock
// of ProcNull open and close such an epoch for calls to ProcNull, as
// MPICH's rmanull test uses them. A call that moves no
// data (a zero count, or a datatype of size zero) succeeds without touching
// memory, whatever its datatypes are built from: empty type signatures
// match (MPI-4.1 3.3.1), as in MPICH and Open MPI. It needs an epoch to its
// target, and as in MPICH its displacement is not checked against the
// window (beyond the end, or in no region of a dynamic window, is fine)
// except that a negative one is an error on a window that is not dynamic.
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
// window never lets them and the target's CPU update one location. By
// default (MPI's same_op_no_op), on a window whose ranks all have working
// NIC atomics, every accumulate-family call on an int64 or uint64 goes to
// the NIC: SUM is a fetch-and-add, CompareAndSwap a compare-and-swap, NO_OP
// an aligned 8-byte READ, and REPLACE, MIN, MAX, PROD, the logical and
// bitwise ops and user-defined ops (applied by the origin, see
// op.Register) compare-and-swap loops; so ops mixed on one word (an MCS
// lock's CompareAndSwap and FetchAndOp(REPLACE)) stay atomic with each
// other. Every other datatype is applied by the
// target's engine from active messages, NO_OP included (a READ could see an
// element the engine writes in two stores, such as a value-index pair,
// half done). AccumulateOps and AnyOp change this (see atomics). The ranks agree
// on the routing when the window is created: if one rank's device cannot
// do remote atomics, every rank sends everything to the engine, and ranks
// that pass different routing options (AccumulateOps, AnyOp) fail the
// creation with ErrInvalid. AccumulateOrdering is each origin's own: it
// orders that rank's calls, and ranks may choose differently.
// Route and RouteCompareAndSwap tell which path a call takes. NIC atomics
// need an 8-byte aligned target address (ErrAlignment otherwise).
//
// Put and Get are RDMA WRITEs and READs, one per contiguous block of the
// target layout: the target's CPU takes no part. A target layout of many
// small blocks then costs a NIC round trip of work per block; with the
// option PackSmallBlocks, an origin sends such a Put or Get packed to the
// target's engine instead, as MPICH sends noncontiguous RMA as active
// messages (tens of times faster on Soft-RoCE for blocks of a few bytes).
// The target's CPU then writes such a Put: the routing above keeps NIC
// atomics and the CPU apart for the accumulate family only, and as MPI
// says a Put and an accumulate to one location in one epoch are erroneous.
//
// # Concurrency
//
// The RMA calls are safe from many goroutines at once. Creation, Free and
// the epoch calls are made by one goroutine per window at a time.
//
// # Cancellation and failures
//
// Every call that waits takes a context. A call whose context has ended
// already does nothing and returns its error. When it ends during a call,
// the call returns its error promptly and the window stays usable (an
// epoch call that another goroutine's epoch call keeps waiting, a misuse,
// gives up too): a cancelled Lock or LockAll
// undoes what it had taken (each atomic of the lock protocol, once posted,
// is awaited before the context is looked at again, so the undo is exact);
// a cancelled Post, Complete or Start leaves the counters of the other
// ranks consistent; a cancelled fetching call (Get, GetAccumulate,
// FetchAndOp, CompareAndSwap, Request.Wait) never writes its result buffer
// afterwards, and the target may or may not have applied it (a cancelled
// accumulate on many 64-bit integers, which the NIC applies word by word,
// may have updated some words and not others, each word whole; so may an
// accumulate through the engine that is larger than one active message,
// sent in pieces, each element whole). A Fence cancelled while it waits
// for the other ranks has told them it came: call Fence again to complete
// it (Free completes it too). A cancelled Free leaves this rank's part of
// the window registered: call Free again to complete it. When a peer process
// dies, calls to it fail with ErrPeerLost at once (its kernel closes its
// connections); when its whole host dies, within about four times the
// group's peer timeout (group.Options.PeerTimeout; see package group for
// what counts as a death). When a connection to a live target fails (the
// transport gave up on a lossy wire, or another call's fault broke it),
// the Puts and Gets it cut short are sent again on the re-established
// connection (sending one twice has the effect of once), so are the
// accumulates through the target's engine (the target applies each at
// most once, and answers one it has applied with its recorded reply), and
// a NIC atomic it cut short fails with ErrOutcomeUnknown: it may or may
// not have been applied, and is not sent again. Calls among the others go on: a lock the
// lost rank held (or was taking) is taken back by the ranks that wait for
// it, once the lock's target rank has itself found the holder lost and
// fenced it off (its connections with the holder failed for good, so that
// nothing the holder still sends can land after the take-back): a holder
// that only some ranks believe dead, such as one whose liveness connection
// to them broke while its RDMA traffic flows, keeps its lock until it
// unlocks or the target fences it, and a fenced holder's later calls to
// the target fail with ErrPeerLost; LockAll locks the living ranks; a Start, Wait, Fence or Complete that
// needs the lost rank fails with ErrPeerLost, and the calls that end an
// epoch (Unlock, UnlockAll, Complete, Wait, Fence) end it even when they
// fail, unless their context ended first. Collectives of a group that
// holds the lost rank fail with ErrPeerLost too, and Free waits for the
// living ranks, returns an error and releases this rank's part of the
// window. A rank that closes its group before it enters a Fence or Free
// counts as lost there.
//
// # Errors
//
// Match with errors.Is: ErrRank, ErrOutOfWindow, ErrAlignment, ErrInvalid,
// ErrEpoch, ErrFreed, ErrUndeclared, ErrNotCreated, ErrNotSupported, ErrPeerLost,
// ErrOutcomeUnknown;
// op.ErrOpDatatype and op.ErrOpUse for an op MPI does not allow there;
// fallback.ErrRemoteRejected (and its reasons) when a target refuses an
// active message; verbs.ErrRemoteAccess from the network; verbs.ErrClosed
// once the group is closed (also for the calls and requests in progress
// then). A call never panics on bad input.
package win
