//go:build !linux

package verbs

import "io/fs"

// memlockLimits: outside Linux this package has no devices; nothing is limited.
func memlockLimits() (soft, hard uint64) { return Unlimited, Unlimited }

// fileOwner: not known outside Linux.
func fileOwner(fs.FileInfo) (int, int) { return -1, -1 }
