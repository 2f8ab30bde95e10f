package win_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/win"
)

// FetchAndOp with REPLACE swaps a value in and returns the old one; with
// NO_OP it reads atomically (the operand is ignored). On int64 both are NIC
// atomics (a compare-and-swap loop and an aligned 8-byte READ), atomic with
// the other ranks' FetchAndOp and CompareAndSwap on the same word.
func ExampleFetchAndOp() {
	ctx := context.Background()
	var w *win.Window // from win.Allocate(ctx, g, 8, 8) on every rank
	if err := w.Lock(ctx, win.LockShared, 0, 0); err != nil {
		log.Fatal(err)
	}
	prev, err := win.FetchAndOp(ctx, w, int64(42), 0, 0, op.Replace)
	if err != nil {
		log.Fatal(err)
	}
	now, err := win.FetchAndOp(ctx, w, int64(0), 0, 0, op.NoOp)
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Unlock(ctx, 0); err != nil {
		log.Fatal(err)
	}
	fmt.Println(prev, now) // now is 42 unless another rank changed the word in between
}

// A spin lock on a word of rank 0's window: 0 means free, rank+1 names the
// holder. CompareAndSwap returns the old value, so the caller that gets 0
// back has taken the lock. (examples/mutex has a fair, queue-based lock.)
func ExampleCompareAndSwap() {
	ctx := context.Background()
	var g *group.Group // from group.JoinEnv
	var w *win.Window  // from win.Allocate(ctx, g, 8, 8)
	me := int64(g.Rank() + 1)
	if err := w.LockAll(ctx); err != nil {
		log.Fatal(err)
	}
	for {
		old, err := win.CompareAndSwap(ctx, w, 0, me, 0, 0)
		if err != nil {
			log.Fatal(err)
		}
		if old == 0 {
			break
		}
		time.Sleep(100 * time.Microsecond) // rank old-1 holds it
	}
	// The critical section.
	if _, err := win.CompareAndSwap(ctx, w, me, 0, 0, 0); err != nil { // release
		log.Fatal(err)
	}
	if err := w.UnlockAll(ctx); err != nil {
		log.Fatal(err)
	}
}

// A histogram in rank 0's window: every rank adds its counts with
// Accumulate(SUM) on int32, which rank 0's engine applies element by
// element, atomically with respect to the other ranks' accumulates. A shared
// lock is enough: accumulates may run concurrently.
func ExampleWindow_Accumulate() {
	ctx := context.Background()
	var w *win.Window           // from win.Allocate(ctx, g, 16*4, 4) on every rank
	counts := make([]int32, 16) // this rank's counts
	if err := w.Lock(ctx, win.LockShared, 0, 0); err != nil {
		log.Fatal(err)
	}
	if err := w.Accumulate(ctx, datatype.AsBytes(counts), datatype.Int32, 0, 0, op.Sum); err != nil {
		log.Fatal(err)
	}
	if err := w.Unlock(ctx, 0); err != nil { // the counts are added at rank 0 when Unlock returns
		log.Fatal(err)
	}
}

// GetAccumulate(MAX) raises the best score kept in rank 0's window and
// returns the previous one, in one atomic step per element.
func ExampleWindow_GetAccumulate() {
	ctx := context.Background()
	var w *win.Window // from win.Allocate(ctx, g, 8, 8) on every rank
	mine := []float64{0.93}
	old := make([]float64, 1)
	if err := w.Lock(ctx, win.LockShared, 0, 0); err != nil {
		log.Fatal(err)
	}
	err := w.GetAccumulate(ctx, datatype.AsBytes(mine), datatype.AsBytes(old), datatype.Float64, 0, 0, op.Max)
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Unlock(ctx, 0); err != nil {
		log.Fatal(err)
	}
	if mine[0] > old[0] {
		fmt.Println("new best score", mine[0], "replaces", old[0])
	}
}

