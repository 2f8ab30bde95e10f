//go:build !linux || !cgo

package verbs

import "unsafe"

// This build has no libibverbs: every constructor returns ErrNotSupported.

const (
	haveVerbs  = false
	opWrite    = 0
	opWriteImm = 1
	opSend     = 2
	opSendImm  = 3
	opRead     = 4
	opCmpSwap  = 5
	opFetchAdd = 6
)

func openDevice(string) (unsafe.Pointer, error)       { return nil, ErrNotSupported }
func deviceName(unsafe.Pointer) string                { return "" }
func closeDevice(unsafe.Pointer) error                { return ErrNotSupported }
func queryDevice(unsafe.Pointer) (DeviceAttr, error)  { return DeviceAttr{}, ErrNotSupported }
func queryPort(unsafe.Pointer, int) (PortAttr, error) { return PortAttr{}, ErrNotSupported }
func allocPD(unsafe.Pointer) (unsafe.Pointer, error)  { return nil, ErrNotSupported }
func deallocPD(unsafe.Pointer) error                  { return ErrNotSupported }
func deregMR(unsafe.Pointer) error                    { return ErrNotSupported }
func destroyCompChannel(unsafe.Pointer) error         { return ErrNotSupported }
func getCQEvent(unsafe.Pointer) (bool, error)         { return false, ErrNotSupported }
func destroyCQ(unsafe.Pointer) error                  { return ErrNotSupported }
func pollCQ(unsafe.Pointer, []WC) (int, error)        { return 0, ErrNotSupported }
func reqNotify(unsafe.Pointer, bool) error            { return ErrNotSupported }
func destroyQP(unsafe.Pointer) error                  { return ErrNotSupported }
func qpInit(unsafe.Pointer, int, Access) error        { return ErrNotSupported }
func qpRTR(unsafe.Pointer, *Path, Endpoint) error     { return ErrNotSupported }
func qpRTS(unsafe.Pointer, *Path, uint32) error       { return ErrNotSupported }
func qpState(unsafe.Pointer) (QPState, error)         { return 0, ErrNotSupported }
func qpToError(unsafe.Pointer) error                  { return ErrNotSupported }
func postRecv(unsafe.Pointer, uint64, Local) error    { return ErrNotSupported }
func deallocMW(unsafe.Pointer) error                  { return ErrNotSupported }
func allocMW(unsafe.Pointer) (unsafe.Pointer, uint32, error) {
	return nil, 0, ErrNotSupported
}
func postBindMW(unsafe.Pointer, uint64, SendFlags, unsafe.Pointer, uint32, unsafe.Pointer, uint64, uint64, Access) error {
	return ErrNotSupported
}
func queryGID(unsafe.Pointer, int, int) (GIDEntry, uint32, error) {
	return GIDEntry{}, 0, ErrNotSupported
}
func regMR(unsafe.Pointer, unsafe.Pointer, int, Access) (unsafe.Pointer, uint32, uint32, error) {
	return nil, 0, 0, ErrNotSupported
}
func createCompChannel(unsafe.Pointer) (unsafe.Pointer, int, error) {
	return nil, -1, ErrNotSupported
}
func createCQ(unsafe.Pointer, int, unsafe.Pointer) (unsafe.Pointer, error) {
	return nil, ErrNotSupported
}
func createQP(unsafe.Pointer, *QPConfig) (unsafe.Pointer, uint32, int, error) {
	return nil, 0, 0, ErrNotSupported
}
func postSendPoll(unsafe.Pointer, uint64, int, SendFlags, Local, uint64, uint32, uint64, uint64, unsafe.Pointer, []WC) (int, error) {
	return 0, ErrNotSupported
}

func postList(unsafe.Pointer, []SendWR, unsafe.Pointer, []WC) (int, int, error) {
	return 0, 0, ErrNotSupported
}

func postSend(unsafe.Pointer, uint64, int, SendFlags, Local, uint64, uint32, uint64, uint64, uint32) error {
	return ErrNotSupported
}
func postSendInline(unsafe.Pointer, uint64, int, SendFlags, []byte, uint64, uint32, uint32) error {
	return ErrNotSupported
}
