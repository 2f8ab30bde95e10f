//go:build integration

package test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/win"
)

func init() {
	workers["fence"] = workFence
	workers["exclusive"] = workExclusive
	workers["shared"] = workShared
	workers["pscw"] = workPSCW
	workers["misuse"] = workMisuse
	workers["create"] = workCreate
	workers["group-sync"] = workGroupSync
}

func u64(v uint64) []byte { return binary.NativeEndian.AppendUint64(nil, v) }

// workFence: inside a fence epoch every rank puts rank+100 into slot
// [its rank] of every window; after the closing fence each rank finds
// every slot of its own window filled.
func workFence(ctx context.Context, g *group.Group) error {
	w, err := win.Allocate(ctx, g, 8*g.Size(), 8)
	if err != nil {
		return err
	}
	if err := w.Put(ctx, u64(1), 0, 0); !errors.Is(err, win.ErrEpoch) {
		return fmt.Errorf("put before the first fence: %v, want ErrEpoch", err)
	}
	if err := w.Fence(ctx, win.NoPrecede); err != nil {
		return err
	}
	for t := 0; t < g.Size(); t++ {
		if err := w.Put(ctx, u64(uint64(g.Rank()+100)), t, g.Rank()); err != nil {
			return err
		}
	}
	if err := w.Fence(ctx, win.NoSucceed); err != nil {
		return err
	}
	for r := 0; r < g.Size(); r++ {
		if v := binary.NativeEndian.Uint64(w.Bytes()[8*r:]); v != uint64(r+100) {
			return fmt.Errorf("after the fence slot %d = %d, want %d", r, v, r+100)
		}
	}
	if err := w.Put(ctx, u64(1), 0, 0); !errors.Is(err, win.ErrEpoch) {
		return fmt.Errorf("put after a NoSucceed fence: %v, want ErrEpoch", err)
	}
	fmt.Println("fence=ok")
	return w.Free(ctx)
}

const exclusiveIters = 100

// workExclusive: a plain Get/increment/Put of rank 0's counter under an
// exclusive lock, from every rank: no update may be lost.
func workExclusive(ctx context.Context, g *group.Group) error {
	w, err := win.Allocate(ctx, g, 8, 8)
	if err != nil {
		return err
	}
	var buf [8]byte
	for i := 0; i < exclusiveIters; i++ {
		if err := w.Lock(ctx, win.LockExclusive, 0, 0); err != nil {
			return err
		}
		if err := w.Get(ctx, buf[:], 0, 0); err != nil {
			return err
		}
		binary.NativeEndian.PutUint64(buf[:], binary.NativeEndian.Uint64(buf[:])+1)
		if err := w.Put(ctx, buf[:], 0, 0); err != nil {
			return err
		}
		if err := w.Unlock(ctx, 0); err != nil {
			return err
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if g.Rank() == 0 {
		fmt.Printf("counter=%d\n", binary.NativeEndian.Uint64(w.Bytes()))
	}
	return w.Free(ctx)
}

// tryLock attempts a lock for d and reports whether it got it.
func tryLock(ctx context.Context, w *win.Window, lt win.LockType, target int, d time.Duration) (bool, error) {
	c, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	err := w.Lock(c, lt, target, 0)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, context.DeadlineExceeded):
		return false, nil
	}
	return false, err
}

