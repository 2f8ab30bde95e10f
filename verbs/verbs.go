package verbs

import (
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/onesided/rma/internal/errs"
)

// Errors returned by this package. Match them with errors.Is.
var (
	// ErrNotSupported is returned by every constructor of a build without
	// cgo or outside Linux, and for features the device lacks.
	ErrNotSupported = errors.New("verbs: not supported")
	// ErrNoDevice means no RDMA device was found (or none of the name asked for).
	ErrNoDevice = errors.New("verbs: no RDMA device")
	// ErrClosed is returned when an object is used after Close.
	ErrClosed = errors.New("verbs: object closed")
	// ErrInvalid marks a bad argument (a zero length, a nil buffer, ...).
	ErrInvalid = errs.Refine("verbs: invalid argument", errs.ErrInvalid)
	// ErrQueueFull means the send or receive queue has no room (ENOMEM from a post).
	ErrQueueFull = errors.New("verbs: work queue full")

	// Completion error classes; a *CompletionError matches one of them.

	// ErrRemoteAccess: the target refused the access (bad rkey, bounds, rights).
	ErrRemoteAccess = errors.New("verbs: remote access error")
	// ErrPeerLost: the peer stopped answering (transport or RNR retries exhausted).
	ErrPeerLost = errors.New("verbs: peer lost")
	// ErrFlushed: the work request was flushed because its QP went to the error state.
	ErrFlushed = errors.New("verbs: work request flushed")
	// ErrLocal: a local protection, length or operation error.
	ErrLocal = errors.New("verbs: local work request error")
	// ErrRemoteOp: the responder could not perform the operation
	// (remote operation or invalid request error, e.g. a misaligned atomic).
	ErrRemoteOp = errors.New("verbs: remote operation error")

	// ErrOutcomeUnknown is no completion's class: the packages above verbs
	// return it for a request whose connection failed, the peer being
	// alive, before its completion told whether the target performed it.
	// An atomic so reported may or may not have taken effect, and is not
	// sent again.
	ErrOutcomeUnknown = errors.New("verbs: outcome unknown")
)

// AtomicCap is the device's guarantee for remote atomics (C: enum ibv_atomic_cap).
type AtomicCap int

const (
	AtomicNone AtomicCap = 0 // IBV_ATOMIC_NONE: no remote atomics
	AtomicHCA  AtomicCap = 1 // IBV_ATOMIC_HCA: atomic only against other atomics of this device
	AtomicGlob AtomicCap = 2 // IBV_ATOMIC_GLOB: atomic against CPU accesses as well
)

// String returns the C name without its IBV_ prefix, as ibv_devinfo
// prints it (ATOMIC_HCA).
func (a AtomicCap) String() string {
	switch a {
	case AtomicNone:
		return "ATOMIC_NONE"
	case AtomicHCA:
		return "ATOMIC_HCA"
	case AtomicGlob:
		return "ATOMIC_GLOB"
	}
	return "AtomicCap(" + strconv.Itoa(int(a)) + ")"
}

// LinkLayer of a port (C: IBV_LINK_LAYER_*).
type LinkLayer int

const (
	LinkLayerUnspecified LinkLayer = 0 // IBV_LINK_LAYER_UNSPECIFIED (treated as InfiniBand)
	LinkLayerInfiniBand  LinkLayer = 1 // IBV_LINK_LAYER_INFINIBAND
	LinkLayerEthernet    LinkLayer = 2 // IBV_LINK_LAYER_ETHERNET (RoCE)
)

// String returns "InfiniBand" or "Ethernet", as ibv_devinfo prints the
// link layer (an unspecified one is InfiniBand).
func (l LinkLayer) String() string {
	switch l {
	case LinkLayerInfiniBand, LinkLayerUnspecified:
		return "InfiniBand"
	case LinkLayerEthernet:
		return "Ethernet"
	}
	return "LinkLayer(" + strconv.Itoa(int(l)) + ")"
}

// PortState (C: enum ibv_port_state).
type PortState int

const (
	PortDown   PortState = 1 // IBV_PORT_DOWN
	PortInit   PortState = 2 // IBV_PORT_INIT
	PortArmed  PortState = 3 // IBV_PORT_ARMED
	PortActive PortState = 4 // IBV_PORT_ACTIVE
)

