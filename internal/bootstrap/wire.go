package bootstrap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
)

// MaxMessage is the largest frame payload sent or accepted. An
// AllGather's results together (plus 4 bytes per rank and a 13-byte
// header) must fit in it.
const MaxMessage = 16 << 20

// Frame: magic, version, type, uint32 big-endian payload length, payload.
const (
	frameMagic   = 0xB5
	frameVersion = 1
	headerLen    = 7
)

// Message types.
const (
	msgHello     byte = 1 + iota // joiner -> 0: size u32, rank u32, joiner nonce
	msgChallenge                 // 0 -> joiner: rank 0 nonce
	msgProof                     // joiner -> 0: joiner MAC
	msgAccept                    // 0 -> joiner: rank 0 MAC
	msgRefuse                    // 0 -> joiner: refusal code
	msgReady                     // 0 -> joiner: the group is complete (empty)
	msgGather                    // joiner -> 0: collective header, contribution
	msgResult                    // 0 -> joiner: collective header, result
	msgAbort                     // 0 -> joiner: code, reason (instead of a result)
)

// Fixed handshake payload sizes.
const (
	nonceLen     = 32
	macLen       = 32
	helloLen     = 8 + nonceLen
	challengeLen = nonceLen
	proofLen     = macLen
	acceptLen    = macLen
	refuseLen    = 1
	maxAbortLen  = 1 + 512
)

// Codes carried by msgRefuse and msgAbort.
const (
	codeAuth byte = 1 + iota
	codeRankTaken
	codeBadSize
	codeBadRank
	codeProtocol
	codeClosed
	codeTooLarge
)

// codeErr maps a code to a phrase and its sentinel.
func codeErr(code byte) (string, error) {
	switch code {
	case codeAuth:
		return "shared secret rejected by rank 0", ErrAuth
	case codeRankTaken:
		return "rank already taken", ErrRankTaken
	case codeBadSize:
		return "group size differs from rank 0's", ErrConfig
	case codeBadRank:
		return "rank out of range", ErrConfig
	case codeClosed:
		return "a connection was lost or the call abandoned", ErrClosed
	case codeTooLarge:
		return "result too large", ErrTooLarge
	}
	return "protocol error", ErrProtocol
}

// writeFrame sends one frame whose payload is the concatenation of parts.
func writeFrame(w io.Writer, typ byte, parts ...[]byte) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	if n > MaxMessage {
		return fmt.Errorf("%w: %d-byte payload exceeds %d", ErrTooLarge, n, MaxMessage)
	}
	h := [headerLen]byte{frameMagic, frameVersion, typ}
	binary.BigEndian.PutUint32(h[3:], uint32(n))
	bufs := append(net.Buffers{h[:]}, parts...)
	_, err := bufs.WriteTo(w)
	return err
}

