package verbs

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Alloc returns n bytes of zeroed, page-aligned memory outside the Go heap
// (an anonymous private mapping), suitable for RegisterMR: the garbage
// collector never moves or frees it. Release it with Free.
func Alloc(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("%w: allocation of %d bytes", ErrInvalid, n)
	}
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("verbs: mmap %d bytes: %w", n, err)
	}
	return b, nil
}

// Free releases memory from Alloc.
func Free(b []byte) error {
	if b == nil {
		return nil
	}
	return unix.Munmap(b[:cap(b)])
}
