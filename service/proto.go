package service

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/onesided/rma/fallback"
)

// The wire protocol, version 5. Every integer is little endian.
//
// Connection request private data (helloLen bytes, at most
// verbs.MaxConnectPrivateData): magic "RMAS", version, three zero bytes,
// the client's 32-byte nonce. Accept private data: the same header and the
// server's nonce. Reject private data: magic, version, a reject reason.
//
// Messages (SENDs) start with an 8-byte header: type, three zero bytes, a
// request sequence number that the reply echoes.
//
//	msgAuth     client: the address (8) and rkey (4) of 8 bytes of its
//	            memory the server may READ (its probes), name length (1),
//	            three zero bytes, a session (16: zero for a new one, else
//	            the one to resume), the name, then
//	            HMAC-SHA256(secret, "rma-service-client" || serverNonce ||
//	            clientNonce || the message between header and MAC)
//	msgAuthOK   server: the address (8) and rkey (4) of the connection's
//	            byte-order word (both zero when the server's device has
//	            no atomics), flags (1: bit 0, the session asked for was
//	            resumed), three zero bytes, the connection's session
//	            (16), then HMAC-SHA256(secret, "rma-service-server" ||
//	            clientNonce || serverNonce || the 32 bytes between header
//	            and MAC)
//	msgAuthFail server: nothing (the server then disconnects)
//	msgOpen     client: name length (1 byte), name
//	msgOpenOK   server: address (8), rkey (4), window id (4), size (8),
//	            flags (1: bit 0, the server's device has atomics; bits 1
//	            to 3, the Access granted), 7 zero bytes
//	msgOpenErr  server: reason (1 byte)
//	msgAcc      client: a request in package fallback's wire format (the
//	            one a group rank's engine takes), for a window the
//	            connection opened
//	msgLock     client: window id (4), lock type (1), three zero bytes
//	msgUnlock   client: window id (4), four zero bytes; also withdraws a
//	            lock request still waiting
//	msgOK       server: to a msgAcc, the fallback reply (the old elements,
//	            or why the engine refused); to the others, nothing
//	msgErr      server: reason (1 byte)
//
// The rkey of msgOpenOK is a memory window bound to the client's QP: it
// works on that connection only. So is that of msgAuthOK: a word holding
// atomics.ProbeValue on which the client checks, before its first call,
// that the NIC atomics between it and the server work in host byte order
// (a fetch-and-add of 1, then a READ of the word). Calls on a window the connection has
// not opened are refused (errUnknownWin), and so are those its grant does
// not cover (errDenied).
//
// A session outlives a connection that fails on the transport (resume.go):
// a client resumes it on a new connection by naming it in msgAuth, and
// then sends again the requests whose replies it had not received, under
// their sequence numbers; the server answers a request it already
// handled with the reply it recorded, and does not handle it again.
//
// A client has at most 9 requests outstanding: one, and up to 8 msgAcc
// whose sequence numbers have bit 31 set (those of the client's lanes;
// the others never have it). The server answers each in the order of
// arrival, except that the reply to a msgLock comes when the lock is
// granted, which may be after the reply to the msgUnlock that withdraws
// it (then both come, the grant first). A connection with more replies
// outstanding than that (and its lock requests) is dropped.

const (
	protoVersion = 5
	nonceLen     = 32
	macLen       = sha256.Size
	headerLen    = 8
	helloLen     = 8 + nonceLen
	rejectLen    = 8

	// recvSize is the size of every receive buffer, on both sides: the
	// largest message (a msgAcc with maxAccData bytes) fits.
	recvSize = 512
)

// MaxNameLen is the longest window name, in bytes.
const MaxNameLen = 128

var magic = [4]byte{'R', 'M', 'A', 'S'}

const (
	msgAuth     = 1
	msgOpen     = 2
	msgAcc      = 3
	msgLock     = 4
	msgUnlock   = 5
	msgAuthOK   = 0x81
	msgAuthFail = 0x82
	msgOpenOK   = 0x83
	msgOpenErr  = 0x84
	msgOK       = 0x85
	msgErr      = 0x86
)

