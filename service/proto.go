package service

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
)

// The wire protocol, version 1. Every integer is little endian.
//
// Connection request private data (helloLen bytes, at most
// verbs.MaxConnectPrivateData): magic "RMAS", version, three zero bytes,
// the client's 32-byte nonce. Accept private data: the same header and the
// server's nonce. Reject private data: magic, version, a reject reason.
//
// Messages (SENDs) start with an 8-byte header: type, three zero bytes, a
// request sequence number that the reply echoes.
//
//	msgAuth     client: HMAC-SHA256(secret, "rma-service-client" || serverNonce || clientNonce)
//	msgAuthOK   server: HMAC-SHA256(secret, "rma-service-server" || clientNonce || serverNonce)
//	msgAuthFail server: nothing (the server then disconnects)
//	msgOpen     client: name length (1 byte), name
//	msgOpenOK   server: address (8), rkey (4), zero (4), size (8)
//	msgOpenErr  server: reason (1 byte)

const (
	protoVersion = 1
	nonceLen     = 32
	macLen       = sha256.Size
	headerLen    = 8
	helloLen     = 8 + nonceLen
	rejectLen    = 8

	// recvSize is the size of every receive buffer, on both sides: the
	// largest message (msgOpen with a name of MaxNameLen bytes) fits.
	recvSize = 256
)

// MaxNameLen is the longest window name, in bytes.
const MaxNameLen = 128

var magic = [4]byte{'R', 'M', 'A', 'S'}

const (
	msgAuth     = 1
	msgOpen     = 2
	msgAuthOK   = 0x81
	msgAuthFail = 0x82
	msgOpenOK   = 0x83
	msgOpenErr  = 0x84
)

// Reject reasons.
const (
	rejectFull     = 1 // MaxConns connections already
	rejectProtocol = 2 // not this protocol or version
	rejectClosing  = 3 // the server is closing
)

// Open failure reasons.
const (
	openUnknown = 1 // no window of that name
	openBad     = 2 // malformed request
)

const (
	openOKLen  = headerLen + 24
	openErrLen = headerLen + 1
	authLen    = headerLen + macLen
)

// appendHello appends a request's or accept's private data.
func appendHello(b []byte, nonce *[nonceLen]byte) []byte {
	b = append(b, magic[:]...)
	b = append(b, protoVersion, 0, 0, 0)
	return append(b, nonce[:]...)
}

// parseHello decodes a request's or accept's private data (which the
// connection manager may have padded with zeros).
func parseHello(b []byte) (nonce [nonceLen]byte, err error) {
	if len(b) < helloLen || [4]byte(b[:4]) != magic {
		return nonce, fmt.Errorf("%w: not an rma service handshake", ErrProtocol)
	}
	if b[4] != protoVersion {
		return nonce, fmt.Errorf("%w: protocol version %d, want %d", ErrProtocol, b[4], protoVersion)
	}
	copy(nonce[:], b[8:helloLen])
	return nonce, nil
}

func rejectData(reason byte) []byte {
	b := append(magic[:0:0], magic[:]...)
	return append(b, protoVersion, reason, 0, 0)
}

// parseReject returns the reason of a reject's private data, or 0 if it
// is not one of this protocol's.
func parseReject(b []byte) byte {
	if len(b) < rejectLen || [4]byte(b[:4]) != magic || b[4] != protoVersion {
		return 0
	}
	return b[5]
}

// putHeader writes a message header into b (at least headerLen bytes).
func putHeader(b []byte, typ byte, seq uint32) {
	b[0], b[1], b[2], b[3] = typ, 0, 0, 0
	binary.LittleEndian.PutUint32(b[4:], seq)
}

// header decodes a message's header; ok is false for a short message.
func header(b []byte) (typ byte, seq uint32, ok bool) {
	if len(b) < headerLen {
		return 0, 0, false
	}
	return b[0], binary.LittleEndian.Uint32(b[4:]), true
}

// proof computes HMAC-SHA256(secret, label || a || b) into out.
func proof(out []byte, secret []byte, label string, a, b *[nonceLen]byte) {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	m.Write(a[:])
	m.Write(b[:])
	m.Sum(out[:0])
}

const (
	clientLabel = "rma-service-client"
	serverLabel = "rma-service-server"
)

// openOK is a decoded msgOpenOK.
type openOK struct {
	addr uint64
	rkey uint32
	size uint64
}

func putOpenOK(b []byte, seq uint32, r openOK) int {
	putHeader(b, msgOpenOK, seq)
	binary.LittleEndian.PutUint64(b[8:], r.addr)
	binary.LittleEndian.PutUint32(b[16:], r.rkey)
	binary.LittleEndian.PutUint32(b[20:], 0)
	binary.LittleEndian.PutUint64(b[24:], r.size)
	return openOKLen
}

func parseOpenOK(b []byte) (openOK, error) {
	if len(b) != openOKLen {
		return openOK{}, fmt.Errorf("%w: open reply of %d bytes", ErrProtocol, len(b))
	}
	r := openOK{addr: binary.LittleEndian.Uint64(b[8:]), rkey: binary.LittleEndian.Uint32(b[16:]),
		size: binary.LittleEndian.Uint64(b[24:])}
	if r.size == 0 || r.size > 1<<47 || r.addr+r.size < r.addr {
		return openOK{}, fmt.Errorf("%w: open reply with a window of %d bytes at %#x", ErrProtocol, r.size, r.addr)
	}
	return r, nil
}

// putOpen writes an open request for name into b; it returns its length.
func putOpen(b []byte, seq uint32, name string) int {
	putHeader(b, msgOpen, seq)
	b[headerLen] = byte(len(name))
	return headerLen + 1 + copy(b[headerLen+1:], name)
}

// parseOpen returns the name of an open request (a subslice of b).
func parseOpen(b []byte) ([]byte, bool) {
	if len(b) < headerLen+1 {
		return nil, false
	}
	n := int(b[headerLen])
	if n == 0 || n > MaxNameLen || len(b) != headerLen+1+n {
		return nil, false
	}
	return b[headerLen+1:], true
}
