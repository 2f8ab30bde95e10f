package service

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/fallback"
	"github.com/onesided/rma/op"
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
	var p1, p2, p3, p4, p5 [macLen]byte
	proof(p1[:], []byte("secret"), clientLabel, &a, &b, nil)
	proof(p2[:], []byte("secret"), clientLabel, &a, &b, nil)
	proof(p3[:], []byte("Secret"), clientLabel, &a, &b, nil)
	proof(p4[:], []byte("secret"), serverLabel, &a, &b, nil)
	proof(p5[:], []byte("secret"), clientLabel, &a, &b, []byte{0})
	if p1 != p2 || p1 == p3 || p1 == p4 || p1 == p5 {
		t.Fatalf("proofs: same inputs equal %v, other secret differs %v, other label differs %v, other extra differs %v",
			p1 == p2, p1 != p3, p1 != p4, p1 != p5)
	}
}

// TestAuthMessage: a msgAuth decodes to what was put, its MAC proves the
// secret it was made with and no other, and any byte changed on the wire
// (name, probe key, nonce) breaks the proof or the decoding.
func TestAuthMessage(t *testing.T) {
	var sn, cn [nonceLen]byte
	sn[0], cn[0] = 7, 9
	secret := []byte("the secret")
	for _, name := range []string{"", "reader", string(bytes.Repeat([]byte("n"), MaxClientNameLen))} {
		var b [recvSize]byte
		n := putAuth(b[:], 3, secret, &sn, &cn, 0x1234_5678_9000, 0xabcdef01, &session{5: 1}, name)
		if n != authMin+len(name) || n > recvSize {
			t.Fatalf("name %q: auth of %d bytes, want %d", name, n, authMin+len(name))
		}
		a, ok := parseAuth(b[:n])
		if !ok || a.name != name || a.probeAddr != 0x1234_5678_9000 || a.probeRKey != 0xabcdef01 || a.resume != (session{5: 1}) {
			t.Fatalf("name %q: parseAuth %+v %v", name, a, ok)
		}
		if !checkAuth(&a, secret, &sn, &cn) {
			t.Fatalf("name %q: proof refused", name)
		}
		if checkAuth(&a, []byte("other"), &sn, &cn) || checkAuth(&a, secret, &cn, &sn) {
			t.Fatalf("name %q: proof taken with another secret or swapped nonces", name)
		}
		for i := headerLen; i < n; i++ {
			m := bytes.Clone(b[:n])
			m[i] ^= 0x10
			if a, ok := parseAuth(m); ok && checkAuth(&a, secret, &sn, &cn) {
				t.Fatalf("name %q: byte %d changed, proof still taken", name, i)
			}
		}
		if _, ok := parseAuth(b[:n-1]); ok {
			t.Fatalf("name %q: truncated auth decoded", name)
		}
	}
}

// TestAuthOKMessage: the server's proof covers the byte-order word's
// address and key, the session and its flag, so a changed byte anywhere
// after the header is refused.
func TestAuthOKMessage(t *testing.T) {
	var sn, cn [nonceLen]byte
	sn[0], cn[0] = 7, 9
	secret := []byte("the secret")
	var b [authOKLen]byte
	in := authOK{addr: 0x1234_5678_9000, rkey: 0xabcdef01, resumed: true, session: session{0: 3, 15: 4}}
	putAuthOK(b[:], 3, secret, &cn, &sn, in)
	if typ, seq, ok := header(b[:]); !ok || typ != msgAuthOK || seq != 3 {
		t.Fatalf("header: %#x %d %v", typ, seq, ok)
	}
	if r, ok := parseAuthOK(b[:], secret, &cn, &sn); !ok || r != in {
		t.Fatalf("parseAuthOK: %+v %v, want %+v", r, ok, in)
	}
	if _, ok := parseAuthOK(b[:], []byte("other"), &cn, &sn); ok {
		t.Fatal("proof taken with another secret")
	}
	if _, ok := parseAuthOK(b[:], secret, &sn, &cn); ok {
		t.Fatal("proof taken with the nonces swapped")
	}
	for i := headerLen; i < authOKLen; i++ {
		m := bytes.Clone(b[:])
		m[i] ^= 0x10
		if _, ok := parseAuthOK(m, secret, &cn, &sn); ok {
			t.Fatalf("byte %d changed, proof still taken", i)
		}
	}
	if _, ok := parseAuthOK(b[:authOKLen-1], secret, &cn, &sn); ok {
		t.Fatal("truncated msgAuthOK taken")
	}
}