// Put writes into another rank's window and Get reads from it. A Put is
// complete at its target only after a flush or the end of the epoch, so a
// Flush comes between them for the Get to see it.
func ExampleWindow_Put() {
	ctx := context.Background()
	var w *win.Window // from win.Allocate(ctx, g, 4096, 1) on every rank
	msg := []byte("hello, rank 1")
	if err := w.Lock(ctx, win.LockExclusive, 1, 0); err != nil {
		log.Fatal(err)
	}
	if err := w.Put(ctx, msg, 1, 128); err != nil { // bytes 128.. of rank 1's window
		log.Fatal(err)
	}
	if err := w.Flush(ctx, 1); err != nil {
		log.Fatal(err)
	}
	back := make([]byte, len(msg))
	if err := w.Get(ctx, back, 1, 128); err != nil {
		log.Fatal(err)
	}
	if err := w.Unlock(ctx, 1); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", back) // hello, rank 1
}

// An exclusive lock makes a read-modify-write of a whole record safe from
// the other lockers: here a record of two int64 (a balance and a count of
// deposits) in rank 0's window, which no single atomic covers.
func ExampleWindow_Lock() {
	ctx := context.Background()
	var w *win.Window // from win.CreateSlice(ctx, g, make([]int64, 2)) on every rank
	if err := w.Lock(ctx, win.LockExclusive, 0, 0); err != nil {
		log.Fatal(err)
	}
	rec := make([]int64, 2)
	if err := win.GetSlice(ctx, w, rec, 0, 0); err != nil {
		log.Fatal(err)
	}
	rec[0] += 100
	rec[1]++
	if err := win.PutSlice(ctx, w, rec, 0, 0); err != nil {
		log.Fatal(err)
	}
	if err := w.Unlock(ctx, 0); err != nil { // the next locker sees the new record
		log.Fatal(err)
	}
}

// LockAll opens one shared epoch to every rank. Here each rank appends an
// entry to a log in every rank's window: FetchAndOp(SUM) on the log's first
// word reserves a slot and a Put fills it. FlushAll completes the Puts at
// every target; the epoch stays open for more.
func ExampleWindow_LockAll() {
	ctx := context.Background()
	var g *group.Group // from group.JoinEnv
	var w *win.Window  // from win.Allocate(ctx, g, 1024*8, 8): word 0 counts the entries that follow
	if err := w.LockAll(ctx); err != nil {
		log.Fatal(err)
	}
	entry := []int64{int64(g.Rank())}
	for t := 0; t < g.Size(); t++ {
		slot, err := win.FetchAndOp(ctx, w, int64(1), t, 0, op.Sum)
		if err != nil {
			log.Fatal(err)
		}
		if err := win.PutSlice(ctx, w, entry, t, 1+int(slot)); err != nil { // ErrOutOfWindow once the log is full
			log.Fatal(err)
		}
	}
	if err := w.FlushAll(ctx); err != nil {
		log.Fatal(err)
	}
	if err := w.UnlockAll(ctx); err != nil {
		log.Fatal(err)
	}
}

// Fence epochs are collective: between two Fences every rank may access
// every window, and after the second each window holds what was put there.
// Here every rank sends a block to its right neighbour (a ring shift) and
// finds its left neighbour's block in its own memory.
func ExampleWindow_Fence() {
	ctx := context.Background()
	var g *group.Group // from group.JoinEnv
	recv := make([]float64, 4)
	w, err := win.CreateSlice(ctx, g, recv)
	if err != nil {
		log.Fatal(err)
	}
	defer w.Free(ctx)
	send := []float64{float64(g.Rank()), 1, 2, 3}
	right := (g.Rank() + 1) % g.Size()
	if err := w.Fence(ctx, win.NoPrecede); err != nil {
		log.Fatal(err)
	}
	if err := win.PutSlice(ctx, w, send, right, 0); err != nil {
		log.Fatal(err)
	}
	if err := w.Fence(ctx, win.NoSucceed); err != nil {
		log.Fatal(err)
	}
	fmt.Println(recv) // [left 1 2 3], left being (rank+size-1)%size
}