// String returns the C name without its IBV_PORT_ prefix (ACTIVE).
func (s PortState) String() string {
	switch s {
	case PortDown:
		return "DOWN"
	case PortInit:
		return "INIT"
	case PortArmed:
		return "ARMED"
	case PortActive:
		return "ACTIVE"
	}
	return "PortState(" + strconv.Itoa(int(s)) + ")"
}

// MTU is a path MTU (C: enum ibv_mtu); the zero value means "the port's active MTU".
type MTU int

const (
	MTU256  MTU = 1 // IBV_MTU_256
	MTU512  MTU = 2 // IBV_MTU_512
	MTU1024 MTU = 3 // IBV_MTU_1024
	MTU2048 MTU = 4 // IBV_MTU_2048
	MTU4096 MTU = 5 // IBV_MTU_4096
)

// Bytes is the MTU in bytes, 0 for an unknown value.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// MTUFromBytes maps 256..4096 to an MTU; other values give 0.
func MTUFromBytes(n int) MTU {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m
		}
	}
	return 0
}

// String returns the MTU in bytes ("1024"); "0" for a code that is not one.
func (m MTU) String() string { return strconv.Itoa(m.Bytes()) }

// GIDType (C: enum ibv_gid_type).
type GIDType int

const (
	GIDTypeIB     GIDType = 0 // IBV_GID_TYPE_IB
	GIDTypeRoCEv1 GIDType = 1 // IBV_GID_TYPE_ROCE_V1
	GIDTypeRoCEv2 GIDType = 2 // IBV_GID_TYPE_ROCE_V2
)

// String returns "IB", "RoCE v1" or "RoCE v2".
func (t GIDType) String() string {
	switch t {
	case GIDTypeIB:
		return "IB"
	case GIDTypeRoCEv1:
		return "RoCE v1"
	case GIDTypeRoCEv2:
		return "RoCE v2"
	}
	return "GIDType(" + strconv.Itoa(int(t)) + ")"
}

// GID is a 16-byte global identifier, in network byte order.
type GID [16]byte

// IsZero reports an unset GID.
func (g GID) IsZero() bool { return g == GID{} }

// IPv4 returns the IPv4 address of an IPv4-mapped GID (::ffff:a.b.c.d), or nil.
func (g GID) IPv4() net.IP { return net.IP(g[:]).To4() }

// String returns the GID as an IP address: dotted decimal for an
// IPv4-mapped GID (RoCE v2 over IPv4), IPv6 notation otherwise.
func (g GID) String() string { return net.IP(g[:]).String() }

// GIDEntry is one entry of a port's GID table.
type GIDEntry struct {
	// Index is the entry's index in the port's GID table, GID its value and
	// Type its kind.
	Index  int
	GID    GID
	Type   GIDType
	Netdev string // the network device the GID belongs to (RoCE), if any
}

// DefaultGIDIndex picks the GID to use on a port: the RoCE v2 GID with an
// IPv4-mapped address if there is one, else the first RoCE v2 GID, else the
// first non-zero one (InfiniBand's index 0).
func DefaultGIDIndex(table []GIDEntry) (int, error) {
	best, rank := -1, 0
	for _, e := range table {
		if e.GID.IsZero() {
			continue
		}
		r := 1
		if e.Type == GIDTypeRoCEv2 {
			r = 2
			if e.GID.IPv4() != nil {
				r = 3
			}
		}
		if r > rank {
			best, rank = e.Index, r
		}
	}
	if best < 0 {
		return 0, fmt.Errorf("%w: the port has no usable GID", ErrNoDevice)
	}
	return best, nil
}