// workShared (4 ranks, locks on rank 0): shared locks overlap; an
// exclusive lock waits for them; a waiting writer holds off new readers.
func workShared(ctx context.Context, g *group.Group) error {
	w, err := win.Allocate(ctx, g, 8, 8)
	if err != nil {
		return err
	}
	step := func() error { return g.Barrier(ctx) }
	r := g.Rank()
	// 1: rank 1 holds a shared lock; rank 2 gets one too; rank 3 cannot get an exclusive one.
	if r == 1 {
		if err := w.Lock(ctx, win.LockShared, 0, 0); err != nil {
			return err
		}
	}
	if err := step(); err != nil {
		return err
	}
	switch r {
	case 2:
		ok, err := tryLock(ctx, w, win.LockShared, 0, 10*time.Second)
		if err != nil || !ok {
			return fmt.Errorf("second shared lock: got %v, %v; shared locks must overlap", ok, err)
		}
		fmt.Println("shared-overlap=ok")
	case 3:
		ok, err := tryLock(ctx, w, win.LockExclusive, 0, 500*time.Millisecond)
		if err != nil || ok {
			return fmt.Errorf("exclusive lock while shared ones are held: got %v, %v", ok, err)
		}
		fmt.Println("exclusive-waits=ok")
	}
	if err := step(); err != nil {
		return err
	}
	if r == 2 {
		if err := w.Unlock(ctx, 0); err != nil {
			return err
		}
	}
	if err := step(); err != nil {
		return err
	}
	// 2: rank 1 still holds its shared lock; rank 3 waits for an exclusive
	// one; meanwhile rank 2 must not get a new shared lock.
	got := make(chan error, 1)
	if r == 3 {
		go func() { got <- w.Lock(ctx, win.LockExclusive, 0, 0) }()
	}
	if err := step(); err != nil {
		return err
	}
	if r == 2 {
		time.Sleep(200 * time.Millisecond) // rank 3 is waiting by now
		ok, err := tryLock(ctx, w, win.LockShared, 0, 500*time.Millisecond)
		if err != nil || ok {
			return fmt.Errorf("new shared lock while a writer waits: got %v, %v", ok, err)
		}
		fmt.Println("writer-first=ok")
	}
	if err := step(); err != nil {
		return err
	}
	if r == 1 {
		if err := w.Unlock(ctx, 0); err != nil {
			return err
		}
	}
	if r == 3 {
		if err := <-got; err != nil {
			return err
		}
		if err := w.Put(ctx, u64(33), 0, 0); err != nil {
			return err
		}
		if err := w.Unlock(ctx, 0); err != nil {
			return err
		}
	}
	if err := step(); err != nil {
		return err
	}
	if r == 2 {
		if err := w.Lock(ctx, win.LockShared, 0, 0); err != nil {
			return err
		}
		var b [8]byte
		if err := w.Get(ctx, b[:], 0, 0); err != nil {
			return err
		}
		if v := binary.NativeEndian.Uint64(b[:]); v != 33 {
			return fmt.Errorf("after the writer: %d, want 33", v)
		}
		if err := w.Unlock(ctx, 0); err != nil {
			return err
		}
	}
	return w.Free(ctx)
}

