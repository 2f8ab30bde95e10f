package datatype

import (
	"errors"
	"fmt"

	"github.com/onesided/rma/internal/errs"
)

// Sentinel errors. Every error returned by this package wraps exactly one of
// them; test with [errors.Is].
var (
	// ErrInvalid reports an invalid argument: an invalid Basic or Type, a
	// negative count, mismatched slice lengths, an out-of-range subarray, an
	// extent or element count that overflows, or a malformed encoding.
	ErrInvalid = errs.Refine("datatype: invalid argument", errs.ErrInvalid)
	// ErrOutOfRange reports that the elements of a datatype do not lie inside
	// a buffer (for example a window).
	ErrOutOfRange = errors.New("datatype: out of range")
	// ErrOverlap reports a datatype whose elements overlap where MPI forbids
	// it (the target datatype of an accumulate).
	ErrOverlap = errors.New("datatype: overlapping elements")
)

// Error is the type of the errors returned by this package.
type Error struct {
	Err error  // one of the sentinels
	Msg string // what was wrong
}

// Error returns the message, prefixed with "datatype: ".
func (e *Error) Error() string { return "datatype: " + e.Msg }

// Unwrap returns the sentinel.
func (e *Error) Unwrap() error { return e.Err }

func errorf(kind error, format string, args ...any) error {
	return &Error{Err: kind, Msg: fmt.Sprintf(format, args...)}
}
