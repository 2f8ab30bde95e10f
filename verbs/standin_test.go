//go:build linux && cgo && standin

package verbs

import (
	"encoding/binary"
	"errors"
	"testing"
)

// standInPair is two connected RC QPs on the stand-in NIC, one CQ for
// both, and a registered buffer of 4096 bytes.
type standInPair struct {
	dev  *Context
	pd   *PD
	cq   *CQ
	a, b *QP
	mem  []byte
	mr   *MR
}

func newStandInPair(t *testing.T) *standInPair {
	t.Helper()
	p := &standInPair{}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var err error
	p.dev, err = Open("")
	must(err)
	if p.dev.Name() != "standin0" {
		t.Fatalf("device %q, want standin0", p.dev.Name())
	}
	p.pd, err = p.dev.AllocPD()
	must(err)
	p.cq, err = p.dev.CreateCQ(64, nil)
	must(err)
	cfg := QPConfig{SendCQ: p.cq, RecvCQ: p.cq, MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}
	p.a, err = p.pd.CreateQP(cfg)
	must(err)
	p.b, err = p.pd.CreateQP(cfg)
	must(err)
	path := &Path{Port: 1, MTU: MTU4096, MaxRdAtomic: 16, Timeout: 14, RetryCount: 7, RNRRetry: 7,
		Access: AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic}
	ea := Endpoint{QPN: p.a.Num(), LID: 1, MTU: MTU4096}
	eb := Endpoint{QPN: p.b.Num(), LID: 1, MTU: MTU4096}
	must(p.a.Connect(path, ea, eb))
	must(p.b.Connect(path, eb, ea))
	p.mem, err = Alloc(4096)
	must(err)
	p.mr, err = p.pd.RegisterMR(p.mem, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic)
	must(err)
	t.Cleanup(func() {
		for _, err := range []error{p.mr.Close(), Free(p.mem), p.a.Close(), p.b.Close(), p.cq.Close(), p.pd.Close(), p.dev.Close()} {
			if err != nil {
				t.Error(err)
			}
		}
	})
	return p
}

// one polls the one completion a work request made.
func (p *standInPair) one(t *testing.T, want uint64) WC {
	t.Helper()
	var wcs [4]WC
	n, err := p.cq.Poll(wcs[:])
	if err != nil || n != 1 || wcs[0].WRID != want {
		t.Fatalf("poll: %d completions %+v, %v; want one of work request %d", n, wcs[:n], err, want)
	}
	return wcs[0]
}

// TestStandIn: the stand-in NIC moves bytes as a NIC would, completes
// at the post, and fails what a NIC fails.
func TestStandIn(t *testing.T) {
	p := newStandInPair(t)
	addr := p.mr.Addr()
	copy(p.mem[0:8], "abcdefgh")
	if err := p.a.PostWrite(1, p.mr.Local(0, 8), addr+100, p.mr.RKey(), SendSignaled); err != nil {
		t.Fatal(err)
	}
	if wc := p.one(t, 1); wc.Err() != nil || string(p.mem[100:108]) != "abcdefgh" {
		t.Fatalf("WRITE: %v, memory %q", wc.Err(), p.mem[100:108])
	}
	if err := p.a.PostRead(2, p.mr.Local(200, 8), addr+100, p.mr.RKey(), SendSignaled); err != nil {
		t.Fatal(err)
	}
	if wc := p.one(t, 2); wc.Err() != nil || string(p.mem[200:208]) != "abcdefgh" || wc.ByteLen != 8 {
		t.Fatalf("READ: %v, %d bytes, memory %q", wc.Err(), wc.ByteLen, p.mem[200:208])
	}
	binary.NativeEndian.PutUint64(p.mem[512:], 40)
	if err := p.a.PostFetchAdd(3, p.mr.Local(520, 8), addr+512, p.mr.RKey(), 2, SendSignaled); err != nil {
		t.Fatal(err)
	}
	p.one(t, 3)
	if old, now := binary.NativeEndian.Uint64(p.mem[520:]), binary.NativeEndian.Uint64(p.mem[512:]); old != 40 || now != 42 {
		t.Fatalf("fetch-and-add: old %d, word %d; want 40, 42", old, now)
	}
	if err := p.a.PostCompareSwap(4, p.mr.Local(520, 8), addr+512, p.mr.RKey(), 42, 7, SendSignaled); err != nil {
		t.Fatal(err)
	}
	p.one(t, 4)
	if old, now := binary.NativeEndian.Uint64(p.mem[520:]), binary.NativeEndian.Uint64(p.mem[512:]); old != 42 || now != 7 {
		t.Fatalf("compare-and-swap: old %d, word %d; want 42, 7", old, now)
	}
	// An unsignalled WRITE completes silently.
	if err := p.a.PostWriteInline(5, []byte("xy"), addr+300, p.mr.RKey(), 0); err != nil {
		t.Fatal(err)
	}
	var wcs [4]WC
	if n, _ := p.cq.Poll(wcs[:]); n != 0 || string(p.mem[300:302]) != "xy" {
		t.Fatalf("unsignalled inline WRITE: %d completions, memory %q", n, p.mem[300:302])
	}
	// A SEND sent before its receive is posted waits for it.
	if err := p.a.PostSendInlineImm(6, []byte("hello"), 99, SendSignaled); err != nil {
		t.Fatal(err)
	}
	p.one(t, 6)
	if err := p.b.PostRecv(7, p.mr.Local(1024, 64)); err != nil {
		t.Fatal(err)
	}
	if wc := p.one(t, 7); wc.Err() != nil || wc.ByteLen != 5 || wc.Imm != 99 || string(p.mem[1024:1029]) != "hello" {
		t.Fatalf("SEND: %+v, memory %q", wc, p.mem[1024:1029])
	}
	// A misaligned atomic is refused at the post.
	if err := p.a.PostFetchAdd(8, p.mr.Local(520, 8), addr+513, p.mr.RKey(), 1, SendSignaled); !errors.Is(err, ErrInvalid) {
		t.Fatalf("misaligned fetch-and-add: %v, want ErrInvalid", err)
	}
	// A READ past the MR fails, and the QP with it: its receive is flushed.
	if err := p.a.PostRecv(9, p.mr.Local(2048, 64)); err != nil {
		t.Fatal(err)
	}
	if err := p.a.PostRead(10, p.mr.Local(0, 16), addr+4090, p.mr.RKey(), SendSignaled); err != nil {
		t.Fatal(err)
	}
	n, err := p.cq.Poll(wcs[:])
	if err != nil || n != 2 || wcs[0].WRID != 9 || !errors.Is(wcs[0].Err(), ErrFlushed) || wcs[1].WRID != 10 || wcs[1].Err() == nil {
		t.Fatalf("READ out of range: %d completions %+v, %v", n, wcs[:n], err)
	}
	if st, _ := p.a.State(); st != QPErr {
		t.Fatalf("QP state %v after a failed READ, want the error state", st)
	}
}

