package fallback

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
)

// Version is the protocol version this package speaks. It is the low 7 bits
// of the first byte of every message; a target refuses another version with
// [StatusBadVersion].
const Version = 1

// Sizes and bounds of the wire format.
const (
	// RequestHeaderSize is the size of the fixed request header. A request
	// with a predefined target datatype is the header followed by its data.
	RequestHeaderSize = 32
	// ReplyHeaderSize is the size of the fixed reply header.
	ReplyHeaderSize = 16
	// MaxMessage bounds every request and reply, whatever the transport's
	// buffers: a longer message is refused with [StatusTooLarge]. Transports
	// use smaller buffers (64 KiB, say) and [Split] to fit them.
	MaxMessage = 1 << 24
	// MaxReason bounds the explanation a target puts in an error reply.
	MaxReason = 256
	// MaxCount is the largest Count a request can carry.
	MaxCount = math.MaxInt32
)

// Header offsets (little endian).
const (
	offVersion = 0  // u8: version | byte-order flag
	offKind    = 1  // u8
	offOp      = 2  // u8
	offBasic   = 3  // u8
	offWindow  = 4  // u32
	offTag     = 8  // u32, at this offset in every version
	offCount   = 12 // u32
	offDisp    = 16 // i64
	offTypeLen = 24 // u32
	offDataLen = 28 // u32

	roffStatus  = 1  // u8
	roffRsv     = 2  // u16, zero
	roffTag     = 4  // u32
	roffDataLen = 8  // u32
	roffRsv2    = 12 // u32, zero
)

// bigEndianFlag is set in the version byte by big-endian hosts: element
// data travels in host byte order, and a target refuses data in the other
// order.
const bigEndianFlag = 0x80

var (
	le          = binary.LittleEndian
	versionByte = byte(Version) | hostOrderFlag()
)

func hostOrderFlag() byte {
	if binary.NativeEndian.Uint16([]byte{1, 0}) == 1 {
		return 0
	}
	return bigEndianFlag
}

// Kind is the kind of a request.
type Kind uint8

// The kinds of request.
const (
	// KindAccumulate is MPI_Accumulate (and MPI_Raccumulate): the reply
	// carries no data.
	KindAccumulate Kind = iota + 1
	// KindGetAccumulate is MPI_Get_accumulate (MPI_Rget_accumulate) and
	// MPI_Fetch_and_op: the reply carries the old contents of the target
	// elements, packed in type-map order.
	KindGetAccumulate
	// KindCompareAndSwap is MPI_Compare_and_swap: the reply carries the old
	// value of the target element.
	KindCompareAndSwap

	numKinds
)

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool { return k >= 1 && k < numKinds }

