//go:build integration

package test

// Conformance tests of synchronisation and argument handling (MPI-4.1
// §12.3, §12.5): fences that start no epoch, zero-size calls, locks whose
// context ends, erroneous calls, MPI_PROC_NULL and assertions. Expected
// values come from the standard's rules, never from the library's output.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/win"
)

func init() {
	workers["conf-fence"] = workConfFence
	workers["conf-zero"] = workConfZero
	workers["conf-cancel"] = workConfCancel
	workers["conf-baduse"] = workConfBadUse
	workers["conf-procnull"] = workConfProcNull
	workers["conf-asserts"] = workConfAsserts
}

// confLog collects the failures of a worker and prints each as it happens.
type confLog struct {
	step     string
	failures []string
}

// ok records err, if any, as a failure of the current step.
func (l *confLog) ok(what string, err error) bool {
	if err == nil {
		return true
	}
	l.failf("%s: %v", what, err)
	return false
}

func (l *confLog) failf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if l.step != "" {
		msg = l.step + ": " + msg
	}
	fmt.Println("FAILED", msg)
	l.failures = append(l.failures, msg)
}

// is records a failure unless err matches one of want.
func (l *confLog) is(what string, err error, want ...error) {
	for _, w := range want {
		if errors.Is(err, w) {
			fmt.Printf("ok %s: %v\n", what, err)
			return
		}
	}
	l.failf("%s: got %v, want %v", what, err, want)
}

func (l *confLog) err() error {
	if len(l.failures) == 0 {
		return nil
	}
	return fmt.Errorf("%d failure(s):\n%s", len(l.failures), strings.Join(l.failures, "\n"))
}

// safely runs f, turning a panic into an error.
func safely(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return f()
}

func confWord(b []byte, slot int) uint64 { return binary.NativeEndian.Uint64(b[8*slot:]) }

// ---------------------------------------------------------------------------
// 3. A fence that no RMA call follows starts no epoch.
//
// MPI-4.1 §12.5.1: a call to MPI_WIN_FENCE starts an access epoch only if it
// is followed by another fence and by RMA calls issued between the two; an
// epoch it would start is otherwise not started. So after Fence(0) (or
// Fence(NoPrecede)) with no RMA call, Lock/Unlock, LockAll/UnlockAll and
// Post/Start/Complete/Wait may be used (MPICH's rmazero test calls Fence and
// then Lock). An RMA call right after Fence(0) is in the fence's epoch, and
// Fence(NoSucceed) ends a fence epoch so that a lock may follow.

func workConfFence(ctx context.Context, g *group.Group) error {
	n, me := g.Size(), g.Rank()
	peer, from := (me+1)%n, (me+n-1)%n
	w, err := win.Allocate(ctx, g, 8*8, 8)
	if err != nil {
		return err
	}
	val := func(step, rank int) uint64 { return uint64(1000*step + rank + 1) }
	var l confLog
	// step runs act on every rank (act makes the same collective calls on
	// every rank whatever fails), a barrier, then check on local memory.
	step := func(name string, act func(ctx context.Context), check func()) error {
		l.step = name
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		act(sctx)
		cancel()
		if err := g.Barrier(ctx); err != nil {
			return err
		}
		if check != nil {
			check()
		}
		l.step = ""
		return g.Barrier(ctx)
	}
	expectSlot := func(slot int, want uint64) func() {
		return func() {
			if got := confWord(w.Bytes(), slot); got != want {
				l.failf("slot %d = %d, want %d", slot, got, want)
			}
		}
	}
	steps := []struct {
		name  string
		act   func(ctx context.Context)
		check func()
	}{
		{"Lock/Unlock after a Fence(0) that no RMA call followed", func(ctx context.Context) {
			l.ok("Fence(0)", w.Fence(ctx, 0))
			if l.ok("Lock(exclusive) of the next rank", w.Lock(ctx, win.LockExclusive, peer, 0)) {
				l.ok("Put", w.Put(ctx, confU64(val(1, me)), peer, 0))
				l.ok("Unlock", w.Unlock(ctx, peer))
			}
		}, expectSlot(0, val(1, from))},
		{"LockAll/UnlockAll after a Fence(NoPrecede) that no RMA call followed", func(ctx context.Context) {
			l.ok("Fence(NoPrecede)", w.Fence(ctx, win.NoPrecede))
			if l.ok("LockAll", w.LockAll(ctx)) {
				l.ok("Put", w.Put(ctx, confU64(val(2, me)), peer, 1))
				l.ok("UnlockAll", w.UnlockAll(ctx))
			}
		}, expectSlot(1, val(2, from))},
		{"Post/Start/Complete/Wait after a Fence(0) that no RMA call followed", func(ctx context.Context) {
			l.ok("Fence(0)", w.Fence(ctx, 0))
			posted := l.ok("Post", w.Post(ctx, []int{from}, 0))
			if l.ok("Start", w.Start(ctx, []int{peer}, 0)) {
				l.ok("Put", w.Put(ctx, confU64(val(3, me)), peer, 2))
				l.ok("Complete", w.Complete(ctx))
			}
			if posted {
				l.ok("Wait", w.Wait(ctx))
			}
		}, expectSlot(2, val(3, from))},
		{"Lock after a Fence(NoSucceed) that ended an epoch with RMA calls", func(ctx context.Context) {
			l.ok("Fence(NoPrecede)", w.Fence(ctx, win.NoPrecede))
			l.ok("Put in the fence epoch", w.Put(ctx, confU64(val(4, me)), peer, 3))
			l.ok("Fence(NoSucceed)", w.Fence(ctx, win.NoSucceed))
			if got := confWord(w.Bytes(), 3); got != val(4, from) {
				l.failf("after Fence(NoSucceed) slot 3 = %d, want %d", got, val(4, from))
			}
			if l.ok("Lock(shared) of the next rank", w.Lock(ctx, win.LockShared, peer, 0)) {
				b := make([]byte, 8)
				if l.ok("Get", w.Get(ctx, b, peer, 3)) && confWord(b, 0) != val(4, me) {
					l.failf("Get of the next rank's slot 3 = %d, want %d", confWord(b, 0), val(4, me))
				}
				l.ok("Unlock", w.Unlock(ctx, peer))
			}
		}, nil},
		{"RMA calls right after a Fence(0) are in its epoch", func(ctx context.Context) {
			l.ok("Fence(0)", w.Fence(ctx, 0))
			l.ok("Put", w.Put(ctx, confU64(val(5, me)), peer, 4))
			l.ok("Accumulate(SUM)", w.Accumulate(ctx, confU64(val(5, me)), datatype.Int64, peer, 5, op.Sum))
			if old, err := win.FetchAndOp(ctx, w, int64(1), peer, 6, op.Sum); l.ok("FetchAndOp(SUM)", err) && old != 0 {
				l.failf("FetchAndOp(SUM) on a fresh word returned %d, want 0", old)
			}
			l.ok("Fence(0) ending the epoch", w.Fence(ctx, 0))
			for slot, want := range map[int]uint64{4: val(5, from), 5: val(5, from), 6: 1} {
				if got := confWord(w.Bytes(), slot); got != want {
					l.failf("after the fence slot %d = %d, want %d", slot, got, want)
				}
			}
			b := make([]byte, 8)
			if l.ok("Get in the next fence epoch", w.Get(ctx, b, peer, 4)) && confWord(b, 0) != val(5, me) {
				l.failf("Get of the next rank's slot 4 = %d, want %d", confWord(b, 0), val(5, me))
			}
			l.ok("Fence(NoSucceed)", w.Fence(ctx, win.NoSucceed))
		}, nil},
		{"Lock of this rank after a Fence(0) that no RMA call followed", func(ctx context.Context) {
			l.ok("Fence(0)", w.Fence(ctx, 0))
			if l.ok("Lock(exclusive) of this rank", w.Lock(ctx, win.LockExclusive, me, 0)) {
				l.ok("Put to this rank", w.Put(ctx, confU64(val(6, me)), me, 7))
				l.ok("Unlock", w.Unlock(ctx, me))
			}
		}, expectSlot(7, val(6, me))},
		{"Fence(0) twice with nothing between, then Fence(NoSucceed) ends every epoch", func(ctx context.Context) {
			l.ok("Fence(0)", w.Fence(ctx, 0))
			l.ok("Fence(0) again", w.Fence(ctx, 0))
			l.ok("Fence(NoSucceed)", w.Fence(ctx, win.NoSucceed))
			l.is("Put after Fence(NoSucceed)", w.Put(ctx, confU64(1), peer, 0), win.ErrEpoch)
		}, nil},
		{"a fence epoch after a lock epoch that followed a Fence(0)", func(ctx context.Context) {
			l.ok("Fence(0)", w.Fence(ctx, 0))
			if l.ok("Lock(exclusive)", w.Lock(ctx, win.LockExclusive, peer, 0)) {
				l.ok("Unlock", w.Unlock(ctx, peer))
			}
			l.ok("Fence(0) after the lock epoch", w.Fence(ctx, 0))
			l.ok("Put in the fence epoch", w.Put(ctx, confU64(val(8, me)), peer, 0))
			l.ok("Fence(NoSucceed)", w.Fence(ctx, win.NoSucceed))
		}, expectSlot(0, val(8, from))},
	}
	for _, s := range steps {
		if err := step(s.name, s.act, s.check); err != nil {
			return err
		}
		fmt.Printf("step done: %s\n", s.name)
	}
	if err := w.Free(ctx); err != nil {
		return err
	}
	if err := l.err(); err != nil {
		return err
	}
	fmt.Println("fence=ok")
	return nil
}

