package verbs

import (
	"io/fs"
	"syscall"

	"golang.org/x/sys/unix"
)

// memlockLimits returns RLIMIT_MEMLOCK's soft and hard limits in bytes
// (Unlimited for RLIM_INFINITY).
func memlockLimits() (soft, hard uint64) {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &r); err != nil {
		return Unlimited, Unlimited // cannot tell: leave it to the kernel
	}
	return r.Cur, r.Max
}

// fileOwner returns the uid and gid of a file, -1 if not known.
func fileOwner(fi fs.FileInfo) (int, int) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid), int(st.Gid)
	}
	return -1, -1
}
