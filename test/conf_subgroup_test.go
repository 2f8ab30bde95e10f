//go:build integration

package test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/onesided/rma/coll"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/win"
)

func init() {
	workers["subgroup"] = workSubgroup
	workers["split-concurrent"] = workSplitConcurrent
}

// workSubgroup: 5 ranks split into the even ranks {0, 2, 4} (keyed in
// reverse, so subgroup rank 0 is rank 4), the odd ranks {1, 3}, while
// every rank keeps a window on the whole group in use. Each subgroup makes
// windows of its own and uses every kind of call on them; a rank outside
// any subgroup (Undefined) gets nil.
func workSubgroup(ctx context.Context, g *group.Group) error {
	me := g.Rank()
	whole, err := win.Allocate(ctx, g, 8*g.Size(), 8)
	if err != nil {
		return err
	}
	colorOf := func(r int) int {
		if r == g.Size()-1 && g.Size()%2 == 0 {
			return group.Undefined // the last rank of an even group joins none
		}
		return r % 2
	}
	color := colorOf(me)
	sub, err := g.Split(ctx, color, -me)
	if err != nil {
		return fmt.Errorf("split: %w", err)
	}
	var members []int // the subgroup's ranks, in the ranks of g
	for r := g.Size() - 1; r >= 0; r-- {
		if colorOf(r) == color {
			members = append(members, r)
		}
	}
	if color == group.Undefined {
		if sub != nil {
			return fmt.Errorf("rank %d passed Undefined and got a subgroup of %d", me, sub.Size())
		}
	} else {
		if sub == nil {
			return fmt.Errorf("rank %d: no subgroup", me)
		}
		if sub.Size() != len(members) || members[sub.Rank()] != me {
			return fmt.Errorf("rank %d is rank %d of %d in its subgroup, want rank %d of %v", me, sub.Rank(), sub.Size(), indexOf(members, me), members)
		}
		if err := useSubgroup(ctx, sub, members); err != nil {
			return fmt.Errorf("subgroup of color %d: %w", color, err)
		}
	}
	// The window on the whole group still works across the subgroups.
	if err := whole.LockAll(ctx); err != nil {
		return err
	}
	for t := 0; t < g.Size(); t++ {
		if err := whole.Put(ctx, u64(uint64(1000+me)), t, me); err != nil {
			return err
		}
	}
	if err := whole.UnlockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	for r := 0; r < g.Size(); r++ {
		if v := binary.NativeEndian.Uint64(whole.Bytes()[8*r:]); v != uint64(1000+r) {
			return fmt.Errorf("whole-group window slot %d = %d, want %d", r, v, 1000+r)
		}
	}
	if err := whole.Free(ctx); err != nil {
		return err
	}
	if sub != nil {
		if err := sub.Close(); err != nil {
			return err
		}
	}
	fmt.Println("subgroup=ok")
	return nil
}

func indexOf(s []int, v int) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// useSubgroup runs every kind of call on windows of the subgroup s, whose
// rank i is rank members[i] of the whole group.
func useSubgroup(ctx context.Context, s *group.Group, members []int) error {
	n, me := s.Size(), s.Rank()
	w, err := win.Allocate(ctx, s, 64, 8)
	if err != nil {
		return err
	}
	if me == 0 {
		binary.NativeEndian.PutUint32(w.Bytes()[56:], 1) // the PROD below starts from 1
	}
	if err := w.Put(ctx, u64(1), 0, 0); !errors.Is(err, win.ErrEpoch) {
		return fmt.Errorf("put before any epoch: %v, want ErrEpoch", err)
	}
	if err := w.Put(ctx, u64(1), n, 0); !errors.Is(err, win.ErrRank) {
		return fmt.Errorf("put to rank %d of a subgroup of %d: %v, want ErrRank", n, n, err)
	}
	// Fence epoch: every rank puts its whole-group rank into slot [1+me]
	// of every rank's window.
	if err := w.Fence(ctx, 0); err != nil {
		return err
	}
	for t := 0; t < n; t++ {
		if err := w.Put(ctx, u64(uint64(members[me])), t, 1+me); err != nil {
			return err
		}
	}
	if err := w.Fence(ctx, win.NoSucceed); err != nil {
		return err
	}
	for r := 0; r < n; r++ {
		if v := binary.NativeEndian.Uint64(w.Bytes()[8*(1+r):]); v != uint64(members[r]) {
			return fmt.Errorf("after the fence slot %d = %d, want %d", 1+r, v, members[r])
		}
	}
	// Passive target: NIC fetch-and-add on word 0 of subgroup rank 0, an
	// engine accumulate (PROD on int32) on word 7, an exclusive lock.
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	const adds = 50
	for i := 0; i < adds; i++ {
		if _, err := win.FetchAndOp(ctx, w, int64(1), 0, 0, op.Sum); err != nil {
			return err
		}
	}
	var three [4]byte
	binary.NativeEndian.PutUint32(three[:], 3)
	if err := w.Accumulate(ctx, three[:], datatype.Int32, 0, 7, op.Prod); err != nil {
		return err
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	if err := s.Barrier(ctx); err != nil {
		return err
	}
	if me == 0 {
		if v := binary.NativeEndian.Uint64(w.Bytes()[0:]); v != uint64(adds*n) {
			return fmt.Errorf("counter = %d, want %d", v, adds*n)
		}
		want := uint32(1)
		for i := 0; i < n; i++ {
			want *= 3
		}
		if v := binary.NativeEndian.Uint32(w.Bytes()[56:]); v != want {
			return fmt.Errorf("PROD of %d threes = %d, want %d", n, v, want)
		}
	}
	if err := w.Lock(ctx, win.LockExclusive, n-1, 0); err != nil {
		return err
	}
	var got [8]byte
	if err := w.Get(ctx, got[:], n-1, 1); err != nil {
		return err
	}
	if v := binary.NativeEndian.Uint64(got[:]); v != uint64(members[0]) {
		return fmt.Errorf("get from subgroup rank %d slot 1 = %d, want %d", n-1, v, members[0])
	}
	if err := w.Unlock(ctx, n-1); err != nil {
		return err
	}
	// A collective reduction over the subgroup.
	c, err := coll.New(ctx, s)
	if err != nil {
		return err
	}
	send, recv := []int64{int64(members[me])}, []int64{0}
	if err := coll.AllreduceOf(ctx, c, send, recv, op.Sum); err != nil {
		return err
	}
	want := int64(0)
	for _, m := range members {
		want += int64(m)
	}
	if recv[0] != want {
		return fmt.Errorf("allreduce over the subgroup = %d, want %d", recv[0], want)
	}
	if err := c.Close(ctx); err != nil {
		return err
	}
	return w.Free(ctx)
}

func TestSubgroupWindows(t *testing.T) {
	for _, n := range []int{4, 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			l := newLaunch(t, "subgroup", n)
			finished(t, l.run(2*time.Minute), "subgroup")
		})
	}
}

