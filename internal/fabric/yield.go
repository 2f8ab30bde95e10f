package fabric

import "syscall"

// yield lets other threads of the host run during a poll loop: with more
// polling processes than cores, a process that spins without yielding
// delays the very peer (or the soft-RoCE kernel work) it waits for.
func yield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