// Lock types of msgLock.
const (
	lockShared    = 1
	lockExclusive = 2
)

// Reasons of msgErr: what the request did wrong, or could not have.
const (
	errBadRequest = 1 // malformed
	errUnknownWin = 2 // no window of that id opened by the connection
	errLockState  = 6 // Lock while holding or waiting, Unlock while not
	errDenied     = 7 // the window's grant to the connection does not cover it
	// 3 to 5 were the engine's refusals, now in its fallback reply.
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
	openDenied  = 3 // ServerConfig.Authorize granted nothing
	openNoKey   = 4 // no key could be made: maxConnBinds windows open, or the device has no memory window left
)

const (
	openOKLen  = headerLen + 32
	openErrLen = headerLen + 1
	sessionLen = 16
	authMin    = headerLen + 16 + sessionLen + macLen // msgAuth without a name
	authOKLen  = headerLen + 16 + sessionLen + macLen
	accLen     = headerLen + fallback.RequestHeaderSize // msgAcc before its data
	lockLen    = headerLen + 8
	errLen     = headerLen + 1

	// maxAccData is the most data a msgAcc carries, maxFetchData the most
	// old data a reply carries: the server sends replies inline, and every
	// QP it accepts takes maxReply inline bytes.
	maxAccData   = recvSize - accLen
	maxFetchData = 192
)

// Flags of msgOpenOK: flagAtomics, and the Access granted shifted by
// accessShift.
const (
	flagAtomics = 1
	accessShift = 1
)

// MaxClientNameLen is the longest ClientConfig.Name, in bytes.
const MaxClientNameLen = 64

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

// proof computes HMAC-SHA256(secret, label || a || b || extra) into out.
func proof(out []byte, secret []byte, label string, a, b *[nonceLen]byte, extra []byte) {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	m.Write(a[:])
	m.Write(b[:])
	m.Write(extra)
	m.Sum(out[:0])
}

// session names a client's session at the server (msgAuth, msgAuthOK).
type session [sessionLen]byte

// flagResumed, in msgAuthOK: the session the client named was resumed.
const flagResumed = 1

// authOK is a decoded msgAuthOK.
type authOK struct {
	addr    uint64 // the byte-order word
	rkey    uint32
	resumed bool
	session session
}

// putAuthOK writes a msgAuthOK into b (at least authOKLen bytes).
func putAuthOK(b []byte, seq uint32, secret []byte, cNonce, sNonce *[nonceLen]byte, r authOK) {
	putHeader(b, msgAuthOK, seq)
	binary.LittleEndian.PutUint64(b[8:], r.addr)
	binary.LittleEndian.PutUint32(b[16:], r.rkey)
	clear(b[20:24])
	if r.resumed {
		b[20] = flagResumed
	}
	copy(b[24:40], r.session[:])
	proof(b[40:authOKLen], secret, serverLabel, cNonce, sNonce, b[headerLen:40])
}

// parseAuthOK checks msg, a msgAuthOK, against secret and decodes it.
func parseAuthOK(msg []byte, secret []byte, cNonce, sNonce *[nonceLen]byte) (r authOK, ok bool) {
	if len(msg) != authOKLen {
		return r, false
	}
	var want [macLen]byte
	proof(want[:], secret, serverLabel, cNonce, sNonce, msg[headerLen:40])
	if !hmac.Equal(msg[40:], want[:]) || msg[20]&^flagResumed != 0 || msg[21]|msg[22]|msg[23] != 0 {
		return r, false
	}
	r = authOK{addr: binary.LittleEndian.Uint64(msg[8:]), rkey: binary.LittleEndian.Uint32(msg[16:]),
		resumed: msg[20]&flagResumed != 0}
	copy(r.session[:], msg[24:40])
	return r, true
}

// auth is a decoded msgAuth.
type auth struct {
	probeAddr uint64
	probeRKey uint32
	resume    session // zero: a new session
	name      string
	body, mac []byte // what the MAC covers, and the MAC (subslices of the message)
}

