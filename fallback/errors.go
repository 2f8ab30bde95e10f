package fallback

import (
	"errors"
	"strconv"
	"strings"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/internal/errs"
	"github.com/onesided/rma/op"
)

// Sentinel errors. Every error of this package is an *[Error] that wraps
// the sentinel of its [Status] (and, where the reason is one of theirs, the
// sentinel of package op or datatype); an error reported by the target in a
// reply also wraps [ErrRemoteRejected]. Test with [errors.Is].
var (
	// ErrRemoteRejected is wrapped by every refusal reported by the target
	// ([Reply.Err], [Status.Err]), whatever the reason.
	ErrRemoteRejected = errors.New("fallback: request refused by the target")
	// ErrVersion: the protocol version or the byte order of the element data
	// differs between origin and target (StatusBadVersion).
	ErrVersion = errors.New("fallback: unsupported protocol version or byte order")
	// ErrUnknownWindow: the target has no window with that id
	// (StatusUnknownWindow).
	ErrUnknownWindow = errs.Refine("fallback: unknown window", errs.ErrUnknownWindow)
	// ErrWindowExists: AddWindow of an id already exposed.
	ErrWindowExists = errors.New("fallback: window id already exposed")
	// ErrUnknownOp: the op is neither predefined nor registered at the target
	// (StatusUnknownOp).
	ErrUnknownOp = errors.New("fallback: unknown op")
	// ErrBadLayout: the target datatype is invalid, not built from the
	// request's basic datatype, not allowed for the kind of request
	// (StatusBadLayout), or overlaps itself (StatusOverlap, which also wraps
	// datatype.ErrOverlap).
	ErrBadLayout = errors.New("fallback: bad target datatype")
	// ErrOutOfWindow: the target region does not lie inside the window
	// (StatusOutOfWindow; also wraps datatype.ErrOutOfRange).
	ErrOutOfWindow = errs.Refine("fallback: target region outside the window", errs.ErrOutOfWindow)
	// ErrLength: the data does not hold as many elements as the count and
	// datatype say (StatusLength).
	ErrLength = errors.New("fallback: data length mismatch")
	// ErrTooLarge: a message beyond [MaxMessage], a reply that would not fit
	// in the reply buffer, or a message too small to hold a single element
	// (StatusTooLarge).
	ErrTooLarge = errors.New("fallback: too large")
	// ErrMalformed: a message that is not a well-formed encoding (truncated,
	// inconsistent lengths, unknown kind, non-zero reserved bytes)
	// (StatusMalformed).
	ErrMalformed = errors.New("fallback: malformed message")
	// ErrOpFailed: a user-defined op failed (panicked) as the target
	// applied it (StatusOpFailed, which also wraps op.ErrInvalid).
	ErrOpFailed = errors.New("fallback: user-defined op failed at the target")
)

// Status is the outcome of a request, carried in its reply: [StatusOK] or
// the reason the target refused it. A refused request has not modified the
// window, except one refused with StatusOpFailed.
type Status uint8

// The statuses. Their values are part of the wire format.
const (
	// StatusOK: the request was applied.
	StatusOK Status = iota
	// StatusBadVersion: unsupported protocol version, or element data in a
	// byte order other than the target's.
	StatusBadVersion
	// StatusUnknownWindow: no window with the request's id at the target.
	StatusUnknownWindow
	// StatusUnknownOp: the op is neither predefined nor a registered
	// user-defined op.
	StatusUnknownOp
	// StatusOpDatatype: the op is not defined on the datatype (MPI-4.1
	// §6.9.2), or compare-and-swap on a datatype other than an integer,
	// byte or bool.
	StatusOpDatatype
	// StatusOpUse: the op is not allowed in that kind of request (NO_OP in
	// an Accumulate).
	StatusOpUse
	// StatusBadLayout: an invalid or unknown target datatype, one not built
	// from the request's basic datatype, or not allowed for the kind
	// (compare-and-swap takes one predefined element).
	StatusBadLayout
	// StatusOverlap: the target datatype has overlapping elements.
	StatusOverlap
	// StatusOutOfWindow: the target region is not inside the window.
	StatusOutOfWindow
	// StatusLength: the data length differs from Count*Type.Size() (two
	// elements for compare-and-swap).
	StatusLength
	// StatusTooLarge: a message beyond MaxMessage, or old values that do not
	// fit in the reply buffer.
	StatusTooLarge
	// StatusMalformed: not a well-formed message.
	StatusMalformed
	// StatusOpFailed: a user-defined op failed (panicked) as the target
	// applied it; unlike the other refusals, the elements it had updated
	// before stay updated.
	StatusOpFailed

	numStatus
)

type statusInfo struct {
	name  string
	desc  string // what was refused
	err   error  // the sentinel
	extra error  // a sentinel of another package, or nil
}

