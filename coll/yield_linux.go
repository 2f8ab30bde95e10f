package coll

import "syscall"

// osYield lets other threads of the host run (sched_yield).
func osYield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
