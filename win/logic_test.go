package win

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"sort"
	"testing"
	"time"

	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
)

// The tests in this file run the window's epoch, lock, request and routing
// logic on the in-process fake transport (fake_test.go): no device.

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func u64(v uint64) []byte { return binary.NativeEndian.AppendUint64(nil, v) }

func word(b []byte, i int) uint64 { return binary.NativeEndian.Uint64(b[8*i:]) }

// A fence epoch: every rank Puts its rank+1 into its slot of every other
// rank's window; the WRITEs land only when the closing Fence flushes them.
func TestFakeFencePut(t *testing.T) {
	const n = 3
	ctx := testCtx(t)
	_, ws := fakeWindows(t, n, 8*n, true)
	err := each(n, func(r int) error {
		w := ws[r]
		if err := w.Fence(ctx, 0); err != nil {
			return err
		}
		for to := 0; to < n; to++ {
			if err := w.Put(ctx, u64(uint64(r+1)), to, 8*r); err != nil {
				return err
			}
		}
		return w.Fence(ctx, 0)
	})
	if err != nil {
		t.Fatal(err)
	}
	for r, w := range ws {
		for from := 0; from < n; from++ {
			if got := word(w.Bytes(), from); got != uint64(from+1) {
				t.Errorf("rank %d slot %d = %d after the fence, want %d", r, from, got, from+1)
			}
		}
	}
}