var statusInfos = [numStatus]statusInfo{
	StatusOK:            {"OK", "ok", nil, nil},
	StatusBadVersion:    {"BadVersion", "unsupported protocol version or byte order", ErrVersion, nil},
	StatusUnknownWindow: {"UnknownWindow", "unknown window", ErrUnknownWindow, nil},
	StatusUnknownOp:     {"UnknownOp", "unknown op", ErrUnknownOp, nil},
	StatusOpDatatype:    {"OpDatatype", "op not defined on the datatype", op.ErrOpDatatype, nil},
	StatusOpUse:         {"OpUse", "op not allowed in this kind of request", op.ErrOpUse, nil},
	StatusBadLayout:     {"BadLayout", "bad target datatype", ErrBadLayout, nil},
	StatusOverlap:       {"Overlap", "overlapping target datatype", ErrBadLayout, datatype.ErrOverlap},
	StatusOutOfWindow:   {"OutOfWindow", "target region outside the window", ErrOutOfWindow, datatype.ErrOutOfRange},
	StatusLength:        {"Length", "data length mismatch", ErrLength, nil},
	StatusTooLarge:      {"TooLarge", "too large", ErrTooLarge, nil},
	StatusMalformed:     {"Malformed", "malformed message", ErrMalformed, nil},
	StatusOpFailed:      {"OpFailed", "user-defined op failed", ErrOpFailed, op.ErrInvalid},
}

// Valid reports whether s is a status this version knows.
func (s Status) Valid() bool { return s < numStatus }

// String returns the name of s ("OK", "OutOfWindow", ...), or "Status(n)".
func (s Status) String() string {
	if !s.Valid() {
		return "Status(" + strconv.Itoa(int(s)) + ")"
	}
	return statusInfos[s].name
}

// Err returns nil for StatusOK, else an *[Error] reported by the target
// (Remote) that wraps [ErrRemoteRejected] and the sentinel of s. Prefer
// [Reply.Err], which adds the target's explanation.
func (s Status) Err() error {
	if s == StatusOK {
		return nil
	}
	return &Error{Status: s, Remote: true}
}

// Error is the type of the errors of this package.
type Error struct {
	// Status is the reason (never StatusOK).
	Status Status
	// Remote is true for a refusal reported by the target in a reply; false
	// for an error found locally (by the encoder, the decoder, Split or
	// Check).
	Remote bool
	// Msg tells what exactly was wrong (for a remote error, the target's
	// explanation); it may be empty.
	Msg string
}

// Error says whether the target refused the request or it failed
// locally, the reason and what exactly was wrong.
func (e *Error) Error() string {
	var sb strings.Builder
	if e.Remote {
		sb.WriteString("fallback: target refused the request: ")
	} else {
		sb.WriteString("fallback: ")
	}
	if e.Status.Valid() {
		sb.WriteString(statusInfos[e.Status].desc)
	} else {
		sb.WriteString(e.Status.String())
	}
	if e.Msg != "" {
		sb.WriteString(": ")
		sb.WriteString(e.Msg)
	}
	return sb.String()
}

// Unwrap returns the sentinels e wraps: that of its status, possibly one of
// package op or datatype, and [ErrRemoteRejected] for a remote error.
func (e *Error) Unwrap() []error {
	errs := make([]error, 0, 3)
	if e.Status.Valid() && e.Status != StatusOK {
		in := statusInfos[e.Status]
		errs = append(errs, in.err)
		if in.extra != nil {
			errs = append(errs, in.extra)
		}
	} else {
		errs = append(errs, ErrMalformed)
	}
	if e.Remote {
		errs = append(errs, ErrRemoteRejected)
	}
	return errs
}

func newError(s Status, msg string) *Error { return &Error{Status: s, Msg: msg} }

// statusOf maps an error of package op or datatype to a status.
func statusOf(err error) Status {
	switch {
	case err == nil:
		return StatusOK
	case errors.Is(err, datatype.ErrOutOfRange):
		return StatusOutOfWindow
	case errors.Is(err, datatype.ErrOverlap):
		return StatusOverlap
	case errors.Is(err, op.ErrOpDatatype):
		return StatusOpDatatype
	case errors.Is(err, op.ErrOpUse):
		return StatusOpUse
	case errors.Is(err, op.ErrLength):
		return StatusLength
	case errors.Is(err, datatype.ErrInvalid):
		// Count instances whose bounds overflow: no window can hold them.
		return StatusOutOfWindow
	case errors.Is(err, op.ErrInvalid):
		return StatusOpFailed // a user-defined op that panicked
	}
	return StatusMalformed
}

// sanitize makes a reason received from the network printable.
func sanitize(b []byte) string {
	return strings.Map(func(r rune) rune {
		if r == '\uFFFD' || r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, string(b))
}
