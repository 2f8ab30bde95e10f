//go:build integration

package test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/coll"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/verbs"
	"github.com/onesided/rma/win"
)

func init() {
	workers["conf-noop"] = workConfNoOp
	workers["conf-truelb"] = workConfTrueLB
	workers["conf-flush"] = workConfFlush
	workers["conf-collpeerdeath"] = workConfCollPeerDeath
	workers["conf-afterclose"] = workConfAfterClose
}

// workConfNoOp (2 ranks): NO_OP on a type other than a 64-bit integer is
// applied by the target's engine, like every other op on that type (MPI:
// accumulate_ops same_op_no_op): it works at any displacement the type's
// alignment allows (4 for the 4-byte pairs and complex64), and it is
// atomic with the engine's MAXLOC on a value-index pair, which the engine
// writes in two stores (an RDMA READ could see half of it). Rank 1
// accumulates MAXLOC of (k, k) into rank 0's pairs for a few seconds while
// rank 0 reads its own pairs with GetAccumulate(NO_OP): no pair may have
// V != I.
func workConfNoOp(ctx context.Context, g *group.Group) error {
	me := g.Rank()
	var l confLog
	for _, b := range datatype.Basics() {
		want := atomics.Engine
		if b == datatype.Int64 || b == datatype.Uint64 {
			want = atomics.NICRead
		}
		w, err := win.Allocate(ctx, g, 8, 8)
		if err != nil {
			return err
		}
		if got := w.Route(op.NoOp, b); got != want && w.Route(op.Sum, datatype.Int64) == atomics.NICFetchAdd {
			l.failf("route of NO_OP on %v: %v, want %v", b, got, want)
		}
		if err := w.Free(ctx); err != nil {
			return err
		}
	}

	w, err := win.Allocate(ctx, g, 64, 1)
	if err != nil {
		return err
	}
	ne := binary.NativeEndian
	b := w.Bytes()
	ne.PutUint32(b[4:], math.Float32bits(1.5)) // float32-int pair at 4
	ne.PutUint32(b[8:], 7)
	ne.PutUint32(b[12:], 11) // int32-int pair at 12
	ne.PutUint32(b[16:], 12)
	ne.PutUint32(b[20:], math.Float32bits(2)) // complex64 at 20
	ne.PutUint32(b[24:], math.Float32bits(3))
	ne.PutUint64(b[28:], math.Float64bits(9.25)) // float64 at 28
	if err := w.Fence(ctx, 0); err != nil {
		return err
	}
	peer := 1 - me
	res := make([]byte, 8)
	if l.ok("GetAccumulate(NO_OP) of a float32-int pair at displacement 4", w.GetAccumulate(ctx, nil, res, datatype.Float32Int, peer, 4, op.NoOp)) &&
		(math.Float32frombits(ne.Uint32(res)) != 1.5 || ne.Uint32(res[4:]) != 7) {
		l.failf("float32-int pair at 4: got %v, %d, want 1.5, 7", math.Float32frombits(ne.Uint32(res)), ne.Uint32(res[4:]))
	}
	if l.ok("GetAccumulate(NO_OP) of an int32-int pair at displacement 12", w.GetAccumulate(ctx, nil, res, datatype.Int32Int, peer, 12, op.NoOp)) &&
		(ne.Uint32(res) != 11 || ne.Uint32(res[4:]) != 12) {
		l.failf("int32-int pair at 12: got %d, %d, want 11, 12", ne.Uint32(res), ne.Uint32(res[4:]))
	}
	if l.ok("FetchAndOp(NO_OP) of a complex64 at displacement 20", w.FetchAndOp(ctx, nil, res, datatype.Complex64, peer, 20, op.NoOp)) &&
		(math.Float32frombits(ne.Uint32(res)) != 2 || math.Float32frombits(ne.Uint32(res[4:])) != 3) {
		l.failf("complex64 at 20: got % x, want 2+3i", res)
	}
	if l.ok("FetchAndOp(NO_OP) of a float64 at displacement 28", w.FetchAndOp(ctx, nil, res, datatype.Float64, peer, 28, op.NoOp)) &&
		math.Float64frombits(ne.Uint64(res)) != 9.25 {
		l.failf("float64 at 28: got %v, want 9.25", math.Float64frombits(ne.Uint64(res)))
	}
	l.is("FetchAndOp(SUM) of an int64 at displacement 4 (a NIC atomic)",
		w.FetchAndOp(ctx, res, res, datatype.Int64, peer, 4, op.Sum), win.ErrAlignment)
	if err := w.Fence(ctx, win.NoSucceed); err != nil {
		return err
	}
	if err := w.Free(ctx); err != nil {
		return err
	}

	// NO_OP against MAXLOC on pairs.
	const pairs, period = 64, 3 * time.Second
	pw, err := win.Allocate(ctx, g, pairs*8, 8)
	if err != nil {
		return err
	}
	if err := pw.LockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	switch me {
	case 1:
		src := make([]datatype.PairInt16Int, pairs)
		k := 1
		for start := time.Now(); time.Since(start) < period && k < math.MaxInt16; k++ {
			for i := range src {
				src[i] = datatype.PairInt16Int{V: int16(k), I: int32(k)}
			}
			if !l.ok("Accumulate(MAXLOC)", pw.Accumulate(ctx, datatype.AsBytes(src), datatype.Int16Int, 0, 0, op.Maxloc)) {
				break
			}
		}
		l.ok("Flush", pw.Flush(ctx, 0))
		fmt.Printf("maxloc updates=%d\n", k-1)
	case 0:
		got := make([]datatype.PairInt16Int, pairs)
		torn, reads := 0, 0
		for start := time.Now(); time.Since(start) < period; {
			if !l.ok("GetAccumulate(NO_OP) of the own pairs", pw.GetAccumulate(ctx, nil, datatype.AsBytes(got), datatype.Int16Int, 0, 0, op.NoOp)) {
				break
			}
			for _, p := range got {
				reads++
				if int32(p.V) != p.I {
					if torn == 0 {
						l.failf("a pair read half written: V=%d I=%d", p.V, p.I)
					}
					torn++
				}
			}
		}
		fmt.Printf("pairs read=%d torn=%d\n", reads, torn)
	}
	if err := pw.UnlockAll(ctx); err != nil {
		return err
	}
	if err := pw.Free(ctx); err != nil {
		return err
	}
	if err := l.err(); err != nil {
		return err
	}
	fmt.Println("noop=ok")
	return nil
}

