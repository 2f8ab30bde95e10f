//go:build integration

package test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/win"
)

func init() { workers["conf-policy"] = workPolicy }

// workPolicy: the ranks of a window must route every (op, datatype) pair
// the same way, so a window whose ranks pass different accumulate options
// is refused on every rank; options that agree (declared pairs in another
// order) are accepted, and give the same routes on every rank.
func workPolicy(ctx context.Context, g *group.Group) error {
	var opts []win.Option
	if g.Rank() == 0 {
		opts = append(opts, win.AnyOp())
	}
	if w, err := win.Allocate(ctx, g, 64, 8, opts...); !errors.Is(err, win.ErrInvalid) {
		if err == nil {
			w.Free(ctx)
		}
		return fmt.Errorf("rank 0 AnyOp, the others default: %v, want ErrInvalid", err)
	}
	pairs := []atomics.Pair{{Op: op.Sum, Basic: datatype.Int64}, {Op: op.Max, Basic: datatype.Int64}}
	if g.Rank()%2 == 1 {
		pairs[0], pairs[1] = pairs[1], pairs[0]
	}
	w, err := win.Allocate(ctx, g, 64, 8, win.AccumulateOps(pairs...))
	if err != nil {
		return fmt.Errorf("the same declared pairs in another order: %w", err)
	}
	if r := w.Route(op.Max, datatype.Int64); r != atomics.NICCompareSwapLoop {
		return fmt.Errorf("declared MAX int64 goes to %v, want %v", r, atomics.NICCompareSwapLoop)
	}
	if err := w.Free(ctx); err != nil {
		return err
	}
	fmt.Println("policy=ok")
	return nil
}

func TestConfWindowOptionsAgree(t *testing.T) {
	l := newLaunch(t, "conf-policy", 3)
	for r, out := range l.run(time.Minute) {
		if value(t, out, "policy") != "ok" {
			t.Errorf("rank %d did not finish", r)
		}
	}
}
