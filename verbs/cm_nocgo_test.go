//go:build !linux || !cgo

package verbs

import (
	"errors"
	"testing"
)

func TestCMNotSupported(t *testing.T) {
	if _, err := NewEventChannel(); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("NewEventChannel without cgo: %v, want ErrNotSupported", err)
	}
	if _, err := OpenCM(""); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("OpenCM without cgo: %v, want ErrNotSupported", err)
	}
}
