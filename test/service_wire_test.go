//go:build integration

package test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/onesided/rma/verbs"
)

// svcWire is a client of the service's wire protocol (version 4, see
// service/proto.go) on raw verbs, as an attacker or a client of another
// implementation would write it: it connects, and may prove a secret,
// open windows, send messages and post RDMA operations with any address
// and key. Its memory (4 KiB, readable remotely for the server's probes):
// results at 0, sends at 1024, 8 receive buffers of 256 bytes at 2048.
type svcWire struct {
	c              cmCloser
	id             *verbs.CMID
	s              *cmSide
	qp             *verbs.QP
	cNonce, sNonce []byte
	seq            byte
	// The server's byte-order word for this connection (msgAuthOK).
	orderAddr uint64
	orderRKey uint32
}

// dialWire connects to addr with the protocol's hello; it proves nothing.
func dialWire(ctx context.Context, addr string) (w *svcWire, err error) {
	w = &svcWire{}
	defer func() {
		if err != nil {
			w.close()
			w = nil
		}
	}()
	dst, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, err
	}
	if w.id, w.s, w.qp, err = cmRawClient(ctx, &w.c, dst, verbs.AccessRemoteRead); err != nil {
		return nil, err
	}
	// A READ to a server that dropped the connection fails after 7 ACK
	// timeouts of 16 ms, not of the default 67 ms.
	if err := w.id.SetAckTimeout(12); err != nil {
		return nil, err
	}
	for i := 0; i < 8; i++ {
		if err := w.qp.PostRecv(uint64(100+i), w.s.mr.Local(2048+i*256, 256)); err != nil {
			return nil, err
		}
	}
	w.cNonce = make([]byte, 32)
	rand.Read(w.cNonce)
	ev, err := w.id.Connect(ctx, verbs.ConnParam{PrivateData: append([]byte("RMAS\x05\x00\x00\x00"), w.cNonce...)})
	if err != nil {
		return nil, err
	}
	if len(ev.PrivateData) < 40 || string(ev.PrivateData[:5]) != "RMAS\x05" {
		return nil, fmt.Errorf("accept private data %q", ev.PrivateData)
	}
	w.sNonce = bytes.Clone(ev.PrivateData[8:40])
	return w, nil
}

func (w *svcWire) close() error {
	var err error
	if w.id != nil {
		w.id.Disconnect()
	}
	w.c.close(&err)
	return err
}

// call sends a message of type t and returns the reply.
func (w *svcWire) call(ctx context.Context, t byte, body []byte) ([]byte, error) {
	w.seq++
	m := append([]byte{t, 0, 0, 0, w.seq, 0, 0, 0}, body...)
	copy(w.s.mem[1024:], m)
	if err := w.qp.PostSend(1, w.s.mr.Local(1024, len(m)), 0); err != nil {
		return nil, err
	}
	for {
		wc, err := w.s.poll(ctx)
		if err == nil {
			err = wc.Err()
		}
		if err != nil {
			return nil, err
		}
		if wc.Opcode == verbs.WCRecv {
			off := 2048 + int(wc.WRID-100)*256
			r := bytes.Clone(w.s.mem[off : off+int(wc.ByteLen)])
			if err := w.qp.PostRecv(wc.WRID, w.s.mr.Local(off, 256)); err != nil {
				return nil, err
			}
			if len(r) < 8 || r[4] != w.seq {
				return nil, fmt.Errorf("reply % x to message %d", r, w.seq)
			}
			return r, nil
		}
	}
}

// auth proves secret under name, offering the first 8 bytes of its
// memory to the server's probes, and checks the server's proof.
func (w *svcWire) auth(ctx context.Context, secret, name string) error {
	body := binary.LittleEndian.AppendUint64(nil, w.s.mr.Addr())
	body = binary.LittleEndian.AppendUint32(body, w.s.mr.RKey())
	body = append(body, byte(len(name)), 0, 0, 0)
	body = append(body, make([]byte, 16)...) // a new session
	body = append(body, name...)
	r, err := w.call(ctx, 1, append(body, wireMAC(secret, "rma-service-client", w.sNonce, w.cNonce, body)...))
	if err != nil {
		return fmt.Errorf("authentication: %w", err)
	}
	if r[0] != 0x81 || len(r) != 72 || !hmac.Equal(r[40:], wireMAC(secret, "rma-service-server", w.cNonce, w.sNonce, r[8:40])) {
		return fmt.Errorf("authentication: reply % x", r)
	}
	w.orderAddr, w.orderRKey = binary.LittleEndian.Uint64(r[8:]), binary.LittleEndian.Uint32(r[16:])
	return nil
}

func wireMAC(secret, label string, a, b, extra []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(label))
	m.Write(a)
	m.Write(b)
	m.Write(extra)
	return m.Sum(nil)
}

// wireWindow is what a msgOpenOK says.
type wireWindow struct {
	addr   uint64
	rkey   uint32
	id     uint32
	size   uint64
	access byte // bits: read 1, write 2, atomic 4
}

var errOpenRefused = errors.New("open refused")

// open opens a window; a refusal is errOpenRefused with its reason.
func (w *svcWire) open(ctx context.Context, name string) (wireWindow, error) {
	r, err := w.call(ctx, 2, append([]byte{byte(len(name))}, name...))
	if err != nil {
		return wireWindow{}, err
	}
	if r[0] == 0x84 && len(r) == 9 {
		return wireWindow{}, fmt.Errorf("%w: reason %d", errOpenRefused, r[8])
	}
	if r[0] != 0x83 || len(r) != 40 {
		return wireWindow{}, fmt.Errorf("open: reply % x", r)
	}
	return wireWindow{addr: binary.LittleEndian.Uint64(r[8:]), rkey: binary.LittleEndian.Uint32(r[16:]),
		id: binary.LittleEndian.Uint32(r[20:]), size: binary.LittleEndian.Uint64(r[24:]), access: r[32] >> 1}, nil
}

// The RDMA operations rdma posts.
const (
	rdmaRead = iota
	rdmaWrite
	rdmaFetchAdd
	rdmaCompareSwap
)

var rdmaNames = [...]string{"READ", "WRITE", "FETCH_ADD", "CMP_SWAP"}

// rdma posts one 8-byte operation at raddr with rkey (a WRITE writes
// 0x5a5a..., a FETCH_ADD adds 1, a CMP_SWAP swaps 0 for 7777777) and
// returns the completion's error; the old value or the data read is at
// offset 0 of its memory.
func (w *svcWire) rdma(ctx context.Context, kind int, raddr uint64, rkey uint32) error {
	l := w.s.mr.Local(0, 8)
	var err error
	switch kind {
	case rdmaRead:
		err = w.qp.PostRead(9, l, raddr, rkey, verbs.SendSignaled)
	case rdmaWrite:
		binary.NativeEndian.PutUint64(w.s.mem, 0x5a5a5a5a5a5a5a5a)
		err = w.qp.PostWrite(9, l, raddr, rkey, verbs.SendSignaled)
	case rdmaFetchAdd:
		err = w.qp.PostFetchAdd(9, l, raddr, rkey, 1, verbs.SendSignaled)
	case rdmaCompareSwap:
		err = w.qp.PostCompareSwap(9, l, raddr, rkey, 0, 7777777, verbs.SendSignaled)
	}
	if err != nil {
		return err
	}
	for {
		wc, err := w.s.poll(ctx)
		if err != nil {
			return err
		}
		if wc.WRID == 9 {
			return wc.Err()
		}
	}
}
