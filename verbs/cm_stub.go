//go:build !linux || !cgo

package verbs

import "unsafe"

// This build has no librdmacm: NewEventChannel and OpenCM return
// ErrNotSupported, so no id is ever made.

const haveCM = false

func cmCreateChannel() (unsafe.Pointer, int, error)                { return nil, -1, ErrNotSupported }
func cmDestroyChannel(unsafe.Pointer)                              {}
func cmGetEvent(unsafe.Pointer, *rawCMEvent) (bool, error)         { return false, ErrNotSupported }
func cmCreateID(unsafe.Pointer, uint64) (unsafe.Pointer, error)    { return nil, ErrNotSupported }
func cmSetHandle(unsafe.Pointer, uint64)                           {}
func cmDestroyID(unsafe.Pointer) error                             { return ErrNotSupported }
func cmBind(unsafe.Pointer, sockAddr) error                        { return ErrNotSupported }
func cmListen(unsafe.Pointer, int) error                           { return ErrNotSupported }
func cmResolveAddr(unsafe.Pointer, *sockAddr, sockAddr, int) error { return ErrNotSupported }
func cmResolveRoute(unsafe.Pointer, int) error                     { return ErrNotSupported }
func cmAddrs(unsafe.Pointer) (sockAddr, sockAddr)                  { return sockAddr{}, sockAddr{} }
func cmRoute(unsafe.Pointer) (CMRoute, bool)                       { return CMRoute{}, false }
func cmHasQP(unsafe.Pointer) bool                                  { return false }
func cmSameContext(unsafe.Pointer, unsafe.Pointer) bool            { return false }
func cmSetAckTimeout(unsafe.Pointer, int) error                    { return ErrNotSupported }
func cmSetReuseAddr(unsafe.Pointer, bool) error                    { return ErrNotSupported }
func cmDestroyQP(unsafe.Pointer)                                   {}
func qpSetMinRNRTimer(unsafe.Pointer, int) error                   { return ErrNotSupported }
func cmConnect(unsafe.Pointer, *ConnParam, bool) error             { return ErrNotSupported }
func cmReject(unsafe.Pointer, []byte) error                        { return ErrNotSupported }
func cmDisconnect(unsafe.Pointer) error                            { return ErrNotSupported }
func cmFreeDevices(unsafe.Pointer)                                 {}
func cmOpenDevice(string) (unsafe.Pointer, unsafe.Pointer, error)  { return nil, nil, ErrNotSupported }
func cmCreateQP(unsafe.Pointer, unsafe.Pointer, *QPConfig) (unsafe.Pointer, uint32, int, error) {
	return nil, 0, 0, ErrNotSupported
}