func TestAccessString(t *testing.T) {
	for a, want := range map[Access]string{0: "none", AccessRead: "read", AccessAll: "read|write|atomic",
		AccessWrite | AccessAtomic: "write|atomic", AccessRead | 0x10: "read|0x10"} {
		if got := a.String(); got != want {
			t.Errorf("Access(%#x).String() = %q, want %q", uint8(a), got, want)
		}
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
	n = putOpenOK(b[:], 9, openOK{addr: 0x1000, rkey: 0xabcd, id: 3, size: 4096, flags: flagAtomics})
	r, err := parseOpenOK(b[:n])
	if err != nil || r != (openOK{addr: 0x1000, rkey: 0xabcd, id: 3, size: 4096, flags: flagAtomics}) {
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
	var n [nonceLen]byte
	f.Add(b[:putAuth(b[:], 1, []byte("s"), &n, &n, 8, 1, &session{}, "client")])
	f.Fuzz(func(t *testing.T, m []byte) {
		if a, ok := parseAuth(m); ok {
			checkAuth(&a, []byte("s"), &n, &n)
		}
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

// TestAccSizes checks the budget of the accumulate messages: a msgAcc of
// maxAccData bytes fits a receive buffer, and every reply the engine can
// give (the old values of maxFetchData bytes, a refusal with the longest
// reason, cut to the buffer) fits maxReply, which the server sends inline.
func TestAccSizes(t *testing.T) {
	for _, dt := range []datatype.Basic{datatype.Int8, datatype.Float64, datatype.Complex128} {
		n := maxAccData / dt.Size()
		req := fallback.Request{Kind: fallback.KindAccumulate, Op: op.Sum, Window: 1, Tag: 2, Type: dt.Type(), Count: n, Data: make([]byte, n*dt.Size())}
		msg, err := fallback.AppendRequest(make([]byte, headerLen, recvSize), &req)
		if err != nil || len(msg) > recvSize || cap(msg) != recvSize {
			t.Errorf("%v: msgAcc of %d elements: %d bytes (buffers %d), %v", dt, n, len(msg), recvSize, err)
		}
		n = maxFetchData / dt.Size()
		req.Kind, req.Count, req.Data = fallback.KindGetAccumulate, n, req.Data[:n*dt.Size()]
		if l := headerLen + req.ReplyLen(); l > maxReply {
			t.Errorf("%v: the reply to a fetch of %d elements is %d bytes, more than %d", dt, n, l, maxReply)
		}
	}
	// A refusal with a reason longer than the buffer is cut to it.
	tg := fallback.NewTarget()
	req := fallback.Request{Kind: fallback.KindAccumulate, Op: op.FirstUser + 100, Window: 9, Type: datatype.Float64.Type(), Count: 1, Data: make([]byte, 8)}
	msg, _ := fallback.AppendRequest(nil, &req)
	var reply [maxReply]byte
	out := tg.Handle(msg, reply[headerLen:headerLen:maxReply])
	var r fallback.Reply
	if err := fallback.DecodeReply(out, &r); err != nil || r.Err() == nil || headerLen+len(out) > maxReply {
		t.Errorf("refusal: %d bytes, %v, %v", len(out), err, r.Err())
	}
}

func TestLockMessages(t *testing.T) {
	var b [lockLen]byte
	n := putLock(b[:], msgLock, 4, 77, lockExclusive)
	if w, lt, ok := parseLock(b[:n]); !ok || w != 77 || lt != lockExclusive {
		t.Fatalf("lock: %d %d %v", w, lt, ok)
	}
	n = putLock(b[:], msgUnlock, 4, 77, 0)
	if w, lt, ok := parseLock(b[:n]); !ok || w != 77 || lt != 0 {
		t.Fatalf("unlock: %d %d %v", w, lt, ok)
	}
	for _, bad := range [][]byte{
		b[:putLock(b[:], msgLock, 1, 1, 3)],
		b[:putLock(b[:], msgUnlock, 1, 1, lockShared)],
		b[:putLock(b[:], msgAcc, 1, 1, lockShared)],
		b[:lockLen-1],
	} {
		if _, _, ok := parseLock(bad); ok {
			t.Errorf("%x parsed", bad)
		}
	}
}
