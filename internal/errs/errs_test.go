package errs_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/onesided/rma/coll"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/fallback"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/service"
	"github.com/onesided/rma/verbs"
	"github.com/onesided/rma/win"
)

// TestShared checks that the sentinels of every package that reports a
// bad argument, a region outside the window or an unknown window match
// the one a caller tests, whichever package raised them, and that the
// refined ones stay apart from each other.
func TestShared(t *testing.T) {
	for _, c := range []struct {
		name   string
		err    error
		shared error
	}{
		{"verbs.ErrInvalid", verbs.ErrInvalid, win.ErrInvalid},
		{"datatype.ErrInvalid", datatype.ErrInvalid, win.ErrInvalid},
		{"op.ErrInvalid", op.ErrInvalid, win.ErrInvalid},
		{"coll.ErrInvalid", coll.ErrInvalid, win.ErrInvalid},
		{"fallback.ErrOutOfWindow", fallback.ErrOutOfWindow, win.ErrOutOfWindow},
		{"fallback.ErrUnknownWindow", fallback.ErrUnknownWindow, service.ErrUnknownWindow},
	} {
		wrapped := fmt.Errorf("call: %w", c.err)
		if !errors.Is(wrapped, c.shared) || !errors.Is(wrapped, c.err) {
			t.Errorf("%s: errors.Is with %v %v, with itself %v", c.name, c.shared, errors.Is(wrapped, c.shared), errors.Is(wrapped, c.err))
		}
	}
	if errors.Is(op.ErrInvalid, datatype.ErrInvalid) || errors.Is(datatype.ErrInvalid, op.ErrInvalid) {
		t.Error("op.ErrInvalid and datatype.ErrInvalid match each other")
	}
	if errors.Is(win.ErrInvalid, op.ErrInvalid) {
		t.Error("the shared ErrInvalid matches op.ErrInvalid")
	}
}
