//go:build !linux || !cgo

package verbs

import (
	"errors"
	"testing"
)

func TestNotSupported(t *testing.T) {
	if _, err := Open(""); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("Open without cgo: %v, want ErrNotSupported", err)
	}
}
