package fabric

import (
	"bytes"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
)

// yield lets other threads run during a poll loop when the machine has
// more runnable threads than CPUs: a process that then spins without
// yielding delays the very peer (or the Soft-RoCE kernel work) it waits
// for. When it has not, yielding only switches to whatever else is ready
// (on a one-CPU guest that cost a fifth of a round trip), so it does
// nothing. Whether it has is read from /proc/loadavg (running threads)
// every 256 calls, by whichever caller's turn it is; without it, yield
// always yields.
func yield() {
	if yields.Add(1)&255 == 0 {
		crowded.Store(runnableOverCPUs())
	}
	if crowded.Load() {
		syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
	}
}

var (
	yields  atomic.Uint32
	crowded atomic.Bool // the last reading found more runnable threads than CPUs
	loadavg = func() int {
		fd, err := syscall.Open("/proc/loadavg", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			return -1
		}
		return fd
	}()
)

func init() { crowded.Store(runnableOverCPUs()) }

// runnableOverCPUs reports whether more threads are runnable than the
// process may use CPUs (true if that cannot be read).
func runnableOverCPUs() bool {
	n := runnable()
	return n < 0 || n > runtime.NumCPU()
}

// runnable reads the number of runnable threads from /proc/loadavg
// ("0.10 0.20 0.30 RUNNING/TOTAL LASTPID"), -1 if it cannot. It
// allocates nothing: it runs on the path of calls (yield), into a buffer
// of its own; a caller that finds another reading it returns the last
// count read.
func runnable() int {
	if loadavg < 0 {
		return -1
	}
	if !load.mu.TryLock() {
		return int(load.last.Load())
	}
	defer load.mu.Unlock()
	n, err := syscall.Pread(loadavg, load.buf[:], 0)
	if err != nil || n <= 0 {
		return -1
	}
	v := parseRunnable(load.buf[:n])
	load.last.Store(int32(v))
	return v
}

// load is runnable's buffer and last count.
var load struct {
	mu   sync.Mutex
	buf  [128]byte
	last atomic.Int32
}

// parseRunnable parses the running count of a /proc/loadavg line (its
// fourth field, before the slash), -1 if the line is not one.
func parseRunnable(b []byte) int {
	field := 0
	for i := 0; i < len(b); {
		for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n') {
			i++
		}
		start := i
		for i < len(b) && b[i] != ' ' && b[i] != '\t' && b[i] != '\n' {
			i++
		}
		if start == i {
			break
		}
		if field++; field == 4 {
			return parseCount(b[start:i])
		}
	}
	return -1
}

// parseCount parses "RUNNING/TOTAL" into RUNNING, -1 if it is not that.
func parseCount(f []byte) int {
	slash := bytes.IndexByte(f, '/')
	if slash <= 0 {
		return -1
	}
	v := 0
	for _, c := range f[:slash] {
		if c < '0' || c > '9' || v > 1<<20 {
			return -1
		}
		v = v*10 + int(c-'0')
	}
	return v
}
