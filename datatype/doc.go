// Package datatype describes the memory layout of the data of one-sided
// (RMA) operations: the predefined MPI datatypes ([Basic]) and the derived
// datatypes built from exactly one of them ([Type]: contiguous, vector,
// hvector, indexed, hindexed, indexed block, hindexed block, subarray and
// resized), as in the "Datatypes" chapter of the MPI standard.
//
// # Predefined datatypes
//
// A [Basic] names the type of one element: integers of 8 to 64 bits, float32,
// float64, complex64, complex128, MPI_BYTE, MPI_C_BOOL and the value-index
// pairs of MAXLOC and MINLOC. Elements are stored in host byte order with the
// layout of the corresponding Go type ([Of] maps a Go type to its Basic); a
// pair is the Go struct {V T; I int32} with Go's natural alignment and
// padding, so [PairFloat64Int] is 16 bytes on 64-bit platforms. The classes
// of MPI (C integer, floating point, complex, logical, byte) decide which
// predefined ops apply to a type; see package op.
//
// # Derived datatypes
//
// A [Type] is an immutable value: build it once with the constructors and
// use it from any number of goroutines. Each constructor validates its
// arguments and reports negative counts, mismatched slices, out-of-range
// subarrays and any int64 overflow of an offset or extent with an error
// wrapping [ErrInvalid]. Lower bound, extent, true lower bound and true
// extent follow MPI (including the alignment "epsilon" of the extent and the
// stickiness of bounds set by [Resized]). The epsilon rounds an extent up
// to the element type's Go alignment, as Open MPI does for every
// constructor (MPICH rounds only structs): an hvector of two int32 6 bytes
// apart has extent 12 here and in Open MPI, 10 in MPICH.
//
// Internally a Type is kept flattened in a compact normal form: a list of
// blocks (runs of consecutive elements) repeated by a nest of strided loops,
// so a contiguous type of a million elements is one block and a vector of a
// million blocks is one block and one loop. [Type.ForEachBlock] walks the runs
// of any number of instances without materialising them, merging adjacent
// runs; [Type.Blocks] returns them as a slice for small types. Only the
// indexed constructors expand their old type (bounded at 1<<24 blocks).
//
// For the RMA checks, [Type.Fits] (or [Type.Bounds]) tells whether count
// instances at a displacement lie inside a window (errors wrap
// [ErrOutOfRange]), [Type.Overlaps] and [Type.OverlapsN] whether a target
// datatype overlaps itself, and [SameSignature] whether origin and target
// describe the same sequence of basic elements. [AppendPack] and [Unpack]
// move data between a layout and its packed form.
//
// # Encoding
//
// [Type.AppendBinary] encodes a Type compactly (to send a target layout over
// the network) and [Unmarshal] decodes it. The decoder treats its input as
// hostile: it never panics, bounds its allocations by the input size and
// [MaxDecodeBlocks], and accepts only the canonical encoding of a valid Type.
//
// # Errors
//
// Every error is an *[Error] wrapping one of [ErrInvalid], [ErrOutOfRange]
// and [ErrOverlap]; test with errors.Is. Nothing in this package panics on
// bad input.
package datatype
