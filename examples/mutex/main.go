// Command mutex builds a lock out of one-sided atomics and uses it to guard
// a shared counter that is updated without atomics.
//
// The lock is a word in rank 0's window, taken and released with
// CompareAndSwap under a passive-target epoch (LockAll): 0 means free, and
// a rank takes it by swapping 0 for its rank+1, and gives it back by
// swapping its rank+1 for 0. Every access to the lock word is a
// CompareAndSwap, which the NIC applies: NIC atomics are atomic only among
// themselves, so the word is never written with Put or an accumulate that
// the target's CPU would apply.
//
// With -lock ticket it is a ticket lock instead, a fair queue: a rank takes
// a ticket with FetchAndOp(SUM, 1) on a "next" word, waits until a "serving"
// word, read with FetchAndOp(NO_OP), shows its ticket, and passes the lock
// on with FetchAndOp(SUM, 1) on "serving". It is fair, and so slower: every
// critical section hands the lock to another rank, where the CAS lock often
// lets a rank take again the lock it has just released.
//
// Every rank enters the critical section K times, and inside it increments
// a counter in rank 0's window with a plain read-modify-write: Get, +1, Put,
// Flush. Only mutual exclusion keeps increments from being lost, so rank 0
// checks at the end that the counter is size*K and that the lock is free.
//
// Run it with the launcher:
//
//	rmarun -n 4 mutex [-k K] [-lock cas|ticket]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/win"
)

// The words of rank 0's window, as displacements in int64 units.
const (
	home        = 0 // the rank whose window holds the lock and the counter
	lockDisp    = 0 // CAS lock: 0 when free, else the holder's rank+1
	counterDisp = 1 // the counter, read and written with plain Get and Put
	nextDisp    = 2 // ticket lock: the next ticket to hand out
	servingDisp = 3 // ticket lock: the ticket allowed in
	words       = 4
)

func main() {
	k := flag.Int("k", 1000, "critical sections per rank")
	kind := flag.String("lock", "cas", "cas (CompareAndSwap lock) or ticket (FetchAndOp ticket lock)")
	timeout := flag.Duration("timeout", 5*time.Minute, "give up after this long")
	flag.Parse()
	if *kind != "cas" && *kind != "ticket" {
		fmt.Fprintf(os.Stderr, "mutex: -lock %q: want cas or ticket\n", *kind)
		os.Exit(2)
	}
	if err := run(*k, *kind, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "mutex:", err)
		os.Exit(1)
	}
}

// A mutex is a lock shared by the ranks of a window's group.
type mutex interface {
	Lock(ctx context.Context) error
	Unlock(ctx context.Context) error
}

// casLock is a lock word taken and released with CompareAndSwap.
type casLock struct {
	w  *win.Window
	id int64 // this rank's value in the lock word: rank+1
}

func (l *casLock) Lock(ctx context.Context) error {
	var b backoff
	for {
		old, err := win.CompareAndSwap(ctx, l.w, 0, l.id, home, lockDisp)
		if err != nil {
			return err
		}
		if old == 0 {
			return nil
		}
		b.wait()
	}
}

func (l *casLock) Unlock(ctx context.Context) error {
	old, err := win.CompareAndSwap(ctx, l.w, l.id, 0, home, lockDisp)
	if err == nil && old != l.id {
		err = fmt.Errorf("unlock: the lock word is %d, not this rank's %d", old, l.id)
	}
	return err
}

// ticketLock is a ticket lock: ranks enter in the order they took tickets.
type ticketLock struct {
	w *win.Window
}

func (l *ticketLock) Lock(ctx context.Context) error {
	ticket, err := win.FetchAndOp(ctx, l.w, int64(1), home, nextDisp, op.Sum)
	if err != nil {
		return err
	}
	var b backoff
	for {
		serving, err := win.FetchAndOp(ctx, l.w, int64(0), home, servingDisp, op.NoOp)
		if err != nil {
			return err
		}
		if serving == ticket {
			return nil
		}
		b.wait()
	}
}

func (l *ticketLock) Unlock(ctx context.Context) error {
	_, err := win.FetchAndOp(ctx, l.w, int64(1), home, servingDisp, op.Sum)
	return err
}

// backoff sleeps between attempts on a busy lock, longer each time, so that
// waiting ranks do not flood the lock's home with atomics.
type backoff time.Duration

func (b *backoff) wait() {
	*b = backoff(min(max(2*time.Duration(*b), time.Microsecond), 100*time.Microsecond))
	time.Sleep(time.Duration(*b))
}

func run(k int, kind string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	g, err := group.JoinEnv(ctx) // RMA_RANK, RMA_SIZE, RMA_ADDR, RMA_SECRET (rmarun sets them)
	if err != nil {
		return err
	}
	defer g.Close()
	w, err := win.Allocate(ctx, g, words*8, 8) // zeroed: lock free, counter 0
	if err != nil {
		return err
	}
	var mu mutex = &casLock{w: w, id: int64(g.Rank() + 1)}
	if kind == "ticket" {
		mu = &ticketLock{w: w}
	}

	if err := w.LockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	start := time.Now()
	var c [1]int64
	for range k {
		if err := mu.Lock(ctx); err != nil {
			return err
		}
		// The critical section: a read-modify-write with no atomicity of
		// its own. Flush completes the Put at rank 0 before the lock is
		// released, so the next holder's Get sees it.
		if err := w.Get(ctx, datatype.AsBytes(c[:]), home, counterDisp); err != nil {
			return err
		}
		c[0]++
		if err := w.Put(ctx, datatype.AsBytes(c[:]), home, counterDisp); err != nil {
			return err
		}
		if err := w.Flush(ctx, home); err != nil {
			return err
		}
		if err := mu.Unlock(ctx); err != nil {
			return err
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	elapsed := time.Since(start)

	var bad error
	if g.Rank() == 0 {
		bad, err = check(ctx, w, kind, int64(k*g.Size()))
		if err != nil {
			return err
		}
		verdict := "correct"
		if bad != nil {
			verdict = "WRONG: " + bad.Error()
		}
		n := k * g.Size()
		fmt.Printf("mutex (%s lock): %d critical sections by %d ranks, counter and lock as expected: %s (%v, %.1f us per critical section)\n",
			kind, n, g.Size(), verdict, elapsed.Round(time.Millisecond), float64(elapsed.Nanoseconds())/1e3/float64(max(n, 1)))
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	ferr := w.Free(ctx)
	if bad != nil {
		return bad
	}
	return ferr
}

// check reads the words of the home window after every rank is done and
// says what is wrong with them, if anything: the counter must be want and
// the lock free.
func check(ctx context.Context, w *win.Window, kind string, want int64) (bad, err error) {
	var v [words]int64
	if err := w.Get(ctx, datatype.AsBytes(v[:]), home, 0); err != nil {
		return nil, err
	}
	switch {
	case v[counterDisp] != want:
		return fmt.Errorf("counter %d, want %d (updates were lost)", v[counterDisp], want), nil
	case kind == "cas" && v[lockDisp] != 0:
		return fmt.Errorf("lock word %d at the end, want 0 (free)", v[lockDisp]), nil
	case kind == "ticket" && (v[nextDisp] != want || v[servingDisp] != want):
		return fmt.Errorf("next ticket %d and serving %d at the end, want both %d", v[nextDisp], v[servingDisp], want), nil
	}
	return nil, nil
}