// String returns the name of the call the kind carries ("GetAccumulate").
func (k Kind) String() string {
	switch k {
	case KindAccumulate:
		return "Accumulate"
	case KindGetAccumulate:
		return "GetAccumulate"
	case KindCompareAndSwap:
		return "CompareAndSwap"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Request is an active message asking a target to apply an accumulate to
// its window.
type Request struct {
	// Kind is the call the request carries out at the target.
	Kind Kind
	// Op is the operation; not sent for KindCompareAndSwap (encoded as 0
	// and decoded as 0).
	Op op.Op
	// Window is the id of the target window.
	Window uint32
	// Tag is chosen by the origin and echoed in the reply.
	Tag uint32
	// Disp is the byte offset in the target window where the layout starts
	// (where instance 0 of Type begins).
	Disp int64
	// Type is the target layout; a predefined datatype (Basic.Type()) costs
	// nothing on the wire.
	Type datatype.Type
	// Count is the number of instances of Type, 0 to MaxCount.
	Count int
	// Data is the origin elements, packed in type-map order, host byte
	// order: Count*Type.Size() bytes. For NO_OP it may be empty. For
	// KindCompareAndSwap it is the compare element then the origin element
	// (Count 1, Type a predefined datatype). Decoding makes it alias the
	// message.
	Data []byte
}

// ReplyLen returns the length of the reply a target sends when it applies
// r: ReplyHeaderSize plus the old values for GetAccumulate and
// CompareAndSwap. An error reply is at most ReplyHeaderSize+MaxReason bytes
// (and never longer than the reply buffer the target was given).
func (r *Request) ReplyLen() int64 {
	switch r.Kind {
	case KindGetAccumulate:
		return ReplyHeaderSize + int64(r.Count)*r.Type.Size()
	case KindCompareAndSwap:
		return ReplyHeaderSize + int64(r.Type.Basic().Size())
	}
	return ReplyHeaderSize
}

func pad8(n int) int { return (n + 7) &^ 7 }

func isPredefined(t datatype.Type) bool { return t.Valid() && t == t.Basic().Type() }

// dataLen checks the fields of r that the encoding depends on and returns
// the expected data length.
func checkEncode(r *Request) (int, *Error) {
	if !r.Kind.Valid() {
		return 0, newError(StatusMalformed, "unknown kind "+r.Kind.String())
	}
	if !r.Type.Valid() {
		return 0, newError(StatusBadLayout, "invalid target datatype")
	}
	if r.Count < 0 || r.Count > MaxCount {
		return 0, newError(StatusBadLayout, fmt.Sprintf("count %d not in [0, %d]", r.Count, MaxCount))
	}
	if r.Kind == KindCompareAndSwap {
		if !isPredefined(r.Type) || r.Count != 1 {
			return 0, newError(StatusBadLayout, "compare-and-swap takes one element of a predefined datatype")
		}
		if n := 2 * r.Type.Size(); int64(len(r.Data)) != n {
			return 0, newError(StatusLength, fmt.Sprintf("compare-and-swap on %v: %d bytes of data, want %d (compare then origin)", r.Type.Basic(), len(r.Data), n))
		}
		return len(r.Data), nil
	}
	size := r.Type.Size()
	if size != 0 && int64(r.Count) > MaxMessage/size {
		return 0, newError(StatusTooLarge, fmt.Sprintf("%d instances of %d bytes exceed %d bytes", r.Count, size, MaxMessage))
	}
	size *= int64(r.Count)
	if int64(len(r.Data)) != size && !(r.Kind == KindGetAccumulate && r.Op == op.NoOp && len(r.Data) == 0) {
		return 0, newError(StatusLength, fmt.Sprintf("%d bytes of data for %d instances of %d bytes", len(r.Data), r.Count, r.Type.Size()))
	}
	return len(r.Data), nil
}

// appendHeader appends the header and the type encoding (padded) of r,
// whose data will be dataLen bytes.
func appendHeader(dst []byte, r *Request, dataLen int) ([]byte, *Error) {
	start := len(dst)
	dst = append(dst, make([]byte, RequestHeaderSize)...)
	h := dst[start:]
	h[offVersion] = versionByte
	h[offKind] = byte(r.Kind)
	if r.Kind != KindCompareAndSwap {
		h[offOp] = byte(r.Op)
	}
	h[offBasic] = byte(r.Type.Basic())
	le.PutUint32(h[offWindow:], r.Window)
	le.PutUint32(h[offTag:], r.Tag)
	le.PutUint32(h[offCount:], uint32(r.Count))
	le.PutUint64(h[offDisp:], uint64(r.Disp))
	typeLen := 0
	if !isPredefined(r.Type) {
		var err error
		if dst, err = r.Type.AppendBinary(dst); err != nil {
			return dst[:start], newError(StatusBadLayout, err.Error())
		}
		typeLen = len(dst) - start - RequestHeaderSize
		for i := typeLen; i < pad8(typeLen); i++ {
			dst = append(dst, 0)
		}
	}
	if total := int64(RequestHeaderSize) + int64(pad8(typeLen)) + int64(dataLen); total > MaxMessage {
		return dst[:start], newError(StatusTooLarge, fmt.Sprintf("request of %d bytes exceeds %d", total, MaxMessage))
	}
	le.PutUint32(dst[start+offTypeLen:], uint32(typeLen))
	le.PutUint32(dst[start+offDataLen:], uint32(dataLen))
	return dst, nil
}

// AppendRequest appends the encoding of r to dst and returns the extended
// slice. It does not allocate when cap(dst) suffices. It checks what the
// encoding needs (a known kind, a valid type, 0 <= Count <= MaxCount, the
// data length, at most MaxMessage bytes) but not whether the op is allowed:
// use [Check]. On error dst is returned unchanged.
func AppendRequest(dst []byte, r *Request) ([]byte, error) {
	n, e := checkEncode(r)
	if e != nil {
		return dst, e
	}
	start := len(dst)
	dst, e = appendHeader(dst, r, n)
	if e != nil {
		return dst[:start], e
	}
	return append(dst, r.Data...), nil
}

// header is the fixed part of a request, parsed.
type header struct {
	kind    Kind
	op      op.Op
	basic   datatype.Basic
	window  uint32
	tag     uint32
	count   int
	disp    int64
	typeLen int
	dataLen int
}

// readTag returns the tag of a message of any version, if it is long
// enough to hold one.
func readTag(b []byte) uint32 {
	if len(b) < offTag+4 {
		return 0
	}
	return le.Uint32(b[offTag:])
}

func checkVersion(v byte) *Error {
	if v&^bigEndianFlag != Version {
		return newError(StatusBadVersion, fmt.Sprintf("protocol version %d, this side speaks %d", v&^bigEndianFlag, Version))
	}
	if v&bigEndianFlag != versionByte&bigEndianFlag {
		return newError(StatusBadVersion, "element data in the other byte order")
	}
	return nil
}

// parseHeader checks the framing of a request: version, size, kind, the
// lengths against the bytes present, zero padding.
func parseHeader(b []byte, h *header) *Error {
	if len(b) == 0 {
		return newError(StatusMalformed, "empty message")
	}
	if e := checkVersion(b[offVersion]); e != nil {
		return e
	}
	if len(b) > MaxMessage {
		return newError(StatusTooLarge, fmt.Sprintf("message of %d bytes exceeds %d", len(b), MaxMessage))
	}
	if len(b) < RequestHeaderSize {
		return newError(StatusMalformed, fmt.Sprintf("truncated header: %d bytes, want %d", len(b), RequestHeaderSize))
	}
	h.kind = Kind(b[offKind])
	h.op = op.Op(b[offOp])
	h.basic = datatype.Basic(b[offBasic])
	h.window = le.Uint32(b[offWindow:])
	h.tag = le.Uint32(b[offTag:])
	count := le.Uint32(b[offCount:])
	h.disp = int64(le.Uint64(b[offDisp:]))
	typeLen := le.Uint32(b[offTypeLen:])
	dataLen := le.Uint32(b[offDataLen:])
	if !h.kind.Valid() {
		return newError(StatusMalformed, "unknown kind "+h.kind.String())
	}
	if h.kind == KindCompareAndSwap && h.op != 0 {
		return newError(StatusMalformed, "compare-and-swap with a non-zero op byte")
	}
	if count > MaxCount {
		return newError(StatusMalformed, fmt.Sprintf("count %d exceeds %d", count, MaxCount))
	}
	// All in uint64: no overflow.
	if want := uint64(RequestHeaderSize) + (uint64(typeLen)+7)&^7 + uint64(dataLen); want != uint64(len(b)) {
		return newError(StatusMalformed, fmt.Sprintf("message of %d bytes, header says %d (type %d, data %d)", len(b), want, typeLen, dataLen))
	}
	h.count, h.typeLen, h.dataLen = int(count), int(typeLen), int(dataLen)
	for _, c := range b[RequestHeaderSize+h.typeLen : RequestHeaderSize+pad8(h.typeLen)] {
		if c != 0 {
			return newError(StatusMalformed, "non-zero padding after the datatype")
		}
	}
	return nil
}

// decodeType returns the target datatype of a request whose header h was
// parsed from b.
func decodeType(b []byte, h *header) (datatype.Type, *Error) {
	if h.typeLen == 0 {
		if !h.basic.Valid() {
			return datatype.Type{}, newError(StatusBadLayout, fmt.Sprintf("unknown datatype %d", uint8(h.basic)))
		}
		return h.basic.Type(), nil
	}
	if h.kind == KindCompareAndSwap {
		return datatype.Type{}, newError(StatusBadLayout, "compare-and-swap takes a predefined datatype")
	}
	t, err := datatype.Unmarshal(b[RequestHeaderSize : RequestHeaderSize+h.typeLen])
	if err != nil {
		return datatype.Type{}, newError(StatusBadLayout, err.Error())
	}
	if t.Basic() != h.basic {
		return datatype.Type{}, newError(StatusBadLayout, fmt.Sprintf("datatype built from %v, header says %v", t.Basic(), h.basic))
	}
	if isPredefined(t) {
		return datatype.Type{}, newError(StatusMalformed, "predefined datatype sent as an encoding")
	}
	return t, nil
}

// DecodeRequest decodes one request, which must be all of b, into r. r.Data
// aliases b. It checks the framing and the datatype encoding (anything else
// is for the target: see [Target.Handle]) and, for a predefined target
// datatype, does not allocate. The encoding is canonical: a request that
// decodes re-encodes to the same bytes. Errors are *[Error] with the status
// a target would reply.
func DecodeRequest(b []byte, r *Request) error {
	var h header
	if e := parseHeader(b, &h); e != nil {
		return e
	}
	t, e := decodeType(b, &h)
	if e != nil {
		return e
	}
	start := RequestHeaderSize + pad8(h.typeLen)
	*r = Request{Kind: h.kind, Op: h.op, Window: h.window, Tag: h.tag, Disp: h.disp, Type: t, Count: h.count,
		Data: b[start : start+h.dataLen : start+h.dataLen]}
	return nil
}

// Reply is the answer of a target to a request.
type Reply struct {
	// Tag is the request's (0 if the target could not read it).
	Tag uint32
	// Status is StatusOK or why the request was refused.
	Status Status
	// Data is, for StatusOK, the old contents of the target elements, packed
	// in target type-map order, for GetAccumulate and CompareAndSwap (empty
	// for Accumulate); for a refusal, the target's explanation (text, at
	// most MaxReason bytes). Decoding makes it alias the message.
	Data []byte
}

// Err returns nil for StatusOK, else an *[Error] (Remote) wrapping
// [ErrRemoteRejected] and the sentinel of the status, with the target's
// explanation.
func (r *Reply) Err() error {
	if r.Status == StatusOK {
		return nil
	}
	return &Error{Status: r.Status, Remote: true, Msg: sanitize(r.Data)}
}

func appendReplyHeader(dst []byte, tag uint32, s Status, dataLen int) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, ReplyHeaderSize)...)
	h := dst[start:]
	h[offVersion] = versionByte
	h[roffStatus] = byte(s)
	le.PutUint32(h[roffTag:], tag)
	le.PutUint32(h[roffDataLen:], uint32(dataLen))
	return dst
}

