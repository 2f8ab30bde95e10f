package service

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/onesided/rma/datatype"
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
		n := putAuth(b[:], 3, secret, &sn, &cn, 0x1234_5678_9000, 0xabcdef01, name)
		if n != authMin+len(name) || n > recvSize {
			t.Fatalf("name %q: auth of %d bytes, want %d", name, n, authMin+len(name))
		}
		a, ok := parseAuth(b[:n])
		if !ok || a.name != name || a.probeAddr != 0x1234_5678_9000 || a.probeRKey != 0xabcdef01 {
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
	f.Add(b[:putAuth(b[:], 1, []byte("s"), &n, &n, 8, 1, "client")])
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

// accMsg builds a msgAcc with data.
func accMsg(r accReq, data ...[]byte) []byte {
	b := make([]byte, accLen, recvSize)
	putAcc(b, 5, &r)
	for _, d := range data {
		b = append(b, d...)
	}
	return b
}

func f64s(v ...float64) []byte { return datatype.AsBytes(v) }

func TestEngineApply(t *testing.T) {
	mem := make([]byte, 64)
	copy(mem[8:], f64s(1.5, 2.5))
	var res [maxFetchData]byte

	// GetAccumulate SUM on two float64 at 8.
	m := accMsg(accReq{win: 3, kind: accFetch, op: op.Sum, dt: datatype.Float64, disp: 8, count: 2}, f64s(10, 20))
	r, ok := parseAcc(m)
	if !ok || r.win != 3 || r.count != 2 || r.disp != 8 {
		t.Fatalf("parseAcc: %+v %v", r, ok)
	}
	n, reason := engineApply(mem, &r, res[:])
	if reason != 0 || n != 16 || !bytes.Equal(res[:16], f64s(1.5, 2.5)) || !bytes.Equal(mem[8:24], f64s(11.5, 22.5)) {
		t.Fatalf("GetAccumulate SUM: n=%d reason=%d old=%v window=%v", n, reason, res[:16], mem[8:24])
	}
	// NO_OP reads without data.
	r, ok = parseAcc(accMsg(accReq{kind: accFetch, op: op.NoOp, dt: datatype.Float64, disp: 8, count: 1}))
	if n, reason = engineApply(mem, &r, res[:]); !ok || reason != 0 || n != 8 || !bytes.Equal(res[:8], f64s(11.5)) {
		t.Fatalf("NO_OP: ok=%v n=%d reason=%d", ok, n, reason)
	}
	// Compare-and-swap on an int32: a match swaps, a mismatch does not.
	i32 := func(v int32) []byte { return datatype.AsBytes([]int32{v}) }
	copy(mem[40:], i32(7))
	r, ok = parseAcc(accMsg(accReq{kind: accCAS, dt: datatype.Int32, disp: 40, count: 1}, i32(7), i32(9)))
	if n, reason = engineApply(mem, &r, res[:]); !ok || reason != 0 || n != 4 || !bytes.Equal(res[:4], i32(7)) || !bytes.Equal(mem[40:44], i32(9)) {
		t.Fatalf("CAS match: ok=%v n=%d reason=%d old=%v now=%v", ok, n, reason, res[:4], mem[40:44])
	}
	r, _ = parseAcc(accMsg(accReq{kind: accCAS, dt: datatype.Int32, disp: 40, count: 1}, i32(7), i32(1)))
	if _, reason = engineApply(mem, &r, res[:]); reason != 0 || !bytes.Equal(mem[40:44], i32(9)) {
		t.Fatalf("CAS mismatch: reason=%d now=%v", reason, mem[40:44])
	}
	// Refusals leave the window as it was.
	before := bytes.Clone(mem)
	for _, tc := range []struct {
		name string
		r    accReq
		data []byte
		want byte
	}{
		{"beyond the end", accReq{kind: accPlain, op: op.Sum, dt: datatype.Float64, disp: 64, count: 1}, f64s(1), errOutOfWindow},
		{"straddling the end", accReq{kind: accPlain, op: op.Sum, dt: datatype.Float64, disp: 60, count: 1}, f64s(1), errOutOfWindow},
		{"huge displacement", accReq{kind: accPlain, op: op.Sum, dt: datatype.Float64, disp: ^uint64(0) - 3, count: 1}, f64s(1), errOutOfWindow},
		{"BAND on float64", accReq{kind: accPlain, op: op.Band, dt: datatype.Float64, count: 1}, f64s(1), errOpDatatype},
		{"CAS on float64", accReq{kind: accCAS, dt: datatype.Float64, count: 1}, f64s(1, 2), errOpDatatype},
		{"an op nobody registered", accReq{kind: accPlain, op: op.FirstUser + 100, dt: datatype.Float64, count: 1}, f64s(1), errUnknownOp},
	} {
		r, ok := parseAcc(accMsg(tc.r, tc.data))
		if !ok {
			t.Errorf("%s: not parsed", tc.name)
			continue
		}
		if _, reason := engineApply(mem, &r, res[:]); reason != tc.want {
			t.Errorf("%s: reason %d, want %d", tc.name, reason, tc.want)
		}
		if !bytes.Equal(mem, before) {
			t.Fatalf("%s: the window changed", tc.name)
		}
	}
	// Malformed messages are not parsed.
	for _, tc := range []struct {
		name string
		m    []byte
	}{
		{"short", accMsg(accReq{kind: accPlain, op: op.Sum, dt: datatype.Float64, count: 1})[:accLen-1]},
		{"data missing", accMsg(accReq{kind: accPlain, op: op.Sum, dt: datatype.Float64, count: 2}, f64s(1))},
		{"data beyond count", accMsg(accReq{kind: accPlain, op: op.Sum, dt: datatype.Float64, count: 1}, f64s(1, 2))},
		{"zero count", accMsg(accReq{kind: accPlain, op: op.Sum, dt: datatype.Float64})},
		{"bad kind", accMsg(accReq{kind: 9, op: op.Sum, dt: datatype.Float64, count: 1}, f64s(1))},
		{"bad datatype", accMsg(accReq{kind: accPlain, op: op.Sum, dt: 0, count: 1}, f64s(1))},
		{"CAS of two", accMsg(accReq{kind: accCAS, dt: datatype.Int32, count: 2}, i32(1), i32(2), i32(3), i32(4))},
		{"fetch too long", accMsg(accReq{kind: accFetch, op: op.Sum, dt: datatype.Float64, count: maxFetchData/8 + 1}, make([]byte, maxFetchData+8))},
	} {
		if r, ok := parseAcc(tc.m); ok {
			t.Errorf("%s: parsed as %+v", tc.name, r)
		}
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

// FuzzEngine feeds arbitrary messages to the engine's decoder and applier
// on a small window: nothing may panic, a refused request must leave the
// window unchanged, and an accepted one must agree with op's kernels
// applied directly.
func FuzzEngine(f *testing.F) {
	f.Add(accMsg(accReq{kind: accFetch, op: op.Sum, dt: datatype.Float64, disp: 8, count: 2}, f64s(1, 2)))
	f.Add(accMsg(accReq{kind: accPlain, op: op.Max, dt: datatype.Int32, disp: 4, count: 1}, []byte{1, 2, 3, 4}))
	f.Add(accMsg(accReq{kind: accCAS, dt: datatype.Uint16, disp: 2, count: 1}, []byte{0, 0, 1, 1}))
	f.Add(accMsg(accReq{kind: accFetch, op: op.NoOp, dt: datatype.Int8, disp: 0, count: 3}))
	f.Fuzz(func(t *testing.T, m []byte) {
		mem := make([]byte, 128)
		for i := range mem {
			mem[i] = byte(i * 7)
		}
		before := bytes.Clone(mem)
		var res [maxFetchData]byte
		r, ok := parseAcc(m)
		if !ok {
			return
		}
		n, reason := engineApply(mem, &r, res[:])
		if reason != 0 {
			if !bytes.Equal(mem, before) {
				t.Fatalf("refused %+v (reason %d) but the window changed", r, reason)
			}
			return
		}
		size := int(r.count) * r.dt.Size()
		want := bytes.Clone(before)
		tgt := want[r.disp : r.disp+uint64(size)]
		switch r.kind {
		case accCAS:
			if string(tgt) == string(r.data[:size]) {
				copy(tgt, r.data[size:])
			}
		default:
			if err := op.Apply(r.op, r.dt, tgt, r.data); err != nil {
				t.Fatalf("%+v accepted by the engine, refused by op.Apply: %v", r, err)
			}
		}
		if !bytes.Equal(mem, want) {
			t.Fatalf("%+v: window %x, want %x", r, mem, want)
		}
		if r.kind != accPlain && (n != size || !bytes.Equal(res[:n], before[r.disp:r.disp+uint64(size)])) {
			t.Fatalf("%+v: old data %x (%d bytes), want %x", r, res[:n], n, before[r.disp:r.disp+uint64(size)])
		}
		if r.kind == accPlain && n != 0 {
			t.Fatalf("%+v: accumulate returned %d bytes", r, n)
		}
	})
}