// DeviceAttr holds what ibv_query_device reports that this library uses.
type DeviceAttr struct {
	// FirmwareVersion (fw_ver), VendorID and VendorPartID identify the device.
	FirmwareVersion string
	NodeGUID        uint64 // as ibv_devinfo prints it
	VendorID        uint32
	VendorPartID    uint32
	// MaxMRSize, MaxQP, MaxSGE, MaxCQ, MaxCQE, MaxMR and MaxPD are the device's
	// limits (max_mr_size, max_qp, max_sge, max_cq, max_cqe, max_mr, max_pd);
	// AtomicCap is its guarantee for remote atomics (atomic_cap) and
	// PhysPortCount its number of ports (phys_port_cnt), numbered from 1.
	MaxMRSize       uint64
	MaxQP           int
	MaxQPWR         int // max_qp_wr
	MaxSGE          int
	MaxCQ           int
	MaxCQE          int
	MaxMR           int
	MaxPD           int
	MaxQPRdAtom     int // max_qp_rd_atom: RDMA READ/atomics a QP may have outstanding as responder
	MaxQPInitRdAtom int // max_qp_init_rd_atom: ... as initiator
	AtomicCap       AtomicCap
	PhysPortCount   int
	// MaxMW is the most memory windows (max_mw); MemWindowType2 says the
	// device binds type 2 windows (IBV_DEVICE_MEM_WINDOW_TYPE_2A or 2B in
	// device_cap_flags), which AllocMW needs.
	MaxMW          int
	MemWindowType2 bool
}

// PortAttr holds what ibv_query_port reports that this library uses.
type PortAttr struct {
	// State, MaxMTU, ActiveMTU, LID, LinkLayer, GIDTableLen and MaxMsgSize are
	// struct ibv_port_attr's state, max_mtu, active_mtu, lid (InfiniBand only),
	// link_layer, gid_tbl_len and max_msg_sz.
	State       PortState
	MaxMTU      MTU
	ActiveMTU   MTU
	LID         uint16
	LinkLayer   LinkLayer
	GIDTableLen int
	MaxMsgSize  uint32
}

// Access flags of a memory region or a QP (C: enum ibv_access_flags).
type Access int

const (
	AccessLocalWrite   Access = 1 << 0 // IBV_ACCESS_LOCAL_WRITE
	AccessRemoteWrite  Access = 1 << 1 // IBV_ACCESS_REMOTE_WRITE
	AccessRemoteRead   Access = 1 << 2 // IBV_ACCESS_REMOTE_READ
	AccessRemoteAtomic Access = 1 << 3 // IBV_ACCESS_REMOTE_ATOMIC
	AccessMWBind       Access = 1 << 4 // IBV_ACCESS_MW_BIND: memory windows may be bound to the MR
)

// SendFlags of a work request (C: enum ibv_send_flags).
type SendFlags int

const (
	SendFence     SendFlags = 1 << 0 // IBV_SEND_FENCE
	SendSignaled  SendFlags = 1 << 1 // IBV_SEND_SIGNALED
	SendSolicited SendFlags = 1 << 2 // IBV_SEND_SOLICITED
	SendInline    SendFlags = 1 << 3 // IBV_SEND_INLINE
)

// WCOpcode says what a completion completed (C: enum ibv_wc_opcode).
type WCOpcode int

const (
	WCSend        WCOpcode = 0   // IBV_WC_SEND
	WCRDMAWrite   WCOpcode = 1   // IBV_WC_RDMA_WRITE
	WCRDMARead    WCOpcode = 2   // IBV_WC_RDMA_READ
	WCCompSwap    WCOpcode = 3   // IBV_WC_COMP_SWAP
	WCFetchAdd    WCOpcode = 4   // IBV_WC_FETCH_ADD
	WCRecv        WCOpcode = 128 // IBV_WC_RECV
	WCRecvRDMAImm WCOpcode = 129 // IBV_WC_RECV_RDMA_WITH_IMM
)

// String returns the C name without its IBV_WC_ prefix (RDMA_WRITE).
func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCRDMARead:
		return "RDMA_READ"
	case WCCompSwap:
		return "COMP_SWAP"
	case WCFetchAdd:
		return "FETCH_ADD"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return "WCOpcode(" + strconv.Itoa(int(o)) + ")"
}

// WCStatus is a completion's status (C: enum ibv_wc_status).
type WCStatus int

