//go:build !linux || !cgo

package verbs

import "unsafe"

func createSRQ(unsafe.Pointer, int, int) (unsafe.Pointer, int, int, error) {
	return nil, 0, 0, ErrNotSupported
}
func destroySRQ(unsafe.Pointer) error                    { return ErrNotSupported }
func postSRQRecv(unsafe.Pointer, uint64, Local) error    { return ErrNotSupported }
func postSRQRecvs(unsafe.Pointer, []RecvWR) (int, error) { return 0, ErrNotSupported }