func TestConfFenceNoEpoch(t *testing.T) {
	outs := newLaunch(t, "conf-fence", 2).run(3 * time.Minute)
	for _, o := range outs {
		value(t, o, "fence")
	}
}

// ---------------------------------------------------------------------------
// 4. Zero-size calls.
//
// A call that moves no data is valid and changes nothing (MPI-4.1 §12.3:
// Put and Get transfer data as a send and a receive would, and an empty type
// signature matches any other empty one, §3.3.1; an accumulate of no
// elements updates nothing). That includes zero-count calls whose origin and
// target datatypes differ, a derived datatype of size zero, a displacement
// at the very end of the window (disp == size: the access covers no byte
// outside it) and a window of size zero. For Accumulate MPI also requires
// both datatypes to be built from the same predefined type (§12.3.4), so the
// accumulate cases keep to one predefined type. Invalid ranks, negative
// displacements and ops MPI forbids stay errors even with no data.

func workConfZero(ctx context.Context, g *group.Group) error {
	n, me := g.Size(), g.Rank()
	peer := (me + 1) % n
	const size = 64
	a, err := win.Allocate(ctx, g, size, 8)
	if err != nil {
		return err
	}
	zsize := size
	if me == n-1 {
		zsize = 0 // the last rank's window in z has no memory
	}
	z, err := win.Allocate(ctx, g, zsize, 8)
	if err != nil {
		return err
	}
	for i := range a.Bytes() {
		a.Bytes()[i] = byte(0x30 + 7*i + me)
	}
	for i := range z.Bytes() {
		z.Bytes()[i] = byte(0x90 + 5*i + me)
	}
	patA, patZ := slices.Clone(a.Bytes()), slices.Clone(z.Bytes())
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	var l confLog
	if !l.ok("LockAll", a.LockAll(ctx)) || !l.ok("LockAll of the zero-size window", z.LockAll(ctx)) {
		return l.err()
	}
	c0i64, err := datatype.Contiguous(0, datatype.Int64.Type())
	if err != nil {
		return err
	}
	c0f64, err := datatype.Contiguous(0, datatype.Float64.Type())
	if err != nil {
		return err
	}
	i64, f64 := datatype.Int64.Type(), datatype.Float64.Type()
	empty := []byte{}
	wait := func(r *win.Request, err error) error {
		if err != nil {
			return err
		}
		if r == nil {
			return errors.New("nil request and nil error")
		}
		return r.Wait(ctx)
	}
	calls := 0
	zero := func(w *win.Window, t, d int) {
		at := fmt.Sprintf("rank %d displacement %d", t, d)
		cases := []struct {
			name string
			f    func() error
		}{
			{"Put(nil)", func() error { return w.Put(ctx, nil, t, d) }},
			{"Put(empty)", func() error { return w.Put(ctx, empty, t, d) }},
			{"Get(nil)", func() error { return w.Get(ctx, nil, t, d) }},
			{"Get(empty)", func() error { return w.Get(ctx, empty, t, d) }},
			{"Accumulate(empty, int64, SUM)", func() error { return w.Accumulate(ctx, empty, datatype.Int64, t, d, op.Sum) }},
			{"Accumulate(nil, float64, SUM)", func() error { return w.Accumulate(ctx, nil, datatype.Float64, t, d, op.Sum) }},
			{"Accumulate(nil, int64, REPLACE)", func() error { return w.Accumulate(ctx, nil, datatype.Int64, t, d, op.Replace) }},
			{"Accumulate(nil, int32, MAX)", func() error { return w.Accumulate(ctx, nil, datatype.Int32, t, d, op.Max) }},
			{"Accumulate(nil, uint64, BXOR)", func() error { return w.Accumulate(ctx, nil, datatype.Uint64, t, d, op.Bxor) }},
			{"Accumulate(nil, complex128, PROD)", func() error { return w.Accumulate(ctx, nil, datatype.Complex128, t, d, op.Prod) }},
			{"GetAccumulate(empty, empty, int64, SUM)", func() error {
				return w.GetAccumulate(ctx, empty, empty, datatype.Int64, t, d, op.Sum)
			}},
			{"GetAccumulate(nil, nil, int64, NO_OP)", func() error { return w.GetAccumulate(ctx, nil, nil, datatype.Int64, t, d, op.NoOp) }},
			{"GetAccumulate(nil, nil, float64, NO_OP)", func() error {
				return w.GetAccumulate(ctx, nil, nil, datatype.Float64, t, d, op.NoOp)
			}},
			{"GetAccumulate(nil, nil, int16, REPLACE)", func() error {
				return w.GetAccumulate(ctx, nil, nil, datatype.Int16, t, d, op.Replace)
			}},
			{"AccumulateTo(1 x contiguous(0, int64), nil buffer -> 0 x int64, SUM)", func() error {
				return w.AccumulateTo(ctx, win.Buffer{Type: c0i64, Count: 1}, win.Region{Rank: t, Disp: d, Type: i64}, op.Sum)
			}},
			{"AccumulateTo(1 x contiguous(0, float64), nil buffer -> 0 x float64, SUM)", func() error {
				return w.AccumulateTo(ctx, win.Buffer{Type: c0f64, Count: 1}, win.Region{Rank: t, Disp: d, Type: f64}, op.Sum)
			}},
			{"AccumulateTo(0 x int64 -> 1 x contiguous(0, int64), SUM)", func() error {
				return w.AccumulateTo(ctx, win.Buffer{Type: i64}, win.Region{Rank: t, Disp: d, Type: c0i64, Count: 1}, op.Sum)
			}},
			{"AccumulateTo(3 x contiguous(0, int64) -> 5 x contiguous(0, int64), MAX)", func() error {
				return w.AccumulateTo(ctx, win.Buffer{Type: c0i64, Count: 3}, win.Region{Rank: t, Disp: d, Type: c0i64, Count: 5}, op.Max)
			}},
			{"GetAccumulateTo(1 x contiguous(0, int64), result 0 x int64 -> 0 x int64, SUM)", func() error {
				return w.GetAccumulateTo(ctx, win.Buffer{Type: c0i64, Count: 1}, win.Buffer{Type: i64}, win.Region{Rank: t, Disp: d, Type: i64}, op.Sum)
			}},
			{"GetAccumulateTo(result 2 x contiguous(0, float64) -> 0 x float64, NO_OP)", func() error {
				return w.GetAccumulateTo(ctx, win.Buffer{}, win.Buffer{Type: c0f64, Count: 2}, win.Region{Rank: t, Disp: d, Type: f64}, op.NoOp)
			}},
			{"PutTo(0 x float64 -> 0 x int64)", func() error {
				return w.PutTo(ctx, win.Buffer{Type: f64}, win.Region{Rank: t, Disp: d, Type: i64})
			}},
			{"PutTo(3 x contiguous(0, float64) -> 0 x int8)", func() error {
				return w.PutTo(ctx, win.Buffer{Type: c0f64, Count: 3}, win.Region{Rank: t, Disp: d, Type: datatype.Int8.Type()})
			}},
			{"GetTo(0 x int32 <- 0 x float64)", func() error {
				return w.GetTo(ctx, win.Buffer{Type: datatype.Int32.Type()}, win.Region{Rank: t, Disp: d, Type: f64})
			}},
			{"GetTo(0 x int64 <- 2 x contiguous(0, int64))", func() error {
				return w.GetTo(ctx, win.Buffer{Type: i64}, win.Region{Rank: t, Disp: d, Type: c0i64, Count: 2})
			}},
			{"RPut(nil)", func() error { return wait(w.RPut(ctx, nil, t, d)) }},
			{"RGet(nil)", func() error { return wait(w.RGet(ctx, nil, t, d)) }},
			{"RAccumulate(0 x int64, SUM)", func() error {
				return wait(w.RAccumulate(ctx, win.Buffer{Type: i64}, win.Region{Rank: t, Disp: d, Type: i64}, op.Sum))
			}},
			{"RAccumulate(1 x contiguous(0, float64), MAX)", func() error {
				return wait(w.RAccumulate(ctx, win.Buffer{Type: c0f64, Count: 1}, win.Region{Rank: t, Disp: d, Type: f64}, op.Max))
			}},
			{"RGetAccumulate(0 x int64, NO_OP)", func() error {
				return wait(w.RGetAccumulate(ctx, win.Buffer{Type: i64}, win.Buffer{Type: i64}, win.Region{Rank: t, Disp: d, Type: i64}, op.NoOp))
			}},
			{"RGetAccumulate(0 x float64, SUM)", func() error {
				return wait(w.RGetAccumulate(ctx, win.Buffer{Type: f64}, win.Buffer{Type: f64}, win.Region{Rank: t, Disp: d, Type: f64}, op.Sum))
			}},
		}
		for _, c := range cases {
			calls++
			l.ok(c.name+" at "+at, safely(c.f))
		}
	}
	for _, t := range []int{peer, me} {
		// size/8: the end of the window; beyond it, a call that moves
		// nothing still succeeds (MPICH returns before looking).
		for _, d := range []int{0, 3, size / 8, size/8 + 5, 1 << 20} {
			zero(a, t, d)
		}
	}
	// A dynamic window with nothing attached: every address is in no
	// region, and a call that moves nothing succeeds at any of them.
	dyn, err := win.CreateDynamic(ctx, g)
	if err != nil {
		return err
	}
	if l.ok("LockAll of the dynamic window", dyn.LockAll(ctx)) {
		for _, t := range []int{peer, me} {
			for _, d := range []int{0, 4096} {
				zero(dyn, t, d)
			}
		}
		l.ok("UnlockAll of the dynamic window", dyn.UnlockAll(ctx))
	}
	if err := dyn.Free(ctx); err != nil {
		return err
	}
	for t := 0; t < n; t++ {
		zd := 0
		if t != n-1 {
			zd = size / 8
		}
		zero(z, t, zd)
	}
	// Still errors with no data.
	l.is("Put(nil) to rank size", safely(func() error { return a.Put(ctx, nil, n, 0) }), win.ErrRank)
	l.is("Accumulate(nil) to rank -1", safely(func() error { return a.Accumulate(ctx, nil, datatype.Int64, -1, 0, op.Sum) }), win.ErrRank)
	l.is("Put(nil) at displacement -1", safely(func() error { return a.Put(ctx, nil, peer, -1) }), win.ErrOutOfWindow, win.ErrInvalid)
	l.is("Get(nil) at displacement -1", safely(func() error { return a.Get(ctx, nil, peer, -1) }), win.ErrOutOfWindow, win.ErrInvalid)
	l.is("Accumulate(nil) at displacement -1", safely(func() error { return a.Accumulate(ctx, nil, datatype.Float64, peer, -1, op.Sum) }), win.ErrOutOfWindow, win.ErrInvalid)
	l.is("Accumulate(nil, int64, NO_OP)", safely(func() error { return a.Accumulate(ctx, nil, datatype.Int64, peer, 0, op.NoOp) }), op.ErrOpUse)
	l.is("Accumulate(nil, float64, BAND)", safely(func() error { return a.Accumulate(ctx, nil, datatype.Float64, peer, 0, op.Band) }), op.ErrOpDatatype)
	l.ok("FlushAll after the zero-size calls", a.FlushAll(ctx))
	l.ok("FlushAll of the zero-size window", z.FlushAll(ctx))
	l.ok("UnlockAll", a.UnlockAll(ctx))
	l.ok("UnlockAll of the zero-size window", z.UnlockAll(ctx))
	l.is("Put(nil) outside an epoch", safely(func() error { return a.Put(ctx, nil, peer, 0) }), win.ErrEpoch)
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if !slices.Equal(a.Bytes(), patA) {
		l.failf("zero-size calls changed rank %d's window:\n got %x\nwant %x", me, a.Bytes(), patA)
	}
	if !slices.Equal(z.Bytes(), patZ) {
		l.failf("zero-size calls changed rank %d's second window:\n got %x\nwant %x", me, z.Bytes(), patZ)
	}
	fmt.Printf("zero_size_calls=%d\n", calls)
	if err := z.Free(ctx); err != nil {
		return err
	}
	if err := a.Free(ctx); err != nil {
		return err
	}
	if err := l.err(); err != nil {
		return err
	}
	fmt.Println("zero=ok")
	return nil
}