// Exclusive locks serialise read-modify-write epochs: each rank adds one
// to a counter at rank 0 with Get, Put and Unlock, many times. A lock that
// let two in, or an Unlock that released the lock before its Put landed,
// loses increments.
func TestFakeExclusiveLockCounter(t *testing.T) {
	const n, iters = 3, 40
	ctx := testCtx(t)
	_, ws := fakeWindows(t, n, 8, true)
	err := each(n, func(r int) error {
		w := ws[r]
		buf := make([]byte, 8)
		for i := 0; i < iters; i++ {
			if err := w.Lock(ctx, LockExclusive, 0, 0); err != nil {
				return err
			}
			if err := w.Get(ctx, buf, 0, 0); err != nil {
				return err
			}
			if err := w.Put(ctx, u64(word(buf, 0)+1), 0, 0); err != nil {
				return err
			}
			if err := w.Unlock(ctx, 0); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ws[0].Lock(ctx, LockShared, 0, 0); err != nil {
		t.Fatal(err)
	}
	if got := word(ws[0].Bytes(), 0); got != n*iters {
		t.Errorf("counter = %d, want %d", got, n*iters)
	}
	if err := ws[0].Unlock(ctx, 0); err != nil {
		t.Fatal(err)
	}
}

// FetchAndOp SUM under a shared LockAll hands out every old value exactly
// once, on each route: the NIC's fetch-and-add and the target's engine.
func TestFakeFetchAndOpUnique(t *testing.T) {
	for _, nic := range []bool{true, false} {
		t.Run(map[bool]string{true: "nic", false: "engine"}[nic], func(t *testing.T) {
			const n, iters = 3, 30
			ctx := testCtx(t)
			net, ws := fakeWindows(t, n, 8, nic)
			want := atomics.Engine
			if nic {
				want = atomics.NICFetchAdd
			}
			if got := ws[0].Route(op.Sum, datatype.Int64); got != want {
				t.Fatalf("route of SUM int64 = %v, want %v", got, want)
			}
			olds := make([][]uint64, n)
			err := each(n, func(r int) error {
				w := ws[r]
				if err := w.LockAll(ctx); err != nil {
					return err
				}
				res := make([]byte, 8)
				for i := 0; i < iters; i++ {
					if err := w.FetchAndOp(ctx, u64(1), res, datatype.Int64, 0, 0, op.Sum); err != nil {
						return err
					}
					olds[r] = append(olds[r], word(res, 0))
				}
				return w.UnlockAll(ctx)
			})
			if err != nil {
				t.Fatal(err)
			}
			var all []uint64
			for _, o := range olds {
				all = append(all, o...)
			}
			sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
			for i, v := range all {
				if v != uint64(i) {
					t.Fatalf("old values %v: want each of 0..%d once", all, n*iters-1)
				}
			}
			fa, msgs := net.stats.fetchAdds.Load(), net.stats.messages.Load()
			t.Logf("fetch-and-adds %d, active messages %d", fa, msgs)
			if nic && fa < n*iters || !nic && msgs < n*iters {
				t.Errorf("fetch-and-adds %d, messages %d: the calls did not take route %v", fa, msgs, want)
			}
		})
	}
}

// MAX on int64 with NIC atomics is a compare-and-swap loop; float64 SUM is
// the engine's. Both are exact under contention.
func TestFakeRoutesUnderContention(t *testing.T) {
	const n, iters = 3, 25
	ctx := testCtx(t)
	net, ws := fakeWindows(t, n, 16, true)
	if got := ws[0].Route(op.Max, datatype.Int64); got != atomics.NICCompareSwapLoop {
		t.Fatalf("route of MAX int64 = %v, want a compare-and-swap loop", got)
	}
	if got := ws[0].Route(op.Sum, datatype.Float64); got != atomics.Engine {
		t.Fatalf("route of SUM float64 = %v", got)
	}
	err := each(n, func(r int) error {
		w := ws[r]
		if err := w.LockAll(ctx); err != nil {
			return err
		}
		for i := 0; i < iters; i++ {
			v := uint64(r*iters + i)
			if err := w.Accumulate(ctx, u64(v), datatype.Int64, 0, 0, op.Max); err != nil {
				return err
			}
			f := binary.NativeEndian.AppendUint64(nil, 0x3ff0000000000000) // 1.0
			if err := w.Accumulate(ctx, f, datatype.Float64, 0, 8, op.Sum); err != nil {
				return err
			}
		}
		return w.UnlockAll(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ws[0].Lock(ctx, LockShared, 0, 0); err != nil {
		t.Fatal(err)
	}
	defer ws[0].Unlock(ctx, 0)
	mem := ws[0].Bytes()
	if got := word(mem, 0); got != n*iters-1 {
		t.Errorf("MAX = %d, want %d", got, n*iters-1)
	}
	if got := math.Float64frombits(word(mem, 1)); got != n*iters {
		t.Errorf("float64 SUM = %v, want %d", got, n*iters)
	}
	// Each MAX reads the word, and swaps it when it grows it.
	if cas, reads := net.stats.compareSwaps.Load(), net.stats.reads.Load(); cas == 0 || reads < n*iters {
		t.Errorf("%d compare-and-swaps and %d reads for %d MAX calls: not a compare-and-swap loop", cas, reads, n*iters)
	}
}

// An engine accumulate with a derived target datatype larger than one
// message is split, and every piece applied once.
func TestFakeIndexedAccumulateSplit(t *testing.T) {
	const n, elems = 2, 64 // 64 int32s in blocks of 2 with gaps: several messages of 256 bytes
	ctx := testCtx(t)
	net, ws := fakeWindows(t, n, 4*3*elems, false)
	blocks, disps := make([]int, elems/2), make([]int, elems/2)
	for i := range blocks {
		blocks[i], disps[i] = 2, 6*i
	}
	tt, err := datatype.Indexed(blocks, disps, datatype.Int32.Type())
	if err != nil {
		t.Fatal(err)
	}
	origin := make([]int32, elems)
	for i := range origin {
		origin[i] = int32(i + 1)
	}
	before := net.stats.messages.Load()
	err = each(n, func(r int) error {
		w := ws[r]
		if err := w.Fence(ctx, 0); err != nil {
			return err
		}
		if err := w.AccumulateTo(ctx, Contiguous(datatype.AsBytes(origin), datatype.Int32),
			Region{Rank: 1, Disp: 0, Type: tt, Count: 1}, op.Sum); err != nil {
			return err
		}
		return w.Fence(ctx, 0)
	})
	if err != nil {
		t.Fatal(err)
	}
	if msgs := net.stats.messages.Load() - before; msgs < 2*n {
		t.Errorf("%d active messages: the accumulate was not split", msgs)
	}
	got, err := datatype.View[int32](ws[1].Bytes())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < elems; i++ {
		at := 6*(i/2) + i%2
		if got[at] != int32(n*(i+1)) {
			t.Fatalf("element %d (int32 %d of the window) = %d, want %d", i, at, got[at], n*(i+1))
		}
	}
	for i := range got {
		if i%6 >= 2 && got[i] != 0 {
			t.Fatalf("int32 %d, between the blocks, = %d", i, got[i])
		}
	}
}

// Post-start-complete-wait: the origins' Puts are in the targets' memory
// once Wait returns.
func TestFakePSCW(t *testing.T) {
	const n = 3
	ctx := testCtx(t)
	_, ws := fakeWindows(t, n, 8*n, true)
	err := each(n, func(r int) error {
		w := ws[r]
		if r == 0 { // the target of ranks 1 and 2
			if err := w.Post(ctx, []int{1, 2}, 0); err != nil {
				return err
			}
			return w.Wait(ctx)
		}
		if err := w.Start(ctx, []int{0}, 0); err != nil {
			return err
		}
		if err := w.Put(ctx, u64(uint64(10+r)), 0, 8*r); err != nil {
			return err
		}
		if err := w.Put(ctx, u64(1), 2-r+1, 0); !errors.Is(err, ErrEpoch) {
			return errors.New("a Put to a rank outside the access group: " + errString(err))
		}
		return w.Complete(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	for r := 1; r < n; r++ {
		if got := word(ws[0].Bytes(), r); got != uint64(10+r) {
			t.Errorf("slot %d = %d after Wait, want %d", r, got, 10+r)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// Requests: RPut, RGet, RAccumulate and RGetAccumulate complete through
// Waitall, and their results are what the epoch's order gives.
func TestFakeRequests(t *testing.T) {
	ctx := testCtx(t)
	_, ws := fakeWindows(t, 2, 64, false)
	w := ws[0]
	if err := w.Lock(ctx, LockExclusive, 1, 0); err != nil {
		t.Fatal(err)
	}
	put, err := w.RPut(ctx, u64(7), 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	acc, err := w.RAccumulate(ctx, Contiguous(u64(5), datatype.Int64), Region{Rank: 1, Disp: 8, Type: datatype.Int64.Type(), Count: 1}, op.Sum)
	if err != nil {
		t.Fatal(err)
	}
	if err := Waitall(ctx, []*Request{put, acc}); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx, 1); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 16)
	get, err := w.RGet(ctx, got, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	old := make([]byte, 8)
	gacc, err := w.RGetAccumulate(ctx, Contiguous(u64(3), datatype.Int64), Contiguous(old, datatype.Int64),
		Region{Rank: 1, Disp: 8, Type: datatype.Int64.Type(), Count: 1}, op.Sum)
	if err != nil {
		t.Fatal(err)
	}
	if err := Waitall(ctx, []*Request{get, gacc}); err != nil {
		t.Fatal(err)
	}
	if word(got, 0) != 7 || word(got, 1) != 5 || word(old, 0) != 5 {
		t.Errorf("RGet read %d, %d and RGetAccumulate's old value is %d; want 7, 5 and 5", word(got, 0), word(got, 1), word(old, 0))
	}
	if err := w.Unlock(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := ws[1].Lock(ctx, LockShared, 1, 0); err != nil {
		t.Fatal(err)
	}
	if v := word(ws[1].Bytes(), 1); v != 8 {
		t.Errorf("after the epoch the accumulated word is %d, want 8", v)
	}
	ws[1].Unlock(ctx, 1)
}

// A request whose Wait's context ends is left in flight for another Wait;
// one created with an ended context sends nothing.
func TestFakeRequestEndedContext(t *testing.T) {
	ctx := testCtx(t)
	_, ws := fakeWindows(t, 2, 16, false)
	w := ws[0]
	if err := w.LockAll(ctx); err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := w.RAccumulate(ended, Contiguous(u64(1), datatype.Int64), Region{Rank: 1, Type: datatype.Int64.Type(), Count: 1}, op.Sum); !errors.Is(err, context.Canceled) {
		t.Errorf("RAccumulate with an ended context: %v, want context.Canceled", err)
	}
	if err := w.FlushAll(ctx); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 8)
	if err := w.Get(ctx, got, 1, 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if word(got, 0) != 0 {
		t.Errorf("the call made with an ended context was applied: word = %d", word(got, 0))
	}
	if err := w.UnlockAll(ctx); err != nil {
		t.Fatal(err)
	}
}

// Bad calls fail with the error that says why, and touch nothing.
func TestFakeBadCalls(t *testing.T) {
	ctx := testCtx(t)
	_, ws := fakeWindows(t, 2, 64, true)
	w := ws[0]
	res := make([]byte, 8)
	if err := w.Put(ctx, u64(1), 1, 0); !errors.Is(err, ErrEpoch) {
		t.Errorf("Put outside an epoch: %v, want ErrEpoch", err)
	}
	if err := w.Unlock(ctx, 1); !errors.Is(err, ErrEpoch) {
		t.Errorf("Unlock without Lock: %v, want ErrEpoch", err)
	}
	if err := w.Lock(ctx, LockShared, 1, 0); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"Put past the end", w.Put(ctx, u64(1), 1, 60), ErrOutOfWindow},
		{"Get at a negative displacement", w.Get(ctx, res, 1, -8), ErrOutOfWindow},
		{"misaligned FetchAndOp", w.FetchAndOp(ctx, u64(1), res, datatype.Int64, 1, 4, op.Sum), ErrAlignment},
		{"FetchAndOp of a non-predefined op on a basic type it does not take", w.FetchAndOp(ctx, u64(1), res, datatype.Float64, 1, 0, op.Band), ErrInvalid},
		{"unknown rank", w.Put(ctx, u64(1), 5, 0), ErrInvalid},
		{"Put to a rank not locked", w.Put(ctx, u64(1), 0, 0), ErrEpoch},
		{"Accumulate of a partial element", w.Accumulate(ctx, []byte{1, 2, 3}, datatype.Int64, 1, 0, op.Sum), ErrInvalid},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	if err := w.Lock(ctx, LockShared, 1, 0); !errors.Is(err, ErrEpoch) {
		t.Errorf("a second Lock of one target: %v, want ErrEpoch", err)
	}
	if err := w.Unlock(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := ws[1].Lock(ctx, LockShared, 1, 0); err != nil {
		t.Fatal(err)
	}
	for i, b := range ws[1].Bytes() {
		if b != 0 {
			t.Fatalf("byte %d of the target = %d after refused calls", i, b)
		}
	}
	ws[1].Unlock(ctx, 1)
}

// A lost peer: calls to it fail with ErrPeerLost at once, LockAll locks
// the living, and the lock a lost holder kept is taken back once it is
// fenced off.
func TestFakePeerLost(t *testing.T) {
	const n = 3
	ctx := testCtx(t)
	net, ws := fakeWindows(t, n, 8, true)
	if err := ws[2].Lock(ctx, LockExclusive, 0, 0); err != nil {
		t.Fatal(err)
	}
	net.kill(2)
	w := ws[0]
	if err := w.Lock(ctx, LockShared, 2, 0); !errors.Is(err, ErrPeerLost) {
		t.Errorf("Lock of a lost rank: %v, want ErrPeerLost", err)
	}
	if err := w.LockAll(ctx); err != nil {
		t.Fatalf("LockAll with a rank lost: %v (it locks the living)", err)
	}
	if err := w.Put(ctx, u64(1), 2, 0); !errors.Is(err, ErrPeerLost) {
		t.Errorf("Put to a lost rank: %v, want ErrPeerLost", err)
	}
	if err := w.Put(ctx, u64(1), 1, 0); err != nil {
		t.Errorf("Put to a living rank under LockAll: %v", err)
	}
	if err := w.UnlockAll(ctx); err != nil && !errors.Is(err, ErrPeerLost) {
		t.Errorf("UnlockAll with a rank lost: %v, want nil or ErrPeerLost", err)
	}
	if err := w.Put(ctx, u64(1), 1, 0); !errors.Is(err, ErrEpoch) {
		t.Errorf("Put after UnlockAll: %v, want ErrEpoch (UnlockAll ends the epoch even when it fails)", err)
	}
	// Rank 2 held rank 0's exclusive lock when it was lost.
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := ws[1].Lock(lctx, LockExclusive, 0, 0); err != nil {
		t.Fatalf("the lock of a lost, fenced holder was not taken back: %v", err)
	}
	if err := ws[1].Put(ctx, u64(9), 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := ws[1].Unlock(ctx, 0); err != nil {
		t.Fatal(err)
	}
}
