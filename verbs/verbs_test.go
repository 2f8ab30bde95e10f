package verbs

import (
	"errors"
	"testing"
)

func TestEndpointRoundTrip(t *testing.T) {
	e := Endpoint{QPN: 0x123456, PSN: 0xabcdef, LID: 0x1234, GID: GID{0: 0xfe, 15: 1}, MTU: MTU2048}
	b := e.AppendBinary(nil)
	if len(b) != EndpointSize {
		t.Fatalf("encoded %d bytes, want %d", len(b), EndpointSize)
	}
	got, err := DecodeEndpoint(b)
	if err != nil || got != e {
		t.Fatalf("decode = %+v, %v; want %+v", got, err, e)
	}
	if _, err := DecodeEndpoint(b[:EndpointSize-1]); !errors.Is(err, ErrInvalid) {
		t.Fatalf("short endpoint: %v", err)
	}
	b[EndpointSize-1] = 6 // no such MTU
	if _, err := DecodeEndpoint(b); !errors.Is(err, ErrInvalid) {
		t.Fatalf("MTU code 6: %v", err)
	}
	b[EndpointSize-1] = byte(MTU1024)
	b[0] = 0xff // QPN beyond 24 bits
	if _, err := DecodeEndpoint(b); !errors.Is(err, ErrInvalid) {
		t.Fatalf("QPN beyond 24 bits: %v", err)
	}
}

// The path MTU of a QP is the smaller of its two ends' (an end that says
// nothing sets no limit).
func TestPathMTU(t *testing.T) {
	for _, c := range []struct{ local, remote, want MTU }{
		{MTU4096, MTU1024, MTU1024},
		{MTU1024, MTU4096, MTU1024},
		{MTU2048, MTU2048, MTU2048},
		{MTU4096, 0, MTU4096},
	} {
		p := Path{MTU: c.local}
		if got := p.To(Endpoint{MTU: c.remote}).MTU; got != c.want {
			t.Errorf("local %v, remote %v: path MTU %v, want %v", c.local, c.remote, got, c.want)
		}
	}
}

func FuzzDecodeEndpoint(f *testing.F) {
	f.Add(Endpoint{QPN: 17, PSN: 3}.AppendBinary(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeEndpoint(b)
		if err != nil {
			return
		}
		if again := e.AppendBinary(nil); string(again) != string(b) {
			t.Fatalf("re-encoding %x gives %x", b, again)
		}
	})
}

func TestDefaultGIDIndex(t *testing.T) {
	v4 := GID{10: 0xff, 11: 0xff, 12: 10, 13: 99, 14: 0, 15: 1}
	link := GID{0: 0xfe, 1: 0x80, 15: 7}
	table := []GIDEntry{
		{Index: 0, GID: link, Type: GIDTypeRoCEv2},
		{Index: 1, GID: v4, Type: GIDTypeRoCEv2},
		{Index: 2, GID: v4, Type: GIDTypeRoCEv1},
	}
	if i, err := DefaultGIDIndex(table); err != nil || i != 1 {
		t.Fatalf("got %d, %v; want the RoCE v2 IPv4 GID at 1", i, err)
	}
	if i, err := DefaultGIDIndex(table[:1]); err != nil || i != 0 {
		t.Fatalf("got %d, %v; want 0", i, err)
	}
	if _, err := DefaultGIDIndex([]GIDEntry{{Index: 0}}); !errors.Is(err, ErrNoDevice) {
		t.Fatalf("empty table: %v", err)
	}
	if got := v4.String(); got != "10.99.0.1" {
		t.Fatalf("GID string %q", got)
	}
}

func TestCompletionErrorClasses(t *testing.T) {
	cases := map[WCStatus]error{
		WCRemAccessErr:   ErrRemoteAccess,
		WCRetryExcErr:    ErrPeerLost,
		WCRNRRetryExcErr: ErrPeerLost,
		WCWRFlushErr:     ErrFlushed,
		WCRemInvReqErr:   ErrRemoteOp,
		WCLocProtErr:     ErrLocal,
	}
	for st, want := range cases {
		wc := WC{Status: st}
		err := wc.Err()
		if !errors.Is(err, want) {
			t.Errorf("status %v: %v does not match %v", st, err, want)
		}
		var ce *CompletionError
		if !errors.As(err, &ce) || ce.Status != st {
			t.Errorf("status %v: not a *CompletionError carrying it", st)
		}
	}
	if (&WC{}).Err() != nil {
		t.Error("success reported as an error")
	}
}

func TestMTU(t *testing.T) {
	for _, n := range []int{256, 512, 1024, 2048, 4096} {
		if got := MTUFromBytes(n).Bytes(); got != n {
			t.Errorf("MTU %d round trip gives %d", n, got)
		}
	}
	if MTUFromBytes(1500) != 0 {
		t.Error("1500 is not an IB MTU")
	}
}

func TestAlloc(t *testing.T) {
	b, err := Alloc(10000)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		if b[i] != 0 {
			t.Fatal("memory not zeroed")
		}
		b[i] = byte(i)
	}
	if err := Free(b); err != nil {
		t.Fatal(err)
	}
	if _, err := Alloc(0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Alloc(0): %v", err)
	}
}
