// Package procs sets the Go runtime up for a process that waits on RDMA
// completion queues by polling them from C calls.
package procs

import (
	"os"
	"runtime"
	"sync"
)

var once sync.Once

// Ensure gives the process a second P (GOMAXPROCS 2) when it has one and
// the GOMAXPROCS environment variable did not choose that. With one P, a
// goroutine that stays in a C call longer than a tick of the runtime's
// monitor thread (20 us; ibv_post_send is a system call on Soft-RoCE,
// which under emulation takes 60 to 100 us) loses its P: the monitor hands
// it to another thread, the call's return waits to get it back, and the
// monitor, having taken a P, keeps waking every 20 us. On the one-CPU
// test guests that doubled the cost of a post and gave about five context
// switches per round trip; with a second P, which is idle, the runtime
// leaves the P alone. Go code still runs on the machine's CPUs only: an
// idle P costs nothing.
func Ensure() { once.Do(raise) }

func raise() {
	if runtime.GOMAXPROCS(0) == 1 && os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(2)
	}
}