// readFrame reads one frame whose payload is at most limit bytes. The
// length is checked before anything is allocated.
func readFrame(r io.Reader, limit int) (typ byte, payload []byte, err error) {
	var h [headerLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	if h[0] != frameMagic || h[1] != frameVersion {
		return 0, nil, fmt.Errorf("%w: bad frame header %x (not a bootstrap peer, or another version)", ErrProtocol, h[:2])
	}
	n := binary.BigEndian.Uint32(h[3:])
	if uint64(n) > uint64(limit) {
		return 0, nil, fmt.Errorf("%w: %d-byte frame of type %d exceeds limit %d", ErrProtocol, n, h[2], limit)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return h[2], payload, nil
}

// readFixed reads one frame that must be of type want with exactly n bytes.
func readFixed(r io.Reader, want byte, n int) ([]byte, error) {
	typ, p, err := readFrame(r, n)
	if err != nil {
		return nil, err
	}
	if typ != want || len(p) != n {
		return nil, fmt.Errorf("%w: got message type %d of %d bytes, want type %d of %d bytes", ErrProtocol, typ, len(p), want, n)
	}
	return p, nil
}

type hello struct {
	size, rank uint32
	nonce      [nonceLen]byte
}

func (h hello) encode() []byte {
	b := make([]byte, helloLen)
	binary.BigEndian.PutUint32(b, h.size)
	binary.BigEndian.PutUint32(b[4:], h.rank)
	copy(b[8:], h.nonce[:])
	return b
}

func decodeHello(b []byte) (hello, error) {
	var h hello
	if len(b) != helloLen {
		return h, fmt.Errorf("%w: hello of %d bytes, want %d", ErrProtocol, len(b), helloLen)
	}
	h.size = binary.BigEndian.Uint32(b)
	h.rank = binary.BigEndian.Uint32(b[4:])
	copy(h.nonce[:], b[8:])
	return h, nil
}

// Collective operations.
const (
	opAllGather byte = 1 + iota
	opBarrier
	opBroadcast
)

func opName(op byte) string {
	switch op {
	case opAllGather:
		return "AllGather"
	case opBarrier:
		return "Barrier"
	case opBroadcast:
		return "Broadcast"
	}
	return fmt.Sprintf("op%d", op)
}

// collHeader starts msgGather and msgResult: op u8, arg u32 (the root of a
// Broadcast), seq u64 (the caller's collective count, from 1).
type collHeader struct {
	op  byte
	arg uint32
	seq uint64
}

const collHeaderLen = 13

func (h collHeader) encode() []byte {
	b := make([]byte, collHeaderLen)
	b[0] = h.op
	binary.BigEndian.PutUint32(b[1:], h.arg)
	binary.BigEndian.PutUint64(b[5:], h.seq)
	return b
}

func (h collHeader) String() string {
	if h.op == opBroadcast {
		return fmt.Sprintf("%s(root %d) #%d", opName(h.op), h.arg, h.seq)
	}
	return fmt.Sprintf("%s #%d", opName(h.op), h.seq)
}

// decodeColl splits a msgGather or msgResult payload; body aliases b.
func decodeColl(b []byte) (collHeader, []byte, error) {
	if len(b) < collHeaderLen {
		return collHeader{}, nil, fmt.Errorf("%w: collective message of %d bytes", ErrProtocol, len(b))
	}
	h := collHeader{op: b[0], arg: binary.BigEndian.Uint32(b[1:]), seq: binary.BigEndian.Uint64(b[5:])}
	return h, b[collHeaderLen:], nil
}

// encodeList encodes parts as (u32 length, bytes) each.
func encodeList(parts [][]byte) []byte {
	n := 0
	for _, p := range parts {
		n += 4 + len(p)
	}
	b := make([]byte, 0, n)
	for _, p := range parts {
		b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
	}
	return b
}

// decodeList decodes exactly n entries filling b. The entries alias b,
// each with its capacity cut to its length.
func decodeList(b []byte, n int) ([][]byte, error) {
	out := make([][]byte, n)
	for i := range out {
		if len(b) < 4 {
			return nil, fmt.Errorf("%w: list truncated at entry %d of %d", ErrProtocol, i, n)
		}
		l := binary.BigEndian.Uint32(b)
		b = b[4:]
		if uint64(l) > uint64(len(b)) {
			return nil, fmt.Errorf("%w: list entry %d claims %d bytes, %d left", ErrProtocol, i, l, len(b))
		}
		out[i], b = b[:l:l], b[l:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the %d list entries", ErrProtocol, len(b), n)
	}
	return out, nil
}

func encodeAbort(code byte, reason string) []byte {
	if len(reason) > maxAbortLen-1 {
		reason = reason[:maxAbortLen-1]
	}
	return append([]byte{code}, reason...)
}

func decodeAbort(b []byte) (code byte, reason string, err error) {
	if len(b) < 1 || len(b) > maxAbortLen {
		return 0, "", fmt.Errorf("%w: abort message of %d bytes", ErrProtocol, len(b))
	}
	return b[0], string(b[1:]), nil
}