// workSplitConcurrent: Splits of three different groups at once, from three
// goroutines (MPI_Comm_split of different communicators from different
// threads), then a window on each new subgroup, created one after the
// other: engine accumulates to each must land in that window's memory
// only. Every subgroup's windows need ids of their own in each process;
// Splits that ran at once once gave two subgroups the same serial number,
// so that their windows shared an id and the accumulates of one went to
// the other's memory.
func workSplitConcurrent(ctx context.Context, g *group.Group) error {
	me, n := g.Rank(), g.Size()
	s1, err := g.Split(ctx, 0, me)
	if err != nil {
		return err
	}
	s2, err := g.Split(ctx, 0, -me)
	if err != nil {
		return err
	}
	parents := []*group.Group{g, s1, s2}
	for round := range 4 {
		subs := make([]*group.Group, len(parents))
		errs := make([]error, len(parents))
		var wg sync.WaitGroup
		for i, p := range parents {
			wg.Add(1)
			go func() {
				defer wg.Done()
				subs[i], errs[i] = p.Split(ctx, 0, me)
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("round %d: %w", round, err)
		}
		// Every subgroup has the ranks of g in the same order (key me).
		ws := make([]*win.Window, len(subs))
		for i, sub := range subs {
			if ws[i], err = win.Allocate(ctx, sub, 8*len(subs), 8, win.AnyOp()); err != nil {
				return fmt.Errorf("round %d: window on subgroup %d: %w", round, i, err)
			}
		}
		next := (me + 1) % n
		for i, w := range ws {
			if err := w.LockAll(ctx); err != nil {
				return err
			}
			// Window i gets 100*(i+1) + round in its slot i, from the previous rank.
			v := []float64{float64(100*(i+1) + round)}
			if err := win.AccumulateSlice(ctx, w, v, next, i, op.Sum); err != nil {
				return fmt.Errorf("round %d: accumulate to window %d: %w", round, i, err)
			}
			if err := w.UnlockAll(ctx); err != nil {
				return err
			}
		}
		if err := g.Barrier(ctx); err != nil {
			return err
		}
		for i, w := range ws {
			got, err := datatype.View[float64](w.Bytes())
			if err != nil {
				return err
			}
			for j, x := range got {
				want := 0.0
				if j == i {
					want = float64(100*(i+1) + round)
				}
				if x != want {
					return fmt.Errorf("round %d: window %d slot %d = %v, want %v (whole window %v)", round, i, j, x, want, got)
				}
			}
		}
		if err := g.Barrier(ctx); err != nil {
			return err
		}
		for i, w := range ws {
			if err := w.Free(ctx); err != nil {
				return fmt.Errorf("round %d: free window %d: %w", round, i, err)
			}
			if err := subs[i].Close(); err != nil {
				return err
			}
		}
	}
	if err := errors.Join(s2.Close(), s1.Close()); err != nil {
		return err
	}
	fmt.Println("split-concurrent=ok")
	return nil
}

func TestSplitConcurrent(t *testing.T) {
	l := newLaunch(t, "split-concurrent", 3)
	finished(t, l.run(2*time.Minute), "split-concurrent")
}