// putAuth writes a msgAuth into b (at least authMin+MaxClientNameLen
// bytes) and returns its length.
func putAuth(b []byte, seq uint32, secret []byte, sNonce, cNonce *[nonceLen]byte, probeAddr uint64, probeRKey uint32, resume *session, name string) int {
	putHeader(b, msgAuth, seq)
	binary.LittleEndian.PutUint64(b[8:], probeAddr)
	binary.LittleEndian.PutUint32(b[16:], probeRKey)
	b[20], b[21], b[22], b[23] = byte(len(name)), 0, 0, 0
	copy(b[24:40], resume[:])
	n := 40 + copy(b[40:], name)
	proof(b[n:n+macLen], secret, clientLabel, sNonce, cNonce, b[headerLen:n])
	return n + macLen
}

// parseAuth decodes a msgAuth; its MAC is checked apart (checkAuth).
func parseAuth(b []byte) (auth, bool) {
	if len(b) < authMin || b[0] != msgAuth || b[21] != 0 || b[22] != 0 || b[23] != 0 {
		return auth{}, false
	}
	n := int(b[20])
	if n > MaxClientNameLen || len(b) != authMin+n {
		return auth{}, false
	}
	end := len(b) - macLen
	a := auth{probeAddr: binary.LittleEndian.Uint64(b[8:]), probeRKey: binary.LittleEndian.Uint32(b[16:]),
		name: string(b[40:end]), body: b[headerLen:end], mac: b[end:]}
	copy(a.resume[:], b[24:40])
	return a, true
}

// checkAuth reports whether a's MAC proves secret.
func checkAuth(a *auth, secret []byte, sNonce, cNonce *[nonceLen]byte) bool {
	var want [macLen]byte
	proof(want[:], secret, clientLabel, sNonce, cNonce, a.body)
	return hmac.Equal(a.mac, want[:])
}

const (
	clientLabel = "rma-service-client"
	serverLabel = "rma-service-server"
)

// openOK is a decoded msgOpenOK.
type openOK struct {
	addr  uint64
	rkey  uint32
	id    uint32
	size  uint64
	flags uint8
}

func putOpenOK(b []byte, seq uint32, r openOK) int {
	putHeader(b, msgOpenOK, seq)
	binary.LittleEndian.PutUint64(b[8:], r.addr)
	binary.LittleEndian.PutUint32(b[16:], r.rkey)
	binary.LittleEndian.PutUint32(b[20:], r.id)
	binary.LittleEndian.PutUint64(b[24:], r.size)
	binary.LittleEndian.PutUint64(b[32:], uint64(r.flags))
	return openOKLen
}

func parseOpenOK(b []byte) (openOK, error) {
	if len(b) != openOKLen {
		return openOK{}, fmt.Errorf("%w: open reply of %d bytes", ErrProtocol, len(b))
	}
	r := openOK{addr: binary.LittleEndian.Uint64(b[8:]), rkey: binary.LittleEndian.Uint32(b[16:]),
		id: binary.LittleEndian.Uint32(b[20:]), size: binary.LittleEndian.Uint64(b[24:]), flags: b[32]}
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

// putLock writes a msgLock or msgUnlock into b; it returns its length.
func putLock(b []byte, typ byte, seq uint32, win uint32, lt byte) int {
	putHeader(b, typ, seq)
	binary.LittleEndian.PutUint32(b[8:], win)
	b[12], b[13], b[14], b[15] = lt, 0, 0, 0
	return lockLen
}

// parseLock decodes a msgLock (lt is lockShared or lockExclusive) or a
// msgUnlock (lt is 0).
func parseLock(b []byte) (win uint32, lt byte, ok bool) {
	if len(b) != lockLen || b[13] != 0 || b[14] != 0 || b[15] != 0 {
		return 0, 0, false
	}
	win, lt = binary.LittleEndian.Uint32(b[8:]), b[12]
	switch {
	case b[0] == msgLock && (lt == lockShared || lt == lockExclusive):
	case b[0] == msgUnlock && lt == 0:
	default:
		return 0, 0, false
	}
	return win, lt, true
}