func TestConfZeroSize(t *testing.T) {
	outs := newLaunch(t, "conf-zero", 2).run(3 * time.Minute)
	for _, o := range outs {
		value(t, o, "zero")
	}
}

// ---------------------------------------------------------------------------
// 5. Locks whose context ends.
//
// Every waiting call takes a context; when it ends the call returns its error
// and the window stays usable: a Lock or LockAll that returns an error holds
// no lock, so afterwards locks behave as MPI says (an exclusive lock excludes
// every other lock, shared locks coexist, §12.5.3). A Lock waiting for a held
// exclusive lock returns context.DeadlineExceeded when its context expires,
// and succeeds once the holder unlocks. A Post or Start that returns an error
// leaves no trace: a later Start matches only a later Post.

const (
	confCancelCalls = 1000
	confAfterBudget = 60 * time.Second
)

func workConfCancel(ctx context.Context, g *group.Group) error {
	n, me := g.Size(), g.Rank()
	if n != 2 {
		return fmt.Errorf("conf-cancel runs on 2 ranks, not %d", n)
	}
	seed := confWorkerSeed()
	fmt.Printf("seed=%d\n", seed)
	rng := rand.New(rand.NewPCG(seed, uint64(me)+1))
	w, err := win.Allocate(ctx, g, 64, 8)
	if err != nil {
		return err
	}
	var l confLog
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	short := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(ctx, time.Duration(1+rng.IntN(50))*time.Microsecond)
	}
	wrong := map[string]int{}
	note := func(what string, err error, want error) {
		if !errors.Is(err, want) {
			wrong[fmt.Sprintf("%s: %v (want %v)", what, err, want)]++
		}
	}
	// Phase A: cancelled and expiring Locks and LockAlls, from both ranks
	// at once, on both targets. A call that succeeds is undone normally.
	t0 := time.Now()
	granted := map[string]int{}
	for i := 0; i < confCancelCalls; i++ {
		t := i % n
		if err := w.Lock(cancelled, win.LockExclusive, t, 0); err == nil {
			granted["Lock(exclusive) with a cancelled context"]++
			if err := w.Unlock(ctx, t); err != nil {
				return fmt.Errorf("Unlock of a granted lock: %w", err)
			}
		} else {
			note("Lock(exclusive) with a cancelled context", err, context.Canceled)
		}
	}
	for i := 0; i < confCancelCalls; i++ {
		t := i % n
		lt := win.LockExclusive
		if i%5 == 4 {
			lt = win.LockShared
		}
		c, cc := short()
		err := w.Lock(c, lt, t, 0)
		cc()
		if err == nil {
			granted["Lock with an expiring context"]++
			if err := w.Unlock(ctx, t); err != nil {
				return fmt.Errorf("Unlock of a granted lock: %w", err)
			}
		} else {
			note("Lock with an expiring context", err, context.DeadlineExceeded)
		}
	}
	for i := 0; i < confCancelCalls; i++ {
		if err := w.LockAll(cancelled); err == nil {
			granted["LockAll with a cancelled context"]++
			if err := w.UnlockAll(ctx); err != nil {
				return fmt.Errorf("UnlockAll of a granted LockAll: %w", err)
			}
		} else {
			note("LockAll with a cancelled context", err, context.Canceled)
		}
	}
	for i := 0; i < confCancelCalls; i++ {
		c, cc := short()
		err := w.LockAll(c)
		cc()
		if err == nil {
			granted["LockAll with an expiring context"]++
			if err := w.UnlockAll(ctx); err != nil {
				return fmt.Errorf("UnlockAll of a granted LockAll: %w", err)
			}
		} else {
			note("LockAll with an expiring context", err, context.DeadlineExceeded)
		}
	}
	fmt.Printf("phase A: %d calls in %v; granted %v\n", 4*confCancelCalls, time.Since(t0).Round(time.Millisecond), granted)
	for k, c := range wrong {
		l.failf("%d x %s", c, k)
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}

	// Phase B: plain locks work, within a bounded time, and exclude.
	bctx, bcancel := context.WithTimeout(ctx, confAfterBudget)
	defer bcancel()
	hung := func(what string, err error) error {
		if bctx.Err() != nil {
			return fmt.Errorf("lock hung after cancelled locks: %s did not finish within %v: %w", what, confAfterBudget, err)
		}
		return fmt.Errorf("%s after cancelled locks: %w", what, err)
	}
	b := make([]byte, 8)
	for t := 0; t < n; t++ {
		if err := w.Lock(bctx, win.LockExclusive, t, 0); err != nil {
			return hung(fmt.Sprintf("Lock(exclusive) of rank %d", t), err)
		}
		if err := w.Put(bctx, confU64(uint64(100+me)), t, me); err != nil {
			return hung("Put", err)
		}
		if err := w.Unlock(bctx, t); err != nil {
			return hung(fmt.Sprintf("Unlock of rank %d", t), err)
		}
		if err := w.Lock(bctx, win.LockShared, t, 0); err != nil {
			return hung(fmt.Sprintf("Lock(shared) of rank %d", t), err)
		}
		if err := w.Get(bctx, b, t, me); err != nil {
			return hung("Get", err)
		}
		if v := confWord(b, 0); v != uint64(100+me) {
			l.failf("Get under a shared lock of rank %d read %d, want %d", t, v, 100+me)
		}
		if err := w.Unlock(bctx, t); err != nil {
			return hung(fmt.Sprintf("Unlock of rank %d", t), err)
		}
	}
	const incs = 50
	for i := 0; i < incs; i++ {
		if err := w.Lock(bctx, win.LockExclusive, 0, 0); err != nil {
			return hung("Lock(exclusive) for the counter", err)
		}
		if err := w.Get(bctx, b, 0, 7); err != nil {
			return hung("Get of the counter", err)
		}
		if err := w.Put(bctx, confU64(confWord(b, 0)+1), 0, 7); err != nil {
			return hung("Put of the counter", err)
		}
		if err := w.Unlock(bctx, 0); err != nil {
			return hung("Unlock after the counter", err)
		}
	}
	if err := w.LockAll(bctx); err != nil {
		return hung("LockAll", err)
	}
	if err := w.UnlockAll(bctx); err != nil {
		return hung("UnlockAll", err)
	}
	if err := g.Barrier(bctx); err != nil {
		return hung("Barrier", err)
	}
	if me == 0 {
		if got := confWord(w.Bytes(), 7); got != incs*uint64(n) {
			l.failf("counter incremented under exclusive locks = %d, want %d: two ranks held the exclusive lock at once", got, incs*n)
		}
	}
	// Each rank in turn, the other idle, takes an exclusive lock on every
	// rank: a lock left held by a cancelled call would stop it.
	for holder := 0; holder < n; holder++ {
		if err := g.Barrier(bctx); err != nil {
			return hung("Barrier", err)
		}
		if me != holder {
			continue
		}
		for t := 0; t < n; t++ {
			if ok, err := tryLock(bctx, w, win.LockExclusive, t, 10*time.Second); err != nil || !ok {
				l.failf("rank %d could not take an exclusive lock of rank %d within 10s while no one held it (%v): a cancelled call left it held", me, t, err)
				continue
			}
			l.ok("Unlock", w.Unlock(bctx, t))
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	fmt.Println("phase B done")

	// Phase C: a Lock waiting behind an exclusive holder expires with
	// DeadlineExceeded, leaves nothing behind, and succeeds after release.
	if me == 1 {
		if err := w.Lock(ctx, win.LockExclusive, 0, 0); err != nil {
			return fmt.Errorf("Lock(exclusive) of rank 0: %w", err)
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if me == 0 {
		for _, lt := range []win.LockType{win.LockExclusive, win.LockShared} {
			c, cc := context.WithTimeout(ctx, 300*time.Millisecond)
			err := w.Lock(c, lt, 0, 0)
			cc()
			if err == nil {
				l.failf("Lock(%d) of rank 0 succeeded while rank 1 held it exclusively", lt)
				l.ok("Unlock", w.Unlock(ctx, 0))
			} else {
				l.is(fmt.Sprintf("Lock(%d) of a rank locked exclusively by another, 300ms", lt), err, context.DeadlineExceeded)
			}
		}
		c, cc := context.WithTimeout(ctx, 300*time.Millisecond)
		err := w.LockAll(c)
		cc()
		if err == nil {
			l.failf("LockAll succeeded while rank 1 held rank 0 exclusively")
			l.ok("UnlockAll", w.UnlockAll(ctx))
		} else {
			l.is("LockAll while another rank holds an exclusive lock, 300ms", err, context.DeadlineExceeded)
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if me == 1 {
		l.ok("Unlock of rank 0", w.Unlock(ctx, 0))
		// Rank 0's expired exclusive attempt must not still count as a
		// waiting writer, nor its expired LockAll as a reader.
		for t := 0; t < n; t++ {
			if ok, err := tryLock(ctx, w, win.LockShared, t, 10*time.Second); err != nil || !ok {
				l.failf("Lock(shared) of rank %d after the holder unlocked: not granted within 10s (%v): an expired Lock left a waiting writer", t, err)
			} else {
				l.ok("Unlock", w.Unlock(ctx, t))
			}
			if ok, err := tryLock(ctx, w, win.LockExclusive, t, 10*time.Second); err != nil || !ok {
				l.failf("Lock(exclusive) of rank %d after the holder unlocked: not granted within 10s (%v): an expired LockAll left a reader", t, err)
			} else {
				l.ok("Unlock", w.Unlock(ctx, t))
			}
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if me == 0 {
		if ok, err := tryLock(ctx, w, win.LockExclusive, 0, 10*time.Second); err != nil || !ok {
			l.failf("Lock(exclusive) of rank 0 after rank 1 unlocked: not granted within 10s (%v)", err)
		} else {
			l.ok("Unlock", w.Unlock(ctx, 0))
		}
		if ok, err := tryLockAll(ctx, w, 10*time.Second); err != nil || !ok {
			l.failf("LockAll after rank 1 unlocked: not granted within 10s (%v)", err)
		} else {
			l.ok("UnlockAll", w.UnlockAll(ctx))
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	fmt.Println("phase C done")

	// Phase D: Post and Start with cancelled contexts, then working
	// post-start-complete-wait epochs (rank 0 exposes, rank 1 accesses).
	if me == 1 {
		for i := 0; i < 200; i++ {
			if err := w.Start(cancelled, []int{0}, 0); err == nil {
				l.failf("Start with a cancelled context succeeded although rank 0 never posted")
				l.ok("Complete", w.Complete(ctx))
				break
			} else {
				note("Start with a cancelled context", err, context.Canceled)
			}
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	posted := false
	if me == 0 {
		for i := 0; i < 200 && !posted; i++ {
			if err := w.Post(cancelled, []int{1}, 0); err == nil {
				posted = true // the exposure epoch is open: it is used below
				fmt.Println("Post with a cancelled context succeeded (no wait was needed)")
			} else {
				note("Post with a cancelled context", err, context.Canceled)
			}
		}
	}
	flag := []byte{0}
	if posted {
		flag[0] = 1
	}
	all, err := g.AllGather(ctx, flag)
	if err != nil {
		return err
	}
	rank0Posted := all[0][0] == 1
	if me == 1 && !rank0Posted {
		c, cc := context.WithTimeout(ctx, 500*time.Millisecond)
		err := w.Start(c, []int{0}, 0)
		cc()
		if err == nil {
			l.failf("Start matched a Post that had returned an error: a failed Post left its mark")
			l.ok("Complete", w.Complete(ctx))
		} else {
			l.is("Start with no Post, 500ms", err, context.DeadlineExceeded)
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	for epoch := 1; epoch <= 2; epoch++ {
		waited := false
		if me == 0 {
			if epoch > 1 || !rank0Posted {
				l.ok(fmt.Sprintf("Post of epoch %d", epoch), w.Post(ctx, []int{1}, 0))
			}
			if epoch == 1 {
				c, cc := context.WithTimeout(ctx, 300*time.Millisecond)
				err := w.Wait(c)
				cc()
				if err == nil {
					l.failf("Wait returned before rank 1 started its access epoch")
					waited = true
				} else {
					l.is("Wait before the origin completed, 300ms", err, context.DeadlineExceeded)
				}
			}
		}
		if err := g.Barrier(ctx); err != nil {
			return err
		}
		if me == 1 {
			sctx, cc := context.WithTimeout(ctx, 10*time.Second)
			if l.ok(fmt.Sprintf("Start of epoch %d", epoch), w.Start(sctx, []int{0}, 0)) {
				l.ok("Put", w.Put(sctx, confU64(uint64(0xD0+epoch)), 0, epoch))
				l.ok("Complete", w.Complete(sctx))
			}
			cc()
		}
		if me == 0 && !waited {
			wctx, cc := context.WithTimeout(ctx, 10*time.Second)
			if l.ok(fmt.Sprintf("Wait of epoch %d", epoch), w.Wait(wctx)) {
				if got := confWord(w.Bytes(), epoch); got != uint64(0xD0+epoch) {
					l.failf("after Wait of epoch %d slot %d = %#x, want %#x", epoch, epoch, got, 0xD0+epoch)
				}
			}
			cc()
		}
		if err := g.Barrier(ctx); err != nil {
			return err
		}
	}
	for k, c := range wrong {
		if strings.HasPrefix(k, "Start") || strings.HasPrefix(k, "Post") {
			l.failf("%d x %s", c, k)
		}
	}
	fmt.Println("phase D done")
	if err := w.Free(ctx); err != nil {
		return err
	}
	if err := l.err(); err != nil {
		return err
	}
	fmt.Println("cancel=ok")
	return nil
}

// tryLockAll attempts LockAll for d and reports whether it got it.
func tryLockAll(ctx context.Context, w *win.Window, d time.Duration) (bool, error) {
	c, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	err := w.LockAll(c)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, context.DeadlineExceeded):
		return false, nil
	}
	return false, err
}

func TestConfCancelledLocks(t *testing.T) {
	outs := newLaunch(t, "conf-cancel", 2, confSeed(t)).run(4 * time.Minute)
	for _, o := range outs {
		value(t, o, "cancel")
	}
}

// ---------------------------------------------------------------------------
// 7. Erroneous use.
//
// Every call MPI calls erroneous here is refused with a typed error before
// anything is sent (the windows are unchanged and a flush reports nothing),
// and no call panics: an invalid rank (ErrRank), a lock type that is neither
// shared nor exclusive (ErrInvalid), a region outside the window
// (ErrOutOfWindow), an op MPI does not allow for the call or the datatype
// (§12.3.4: NO_OP only in the fetching forms, the ops' domains of §6.9.2),
// mismatched signatures (ErrInvalid), and any call on a freed window
// (ErrFreed).

func workConfBadUse(ctx context.Context, g *group.Group) error {
	n, me := g.Size(), g.Rank()
	peer := (me + 1) % n
	var l confLog
	for _, f := range []win.Flavor{99, -1, win.FlavorDynamic + 1} {
		var s string
		if err := safely(func() error { s = f.String(); return nil }); err != nil {
			l.failf("Flavor(%d).String(): %v", int(f), err)
		} else if s == "" {
			l.failf("Flavor(%d).String() is empty", int(f))
		}
	}
	l.is("Allocate of size -1", safely(func() error { _, err := win.Allocate(ctx, g, -1, 8); return err }), win.ErrInvalid)
	l.is("Allocate with displacement unit 0", safely(func() error { _, err := win.Allocate(ctx, g, 8, 0); return err }), win.ErrInvalid)
	l.is("Create with displacement unit 0", safely(func() error { _, err := win.Create(ctx, g, make([]byte, 8), 0); return err }), win.ErrInvalid)

	const size = 64
	w, err := win.Allocate(ctx, g, size, 8)
	if err != nil {
		return err
	}
	copy(w.Bytes(), badUsePattern(me))
	pattern := slices.Clone(w.Bytes())
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	do := func(name string, f func() error, want ...error) { l.is(name, safely(f), want...) }
	// Epoch calls with bad arguments, outside any epoch.
	do("Lock(exclusive) of rank size", func() error { return w.Lock(ctx, win.LockExclusive, n, 0) }, win.ErrRank)
	do("Lock(shared) of rank -1", func() error { return w.Lock(ctx, win.LockShared, -1, 0) }, win.ErrRank)
	do("Unlock of rank size", func() error { return w.Unlock(ctx, n) }, win.ErrRank)
	do("Lock type 0", func() error { return w.Lock(ctx, 0, peer, 0) }, win.ErrInvalid)
	do("Lock type 3", func() error { return w.Lock(ctx, win.LockType(3), peer, 0) }, win.ErrInvalid)
	do("Lock type -1", func() error { return w.Lock(ctx, win.LockType(-1), peer, 0) }, win.ErrInvalid)
	do("Post to rank size", func() error { return w.Post(ctx, []int{n}, 0) }, win.ErrRank)
	do("Start of rank -1", func() error { return w.Start(ctx, []int{-1}, 0) }, win.ErrRank)
	do("Post with a rank twice", func() error { return w.Post(ctx, []int{peer, peer}, 0) }, win.ErrInvalid)
	do("Start with a rank twice", func() error { return w.Start(ctx, []int{peer, peer}, 0) }, win.ErrInvalid)
	// None of these opened an epoch.
	if !l.ok("LockAll after the refused epoch calls", w.LockAll(ctx)) {
		return l.err()
	}
	b8, b16, r8, r16 := make([]byte, 8), make([]byte, 16), make([]byte, 8), make([]byte, 16)
	i64, f64 := datatype.Int64.Type(), datatype.Float64.Type()
	vec, err := datatype.Vector(2, 1, 8, i64) // elements 0 and 64 bytes apart
	if err != nil {
		return err
	}
	overlap, err := datatype.Indexed([]int{1, 1}, []int{0, 0}, i64)
	if err != nil {
		return err
	}
	reqErr := func(_ *win.Request, err error) error { return err }
	// Invalid ranks.
	do("Put to rank size", func() error { return w.Put(ctx, b8, n, 0) }, win.ErrRank)
	do("Put to rank -1", func() error { return w.Put(ctx, b8, -1, 0) }, win.ErrRank)
	do("Put to rank -3", func() error { return w.Put(ctx, b8, -3, 0) }, win.ErrRank)
	do("Put of no bytes to rank size", func() error { return w.Put(ctx, nil, n, 0) }, win.ErrRank)
	do("Get from rank 99", func() error { return w.Get(ctx, r8, 99, 0) }, win.ErrRank)
	do("Accumulate to rank size", func() error { return w.Accumulate(ctx, b8, datatype.Int64, n, 0, op.Sum) }, win.ErrRank)
	do("GetAccumulate to rank -1", func() error { return w.GetAccumulate(ctx, b8, r8, datatype.Int64, -1, 0, op.Sum) }, win.ErrRank)
	do("FetchAndOp to rank size", func() error { return w.FetchAndOp(ctx, b8, r8, datatype.Int64, n, 0, op.Sum) }, win.ErrRank)
	do("CompareAndSwap to rank size", func() error { return w.CompareAndSwap(ctx, b8, b8, r8, datatype.Int64, n, 0) }, win.ErrRank)
	do("RPut to rank -1", func() error { return reqErr(w.RPut(ctx, b8, -1, 0)) }, win.ErrRank)
	do("RGet from rank size", func() error { return reqErr(w.RGet(ctx, r8, n, 0)) }, win.ErrRank)
	do("Flush of rank size", func() error { return w.Flush(ctx, n) }, win.ErrRank)
	do("FlushLocal of rank -1", func() error { return w.FlushLocal(ctx, -1) }, win.ErrRank)
	// Outside the window (64 bytes, displacement unit 8: displacements 0-7).
	do("Put at displacement 8", func() error { return w.Put(ctx, b8, peer, 8) }, win.ErrOutOfWindow)
	do("Put of 16 bytes at displacement 7", func() error { return w.Put(ctx, b16, peer, 7) }, win.ErrOutOfWindow)
	do("Put at displacement 2^60", func() error { return w.Put(ctx, b8, peer, 1<<60) }, win.ErrOutOfWindow)
	do("Get at displacement 8", func() error { return w.Get(ctx, r8, peer, 8) }, win.ErrOutOfWindow)
	do("Get at displacement -1", func() error { return w.Get(ctx, r8, peer, -1) }, win.ErrOutOfWindow)
	do("Accumulate(SUM, int64) at displacement 8", func() error { return w.Accumulate(ctx, b8, datatype.Int64, peer, 8, op.Sum) }, win.ErrOutOfWindow)
	do("Accumulate(SUM, 2 x float64) at displacement 7", func() error { return w.Accumulate(ctx, b16, datatype.Float64, peer, 7, op.Sum) }, win.ErrOutOfWindow)
	do("Accumulate(MAX, float64) at displacement 8", func() error { return w.Accumulate(ctx, b8, datatype.Float64, peer, 8, op.Max) }, win.ErrOutOfWindow)
	do("GetAccumulate(NO_OP, int64) at displacement 8", func() error {
		return w.GetAccumulate(ctx, nil, r8, datatype.Int64, peer, 8, op.NoOp)
	}, win.ErrOutOfWindow)
	do("GetAccumulate(SUM, float64) at displacement 8", func() error {
		return w.GetAccumulate(ctx, b8, r8, datatype.Float64, peer, 8, op.Sum)
	}, win.ErrOutOfWindow)
	do("FetchAndOp(SUM, int64) at displacement 8", func() error { return w.FetchAndOp(ctx, b8, r8, datatype.Int64, peer, 8, op.Sum) }, win.ErrOutOfWindow)
	do("FetchAndOp(SUM, float64) at displacement 8", func() error {
		return w.FetchAndOp(ctx, b8, r8, datatype.Float64, peer, 8, op.Sum)
	}, win.ErrOutOfWindow)
	do("FetchAndOp(REPLACE, int64) at displacement -1", func() error {
		return w.FetchAndOp(ctx, b8, r8, datatype.Int64, peer, -1, op.Replace)
	}, win.ErrOutOfWindow)
	do("CompareAndSwap(int64) at displacement 8", func() error { return w.CompareAndSwap(ctx, b8, b8, r8, datatype.Int64, peer, 8) }, win.ErrOutOfWindow)
	do("RPut at displacement 8", func() error { return reqErr(w.RPut(ctx, b8, peer, 8)) }, win.ErrOutOfWindow)
	do("RGet at displacement 8", func() error { return reqErr(w.RGet(ctx, r8, peer, 8)) }, win.ErrOutOfWindow)
	do("RAccumulate at displacement 8", func() error {
		return reqErr(w.RAccumulate(ctx, win.Buffer{Data: b8, Type: i64, Count: 1}, win.Region{Rank: peer, Disp: 8, Type: i64, Count: 1}, op.Sum))
	}, win.ErrOutOfWindow)
	do("PutTo of 2 x int64 at displacement 7", func() error {
		return w.PutTo(ctx, win.Buffer{Data: b16, Type: i64, Count: 2}, win.Region{Rank: peer, Disp: 7, Type: i64, Count: 2})
	}, win.ErrOutOfWindow)
	do("GetTo of a vector reaching past the window", func() error {
		return w.GetTo(ctx, win.Buffer{Data: r16, Type: i64, Count: 2}, win.Region{Rank: peer, Disp: 0, Type: vec, Count: 1})
	}, win.ErrOutOfWindow)
	// Ops MPI does not allow for the call or the datatype.
	do("Accumulate(NO_OP)", func() error { return w.Accumulate(ctx, b8, datatype.Int64, peer, 0, op.NoOp) }, op.ErrOpUse)
	do("AccumulateTo(NO_OP)", func() error {
		return w.AccumulateTo(ctx, win.Buffer{Data: b8, Type: i64, Count: 1}, win.Region{Rank: peer, Type: i64, Count: 1}, op.NoOp)
	}, op.ErrOpUse)
	do("RAccumulate(NO_OP)", func() error {
		return reqErr(w.RAccumulate(ctx, win.Buffer{Data: b8, Type: i64, Count: 1}, win.Region{Rank: peer, Type: i64, Count: 1}, op.NoOp))
	}, op.ErrOpUse)
	do("Accumulate(MAXLOC, float64)", func() error { return w.Accumulate(ctx, b8, datatype.Float64, peer, 0, op.Maxloc) }, op.ErrOpDatatype)
	do("Accumulate(BAND, float64)", func() error { return w.Accumulate(ctx, b8, datatype.Float64, peer, 0, op.Band) }, op.ErrOpDatatype)
	do("Accumulate(LOR, float32)", func() error { return w.Accumulate(ctx, b8[:4], datatype.Float32, peer, 0, op.Lor) }, op.ErrOpDatatype)
	do("Accumulate(SUM, bool)", func() error { return w.Accumulate(ctx, b8[:1], datatype.Bool, peer, 0, op.Sum) }, op.ErrOpDatatype)
	do("Accumulate(MAX, complex128)", func() error { return w.Accumulate(ctx, b16, datatype.Complex128, peer, 0, op.Max) }, op.ErrOpDatatype)
	do("FetchAndOp(BXOR, float64)", func() error { return w.FetchAndOp(ctx, b8, r8, datatype.Float64, peer, 0, op.Bxor) }, op.ErrOpDatatype)
	do("FetchAndOp(MINLOC, int64)", func() error { return w.FetchAndOp(ctx, b8, r8, datatype.Int64, peer, 0, op.Minloc) }, op.ErrOpDatatype)
	do("GetAccumulate(PROD, bool)", func() error { return w.GetAccumulate(ctx, b8[:1], r8[:1], datatype.Bool, peer, 0, op.Prod) }, op.ErrOpDatatype)
	do("CompareAndSwap(float64)", func() error { return w.CompareAndSwap(ctx, b8, b8, r8, datatype.Float64, peer, 0) }, op.ErrOpDatatype)
	do("CompareAndSwap(complex64)", func() error { return w.CompareAndSwap(ctx, b8, b8, r8, datatype.Complex64, peer, 0) }, op.ErrOpDatatype)
	do("FetchAndOp(Op(0))", func() error { return w.FetchAndOp(ctx, b8, r8, datatype.Int64, peer, 0, op.Op(0)) }, op.ErrInvalid)
	do("FetchAndOp(Op(99))", func() error { return w.FetchAndOp(ctx, b8, r8, datatype.Int64, peer, 0, op.Op(99)) }, op.ErrInvalid)
	do("Accumulate(an undefined user op)", func() error { return w.Accumulate(ctx, b8, datatype.Int64, peer, 0, op.Op(250)) }, op.ErrInvalid)
	do("Accumulate on datatype 0", func() error { return w.Accumulate(ctx, b8, datatype.Basic(0), peer, 0, op.Sum) }, win.ErrInvalid, op.ErrInvalid)
	do("Accumulate on datatype 200", func() error { return w.Accumulate(ctx, b8, datatype.Basic(200), peer, 0, op.Sum) }, win.ErrInvalid, op.ErrInvalid)
	do("FetchAndOp on datatype 0", func() error { return w.FetchAndOp(ctx, b8, r8, datatype.Basic(0), peer, 0, op.Sum) }, win.ErrInvalid, op.ErrInvalid)
	// Buffers and signatures that do not match.
	do("Accumulate of 7 bytes of int64", func() error { return w.Accumulate(ctx, b8[:7], datatype.Int64, peer, 0, op.Sum) }, win.ErrInvalid)
	do("FetchAndOp with a 4-byte origin", func() error { return w.FetchAndOp(ctx, b8[:4], r8, datatype.Int64, peer, 0, op.Sum) }, win.ErrInvalid)
	do("CompareAndSwap with a 4-byte result", func() error {
		return w.CompareAndSwap(ctx, b8, b8, r8[:4], datatype.Int64, peer, 0)
	}, win.ErrInvalid)
	do("AccumulateTo of 2 elements into 1", func() error {
		return w.AccumulateTo(ctx, win.Buffer{Data: b16, Type: i64, Count: 2}, win.Region{Rank: peer, Type: i64, Count: 1}, op.Sum)
	}, win.ErrInvalid)
	do("AccumulateTo from float64 into int64", func() error {
		return w.AccumulateTo(ctx, win.Buffer{Data: b8, Type: f64, Count: 1}, win.Region{Rank: peer, Type: i64, Count: 1}, op.Sum)
	}, win.ErrInvalid)
	do("AccumulateTo into an overlapping target datatype", func() error {
		return w.AccumulateTo(ctx, win.Buffer{Data: b16, Type: i64, Count: 2}, win.Region{Rank: peer, Type: overlap, Count: 1}, op.Sum)
	}, win.ErrInvalid)
	// A result buffer receives: its entries may not overlap (MPI-4.1 5.1).
	do("GetAccumulateTo into an overlapping result datatype", func() error {
		return w.GetAccumulateTo(ctx, win.Buffer{Data: b16, Type: i64, Count: 2}, win.Buffer{Data: r8, Type: overlap, Count: 1},
			win.Region{Rank: peer, Type: i64, Count: 2}, op.Sum)
	}, win.ErrInvalid)
	do("RGetAccumulate into an overlapping result datatype", func() error {
		return reqErr(w.RGetAccumulate(ctx, win.Buffer{Data: b16, Type: i64, Count: 2}, win.Buffer{Data: r8, Type: overlap, Count: 1},
			win.Region{Rank: peer, Type: i64, Count: 2}, op.Replace))
	}, win.ErrInvalid)
	do("GetTo into an overlapping result datatype", func() error {
		return w.GetTo(ctx, win.Buffer{Data: r8, Type: overlap, Count: 1}, win.Region{Rank: peer, Type: i64, Count: 2})
	}, win.ErrInvalid)
	do("RGetTo into an overlapping result datatype", func() error {
		return reqErr(w.RGetTo(ctx, win.Buffer{Data: r8, Type: overlap, Count: 1}, win.Region{Rank: peer, Type: i64, Count: 2}))
	}, win.ErrInvalid)
	do("AccumulateTo with a buffer shorter than its datatype", func() error {
		return w.AccumulateTo(ctx, win.Buffer{Data: b8, Type: i64, Count: 2}, win.Region{Rank: peer, Type: i64, Count: 2}, op.Sum)
	}, win.ErrInvalid)
	do("PutTo of 2 elements into 1", func() error {
		return w.PutTo(ctx, win.Buffer{Data: b16, Type: i64, Count: 2}, win.Region{Rank: peer, Type: i64, Count: 1})
	}, win.ErrInvalid)
	l.ok("Flush after the refused calls (something was sent)", w.Flush(ctx, peer))
	l.ok("UnlockAll", w.UnlockAll(ctx))
	do("Put outside an epoch", func() error { return w.Put(ctx, b8, peer, 0) }, win.ErrEpoch)
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if !slices.Equal(w.Bytes(), pattern) {
		l.failf("refused calls changed rank %d's window:\n got %x\nwant %x", me, w.Bytes(), pattern)
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	// The window still works: each rank adds 1 to the next rank's word 0,
	// which held the next rank's pattern.
	if l.ok("LockAll", w.LockAll(ctx)) {
		old, err := win.FetchAndOp(ctx, w, int64(1), peer, 0, op.Sum)
		if l.ok("FetchAndOp after the refused calls", err) {
			want := int64(binary.NativeEndian.Uint64(badUsePattern(peer)))
			if old != want {
				l.failf("FetchAndOp returned %#x; the word held %#x", old, want)
			}
		}
		l.ok("UnlockAll", w.UnlockAll(ctx))
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if got, want := confWord(w.Bytes(), 0), binary.NativeEndian.Uint64(pattern)+1; got != want {
		l.failf("word 0 = %#x after one FetchAndOp(SUM, 1), want %#x", got, want)
	}
	if err := w.Free(ctx); err != nil {
		return err
	}
	// Every call on a freed window: ErrFreed, no panic.
	var bs []byte
	if err := safely(func() error { bs = w.Bytes(); return nil }); err != nil {
		l.failf("Bytes() after Free: %v", err)
	} else if len(bs) != 0 {
		l.failf("Bytes() after Free has %d bytes, want none", len(bs))
	}
	buf := win.Buffer{Data: b8, Type: i64, Count: 1}
	reg := win.Region{Rank: peer, Type: i64, Count: 1}
	after := []struct {
		name string
		f    func(ctx context.Context) error
	}{
		{"Put", func(ctx context.Context) error { return w.Put(ctx, b8, peer, 0) }},
		{"Get", func(ctx context.Context) error { return w.Get(ctx, r8, peer, 0) }},
		{"Accumulate", func(ctx context.Context) error { return w.Accumulate(ctx, b8, datatype.Int64, peer, 0, op.Sum) }},
		{"GetAccumulate", func(ctx context.Context) error { return w.GetAccumulate(ctx, b8, r8, datatype.Int64, peer, 0, op.Sum) }},
		{"FetchAndOp", func(ctx context.Context) error { return w.FetchAndOp(ctx, b8, r8, datatype.Int64, peer, 0, op.Sum) }},
		{"CompareAndSwap", func(ctx context.Context) error { return w.CompareAndSwap(ctx, b8, b8, r8, datatype.Int64, peer, 0) }},
		{"PutTo", func(ctx context.Context) error { return w.PutTo(ctx, buf, reg) }},
		{"GetTo", func(ctx context.Context) error { return w.GetTo(ctx, win.Buffer{Data: r8, Type: i64, Count: 1}, reg) }},
		{"AccumulateTo", func(ctx context.Context) error { return w.AccumulateTo(ctx, buf, reg, op.Sum) }},
		{"GetAccumulateTo", func(ctx context.Context) error {
			return w.GetAccumulateTo(ctx, buf, win.Buffer{Data: r8, Type: i64, Count: 1}, reg, op.Sum)
		}},
		{"RPut", func(ctx context.Context) error { return reqErr(w.RPut(ctx, b8, peer, 0)) }},
		{"RGet", func(ctx context.Context) error { return reqErr(w.RGet(ctx, r8, peer, 0)) }},
		{"RAccumulate", func(ctx context.Context) error { return reqErr(w.RAccumulate(ctx, buf, reg, op.Sum)) }},
		{"RGetAccumulate", func(ctx context.Context) error {
			return reqErr(w.RGetAccumulate(ctx, buf, win.Buffer{Data: r8, Type: i64, Count: 1}, reg, op.Sum))
		}},
		{"Put to ProcNull", func(ctx context.Context) error { return w.Put(ctx, b8, win.ProcNull, 0) }},
		{"Lock", func(ctx context.Context) error { return w.Lock(ctx, win.LockExclusive, peer, 0) }},
		{"Unlock", func(ctx context.Context) error { return w.Unlock(ctx, peer) }},
		{"LockAll", func(ctx context.Context) error { return w.LockAll(ctx) }},
		{"UnlockAll", func(ctx context.Context) error { return w.UnlockAll(ctx) }},
		{"Fence", func(ctx context.Context) error { return w.Fence(ctx, 0) }},
		{"Flush", func(ctx context.Context) error { return w.Flush(ctx, peer) }},
		{"FlushAll", func(ctx context.Context) error { return w.FlushAll(ctx) }},
		{"FlushLocal", func(ctx context.Context) error { return w.FlushLocal(ctx, peer) }},
		{"FlushLocalAll", func(ctx context.Context) error { return w.FlushLocalAll(ctx) }},
		{"Sync", func(ctx context.Context) error { return w.Sync() }},
		{"Post", func(ctx context.Context) error { return w.Post(ctx, []int{peer}, 0) }},
		{"Start", func(ctx context.Context) error { return w.Start(ctx, []int{peer}, 0) }},
		{"Complete", func(ctx context.Context) error { return w.Complete(ctx) }},
		{"Wait", func(ctx context.Context) error { return w.Wait(ctx) }},
		{"Test", func(ctx context.Context) error { _, err := w.Test(); return err }},
		{"Free", func(ctx context.Context) error { return w.Free(ctx) }},
	}
	for _, c := range after {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		do(c.name+" after Free", func() error { return c.f(cctx) }, win.ErrFreed)
		cancel()
	}
	if err := l.err(); err != nil {
		return err
	}
	fmt.Println("baduse=ok")
	return nil
}

// badUsePattern is what rank r's window holds in workConfBadUse.
func badUsePattern(r int) []byte {
	b := make([]byte, 64)
	for i := range b {
		b[i] = byte(0xC3 ^ (5*i + r))
	}
	return b
}

func TestConfBadUse(t *testing.T) {
	outs := newLaunch(t, "conf-baduse", 2).run(2 * time.Minute)
	for _, o := range outs {
		value(t, o, "baduse")
	}
}

// ---------------------------------------------------------------------------
// MPI_PROC_NULL (MPI-4.1 §12.3: a valid target rank in every RMA call, with
// the effect it has in point-to-point communication: nothing is transferred,
// the call succeeds, and a result buffer is left as it was; the epoch must
// still be closed as usual).

func workConfProcNull(ctx context.Context, g *group.Group) error {
	n, me := g.Size(), g.Rank()
	peer, from := (me+1)%n, (me+n-1)%n
	w, err := win.Allocate(ctx, g, 64, 8)
	if err != nil {
		return err
	}
	for i := range w.Bytes() {
		w.Bytes()[i] = byte(0x11 * (i%7 + me + 1))
	}
	pattern := slices.Clone(w.Bytes())
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	var l confLog
	pn := win.ProcNull
	const fill = 0xEE
	res := func(n int) []byte { return bytes.Repeat([]byte{fill}, n) }
	untouched := func(name string, b []byte) {
		for _, x := range b {
			if x != fill {
				l.failf("%s to ProcNull wrote its result buffer: %x", name, b)
				return
			}
		}
	}
	i64 := datatype.Int64.Type()
	b8 := confU64(0x0102030405060708)
	// A call to ProcNull needs the epoch a call to any rank needs (as in
	// MPICH, which checks the epoch first): rma says whether the RMA calls
	// may be made (an access epoch of any kind is open), passive whether
	// the request-based calls and Flush may (a passive-target one is).
	calls := func(epoch string, rma, passive bool) {
		l.step = epoch
		want := func(name string, ok bool, err error) {
			if ok {
				l.ok(name, err)
			} else {
				l.is(name, err, win.ErrEpoch)
			}
		}
		rmaCall := func(name string, f func() error) { want(name, rma, safely(f)) }
		rmaCall("Put", func() error { return w.Put(ctx, b8, pn, 0) })
		r := res(8)
		rmaCall("Get", func() error { return w.Get(ctx, r, pn, 0) })
		untouched("Get", r)
		rmaCall("Accumulate(SUM, int64)", func() error { return w.Accumulate(ctx, b8, datatype.Int64, pn, 0, op.Sum) })
		rmaCall("Accumulate(MAX, float64)", func() error { return w.Accumulate(ctx, b8, datatype.Float64, pn, 0, op.Max) })
		r = res(8)
		rmaCall("GetAccumulate(REPLACE)", func() error { return w.GetAccumulate(ctx, b8, r, datatype.Int64, pn, 0, op.Replace) })
		untouched("GetAccumulate", r)
		r = res(8)
		rmaCall("FetchAndOp(SUM)", func() error { return w.FetchAndOp(ctx, b8, r, datatype.Int64, pn, 0, op.Sum) })
		untouched("FetchAndOp", r)
		r = res(8)
		rmaCall("CompareAndSwap", func() error { return w.CompareAndSwap(ctx, b8, b8, r, datatype.Int64, pn, 0) })
		untouched("CompareAndSwap", r)
		reg := win.Region{Rank: pn, Type: i64, Count: 1}
		rmaCall("PutTo", func() error { return w.PutTo(ctx, win.Buffer{Data: b8, Type: i64, Count: 1}, reg) })
		r = res(8)
		rmaCall("GetTo", func() error { return w.GetTo(ctx, win.Buffer{Data: r, Type: i64, Count: 1}, reg) })
		untouched("GetTo", r)
		rmaCall("AccumulateTo", func() error { return w.AccumulateTo(ctx, win.Buffer{Data: b8, Type: i64, Count: 1}, reg, op.Sum) })
		r = res(8)
		rmaCall("GetAccumulateTo", func() error {
			return w.GetAccumulateTo(ctx, win.Buffer{Data: b8, Type: i64, Count: 1}, win.Buffer{Data: r, Type: i64, Count: 1}, reg, op.Sum)
		})
		untouched("GetAccumulateTo", r)
		wait := func(name string, f func() (*win.Request, error)) {
			want(name, passive, safely(func() error {
				q, err := f()
				if err != nil {
					if q != nil {
						return fmt.Errorf("a request and an error (%w)", err)
					}
					return err
				}
				if q == nil {
					return errors.New("nil request and nil error")
				}
				return q.Wait(ctx)
			}))
		}
		wait("RPut", func() (*win.Request, error) { return w.RPut(ctx, b8, pn, 0) })
		wait("RPutTo", func() (*win.Request, error) { return w.RPutTo(ctx, win.Buffer{Data: b8, Type: i64, Count: 1}, reg) })
		r = res(8)
		wait("RGet", func() (*win.Request, error) { return w.RGet(ctx, r, pn, 0) })
		untouched("RGet", r)
		r = res(8)
		wait("RGetTo", func() (*win.Request, error) { return w.RGetTo(ctx, win.Buffer{Data: r, Type: i64, Count: 1}, reg) })
		untouched("RGetTo", r)
		wait("RAccumulate", func() (*win.Request, error) {
			return w.RAccumulate(ctx, win.Buffer{Data: b8, Type: i64, Count: 1}, reg, op.Sum)
		})
		r = res(8)
		wait("RGetAccumulate", func() (*win.Request, error) {
			return w.RGetAccumulate(ctx, win.Buffer{Data: b8, Type: i64, Count: 1}, win.Buffer{Data: r, Type: i64, Count: 1}, reg, op.Sum)
		})
		untouched("RGetAccumulate", r)
		want("Flush(ProcNull)", passive, safely(func() error { return w.Flush(ctx, pn) }))
		want("FlushLocal(ProcNull)", passive, safely(func() error { return w.FlushLocal(ctx, pn) }))
		l.step = ""
	}
	calls("before any epoch", false, false)
	l.is("RAccumulate(BAND, float64) to ProcNull before any epoch: the op first", safely(func() error {
		_, err := w.RAccumulate(ctx, win.Buffer{Data: b8, Type: datatype.Float64.Type(), Count: 1},
			win.Region{Rank: pn, Type: datatype.Float64.Type(), Count: 1}, op.Band)
		return err
	}), op.ErrOpDatatype)
	if l.ok("LockAll", w.LockAll(ctx)) {
		calls("in a LockAll epoch", true, true)
		// What MPI forbids whatever the target is refused for ProcNull
		// too, as MPICH checks the op and datatype before it returns.
		l.step = "arguments MPI forbids, to ProcNull"
		f64 := datatype.Float64.Type()
		l.is("Accumulate(BAND, float64)", safely(func() error { return w.Accumulate(ctx, b8, datatype.Float64, pn, 0, op.Band) }), op.ErrOpDatatype)
		l.is("Accumulate(NO_OP)", safely(func() error { return w.Accumulate(ctx, b8, datatype.Int64, pn, 0, op.NoOp) }), op.ErrOpUse)
		l.is("GetAccumulateTo(LAND, float64)", safely(func() error {
			return w.GetAccumulateTo(ctx, win.Buffer{Data: b8, Type: f64, Count: 1}, win.Buffer{Data: res(8), Type: f64, Count: 1},
				win.Region{Rank: pn, Type: f64, Count: 1}, op.Land)
		}), op.ErrOpDatatype)
		l.is("RGetAccumulate(BOR, float64)", safely(func() error {
			_, err := w.RGetAccumulate(ctx, win.Buffer{Data: b8, Type: f64, Count: 1}, win.Buffer{Data: res(8), Type: f64, Count: 1},
				win.Region{Rank: pn, Type: f64, Count: 1}, op.Bor)
			return err
		}), op.ErrOpDatatype)
		l.is("FetchAndOp(BXOR, float64)", safely(func() error { return w.FetchAndOp(ctx, b8, res(8), datatype.Float64, pn, 0, op.Bxor) }), op.ErrOpDatatype)
		l.is("FetchAndOp with a 4-byte result", safely(func() error { return w.FetchAndOp(ctx, b8, res(4), datatype.Int64, pn, 0, op.Sum) }), win.ErrInvalid)
		l.is("CompareAndSwap(float64)", safely(func() error { return w.CompareAndSwap(ctx, b8, b8, res(8), datatype.Float64, pn, 0) }), op.ErrOpDatatype)
		l.step = ""
		l.ok("UnlockAll", w.UnlockAll(ctx))
	}
	// MPICH's rmanull test makes its calls to ProcNull between Lock and
	// Unlock of ProcNull.
	if l.ok("Lock(exclusive, ProcNull)", safely(func() error { return w.Lock(ctx, win.LockExclusive, pn, 0) })) {
		calls("in a Lock(ProcNull) epoch", true, true)
		l.ok("FlushAll in a Lock(ProcNull) epoch", w.FlushAll(ctx))
		l.ok("Unlock(ProcNull)", safely(func() error { return w.Unlock(ctx, pn) }))
	}
	calls("after Unlock(ProcNull)", false, false)
	if l.ok("Lock(shared, next rank)", w.Lock(ctx, win.LockShared, peer, 0)) {
		calls("in a Lock epoch of another rank", true, true)
		l.ok("Unlock(next rank)", w.Unlock(ctx, peer))
	}
	l.ok("Fence(NoPrecede)", w.Fence(ctx, win.NoPrecede))
	calls("in a fence epoch", true, false)
	l.ok("Fence(NoSucceed)", w.Fence(ctx, win.NoSucceed))
	calls("after Fence(NoSucceed)", false, false)
	if l.ok("Post", w.Post(ctx, []int{from}, 0)) {
		if l.ok("Start", w.Start(ctx, []int{peer}, 0)) {
			calls("in a Start epoch", true, false)
			l.ok("Complete", w.Complete(ctx))
		}
		l.ok("Wait", w.Wait(ctx))
	}
	calls("after Complete", false, false)
	// The epoch calls still work normally.
	if l.ok("LockAll", w.LockAll(ctx)) {
		l.ok("Put to the next rank", w.Put(ctx, confU64(uint64(me+1)), (me+1)%n, 7))
		l.ok("UnlockAll", w.UnlockAll(ctx))
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	want := slices.Clone(pattern)
	binary.NativeEndian.PutUint64(want[56:], uint64((me+n-1)%n+1))
	if !slices.Equal(w.Bytes(), want) {
		l.failf("calls to ProcNull changed rank %d's window:\n got %x\nwant %x", me, w.Bytes(), want)
	}
	if err := w.Free(ctx); err != nil {
		return err
	}
	if err := l.err(); err != nil {
		return err
	}
	fmt.Println("procnull=ok")
	return nil
}

func TestConfProcNull(t *testing.T) {
	outs := newLaunch(t, "conf-procnull", 2).run(2 * time.Minute)
	for _, o := range outs {
		value(t, o, "procnull")
	}
}

// ---------------------------------------------------------------------------
// Assertions (MPI-4.1 §12.5.5): correct assertions do not change a program's
// meaning. LockAll and Lock take NoCheck; Fence takes NoStore, NoPut,
// NoPrecede and NoSucceed; Post takes NoCheck, NoStore and NoPut; Start takes
// NoCheck when every matching Post did (and had completed when Start was
// called). Each assertion below is true of the program that makes it.

func workConfAsserts(ctx context.Context, g *group.Group) error {
	n, me := g.Size(), g.Rank()
	peer, from := (me+1)%n, (me+n-1)%n
	w, err := win.Allocate(ctx, g, 64, 8)
	if err != nil {
		return err
	}
	var l confLog
	// Every rank takes only shared locks with LockAll(NoCheck): no
	// conflicting lock exists, as NoCheck promises.
	if l.ok("LockAll(NoCheck)", w.LockAll(ctx, win.NoCheck)) {
		l.ok("Put", w.Put(ctx, confU64(uint64(10+me)), peer, 0))
		l.ok("Accumulate(SUM)", w.Accumulate(ctx, confU64(uint64(me+1)), datatype.Int64, peer, 1, op.Sum))
		l.ok("UnlockAll", w.UnlockAll(ctx))
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if got := confWord(w.Bytes(), 0); got != uint64(10+from) {
		l.failf("after LockAll(NoCheck) epoch slot 0 = %d, want %d", got, 10+from)
	}
	if got := confWord(w.Bytes(), 1); got != uint64(from+1) {
		l.failf("after LockAll(NoCheck) epoch slot 1 = %d, want %d", got, from+1)
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	// Lock(shared, NoCheck), again with no conflicting lock anywhere.
	if l.ok("Lock(shared, NoCheck)", w.Lock(ctx, win.LockShared, peer, win.NoCheck)) {
		l.ok("Put", w.Put(ctx, confU64(uint64(20+me)), peer, 2))
		l.ok("Unlock", w.Unlock(ctx, peer))
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if got := confWord(w.Bytes(), 2); got != uint64(20+from) {
		l.failf("after Lock(NoCheck) epoch slot 2 = %d, want %d", got, 20+from)
	}
	// Fences with the assertions that hold here: no local stores at all;
	// no epoch before the first; only Gets in the second epoch, so no Put
	// or Accumulate updates the window between the second and third fence.
	l.ok("Fence(NoStore|NoPrecede)", w.Fence(ctx, win.NoStore|win.NoPrecede))
	l.ok("Put", w.Put(ctx, confU64(uint64(30+me)), peer, 3))
	l.ok("Fence(NoStore|NoPut)", w.Fence(ctx, win.NoStore|win.NoPut))
	if got := confWord(w.Bytes(), 3); got != uint64(30+from) {
		l.failf("after the asserted fence slot 3 = %d, want %d", got, 30+from)
	}
	got := make([]byte, 8)
	if l.ok("Get in a NoPut fence epoch", w.Get(ctx, got, peer, 3)) && confWord(got, 0) != uint64(30+me) {
		l.failf("Get of the next rank's slot 3 = %d, want %d", confWord(got, 0), 30+me)
	}
	l.ok("Fence(NoStore|NoSucceed)", w.Fence(ctx, win.NoStore|win.NoSucceed))
	// Post(NoCheck|NoStore) completes on every rank before any Start(NoCheck).
	posted := l.ok("Post(NoCheck|NoStore)", w.Post(ctx, []int{from}, win.NoCheck|win.NoStore))
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	if l.ok("Start(NoCheck)", w.Start(sctx, []int{peer}, win.NoCheck)) {
		l.ok("Put", w.Put(sctx, confU64(uint64(40+me)), peer, 4))
		l.ok("Complete", w.Complete(sctx))
	}
	if posted && l.ok("Wait", w.Wait(sctx)) {
		if got := confWord(w.Bytes(), 4); got != uint64(40+from) {
			l.failf("after the asserted post-start-complete-wait slot 4 = %d, want %d", got, 40+from)
		}
	}
	cancel()
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if err := w.Free(ctx); err != nil {
		return err
	}
	if err := l.err(); err != nil {
		return err
	}
	fmt.Println("asserts=ok")
	return nil
}

func TestConfAsserts(t *testing.T) {
	outs := newLaunch(t, "conf-asserts", 2).run(2 * time.Minute)
	for _, o := range outs {
		value(t, o, "asserts")
	}
}
