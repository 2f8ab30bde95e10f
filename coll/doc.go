// Package coll provides MPI's reduction collectives over a process group
// (package group): Reduce, Allreduce, ReduceScatter, ReduceScatterBlock,
// Scan and Exscan, with the predefined ops and user-defined ones
// (op.Create, op.Register), carried over the group's RDMA connections with
// the library's own one-sided calls.
//
//	c, err := coll.New(ctx, g)                       // collective: creates the inbox window
//	defer c.Close(ctx)                               // collective
//	err = coll.AllreduceOf(ctx, c, mine, sum, op.Sum) // []float64 in, []float64 out
//
// # Semantics
//
// Every rank of the group calls the same collectives in the same order,
// with the same op, datatype, counts and root (MPI's rules); the calls on
// one Comm are serialised. Buffers are byte slices of elements of a
// predefined datatype (host byte order, Go layout: see package datatype);
// the typed forms (AllreduceOf, ...) take Go slices. send and recv may
// overlap: recv == send is MPI_IN_PLACE. The result is combined element by
// element:
//
//   - Reduce: root's recv = x0 o x1 o ... o x(n-1) (recv is not used
//     elsewhere and may be nil);
//   - Allreduce: the same on every rank, bit for bit;
//   - ReduceScatter: rank i gets counts[i] elements of the result, those
//     following counts[0]+...+counts[i-1]; ReduceScatterBlock: the i-th of
//     n equal blocks;
//   - Scan: rank i gets x0 o ... o xi; Exscan: x0 o ... o x(i-1). Rank 0's
//     recv in Exscan, which MPI leaves undefined, is not modified (it may be
//     nil there).
//
// The op must be allowed in a collective on the datatype (op.Check with
// op.Collective): REPLACE and NO_OP are refused with op.ErrOpUse, an op not
// defined on the datatype (a user op bound to another element type
// included) with op.ErrOpDatatype, all before anything is sent. The op is
// taken to be associative. A non-commutative op is always combined in
// ascending rank order: the lower ranks' partial result is the left operand
// ("in" of the user function, which computes inout = in o inout). A
// commutative one may be combined in any order and grouping, which for
// floating-point SUM and PROD may change the rounding (every rank of an
// Allreduce still gets the same bits). Zero-length vectors are allowed
// (the ranks still exchange empty messages).
//
// # Algorithms
//
// The choice depends on the vector size in bytes, the op's commutativity and
// the group size, so all ranks choose alike. With n ranks and p pieces of
// a message (slot-sized chunks, below):
//
//   - short vectors, or any op below LongThreshold: Reduce is a binomial
//     tree (ceil(log2 n) steps); for a commutative op it is rooted at root,
//     for a non-commutative one it runs over the ranks in order to rank 0,
//     each rank combining its own contiguous range of ranks with the next,
//     and rank 0 passes the result to root. Allreduce is recursive doubling
//     (MPICH's, order preserving: with m the largest power of two <= n, the
//     first 2(n-m) ranks fold in pairs first); ReduceScatter is the ordered
//     tree reduce to rank 0, which sends each rank its block; Scan and
//     Exscan are recursive doubling (MPICH's).
//   - long vectors (>= LongThreshold bytes) with a commutative op: the ring.
//     The vector is cut into n blocks (ReduceScatter: the counts); in n-1
//     steps each rank sends a block to its right neighbour and combines the
//     one from its left, after which rank i holds block i fully reduced.
//     Then ReduceScatter is done, Allreduce runs a ring allgather (n-1
//     more steps) and Reduce gathers the blocks at root. Each rank sends
//     2(n-1)/n of the vector for Allreduce, whatever n.
//   - long vectors with a non-commutative op, and Scan and Exscan with any
//     op: the pipelined chain, when it beats the logarithmic algorithm
//     (p x rounds of the latter > p x rounds of the chain + hops). Rank i
//     receives the combination of ranks 0..i-1 from rank i-1 piece by piece,
//     combines its own vector into each piece (in rank order) and forwards
//     it to rank i+1 at once, so all links work together: about one vector's
//     transfer time plus one piece per rank. Rank n-1 ends with the result:
//     Reduce forwards the pieces to root as they complete, ReduceScatter
//     sends each rank its block as soon as it is complete, Allreduce
//     broadcasts the pieces along the ring n-1, 0, 1, ..., n-2; Scan and
//     Exscan keep what passes by.
//
// The ring needs at least n elements. The Threshold option moves the
// switch point (0: long-vector algorithms at every size; negative: never).
//
// # Transport
//
// New allocates a window (win.Allocate, collective over the bootstrap like
// every window creation) holding, for every peer, an inbox of Slots slots
// of SlotSize bytes plus a 64-byte header, a flag word per slot and an
// acknowledgement word per peer, and keeps a LockAll epoch open on it until
// Close. A message from rank s to rank d travels in pieces of at most one
// slot, numbered from 1 on each ordered pair: s writes piece q into slot
// (q-1) mod Slots of its inbox at d (header, then data, with Put), waits
// for them to complete (Flush), then writes q into the slot's flag word. d
// polls the flag in its own memory (atomic loads), checks the header, uses
// the piece in place (combining straight from the slot), and writes q into
// s's acknowledgement word for d. s writes piece q only once that word says
// q-Slots is consumed: credits, so a slot is never overwritten before it
// is read. Nothing of a collective goes through the TCP bootstrap.
//
// A collective runs its sends and receives together in one poll loop (a
// rank sending to and receiving from the same peer cannot deadlock on the
// credits); pieces of different messages on one channel keep their order.
// While nothing arrives the loop yields the processor (runtime.Gosched,
// then sched_yield for 200us, then 50us sleeps): with more processes than
// cores, a spinning process would delay the very peer, or the soft-RoCE
// kernel work, it waits for. It checks its context on the way.
//
// The header of each piece names the collective (its sequence number on the
// communicator, its kind and root), the message length and the piece's
// place in it; a receiver that expected something else fails with
// ErrMismatch rather than combining the wrong data.
//
// Memory: Size() x Slots x (SlotSize+64) bytes of window per rank (4 MiB for
// 8 ranks with the defaults; on large groups the default slot size shrinks
// so that it stays within DefaultMemory), plus a scratch buffer as large as
// the largest vector reduced, kept for reuse.
//
// # Errors
//
// Argument errors (ErrInvalid, and the op errors above) are found before
// anything is sent and leave the communicator usable. An error once the
// collective has started (the context ended, a peer was lost, ErrMismatch,
// a user function that panicked) leaves the message streams out of step:
// the Comm then refuses every collective with ErrBroken (wrapping the
// cause) and may only be closed. Nothing blocks beyond the context: a rank
// waiting for a peer that never calls the collective returns the context's
// error. A rank that fails an argument check while the others go on leaves
// them waiting until their contexts end (as in MPI, such a program is
// erroneous).
package coll
