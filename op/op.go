package op

import (
	"fmt"
	"strconv"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/internal/errs"
)

// Op is a reduction or accumulate operation. The zero value is invalid.
//
// Values 1 to 127 are reserved for predefined ops, values from [FirstUser]
// (128) to 255 for user-defined ops made at run time by [Create] and
// [Register].
type Op uint8

// The predefined ops of MPI.
const (
	// Max is MPI_MAX: the maximum.
	Max Op = iota + 1
	// Min is MPI_MIN: the minimum.
	Min
	// Sum is MPI_SUM: the sum.
	Sum
	// Prod is MPI_PROD: the product.
	Prod
	// Land is MPI_LAND: logical and.
	Land
	// Lor is MPI_LOR: logical or.
	Lor
	// Lxor is MPI_LXOR: logical exclusive or.
	Lxor
	// Band is MPI_BAND: bitwise and.
	Band
	// Bor is MPI_BOR: bitwise or.
	Bor
	// Bxor is MPI_BXOR: bitwise exclusive or.
	Bxor
	// Maxloc is MPI_MAXLOC: the maximum value and its (lowest) index.
	Maxloc
	// Minloc is MPI_MINLOC: the minimum value and its (lowest) index.
	Minloc
	// Replace is MPI_REPLACE: the result is the origin value. Accumulate
	// family only.
	Replace
	// NoOp is MPI_NO_OP: the target is left unchanged. Fetching forms of the
	// accumulate family only (GetAccumulate, FetchAndOp).
	NoOp

	numOps
)

// FirstUser is the first value reserved for user-defined ops.
const FirstUser Op = 128

var opNames = [numOps]string{
	Max: "MAX", Min: "MIN", Sum: "SUM", Prod: "PROD",
	Land: "LAND", Lor: "LOR", Lxor: "LXOR",
	Band: "BAND", Bor: "BOR", Bxor: "BXOR",
	Maxloc: "MAXLOC", Minloc: "MINLOC", Replace: "REPLACE", NoOp: "NO_OP",
}

// Predefined reports whether o is one of the predefined ops.
func (o Op) Predefined() bool { return o >= 1 && o < numOps }

// IsUser reports whether o is in the range reserved for user-defined ops.
func (o Op) IsUser() bool { return o >= FirstUser }

// String returns the MPI name of o without the "MPI_" prefix ("SUM",
// "NO_OP", ...), the name of a registered user-defined op, "USER(n)" for
// another value of the user range (n counted from FirstUser, as Create
// numbers them) and "Op(n)" for an invalid value.
func (o Op) String() string {
	switch {
	case o.Predefined():
		return opNames[o]
	case o.IsUser():
		if u := lookup(o); u != nil && u.named {
			return u.name
		}
		return "USER(" + strconv.Itoa(int(o-FirstUser)) + ")"
	}
	return "Op(" + strconv.Itoa(int(o)) + ")"
}

// Ops returns the predefined ops in increasing order.
func Ops() []Op {
	s := make([]Op, 0, numOps-1)
	for o := Op(1); o < numOps; o++ {
		s = append(s, o)
	}
	return s
}

// Use is the kind of call an op is used in; MPI restricts REPLACE and NO_OP
// by it.
type Use uint8

const (
	// Accumulate is MPI_Accumulate and MPI_Raccumulate: every predefined op
	// but NO_OP.
	Accumulate Use = iota + 1
	// GetAccumulate is MPI_Get_accumulate, MPI_Rget_accumulate and
	// MPI_Fetch_and_op: every predefined op.
	GetAccumulate
	// Collective is the reduction collectives (reduce, allreduce,
	// reduce_scatter, scan, exscan): every predefined op but REPLACE and
	// NO_OP.
	Collective

	numUses
)

// FetchAndOp is the same use as GetAccumulate: MPI_Fetch_and_op takes the ops
// of MPI_Get_accumulate.
const FetchAndOp = GetAccumulate

// String names the kind of call as the error messages do: "Accumulate",
// "GetAccumulate" or "a collective".
func (u Use) String() string {
	switch u {
	case Accumulate:
		return "Accumulate"
	case GetAccumulate:
		return "GetAccumulate"
	case Collective:
		return "a collective"
	}
	return "Use(" + strconv.Itoa(int(u)) + ")"
}

// Sentinel errors; every error of this package wraps one of them (and is an
// *[Error]). Each is a bad argument: it matches errs.ErrInvalid (so
// win.ErrInvalid, service.ErrInvalid and rma.ErrInvalid) too.
var (
	// ErrOpDatatype: the op is not defined on the datatype (MPI-4.1 §6.9.2).
	ErrOpDatatype = errs.Refine("op: op not defined on datatype", errs.ErrInvalid)
	// ErrOpUse: the op may not be used in that kind of call (REPLACE in a
	// collective, NO_OP in Accumulate or a collective).
	ErrOpUse = errs.Refine("op: op not allowed in this call", errs.ErrInvalid)
	// ErrLength: the buffers of a kernel call differ in length or are not a
	// whole number of elements.
	ErrLength = errs.Refine("op: buffer length mismatch", errs.ErrInvalid)
	// ErrInvalid: an invalid op, datatype or use value (including a
	// user-defined op value that is not defined in this process), a bad
	// argument, or a user-defined op's function that panicked.
	ErrInvalid = errs.Refine("op: invalid argument", errs.ErrInvalid)
)

