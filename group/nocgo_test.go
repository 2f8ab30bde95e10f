//go:build !linux || !cgo

package group

import (
	"context"
	"errors"
	"testing"

	"github.com/onesided/rma/verbs"
)

func TestJoinWithoutVerbs(t *testing.T) {
	_, err := Join(context.Background(), Options{Rank: 0, Size: 1})
	if !errors.Is(err, verbs.ErrNotSupported) {
		t.Fatalf("Join without cgo: %v, want verbs.ErrNotSupported", err)
	}
}
