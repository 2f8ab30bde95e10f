package service

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/onesided/rma/verbs"
)

func TestHello(t *testing.T) {
	var n [nonceLen]byte
	for i := range n {
		n[i] = byte(i + 1)
	}
	b := appendHello(nil, &n)
	if len(b) != helloLen || len(b) > verbs.MaxConnectPrivateData {
		t.Fatalf("hello of %d bytes", len(b))
	}
	got, err := parseHello(append(b, make([]byte, 16)...)) // padded by the CM
	if err != nil || got != n {
		t.Fatalf("parseHello: %x, %v", got, err)
	}
	bad := bytes.Clone(b)
	bad[4] = protoVersion + 1
	if _, err := parseHello(bad); !errors.Is(err, ErrProtocol) {
		t.Fatalf("other version: %v, want ErrProtocol", err)
	}
	if _, err := parseHello(b[:helloLen-1]); !errors.Is(err, ErrProtocol) {
		t.Fatalf("short hello: %v, want ErrProtocol", err)
	}
	if r := parseReject(append(rejectData(rejectFull), 0, 0)); r != rejectFull {
		t.Fatalf("reject reason %d, want %d", r, rejectFull)
	}
	if r := parseReject([]byte("not ours")); r != 0 {
		t.Fatalf("foreign reject reason %d, want 0", r)
	}
}

func TestProofs(t *testing.T) {
	var a, b [nonceLen]byte
	a[0], b[0] = 1, 2
	var p1, p2, p3, p4 [macLen]byte
	proof(p1[:], []byte("secret"), clientLabel, &a, &b)
	proof(p2[:], []byte("secret"), clientLabel, &a, &b)
	proof(p3[:], []byte("Secret"), clientLabel, &a, &b)
	proof(p4[:], []byte("secret"), serverLabel, &a, &b)
	if p1 != p2 || p1 == p3 || p1 == p4 {
		t.Fatalf("proofs: same inputs equal %v, other secret differs %v, other label differs %v", p1 == p2, p1 != p3, p1 != p4)
	}
}

func TestMessages(t *testing.T) {
	var b [recvSize]byte
	n := putOpen(b[:], 7, "alpha")
	typ, seq, ok := header(b[:n])
	name, nok := parseOpen(b[:n])
	if !ok || typ != msgOpen || seq != 7 || !nok || string(name) != "alpha" {
		t.Fatalf("open: %d %d %v %q %v", typ, seq, ok, name, nok)
	}
	if _, ok := parseOpen(b[:n-1]); ok {
		t.Fatal("truncated open accepted")
	}
	long := string(bytes.Repeat([]byte("x"), MaxNameLen))
	n = putOpen(b[:], 8, long)
	if n > recvSize {
		t.Fatalf("open of the longest name is %d bytes, buffers %d", n, recvSize)
	}
	if name, ok := parseOpen(b[:n]); !ok || string(name) != long {
		t.Fatal("longest name refused")
	}
	n = putOpenOK(b[:], 9, openOK{addr: 0x1000, rkey: 0xabcd, size: 4096})
	r, err := parseOpenOK(b[:n])
	if err != nil || r != (openOK{addr: 0x1000, rkey: 0xabcd, size: 4096}) {
		t.Fatalf("open reply: %+v %v", r, err)
	}
	putOpenOK(b[:], 9, openOK{addr: ^uint64(0) - 10, rkey: 1, size: 4096})
	if _, err := parseOpenOK(b[:n]); !errors.Is(err, ErrProtocol) {
		t.Fatalf("wrapping window: %v, want ErrProtocol", err)
	}
}

func FuzzParse(f *testing.F) {
	var b [recvSize]byte
	f.Add(b[:putOpen(b[:], 1, "w")])
	f.Add(b[:putOpenOK(b[:], 1, openOK{addr: 8, rkey: 1, size: 8})])
	f.Fuzz(func(t *testing.T, m []byte) {
		header(m)
		parseOpen(m)
		parseOpenOK(m)
		parseHello(m)
		parseReject(m)
	})
}

func TestConfig(t *testing.T) {
	ctx := context.Background()
	if _, err := Listen(ctx, "127.0.0.1:0", ServerConfig{}); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("Listen without a secret: %v, want ErrInvalid", err)
	}
	if _, err := Dial(ctx, "127.0.0.1:1", ClientConfig{}); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("Dial without a secret: %v, want ErrInvalid", err)
	}
	if _, err := Dial(ctx, "no-port", ClientConfig{Secret: []byte("s")}); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("Dial without a port: %v, want ErrInvalid", err)
	}
	if _, err := Listen(ctx, "0.0.0.0:0", ServerConfig{Secret: []byte("s")}); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("Listen on 0.0.0.0: %v, want ErrInvalid", err)
	}
	ap, err := resolve(ctx, "localhost:80")
	if err != nil || !ap.Addr().IsLoopback() || ap.Port() != 80 {
		t.Fatalf("resolve localhost:80: %v %v", ap, err)
	}
}