// workConfTrueLB (2 ranks): an origin or result datatype whose data does
// not start at its lower bound (Resized(Hindexed one int64 at byte 8),
// lower bound 0, extent 8: the elements of two instances are at bytes 8
// and 16) is read and written where its type map says, in PutTo,
// AccumulateTo, GetTo and RGetTo (MPI-4.1 5.1; MPICH's contig_displ).
func workConfTrueLB(ctx context.Context, g *group.Group) error {
	me := g.Rank()
	var l confLog
	hi64, err := datatype.Hindexed([]int{1}, []int{8}, datatype.Int64.Type())
	if err != nil {
		return err
	}
	rs64, err := datatype.Resized(hi64, 0, 8)
	if err != nil {
		return err
	}
	hi32, err := datatype.Hindexed([]int{1}, []int{4}, datatype.Int32.Type())
	if err != nil {
		return err
	}
	rs32, err := datatype.Resized(hi32, 0, 4)
	if err != nil {
		return err
	}
	w, err := win.Allocate(ctx, g, 4*8, 8)
	if err != nil {
		return err
	}
	w4, err := win.Allocate(ctx, g, 4*4, 4)
	if err != nil {
		return err
	}
	copy(w.Bytes(), datatype.AsBytes([]int64{100, 101, 102, 103}))
	copy(w4.Bytes(), datatype.AsBytes([]int32{100, 101, 102, 103}))
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	if err := w4.LockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	peer := 1 - me
	if me == 0 {
		// Results first, before the peer's words change.
		res := []int64{-1, -2, -3}
		if l.ok("GetTo into the resized type", w.GetTo(ctx, win.Buffer{Data: datatype.AsBytes(res), Type: rs64, Count: 2},
			win.Region{Rank: peer, Type: datatype.Int64.Type(), Count: 2})) && !slices.Equal(res, []int64{-1, 100, 101}) {
			l.failf("GetTo into the resized type: result %v, want [-1 100 101]", res)
		}
		res = []int64{-1, -2, -3}
		r, err := w.RGetTo(ctx, win.Buffer{Data: datatype.AsBytes(res), Type: rs64, Count: 2}, win.Region{Rank: peer, Type: datatype.Int64.Type(), Count: 2})
		if l.ok("RGetTo into the resized type", err) && l.ok("RGetTo's Wait", r.Wait(ctx)) && !slices.Equal(res, []int64{-1, 100, 101}) {
			l.failf("RGetTo into the resized type: result %v, want [-1 100 101]", res)
		}
		l.ok("PutTo from the resized type", w.PutTo(ctx, win.Buffer{Data: datatype.AsBytes([]int64{-1, 7, 8}), Type: rs64, Count: 2},
			win.Region{Rank: peer, Type: datatype.Int64.Type(), Count: 2}))
		l.ok("AccumulateTo(SUM) from the resized type", w4.AccumulateTo(ctx, win.Buffer{Data: datatype.AsBytes([]int32{-1, 7, 8}), Type: rs32, Count: 2},
			win.Region{Rank: peer, Type: datatype.Int32.Type(), Count: 2}, op.Sum))
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	if err := w4.UnlockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if me == 1 {
		if got, _ := datatype.View[int64](w.Bytes()); !slices.Equal(got, []int64{7, 8, 102, 103}) {
			l.failf("after PutTo from the resized type: window %v, want [7 8 102 103]", got)
		}
		if got, _ := datatype.View[int32](w4.Bytes()); !slices.Equal(got, []int32{107, 109, 102, 103}) {
			l.failf("after AccumulateTo from the resized type: window %v, want [107 109 102 103]", got)
		}
	}
	if err := w.Free(ctx); err != nil {
		return err
	}
	if err := w4.Free(ctx); err != nil {
		return err
	}
	if err := l.err(); err != nil {
		return err
	}
	fmt.Println("truelb=ok")
	return nil
}

// workConfFlush (2 ranks): the flush calls belong to passive-target epochs
// (MPI-4.1 12.5.4; MPICH returns MPI_ERR_RMA_SYNC elsewhere): outside any
// epoch, in a fence epoch and in a post-start-complete-wait epoch they
// fail with ErrEpoch, and a refused Flush right after a Fence does not
// start the fence epoch (a Lock may still follow, as in MPICH's rmazero).
// Lock takes only NoCheck; an empty Start group is an access epoch too;
// Free inside an epoch fails with ErrEpoch.
func workConfFlush(ctx context.Context, g *group.Group) error {
	me := g.Rank()
	peer := 1 - me
	var l confLog
	w, err := win.Allocate(ctx, g, 64, 8)
	if err != nil {
		return err
	}
	b8 := make([]byte, 8)
	flushes := func(where string) {
		l.is("Flush "+where, w.Flush(ctx, peer), win.ErrEpoch)
		l.is("FlushLocal "+where, w.FlushLocal(ctx, peer), win.ErrEpoch)
		l.is("FlushAll "+where, w.FlushAll(ctx), win.ErrEpoch)
		l.is("FlushLocalAll "+where, w.FlushLocalAll(ctx), win.ErrEpoch)
	}
	flushes("outside any epoch")
	for _, a := range []win.Assert{win.NoStore, win.NoPut, win.NoPrecede, win.NoSucceed, win.NoCheck | win.NoPut} {
		l.is(fmt.Sprintf("Lock with assertion %#x", int(a)), w.Lock(ctx, win.LockShared, peer, a), win.ErrInvalid)
	}
	if l.ok("Lock(NoCheck)", w.Lock(ctx, win.LockShared, peer, win.NoCheck)) {
		l.ok("Flush in a Lock(NoCheck) epoch", w.Flush(ctx, peer))
		l.ok("FlushAll in a Lock epoch", w.FlushAll(ctx))
		l.ok("Unlock", w.Unlock(ctx, peer))
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	// A fence epoch, with an RMA call.
	if l.ok("Fence", w.Fence(ctx, 0)) && l.ok("Put in the fence epoch", w.Put(ctx, b8, peer, 0)) {
		flushes("in a fence epoch")
	}
	// A Fence, a refused Flush, then a Lock: the fence epoch never started.
	if l.ok("Fence", w.Fence(ctx, 0)) {
		l.is("Flush after a Fence, before any RMA call", w.Flush(ctx, peer), win.ErrEpoch)
		if l.ok("Lock after a Fence and a refused Flush", w.Lock(ctx, win.LockShared, peer, 0)) {
			l.ok("Unlock", w.Unlock(ctx, peer))
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	// A post-start-complete-wait epoch.
	if l.ok("Post", w.Post(ctx, []int{peer}, 0)) && l.ok("Start", w.Start(ctx, []int{peer}, 0)) {
		l.ok("Put in the access epoch", w.Put(ctx, b8, peer, 0))
		flushes("in a post-start-complete-wait epoch")
		l.ok("Complete", w.Complete(ctx))
		l.ok("Wait", w.Wait(ctx))
	}
	// An empty Start group opens an access epoch all the same.
	if l.ok("Start of no rank", w.Start(ctx, []int{}, 0)) {
		err := w.LockAll(ctx)
		l.is("LockAll inside Start of no rank", err, win.ErrEpoch)
		if err == nil {
			w.UnlockAll(ctx)
		}
		l.is("Fence inside Start of no rank", w.Fence(ctx, 0), win.ErrEpoch)
		l.ok("Complete of Start of no rank", w.Complete(ctx))
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	// Free inside an epoch is refused and frees nothing (MPICH's
	// win_sync_free_pt and win_sync_free_at); the epoch goes on.
	if l.ok("Lock(NoCheck) before Free", w.Lock(ctx, win.LockShared, peer, win.NoCheck)) {
		l.is("Free inside a Lock epoch", w.Free(ctx), win.ErrEpoch)
		l.ok("Put after the refused Free", w.Put(ctx, b8, peer, 1))
		l.ok("Unlock", w.Unlock(ctx, peer))
	}
	if l.ok("Post before Free", w.Post(ctx, []int{peer}, 0)) && l.ok("Start before Free", w.Start(ctx, []int{peer}, 0)) {
		l.is("Free inside a post-start-complete-wait epoch", w.Free(ctx), win.ErrEpoch)
		l.ok("Complete", w.Complete(ctx))
		l.is("Free inside an exposure epoch", w.Free(ctx), win.ErrEpoch)
		l.ok("Wait", w.Wait(ctx))
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if err := w.Free(ctx); err != nil {
		return err
	}
	if err := l.err(); err != nil {
		return err
	}
	fmt.Println("flush=ok")
	return nil
}

func TestConfNoOpEngine(t *testing.T) {
	l := newLaunch(t, "conf-noop", 2)
	for r, out := range l.run(2 * time.Minute) {
		if v := value(t, out, "noop"); v != "ok" {
			t.Errorf("rank %d: noop=%s", r, v)
		}
		if r == 0 && !strings.Contains(out, "torn=0") {
			t.Errorf("rank 0 read pairs half written:\n%s", out)
		}
	}
}

func TestConfTrueLB(t *testing.T) {
	l := newLaunch(t, "conf-truelb", 2)
	for r, out := range l.run(time.Minute) {
		if v := value(t, out, "truelb"); v != "ok" {
			t.Errorf("rank %d: truelb=%s", r, v)
		}
	}
}

func TestConfFlushEpochs(t *testing.T) {
	l := newLaunch(t, "conf-flush", 2)
	for r, out := range l.run(time.Minute) {
		if v := value(t, out, "flush"); v != "ok" {
			t.Errorf("rank %d: flush=%s", r, v)
		}
	}
}

// workConfCollPeerDeath (3 ranks): rank 2's process exits while ranks 0 and
// 1 start an Allreduce; both must fail with ErrPeerLost within 3 s (a dead
// process is noticed at once), although rank 0 may only be waiting for
// rank 1, which has failed its own part and stays alive for 5 s more.
func workConfCollPeerDeath(ctx context.Context, g *group.Group) error {
	c, err := coll.New(ctx, g)
	if err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if g.Rank() == 2 {
		time.Sleep(300 * time.Millisecond)
		os.Exit(0)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v := make([]float64, 1000)
	start := time.Now()
	err = coll.AllreduceOf(cctx, c, v, v, op.Sum)
	took := time.Since(start)
	if !errors.Is(err, verbs.ErrPeerLost) || took > 3*time.Second {
		return fmt.Errorf("Allreduce with rank 2 gone: %v after %v, want %v within 3s", err, took.Round(time.Millisecond), verbs.ErrPeerLost)
	}
	fmt.Printf("collpeerdeath=ok after %v: %v\n", took.Round(time.Millisecond), err)
	time.Sleep(time.Until(start.Add(5 * time.Second)))
	os.Exit(0) // the group cannot be closed collectively without rank 2
	return nil
}

// workConfAfterClose (2 ranks): calls made after the group's Close (a
// misuse: windows, communicators and subgroups are to be closed first)
// return an error that matches verbs.ErrClosed, and none panics.
func workConfAfterClose(ctx context.Context, g *group.Group) error {
	var l confLog
	w, err := win.Allocate(ctx, g, 64, 8)
	if err != nil {
		return err
	}
	c, err := coll.New(ctx, g)
	if err != nil {
		return err
	}
	sub, err := g.Split(ctx, 0, g.Rank())
	if err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	// What the window and the others hold keeps parts of the group from
	// being released: Close says so, and the group is closed all the same.
	fmt.Printf("Close with a window, a communicator and a subgroup open: %v\n", g.Close())
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	peer := 1 - g.Rank()
	b8 := make([]byte, 8)
	v := []int64{1}
	for _, c := range []struct {
		name string
		f    func() error
	}{
		{"Barrier", func() error { return g.Barrier(cctx) }},
		{"AllGather", func() error { _, err := g.AllGather(cctx, b8); return err }},
		{"the subgroup's Barrier", func() error { return sub.Barrier(cctx) }},
		{"LockAll", func() error { return w.LockAll(cctx) }},
		{"Put", func() error { return w.Put(cctx, b8, peer, 0) }},
		{"Get", func() error { return w.Get(cctx, b8, peer, 0) }},
		{"FetchAndOp", func() error { _, err := win.FetchAndOp(cctx, w, int64(1), peer, 0, op.Sum); return err }},
		{"Accumulate", func() error { return w.Accumulate(cctx, b8, datatype.Float64, peer, 0, op.Sum) }},
		{"Allreduce", func() error { return coll.AllreduceOf(cctx, c, v, v, op.Sum) }},
		{"the communicator's Close", func() error { return c.Close(cctx) }},
		{"Free", func() error { return w.Free(cctx) }},
	} {
		err := safely(c.f)
		if err == nil || !errors.Is(err, verbs.ErrClosed) && !errors.Is(err, win.ErrEpoch) {
			l.failf("%s after the group's Close: %v, want an error matching %v", c.name, err, verbs.ErrClosed)
		}
	}
	if err := l.err(); err != nil {
		return err
	}
	fmt.Println("afterclose=ok")
	return nil
}

func TestConfCollPeerDeath(t *testing.T) {
	l := newLaunch(t, "conf-collpeerdeath", 3)
	outs := l.run(2 * time.Minute)
	for r := 0; r < 2; r++ {
		if v := value(t, outs[r], "collpeerdeath"); !strings.HasPrefix(v, "ok") {
			t.Errorf("rank %d: collpeerdeath=%s", r, v)
		}
	}
}

func TestConfAfterClose(t *testing.T) {
	l := newLaunch(t, "conf-afterclose", 2)
	for r, out := range l.run(time.Minute) {
		if v := value(t, out, "afterclose"); v != "ok" {
			t.Errorf("rank %d: afterclose=%s", r, v)
		}
	}
}

// TestCloseDuringCalls: closing the group while goroutines are in calls
// of every kind makes them all fail with an error, and crashes nothing.
func TestCloseDuringCalls(t *testing.T) {
	l := newLaunch(t, "closeduring", 2)
	finished(t, l.run(2*time.Minute), "closeduring")
}

// TestRequestsAfterClose: requests whose target stopped answering complete
// with an error once the group is closed, by Test as by Waitany.
func TestRequestsAfterClose(t *testing.T) {
	l := newLaunch(t, "reqclose", 2)
	finished(t, l.run(2*time.Minute), "reqclose")
}