// AppendReply appends the encoding of r to dst and returns the extended
// slice; it does not allocate when cap(dst) suffices. For a status other
// than OK, at most MaxReason bytes of Data are sent.
func AppendReply(dst []byte, r *Reply) []byte {
	data := r.Data
	if r.Status != StatusOK && len(data) > MaxReason {
		data = data[:MaxReason]
	}
	dst = appendReplyHeader(dst, r.Tag, r.Status, len(data))
	return append(dst, data...)
}

// DecodeReply decodes one reply, which must be all of b, into r. r.Data
// aliases b. A reply carrying a refusal decodes without error: check
// r.Err(). Errors (for a malformed reply or another protocol version) are
// *[Error].
func DecodeReply(b []byte, r *Reply) error {
	if len(b) < ReplyHeaderSize {
		return newError(StatusMalformed, fmt.Sprintf("truncated reply: %d bytes, want at least %d", len(b), ReplyHeaderSize))
	}
	if e := checkVersion(b[offVersion]); e != nil {
		return e
	}
	if len(b) > MaxMessage {
		return newError(StatusTooLarge, fmt.Sprintf("reply of %d bytes exceeds %d", len(b), MaxMessage))
	}
	s := Status(b[roffStatus])
	n := le.Uint32(b[roffDataLen:])
	switch {
	case !s.Valid():
		return newError(StatusMalformed, "unknown status "+s.String())
	case le.Uint16(b[roffRsv:]) != 0 || le.Uint32(b[roffRsv2:]) != 0:
		return newError(StatusMalformed, "non-zero reserved bytes in reply")
	case uint64(n) != uint64(len(b)-ReplyHeaderSize):
		return newError(StatusMalformed, fmt.Sprintf("reply of %d bytes, header says %d bytes of data", len(b), n))
	case s != StatusOK && n > MaxReason:
		return newError(StatusMalformed, fmt.Sprintf("error reply with %d bytes of explanation", n))
	}
	*r = Reply{Tag: le.Uint32(b[roffTag:]), Status: s, Data: b[ReplyHeaderSize:len(b):len(b)]}
	return nil
}
