// Package op defines the predefined MPI reduction and accumulate operations
// (MAX, MIN, SUM, PROD, LAND, LOR, LXOR, BAND, BOR, BXOR, MAXLOC, MINLOC,
// REPLACE, NO_OP), the rules of which op MPI allows on which predefined
// datatype and in which kind of call, and the kernels that apply them to
// memory.
//
// # Rules
//
// [Check] implements MPI-4.1 §6.9.2 and the accumulate restrictions of §13.3.4:
// MAX and MIN on integers and floating point; SUM and PROD also on complex;
// LAND, LOR and LXOR on integers and bool; BAND, BOR and BXOR on integers and
// byte; MAXLOC and MINLOC on the value-index pairs only; REPLACE on any type
// but only in the accumulate family; NO_OP on any type but only in the
// fetching forms (GetAccumulate, FetchAndOp). [CheckCompareAndSwap] allows
// integers, byte and bool. Calls check before anything is sent, and the
// target engine checks again before touching memory.
//
// # Kernels
//
// [Apply](o, b, target, origin) sets target[i] = target[i] o origin[i] for
// every element, as an accumulate updates its target with the origin data;
// REPLACE stores origin[i], NO_OP leaves target alone. [ApplyFetch] also
// returns the old target (GetAccumulate, FetchAndOp), [ApplyType] walks a
// derived target datatype inside a window and [CompareAndSwap] is the target
// side of MPI_Compare_and_swap. Buffers are byte slices holding
// elements in host byte order with Go's layout (see package datatype): the
// byte order of the data is the host's, as it is for the NIC atomics after
// the start-up probe.
//
// The kernels dispatch through a table indexed by (op, datatype) to loops
// over typed slices, viewing the bytes with unsafe.Slice when they are
// suitably aligned and staging them through aligned buffers on the stack
// when they are not (misaligned typed access is invalid Go, rejected by
// checkptr under -race). They never allocate.
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
// The functions keep no reference to the buffers after they return and have
// no shared mutable state: they may be called from many goroutines at once.
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
// Op values from [FirstUser] (128) up are reserved for user-defined ops
// (MPI_Op_create), to be registered on every process; they are not
// implemented yet and are refused with [ErrInvalid].
package op
