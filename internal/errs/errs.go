// Package errs holds the sentinel errors that several packages of the
// library return for one condition. Each is defined here once and re-
// exported where it is documented (win.ErrInvalid is ErrInvalid); a
// package that also needs to tell its own case apart has a sentinel of its
// own that matches the shared one (op.ErrInvalid, made with Refine, is
// matched by errors.Is(err, win.ErrInvalid) and by errors.Is(err,
// op.ErrInvalid)). So errors.Is(err, win.ErrInvalid) holds whichever
// package, and whichever mode (group or service), raised the error.
package errs

import "errors"

var (
	// ErrInvalid: a bad argument.
	ErrInvalid = errors.New("rma: invalid argument")
	// ErrOutOfWindow: a target region outside the window.
	ErrOutOfWindow = errors.New("rma: target region outside the window")
	// ErrUnknownWindow: no window of that name or id.
	ErrUnknownWindow = errors.New("rma: unknown window")
	// ErrAlignment: a NIC atomic's target is not 8-byte aligned.
	ErrAlignment = errors.New("rma: misaligned atomic target")
	// ErrEpoch: the call needs a synchronisation epoch that is not open,
	// or opens one that conflicts with an open one.
	ErrEpoch = errors.New("rma: wrong synchronization epoch")
)

// Refine returns a sentinel with the message msg that matches shared.
func Refine(msg string, shared error) error { return &refined{msg, shared} }

type refined struct {
	msg    string
	shared error
}

func (e *refined) Error() string { return e.msg }
func (e *refined) Unwrap() error { return e.shared }