// Completion statuses, in the order of enum ibv_wc_status.
const (
	WCSuccess WCStatus = iota
	WCLocLenErr
	WCLocQPOpErr
	WCLocEECOpErr
	WCLocProtErr
	WCWRFlushErr
	WCMWBindErr
	WCBadRespErr
	WCLocAccessErr
	WCRemInvReqErr
	WCRemAccessErr
	WCRemOpErr
	WCRetryExcErr
	WCRNRRetryExcErr
	WCLocRDDViolErr
	WCRemInvRdReqErr
	WCRemAbortErr
	WCInvEECNErr
	WCInvEECStateErr
	WCFatalErr
	WCRespTimeoutErr
	WCGeneralErr
)

var wcStatusNames = [...]string{
	"success", "local length error", "local QP operation error", "local EE context operation error",
	"local protection error", "work request flushed error", "memory window bind error",
	"bad response error", "local access error", "remote invalid request error",
	"remote access error", "remote operation error", "transport retry counter exceeded",
	"RNR retry counter exceeded", "local RDD violation error", "remote invalid RD request",
	"aborted error", "invalid EE context number", "invalid EE context state",
	"fatal error", "response timeout error", "general error",
}

// String returns the status as ibv_wc_status_str describes it
// ("remote access error").
func (s WCStatus) String() string {
	if s >= 0 && int(s) < len(wcStatusNames) {
		return wcStatusNames[s]
	}
	return "WCStatus(" + strconv.Itoa(int(s)) + ")"
}

// class is the sentinel error a failed status matches.
func (s WCStatus) class() error {
	switch s {
	case WCRemAccessErr:
		return ErrRemoteAccess
	case WCRetryExcErr, WCRNRRetryExcErr, WCRespTimeoutErr:
		return ErrPeerLost
	case WCWRFlushErr:
		return ErrFlushed
	case WCRemOpErr, WCRemInvReqErr, WCRemInvRdReqErr, WCRemAbortErr:
		return ErrRemoteOp
	}
	return ErrLocal
}

// WC is one work completion. Its layout matches the C helper's struct, so a
// []WC is filled by one cgo call.
type WC struct {
	// WRID is the work request's id (wr_id), Status its outcome, Opcode its
	// kind (valid on success only, on most devices), VendorErr the device's
	// code for a failure, ByteLen the bytes transferred (for a receive, the
	// message's length) and QPNum the number of the local QP it belongs to.
	WRID      uint64
	Status    WCStatus
	Opcode    WCOpcode
	VendorErr uint32
	ByteLen   uint32
	Imm       uint32 // immediate data, host byte order
	QPNum     uint32
	Flags     uint32 // IBV_WC_* flags (IBV_WC_WITH_IMM = 2)
	_         uint32
}

// Err returns nil for a successful completion and a *CompletionError otherwise.
func (wc *WC) Err() error {
	if wc.Status == WCSuccess {
		return nil
	}
	return &CompletionError{Status: wc.Status, Opcode: wc.Opcode, VendorErr: wc.VendorErr, WRID: wc.WRID}
}

// CompletionError is a failed work completion. errors.Is matches it against
// ErrRemoteAccess, ErrPeerLost, ErrFlushed, ErrRemoteOp or ErrLocal.
type CompletionError struct {
	// Status is the failed completion's status, VendorErr the device's code
	// for it and WRID the work request's id.
	Status    WCStatus
	Opcode    WCOpcode // only meaningful for successful completions on most devices
	VendorErr uint32
	WRID      uint64
}

// Error names the status, its number and the vendor error code.
func (e *CompletionError) Error() string {
	return fmt.Sprintf("verbs: work completion failed: %s (status %d, vendor error %#x)", e.Status, int(e.Status), e.VendorErr)
}

// Is matches the status's class.
func (e *CompletionError) Is(target error) bool { return target == e.Status.class() }

// Local is a scatter/gather element: a range of registered memory.
type Local struct {
	// Addr is the start address, Len the length in bytes and LKey the local
	// key of the memory region that holds the range.
	Addr uint64
	Len  uint32
	LKey uint32
}

// Endpoint is what a peer needs to connect an RC QP to this one.
type Endpoint struct {
	// QPN is the QP number and PSN the first packet sequence number (24 bits
	// each); LID is the port's LID (InfiniBand) and GID the port's source GID
	// (RoCE, or InfiniBand with a GRH).
	QPN uint32
	PSN uint32
	LID uint16
	GID GID
	// MTU is the largest path MTU this end can use (its port's active MTU,
	// or less if configured); the two ends of a QP use the smaller of
	// theirs. Zero means unknown (no limit from this end).
	MTU MTU
}

