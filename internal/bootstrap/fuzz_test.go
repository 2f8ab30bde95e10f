package bootstrap

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"
)

// frameBytes builds a frame by hand.
func frameBytes(typ byte, p []byte) []byte {
	b := []byte{frameMagic, frameVersion, typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[3:], uint32(len(p)))
	return append(b, p...)
}

func FuzzReadFrame(f *testing.F) {
	f.Add(frameBytes(msgHello, make([]byte, helloLen)), uint16(helloLen))
	f.Add(frameBytes(msgResult, []byte("abc")), uint16(2))
	f.Add([]byte{frameMagic, frameVersion, 1, 0xff, 0xff, 0xff, 0xff}, uint16(100))
	f.Add([]byte{0, 0, 0}, uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, limit uint16) {
		typ, p, err := readFrame(bytes.NewReader(data), int(limit))
		if err != nil {
			return
		}
		if cap(p) > int(limit) {
			t.Fatalf("allocated %d bytes with limit %d", cap(p), limit)
		}
		if want := frameBytes(typ, p); !bytes.Equal(data[:len(want)], want) {
			t.Fatalf("decoded frame does not re-encode to its input")
		}
	})
}

func FuzzDecodeHello(f *testing.F) {
	f.Add(hello{size: 4, rank: 3}.encode())
	f.Add([]byte{1, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHello(b)
		if err == nil && !bytes.Equal(h.encode(), b) {
			t.Fatal("hello does not round-trip")
		}
	})
}

func FuzzDecodeCollective(f *testing.F) {
	body := encodeList([][]byte{[]byte("a"), nil, []byte("ccc")})
	f.Add(append(collHeader{op: opAllGather, seq: 7}.encode(), body...), uint8(3))
	f.Add([]byte{opBarrier, 0, 0}, uint8(1))
	f.Add(append(collHeader{op: opAllGather, seq: 1}.encode(), 0xff, 0xff, 0xff, 0xff), uint8(2))
	f.Fuzz(func(t *testing.T, b []byte, n uint8) {
		h, body, err := decodeColl(b)
		if err != nil {
			return
		}
		if !bytes.Equal(append(h.encode(), body...), b) {
			t.Fatal("collective header does not round-trip")
		}
		parts, err := decodeList(body, int(n))
		if err != nil {
			return
		}
		if !bytes.Equal(encodeList(parts), body) {
			t.Fatal("list does not round-trip")
		}
		for _, p := range parts {
			if cap(p) != len(p) {
				t.Fatal("list entry has spare capacity")
			}
		}
	})
}

func FuzzDecodeAbort(f *testing.F) {
	f.Add(encodeAbort(codeProtocol, "rank 1 called Barrier"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		code, reason, err := decodeAbort(b)
		if err == nil && !bytes.Equal(encodeAbort(code, reason), b) {
			t.Fatal("abort does not round-trip")
		}
		codeErr(code)
	})
}

type fakeConn struct {
	io.Reader
	io.Writer
}

// FuzzHandshakeRank0 feeds rank 0's side of the handshake arbitrary
// bytes: it must never panic, and never admit anyone (no MAC can be
// forged against a fresh nonce).
func FuzzHandshakeRank0(f *testing.F) {
	f.Add(append(frameBytes(msgHello, hello{size: 2, rank: 1}.encode()), frameBytes(msgProof, make([]byte, proofLen))...))
	f.Add(frameBytes(msgHello, make([]byte, helloLen)))
	f.Add(frameBytes(msgHello, nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		l := &Listener{cfg: Config{Rank: 0, Size: 2, Secret: testSecret}, taken: make([]bool, 2)}
		if rank, err := l.handshake(fakeConn{bytes.NewReader(data), io.Discard}); err == nil {
			t.Fatalf("admitted rank %d from fuzz input", rank)
		}
	})
}

// FuzzHandshakeJoiner feeds a joiner's side arbitrary bytes from "rank 0".
func FuzzHandshakeJoiner(f *testing.F) {
	ch := frameBytes(msgChallenge, make([]byte, challengeLen))
	f.Add(append(ch, frameBytes(msgAccept, make([]byte, acceptLen))...))
	f.Add(append(ch, frameBytes(msgRefuse, []byte{codeAuth})...))
	f.Add(append(ch, frameBytes(msgRefuse, []byte{200})...))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := Config{Rank: 1, Size: 2, Secret: testSecret}
		if err := joinHandshake(fakeConn{bytes.NewReader(data), io.Discard}, cfg); err == nil {
			t.Fatal("joiner accepted a forged rank 0")
		}
	})
}