// TestStandInLoop: the C floor loop adds 1 per iteration.
func TestStandInLoop(t *testing.T) {
	p := newStandInPair(t)
	if err := StandInLoop(p.a, p.cq, p.mr.Local(8, 8), p.mr.Addr(), p.mr.RKey(), 1000); err != nil {
		t.Fatal(err)
	}
	if v := binary.NativeEndian.Uint64(p.mem[0:]); v != 1000 {
		t.Fatalf("word %d after 1000 fetch-and-adds of 1", v)
	}
}

// TestStandInMW: a type 2 memory window reaches what it was bound to, and
// nothing else.
func TestStandInMW(t *testing.T) {
	p := newStandInPair(t)
	mr, err := p.pd.RegisterMR(p.mem, AccessLocalWrite|AccessMWBind)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Close()
	mw, err := p.pd.AllocMW()
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Close()
	rkey, err := p.b.PostBindMW(1, mw, 7, mr, 1024, 64, AccessRemoteRead, SendSignaled)
	if err != nil {
		t.Fatal(err)
	}
	if wc := p.one(t, 1); wc.Err() != nil {
		t.Fatal(wc.Err())
	}
	copy(p.mem[1024:], "windowed")
	if err := p.a.PostRead(2, p.mr.Local(0, 8), mr.Addr()+1024, rkey, SendSignaled); err != nil {
		t.Fatal(err)
	}
	if wc := p.one(t, 2); wc.Err() != nil || string(p.mem[0:8]) != "windowed" {
		t.Fatalf("READ through the window: %v, %q", wc.Err(), p.mem[0:8])
	}
	// The MR's own key gives no remote access; the window none beyond
	// its range, and none to the QP it was not bound on (b's peer is a).
	for i, c := range []struct {
		q    *QP
		addr uint64
		key  uint32
	}{{p.a, mr.Addr() + 1024, mr.RKey()}, {p.b, mr.Addr() + 1024, rkey}} {
		q := c.q
		if err := q.PostRead(uint64(10+i), p.mr.Local(0, 8), c.addr, c.key, SendSignaled); err != nil {
			t.Fatal(err)
		}
		if wc := p.one(t, uint64(10+i)); wc.Err() == nil {
			t.Fatalf("READ %d out of reach succeeded", i)
		}
	}
}

// TestStandInPostList: a list is posted in order with one call, and only
// its signalled work requests complete; a refused one stops the list.
func TestStandInPostList(t *testing.T) {
	p := newStandInPair(t)
	addr, rkey := p.mr.Addr(), p.mr.RKey()
	copy(p.mem[0:8], "listlist")
	wrs := []SendWR{
		{WRID: 1, Op: OpWrite, Local: p.mr.Local(0, 8), RAddr: addr + 64, RKey: rkey},
		{WRID: 2, Op: OpRead, Local: p.mr.Local(128, 8), RAddr: addr + 64, RKey: rkey},
		{WRID: 3, Op: OpFetchAdd, Local: p.mr.Local(136, 8), RAddr: addr + 256, RKey: rkey, A: 5, Flags: SendSignaled},
	}
	var wcs [4]WC
	posted, polled, err := p.a.PostList(wrs, p.cq, wcs[:])
	if err != nil || posted != 3 || polled != 1 || wcs[0].WRID != 3 || wcs[0].Err() != nil {
		t.Fatalf("PostList: %d posted, %d polled %+v, %v", posted, polled, wcs[:polled], err)
	}
	if string(p.mem[128:136]) != "listlist" || binary.NativeEndian.Uint64(p.mem[256:]) != 5 {
		t.Fatalf("after the list: READ got %q, word %d", p.mem[128:136], binary.NativeEndian.Uint64(p.mem[256:]))
	}
	wrs[0].RAddr, wrs[1].RAddr = addr+513, addr+1 // the second is a misaligned atomic
	wrs[1].Op = OpFetchAdd
	posted, _, err = p.a.PostList(wrs, nil, nil)
	if posted != 1 || !errors.Is(err, ErrInvalid) {
		t.Fatalf("PostList with a misaligned atomic second: %d posted, %v", posted, err)
	}
}
