// Package op defines the predefined MPI reduction and accumulate operations
// (MAX, MIN, SUM, PROD, LAND, LOR, LXOR, BAND, BOR, BXOR, MAXLOC, MINLOC,
// REPLACE, NO_OP) and user-defined ones (MPI_Op_create: [Create],
// [Register]), the rules of which op MPI allows on which predefined
// datatype and in which kind of call, and the kernels that apply them to
// memory.
//
// # Rules
//
// [Check] implements MPI-4.1 §6.9.2 and the accumulate restrictions of §12.3.4:
// MAX and MIN on integers and floating point; SUM and PROD also on complex;
// LAND, LOR and LXOR on integers and bool; BAND, BOR and BXOR on integers and
// byte; MAXLOC and MINLOC on the value-index pairs only; REPLACE on any type
// but only in the accumulate family; NO_OP on any type but only in the
// fetching forms (GetAccumulate, FetchAndOp); a user-defined op on its own
// element type only (see below). [CheckCompareAndSwap] allows integers,
// byte and bool. Calls check before anything is sent, and the
// target engine checks again before touching memory.
//
// # Kernels
//
// [Apply](o, b, target, origin) sets target[i] = target[i] o origin[i] for
// every element, as an accumulate updates its target with the origin data;
// REPLACE stores origin[i], NO_OP leaves target alone, and a user-defined
// op sets target[i] = origin[i] o target[i] (its function's in and inout). [ApplyFetch] also
// returns the old target (GetAccumulate, FetchAndOp), [ApplyType] walks a
// derived target datatype inside a window, [CompareAndSwap] is the target
// side of MPI_Compare_and_swap and [ReduceLocal] (MPI_Reduce_local) is the
// step of the reduction collectives: inout[i] = in[i] o inout[i]. Buffers
// are byte slices holding elements in host byte order with Go's layout (see
// package datatype): the byte order of the data is the host's, as it is for
// the NIC atomics after the start-up probe.
//
// The kernels dispatch through a table indexed by (op, datatype) to loops
// over typed slices, viewing the bytes with unsafe.Slice when they are
// suitably aligned and staging them through aligned buffers on the stack
// when they are not (misaligned typed access is invalid Go, rejected by
// checkptr under -race). They never allocate (user-defined ops: see below).
//
// Semantics where MPI leaves a choice:
//   - integer SUM and PROD wrap around (two's complement), as in Go and C;
//   - float MAX and MIN follow Go's built-in max and min (IEEE 754-2019
//     maximum and minimum): a NaN operand gives NaN, and -0 is below +0;
//   - complex PROD is (a+bi)(c+di) = (ac-bd) + (ad+bc)i with every product
//     rounded separately (no fused multiply-add), so every architecture gives
//     the same bits;
//   - the logical ops treat any non-zero value as true and store 1 or 0 in
//     the element's type; Bool is one byte;
//   - MAXLOC (MINLOC) keeps the pair with the greater (smaller) value and, on
//     equal values, the lower index, as MPI specifies; a NaN value wins like
//     MAX's NaN and between two NaNs the lower index wins; the contents of the
//     padding bytes of a pair are unspecified.
//
// # Ownership and concurrency
//
// The functions keep no reference to the buffers after they return and
// share no mutable state but the registry of user-defined ops (safe for
// concurrent use): they may be called from many goroutines at once.
// They are not atomic: the caller (the target engine) serializes updates of
// the same elements, which is how MPI's per-element atomicity of accumulates
// is provided.
//
// # Errors
//
// Every error of this package is an *[Error] (with the op, datatype and use
// concerned) wrapping one of [ErrOpDatatype], [ErrOpUse], [ErrLength] and
// [ErrInvalid]. [ApplyType] also returns the errors of package datatype
// (datatype.ErrOutOfRange, datatype.ErrOverlap, datatype.ErrInvalid). A
// refused call modifies nothing, and nothing panics on bad input.
//
// # User-defined ops
//
// Op values from [FirstUser] (128) to 255 are user-defined ops
// (MPI_Op_create), typed in Go terms: a function over two slices of one
// element type, combining in into inout element by element,
//
//	inout[i] = in[i] o inout[i]
//
// with o associative, and a flag saying whether it is also commutative.
//
//   - [Create] makes a process-local op: usable in the reduction
//     collectives (package coll), [ReduceLocal] and [Apply]; [Free] releases
//     it. It cannot be used in the accumulate family, since the target would
//     not know it (Check refuses it with [ErrOpUse]).
//   - [Register] makes a named op that is, beyond MPI, also usable in
//     Accumulate, GetAccumulate, FetchAndOp and their request-based forms:
//     the target's engine applies it as target[i] = origin[i] o target[i]
//     (fn(in=origin, inout=target)), with the same per-element atomicity as a
//     predefined op through the engine (the engine's lock); on int64 and
//     uint64, where a window sends the predefined ops to the NIC's atomics,
//     the origin applies it in a compare-and-swap loop, as it does MAX (see
//     [Register]). Its value is its
//     registration index (the first Register of a process gives FirstUser,
//     the next FirstUser+1, ...), so every process must register the same
//     names, with the same element types, in the same order; [RegistryDigest]
//     lets them check. A target that has not registered the value refuses
//     the request with an error reply (fallback.ErrUnknownOp). Registered
//     ops are permanent. Process-local ops take values from 255 down, so
//     they do not disturb the numbering of registered ones.
//
// A user op is bound to its Go element type T (datatype.Of[T]; an op on
// uint8 also accepts datatype.Byte): [Check] and the kernels refuse it on
// any other datatype with [ErrOpDatatype]. MPI's rules by use apply as for
// predefined ops (a user op is never REPLACE or NO_OP). [Op.String] returns
// a registered op's name, [Op.Commutative] its flag.
//
// The kernels call the function on the buffers themselves when they are
// aligned for T (no copy, no allocation) and through aligned copies from a
// pool when they are not; bool elements are always copied, so the function
// sees only true and false whatever the bytes. The function must not
// retain the slices and may be called from several goroutines at once; in
// the target engine it runs with the engine's lock held, so it must be
// quick and must not call into this module. A panic in it is recovered and
// returned as an error wrapping [ErrInvalid] (the target may then be
// partly updated).
//
// The registry is safe for concurrent use: lookups are lock-free loads,
// Create, Register and Free take a mutex.
package op
