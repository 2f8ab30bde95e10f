//go:build integration

package test

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/win"
)

func init() {
	workers["conf-policy"] = workPolicy
	workers["conf-create-fail"] = workCreateFail
}

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
	finished(t, l.run(time.Minute), "policy")
}

// workCreateFail: a window whose creation fails on one rank (its memory
// cannot be registered, a bad size or displacement unit) fails on every
// rank, the failing rank with its own error and the others with
// ErrNotCreated, and leaves the group's collectives and window ids in step:
// the next two windows are the same windows on every rank, so that an
// accumulate meant for one lands in it and not in the other.
func workCreateFail(ctx context.Context, g *group.Group) error {
	me := g.Rank()
	expect := func(what string, err error, failing int, want error) error {
		switch {
		case me == failing && !errors.Is(err, want):
			return fmt.Errorf("%s failing here: %v, want %v", what, err, want)
		case me == failing && errors.Is(err, win.ErrNotCreated):
			return fmt.Errorf("%s failing here: %v, want this rank's own error, not ErrNotCreated", what, err)
		case me != failing && !errors.Is(err, win.ErrNotCreated):
			return fmt.Errorf("%s failing on rank %d: %v, want ErrNotCreated", what, failing, err)
		}
		return nil
	}
	// Memory the device cannot register for remote writes: read only.
	ro, err := syscall.Mmap(-1, 0, 4096, syscall.PROT_READ, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return err
	}
	defer syscall.Munmap(ro)
	mem := make([]byte, 4096)
	if me == 1 {
		mem = ro
	}
	w, err := win.Create(ctx, g, mem, 1)
	if err == nil {
		w.Free(ctx)
		return fmt.Errorf("Create over rank 1's read-only memory succeeded on rank %d", me)
	}
	if me == 1 {
		fmt.Printf("rank 1 read-only Create: %v\n", err)
	}
	if e := expect("Create over read-only memory", err, 1, err); e != nil {
		return e
	}
	// A failure comes before options that do not agree, on every rank:
	// rank 0 asks for AnyOp, rank 1's memory cannot be registered.
	var opts []win.Option
	if me == 0 {
		opts = append(opts, win.AnyOp())
	}
	if w, err = win.Create(ctx, g, mem, 1, opts...); err == nil {
		w.Free(ctx)
	}
	if e := expect("Create over read-only memory, rank 0 with AnyOp", err, 1, err); e != nil {
		return e
	}
	size := 64
	if me == 1 {
		size = -1
	}
	if w, err = win.Allocate(ctx, g, size, 8); err == nil {
		w.Free(ctx)
	}
	if e := expect("Allocate of size -1", err, 1, win.ErrInvalid); e != nil {
		return e
	}
	unit := 8
	if me == g.Size()-1 {
		unit = 0
	}
	if w, err = win.Create(ctx, g, make([]byte, 64), unit); err == nil {
		w.Free(ctx)
	}
	if e := expect("Create with displacement unit 0", err, g.Size()-1, win.ErrInvalid); e != nil {
		return e
	}
	a, err := win.Allocate(ctx, g, 64, 8)
	if err != nil {
		return fmt.Errorf("window A: %w", err)
	}
	b, err := win.Allocate(ctx, g, 64, 8)
	if err != nil {
		return fmt.Errorf("window B: %w", err)
	}
	for _, x := range []*win.Window{a, b} {
		if err := x.LockAll(ctx); err != nil {
			return err
		}
	}
	if me == 0 {
		if err := win.AccumulateSlice(ctx, b, []float64{42}, 1, 3, op.Sum); err != nil {
			return err
		}
		if err := win.AccumulateSlice(ctx, a, []float64{7}, 1, 5, op.Sum); err != nil {
			return err
		}
	}
	for _, x := range []*win.Window{a, b} {
		if err := x.UnlockAll(ctx); err != nil {
			return err
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if me == 1 {
		av, _ := datatype.View[float64](a.Bytes())
		bv, _ := datatype.View[float64](b.Bytes())
		if av[3] != 0 || av[5] != 7 || bv[3] != 42 || bv[5] != 0 {
			return fmt.Errorf("rank 1: window A %v, B %v; want 7 at A[5] and 42 at B[3] only", av, bv)
		}
	}
	for _, x := range []*win.Window{a, b} {
		if err := x.Free(ctx); err != nil {
			return err
		}
	}
	fmt.Println("createfail=ok")
	return nil
}

func TestConfCreateFails(t *testing.T) {
	l := newLaunch(t, "conf-create-fail", 3)
	finished(t, l.run(time.Minute), "createfail")
}