// workPSCW (3 ranks): rank 0 exposes its window to ranks 1 and 2; rank 2
// starts late. Rank 0's Test stays false until both have completed.
func workPSCW(ctx context.Context, g *group.Group) error {
	w, err := win.Allocate(ctx, g, 16, 8)
	if err != nil {
		return err
	}
	const delay = 400 * time.Millisecond
	// The ranks leave Allocate together: rank 2 starts delay after it. On a
	// loaded host rank 0's Post may itself come late; Test is checked only
	// if it comes well before rank 2 can have completed.
	allocated := time.Now()
	switch g.Rank() {
	case 0:
		if err := w.Post(ctx, []int{1, 2}, 0); err != nil {
			return err
		}
		time.Sleep(time.Until(allocated.Add(delay / 4))) // rank 1 completes quickly
		if at := time.Since(allocated); at < delay/2 {
			done, err := w.Test()
			if err != nil {
				return err
			}
			if done {
				return errors.New("exposure epoch ended before rank 2 completed")
			}
		} else {
			fmt.Printf("pscw: Post came %v after Allocate: Test not checked\n", at.Round(time.Millisecond))
		}
		if err := w.Wait(ctx); err != nil {
			return err
		}
		waited := time.Since(allocated)
		a, b := binary.NativeEndian.Uint64(w.Bytes()), binary.NativeEndian.Uint64(w.Bytes()[8:])
		if a != 11 || b != 22 {
			return fmt.Errorf("after Wait: %d, %d; want 11, 22", a, b)
		}
		if waited < delay*3/4 {
			return fmt.Errorf("Wait returned after %v, before rank 2 completed", waited)
		}
		fmt.Printf("pscw=ok waited=%v\n", waited.Round(time.Millisecond))
	case 1, 2:
		if g.Rank() == 2 {
			time.Sleep(delay)
		}
		if err := w.Start(ctx, []int{0}, 0); err != nil {
			return err
		}
		if err := w.Put(ctx, u64(uint64(11*g.Rank())), 0, g.Rank()-1); err != nil {
			return err
		}
		if err := w.Complete(ctx); err != nil {
			return err
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	return w.Free(ctx)
}

// workMisuse: every epoch call out of place is an error, not a hang.
func workMisuse(ctx context.Context, g *group.Group) error {
	w, err := win.Allocate(ctx, g, 8, 8)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var b [8]byte
	checks := []struct {
		name string
		err  error
	}{
		{"Get outside an epoch", w.Get(ctx, b[:], 0, 0)},
		{"Unlock without Lock", w.Unlock(ctx, 0)},
		{"UnlockAll without LockAll", w.UnlockAll(ctx)},
		{"Complete without Start", w.Complete(ctx)},
		{"Wait without Post", w.Wait(ctx)},
		{"Flush outside an epoch", w.Flush(ctx, 0)},
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	checks = append(checks,
		struct {
			name string
			err  error
		}{"Fence inside LockAll", w.Fence(ctx, 0)},
		struct {
			name string
			err  error
		}{"LockAll twice", w.LockAll(ctx)},
		struct {
			name string
			err  error
		}{"Lock inside LockAll", w.Lock(ctx, win.LockShared, 0, 0)},
		struct {
			name string
			err  error
		}{"Start inside LockAll", w.Start(ctx, []int{0}, 0)},
	)
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	for _, c := range checks {
		if !errors.Is(c.err, win.ErrEpoch) {
			return fmt.Errorf("%s: %v, want ErrEpoch", c.name, c.err)
		}
		fmt.Printf("misuse %q: %v\n", c.name, c.err)
	}
	fmt.Printf("misuses=%d\n", len(checks))
	return w.Free(ctx)
}

// workCreate: windows over caller memory (a byte slice and an int64 slice)
// and a dynamic window with attached memory take Put, Get, Accumulate and
// FetchAndOp from every rank.
func workCreate(ctx context.Context, g *group.Group) error {
	n := g.Size()
	raw := make([]byte, 64) // Go heap memory
	wb, err := win.Create(ctx, g, raw, 1)
	if err != nil {
		return err
	}
	ints := make([]int64, 4)
	wi, err := win.CreateSlice(ctx, g, ints)
	if err != nil {
		return err
	}
	wd, err := win.CreateDynamic(ctx, g)
	if err != nil {
		return err
	}
	dmem := make([]byte, 128)
	if err := wd.Attach(dmem); err != nil {
		return err
	}
	addrs, err := g.AllGather(ctx, u64(uint64(win.Address(dmem))))
	if err != nil {
		return err
	}
	base := func(r int) int { return int(binary.NativeEndian.Uint64(addrs[r])) }
	for _, w := range []*win.Window{wb, wi, wd} {
		if err := w.LockAll(ctx); err != nil {
			return err
		}
	}
	one := math.Float64bits(1)
	for t := 0; t < n; t++ {
		// byte window: slot [rank] via Put, a float64 sum at 32, a counter at 40
		if err := wb.Put(ctx, []byte{byte(g.Rank() + 1)}, t, g.Rank()); err != nil {
			return err
		}
		if err := wb.Accumulate(ctx, u64(one), datatype.Float64, t, 32, op.Sum); err != nil {
			return err
		}
		if _, err := win.FetchAndOp(ctx, wb, int64(1), t, 40, op.Sum); err != nil {
			return err
		}
		// int64 window: displacement = index
		if _, err := win.FetchAndOp(ctx, wi, int64(1), t, 1, op.Sum); err != nil {
			return err
		}
		if err := wi.Accumulate(ctx, u64(uint64(g.Rank())), datatype.Int64, t, 2, op.Max); err != nil {
			return err
		}
		// dynamic window: displacement = address
		if err := wd.Put(ctx, []byte{byte(g.Rank() + 1)}, t, base(t)+g.Rank()); err != nil {
			return err
		}
		if err := wd.Accumulate(ctx, u64(one), datatype.Float64, t, base(t)+64, op.Sum); err != nil {
			return err
		}
		if _, err := win.FetchAndOp(ctx, wd, int64(1), t, base(t)+72, op.Sum); err != nil {
			return err
		}
	}
	if err := wd.Put(ctx, []byte{1}, 0, base(0)+128); !errors.Is(err, win.ErrOutOfWindow) {
		return fmt.Errorf("put past the attached region: %v, want ErrOutOfWindow", err)
	}
	for _, w := range []*win.Window{wb, wi, wd} {
		if err := w.UnlockAll(ctx); err != nil {
			return err
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	// Check this rank's memory, then read a peer's back with Get.
	check := func(name string, mem []byte) error {
		for r := 0; r < n; r++ {
			if mem[r] != byte(r+1) {
				return fmt.Errorf("%s: byte %d = %d, want %d", name, r, mem[r], r+1)
			}
		}
		return nil
	}
	if err := check("created window", raw); err != nil {
		return err
	}
	if err := check("dynamic window", dmem); err != nil {
		return err
	}
	sums := []struct {
		name string
		got  float64
		cnt  uint64
	}{
		{"created", math.Float64frombits(binary.NativeEndian.Uint64(raw[32:])), binary.NativeEndian.Uint64(raw[40:])},
		{"dynamic", math.Float64frombits(binary.NativeEndian.Uint64(dmem[64:])), binary.NativeEndian.Uint64(dmem[72:])},
	}
	for _, s := range sums {
		if s.got != float64(n) || s.cnt != uint64(n) {
			return fmt.Errorf("%s window: sum %g, count %d; want %d, %d", s.name, s.got, s.cnt, n, n)
		}
	}
	if ints[1] != int64(n) || ints[2] != int64(n-1) {
		return fmt.Errorf("slice window: %v, want [_ %d %d _]", ints, n, n-1)
	}
	peer := (g.Rank() + 1) % n
	for _, w := range []*win.Window{wb, wd} {
		if err := w.Lock(ctx, win.LockShared, peer, 0); err != nil {
			return err
		}
		got := make([]byte, n)
		disp := 0
		if w == wd {
			disp = base(peer)
		}
		if err := w.Get(ctx, got, peer, disp); err != nil {
			return err
		}
		if err := w.Unlock(ctx, peer); err != nil {
			return err
		}
		if err := check("get from peer", got); err != nil {
			return err
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if err := wd.Detach(dmem); err != nil {
		return err
	}
	fmt.Println("create=ok")
	for _, w := range []*win.Window{wd, wi, wb} {
		if err := w.Free(ctx); err != nil {
			return err
		}
	}
	return nil
}

func TestFence(t *testing.T) {
	outs := newLaunch(t, "fence", 4).run(2 * time.Minute)
	value(t, outs[3], "fence")
}

func TestExclusiveLock(t *testing.T) {
	outs := newLaunch(t, "exclusive", 4).run(5 * time.Minute)
	if got := value(t, outs[0], "counter"); got != strconv.Itoa(4*exclusiveIters) {
		t.Fatalf("counter %s, want %d: the exclusive lock let updates be lost", got, 4*exclusiveIters)
	}
}

func TestSharedLocks(t *testing.T) {
	outs := newLaunch(t, "shared", 4).run(2 * time.Minute)
	value(t, outs[2], "shared-overlap")
	value(t, outs[3], "exclusive-waits")
	value(t, outs[2], "writer-first")
}

func TestPostStartCompleteWait(t *testing.T) {
	outs := newLaunch(t, "pscw", 3).run(2 * time.Minute)
	value(t, outs[0], "pscw")
}

func TestEpochMisuse(t *testing.T) {
	outs := newLaunch(t, "misuse", 2).run(2 * time.Minute)
	value(t, outs[0], "misuses")
}

func TestCreateAndDynamicWindows(t *testing.T) {
	outs := newLaunch(t, "create", 4).run(2 * time.Minute)
	for _, o := range outs {
		value(t, o, "create")
	}
}

// workGroupSync (run under the race detector too): the group's Barrier and
// AllGather order a rank's plain stores to its window memory before the
// accumulates another rank sends once released by them, which the
// engine applies, and those accumulates before the rank's loads after the
// next one (MPICH's mixedsync: memset, MPI_Barrier, then locked
// accumulates by the others). Barrier synchronised the engine only after
// the collective, so that the engine could apply an accumulate before it:
// a data race the race detector reported every time, and that a weaker
// memory order than amd64's could make real.
func workGroupSync(ctx context.Context, g *group.Group) error {
	me, n := g.Rank(), g.Size()
	// Go memory, which the race detector watches (not Allocate's).
	mem := make([]int32, 16)
	w, err := win.CreateSlice(ctx, g, mem)
	if err != nil {
		return err
	}
	syncs := []struct {
		name string
		sync func() error
	}{
		{"Barrier", func() error { return g.Barrier(ctx) }},
		{"AllGather", func() error { _, err := g.AllGather(ctx, []byte{byte(me)}); return err }},
	}
	// One LockAll epoch throughout, so that a rank's accumulates leave as
	// soon as its collective returns, while the others may still be in
	// theirs.
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	for round := range 40 {
		s := syncs[round%len(syncs)]
		base := int32(100 * (round + 1))
		for i := range mem {
			mem[i] = base // plain stores, before the collective
		}
		if err := s.sync(); err != nil {
			return err
		}
		for t := range n {
			if t != me {
				// int32 SUM: applied by the target's engine.
				if err := win.AccumulateSlice(ctx, w, []int32{1}, t, 0, op.Sum); err != nil {
					return err
				}
			}
		}
		if err := w.FlushAll(ctx); err != nil {
			return err
		}
		if err := s.sync(); err != nil {
			return err
		}
		if want := base + int32(n-1); mem[0] != want {
			return fmt.Errorf("after %s: slot 0 = %d, want %d", s.name, mem[0], want)
		}
		if err := s.sync(); err != nil {
			return err
		}
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	if err := w.Free(ctx); err != nil {
		return err
	}
	fmt.Println("group-sync=ok")
	return nil
}

func TestGroupSync(t *testing.T) {
	for _, o := range newLaunch(t, "group-sync", 4).run(2 * time.Minute) {
		value(t, o, "group-sync")
	}
}
