// Package procs sets the Go runtime up for a process that waits on RDMA
// completion queues by polling them from C calls.
package procs

import (
	"os"
	"runtime"
	"sync"
	"sync/atomic"
)

var once sync.Once

// Ensure gives the process a second P (GOMAXPROCS 2) when it has one and
// the GOMAXPROCS environment variable did not choose that. With one P, a
// goroutine that stays in a C call longer than a tick of the runtime's
// monitor thread (20 us; ibv_post_send is a system call on Soft-RoCE,
// which under emulation takes 60 to 100 us) loses its P: the monitor hands
// it to another thread, the call's return waits to get it back, and the
// monitor, having taken a P, keeps waking every 20 us. On the one-CPU
// test guests that gave 3 to 6 context switches per SEND round trip
// between two hosts, and 540 to 630 us a round trip instead of 370 to 400
// us; with a second P, which is idle, the runtime leaves the P alone. Go code still runs on the machine's CPUs only: an
// idle P costs nothing.
func Ensure() { once.Do(raise) }

func raise() {
	if runtime.GOMAXPROCS(0) == 1 && os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(2)
	}
}

var polls atomic.Uint32

// Polled counts a poll of a completion queue by a goroutine that waits;
// the poller of every 1024th passes through the scheduler
// (runtime.Gosched). A goroutine that goes from one call to the next
// polling, and never blocks, would otherwise not: after 10 ms the
// runtime's monitor takes it for a long-running goroutine, preempts it,
// takes its P from the C call it is in (a post, a poll), and then wakes
// every 20 us for a millisecond or more. In the one-CPU test guests, a
// loop of SENDs between the two hosts from Go took 368 to 381 us a round
// trip without this (150 to 250 monitor wake-ups per 100 ms), 319 to 329
// us with it (12), and 272 to 278 us from C. Passing through the scheduler
// more often costs more than it saves: with an idle P, each pass wakes
// another thread, which takes the goroutine over.
func Polled() {
	if polls.Add(1)&1023 == 0 {
		runtime.Gosched()
	}
}