// Error describes why an op cannot be applied. Fields that do not apply are
// zero.
type Error struct {
	Op    Op             // the op asked for
	Basic datatype.Basic // the datatype it was asked on
	Use   Use            // the call it was asked in
	Err   error          // the sentinel: ErrOpDatatype, ErrOpUse, ErrLength or ErrInvalid
	Msg   string         // what was wrong
}

// Error returns the message, prefixed with "op: ".
func (e *Error) Error() string { return "op: " + e.Msg }

// Unwrap returns the sentinel.
func (e *Error) Unwrap() error { return e.Err }

// domain describes, for the error messages, where MPI defines each op.
var domain = [numOps]string{
	Max: "integers and floating point only", Min: "integers and floating point only",
	Sum: "integers, floating point and complex only", Prod: "integers, floating point and complex only",
	Land: "integers and bool only", Lor: "integers and bool only", Lxor: "integers and bool only",
	Band: "integers and byte only", Bor: "integers and byte only", Bxor: "integers and byte only",
	Maxloc: "value-index pairs only", Minloc: "value-index pairs only",
}

// defined reports whether MPI defines predefined op o on basic type b
// (MPI-4.1 §6.9.2), independently of the use.
func defined(o Op, b datatype.Basic) bool {
	switch o {
	case Max, Min:
		return b.IsInteger() || b.IsFloat()
	case Sum, Prod:
		return b.IsInteger() || b.IsFloat() || b.IsComplex()
	case Land, Lor, Lxor:
		return b.IsInteger() || b.IsLogical()
	case Band, Bor, Bxor:
		return b.IsInteger() || b.IsByte()
	case Maxloc, Minloc:
		return b.IsPair()
	case Replace, NoOp:
		return b.Valid()
	}
	return false
}

func checkArgs(o Op, b datatype.Basic) error {
	if o.IsUser() {
		return checkUser(o, b, Collective)
	}
	if !o.Predefined() {
		return &Error{Op: o, Basic: b, Err: ErrInvalid, Msg: fmt.Sprintf("invalid op: %v", o)}
	}
	if !b.Valid() {
		return &Error{Op: o, Basic: b, Err: ErrInvalid, Msg: fmt.Sprintf("%v: invalid datatype %v", o, b)}
	}
	if !defined(o, b) {
		return &Error{Op: o, Basic: b, Err: ErrOpDatatype,
			Msg: fmt.Sprintf("%v is not defined on %v (MPI defines it on %s)", o, b, domain[o])}
	}
	return nil
}

// Check reports whether MPI allows op o on elements of type b in a call of
// kind use. The rules (MPI-4.1 §6.9.2 and §12.3.4):
//
//   - MAX, MIN: integers and floating point (not complex, bool or byte);
//   - SUM, PROD: integers, floating point and complex;
//   - LAND, LOR, LXOR: integers and bool (C integer and logical classes);
//   - BAND, BOR, BXOR: integers and byte;
//   - MAXLOC, MINLOC: the value-index pairs only;
//   - REPLACE: any type, accumulate family only (not in collectives);
//   - NO_OP: any type, fetching forms only (GetAccumulate, FetchAndOp);
//   - a user-defined op: only the element type it is bound to (and
//     datatype.Byte for an op on uint8); in the collectives whether made by
//     [Create] or [Register], in the accumulate family only if made by
//     [Register]; a value of the user range that is not defined in this
//     process is invalid.
//
// The error is an *[Error] wrapping [ErrOpDatatype], [ErrOpUse] or
// [ErrInvalid].
func Check(o Op, b datatype.Basic, use Use) error {
	if use < 1 || use >= numUses {
		return &Error{Op: o, Basic: b, Use: use, Err: ErrInvalid, Msg: fmt.Sprintf("invalid use %v", use)}
	}
	if o.IsUser() {
		return checkUser(o, b, use)
	}
	if err := checkArgs(o, b); err != nil {
		e := err.(*Error)
		e.Use = use
		return e
	}
	switch {
	case o == Replace && use == Collective:
		return &Error{Op: o, Basic: b, Use: use, Err: ErrOpUse,
			Msg: "REPLACE cannot be used in a collective (MPI allows it only in the accumulate family)"}
	case o == NoOp && use != GetAccumulate:
		return &Error{Op: o, Basic: b, Use: use, Err: ErrOpUse,
			Msg: fmt.Sprintf("NO_OP cannot be used in %v (MPI allows it only in GetAccumulate and FetchAndOp)", use)}
	}
	return nil
}

// CheckCompareAndSwap reports whether MPI allows MPI_Compare_and_swap on
// elements of type b: the integers, byte and bool (C integer, byte and
// logical classes). The error wraps [ErrOpDatatype] or [ErrInvalid].
func CheckCompareAndSwap(b datatype.Basic) error {
	if !b.Valid() {
		return &Error{Basic: b, Err: ErrInvalid, Msg: fmt.Sprintf("compare-and-swap: invalid datatype %v", b)}
	}
	if b.IsInteger() || b.IsByte() || b.IsLogical() {
		return nil
	}
	return &Error{Basic: b, Err: ErrOpDatatype,
		Msg: fmt.Sprintf("compare-and-swap is not defined on %v (MPI defines it on integers, byte and bool only)", b)}
}

// Commutative reports whether o is commutative, as the collectives need to
// know. Every predefined reduction op is (MPI treats them as commutative and
// associative, although floating point SUM and PROD round differently in
// different orders); REPLACE and NO_OP, which keep one operand, are not. A
// user-defined op is if it was made so; an undefined value is not.
func (o Op) Commutative() bool {
	if o.IsUser() {
		u := lookup(o)
		return u != nil && u.commute
	}
	return o.Predefined() && o != Replace && o != NoOp
}