// EndpointSize is the length of an encoded Endpoint.
const EndpointSize = 4 + 4 + 2 + 16 + 1

// AppendBinary appends the encoding of e (big endian, EndpointSize bytes).
func (e Endpoint) AppendBinary(b []byte) []byte {
	b = append(b, byte(e.QPN>>24), byte(e.QPN>>16), byte(e.QPN>>8), byte(e.QPN))
	b = append(b, byte(e.PSN>>24), byte(e.PSN>>16), byte(e.PSN>>8), byte(e.PSN))
	b = append(b, byte(e.LID>>8), byte(e.LID))
	b = append(b, e.GID[:]...)
	return append(b, byte(e.MTU))
}

// DecodeEndpoint decodes what AppendBinary wrote.
func DecodeEndpoint(b []byte) (Endpoint, error) {
	if len(b) != EndpointSize {
		return Endpoint{}, fmt.Errorf("%w: endpoint of %d bytes, want %d", ErrInvalid, len(b), EndpointSize)
	}
	var e Endpoint
	e.QPN = uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	e.PSN = uint32(b[4])<<24 | uint32(b[5])<<16 | uint32(b[6])<<8 | uint32(b[7])
	e.LID = uint16(b[8])<<8 | uint16(b[9])
	copy(e.GID[:], b[10:26])
	e.MTU = MTU(b[26])
	if e.QPN >= 1<<24 || e.PSN >= 1<<24 {
		return Endpoint{}, fmt.Errorf("%w: QP number or PSN beyond 24 bits", ErrInvalid)
	}
	if e.MTU != 0 && e.MTU.Bytes() == 0 {
		return Endpoint{}, fmt.Errorf("%w: path MTU code %d", ErrInvalid, b[26])
	}
	return e, nil
}

// Path says how a QP reaches its peer (the RTR and RTS attributes).
type Path struct {
	Port      int       // port number, from 1
	LinkLayer LinkLayer // Ethernet: RoCE addressing with a GRH; else InfiniBand LID
	GIDIndex  int       // source GID index (RoCE, or IB with a GRH)
	MTU       MTU       // path MTU
	// MaxRdAtomic is the number of RDMA READ/atomic requests in flight,
	// as initiator (max_rd_atomic) and as responder (max_dest_rd_atomic).
	MaxRdAtomic int
	// Timeout is the local ACK timeout exponent: 4.096 us * 2^Timeout.
	Timeout int
	// RetryCount and RNRRetry bound transport and receiver-not-ready retries (7 = RNR forever).
	RetryCount int
	RNRRetry   int
	// MinRNRTimer is the RNR NAK timer code sent to the peer.
	MinRNRTimer int
	// Access is what remote peers may do through this QP.
	Access Access
}

// To returns the path to remote: p with the smaller of p's MTU and the one
// remote announced, so that neither end sends packets the other's port
// cannot take (a zero MTU on either side sets no limit).
func (p *Path) To(remote Endpoint) *Path {
	q := *p
	if remote.MTU != 0 && (q.MTU == 0 || remote.MTU < q.MTU) {
		q.MTU = remote.MTU
	}
	return &q
}

// QPConfig sizes a reliable-connected QP.
type QPConfig struct {
	// SendCQ and RecvCQ receive the completions of the send and the receive
	// queue; MaxSendWR and MaxRecvWR are the queues' depths in work requests,
	// MaxSendSGE and MaxRecvSGE the scatter/gather elements per work request.
	SendCQ, RecvCQ *CQ
	MaxSendWR      int
	MaxRecvWR      int
	MaxSendSGE     int
	MaxRecvSGE     int
	MaxInlineData  int // asked for; QP.MaxInline says what the device granted
	// SRQ, if not nil, is the shared receive queue the QP receives from
	// (MaxRecvWR and MaxRecvSGE are then unused, and QP.PostRecv fails).
	SRQ *SRQ
}
