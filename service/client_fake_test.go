package service

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onesided/rma"
	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/fallback"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/verbs"
)

// The tests in this file drive a Client's calls against a fake
// connection: a stand-in for its QP, CQ, completion channel and memory
// region that carries out the work requests on a window's memory in the
// test and hands the messages to a Server's message handling (as the
// tests of server_logic_test.go do), delivering the completions as an RC
// QP would: each work request's in the order of posting, a reply's
// after the send it answers.

const (
	fakeBase = 1 << 20 // the window's address as the clients see it
	fakeRKey = 0x5a5a
)

// fakeServer is the server side of fake connections, one window "w".
type fakeServer struct {
	mu      sync.Mutex // guards the window's memory, the server, and its connections' state
	s       *logicServer
	atomics bool // the window's open reply offers the NIC atomics
	conns   []*fakeConn
}

// newFakeServer is a server with one window "w" of size bytes, id 0.
func newFakeServer(t *testing.T, size int) *fakeServer {
	t.Helper()
	return &fakeServer{s: newLogicServerSize(t, size), atomics: true}
}

// word returns the 8-byte word of the window at disp.
func (fs *fakeServer) word(disp int) uint64 {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return binary.NativeEndian.Uint64(fs.s.win.mem[disp:])
}

// mem returns a copy of n bytes of the window at disp.
func (fs *fakeServer) mem(disp, n int) []byte {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return append([]byte(nil), fs.s.win.mem[disp:disp+n]...)
}

// setMem writes b into the window at disp.
func (fs *fakeServer) setMem(disp int, b []byte) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	copy(fs.s.win.mem[disp:], b)
}

// fakeWR is a work request posted and not carried out yet.
type fakeWR struct {
	op    verbs.WCOpcode
	id    uint64
	l     verbs.Local
	raddr uint64
	rkey  uint32
	a, b  uint64
}

// fakeConn is one client's connection: its QP, CQ, completion channel
// and memory region (whose Local addresses are offsets in the client's
// buffer).
type fakeConn struct {
	fs     *fakeServer
	c      *Client
	sc     *sconn
	out    *replies
	access Access // what an open grants (0: refused)
	ev     chan struct{}

	// Under fs.mu.
	recvs   []fakeWR   // receives posted, in order
	replies [][]byte   // replies waiting for a receive
	wcs     []verbs.WC // completions not polled yet
	armed   bool
	hold    bool     // work requests are kept in held until setHold(false)
	held    []fakeWR // in the order of posting
	failing verbs.WCStatus
	postErr error // every post fails with it, if set
	broken  bool  // a work request failed: the QP is in the error state
	lanes   int   // work requests posted by lanes
	others  int   // the others (receives aside)

	num      uint32 // its QP number, in its completions
	rkey     uint32 // the window's key on it
	applyBad bool   // the failing work request is carried out before it fails
	runOK    int    // with failing set: work requests carried out before the failing one
}

// client returns a Client on a new fake connection whose opens get access,
// with a staging buffer of staging bytes.
func (fs *fakeServer) client(t *testing.T, access Access, staging int) (*Client, *fakeConn) {
	t.Helper()
	r := &replies{}
	f := &fakeConn{fs: fs, sc: &sconn{out: r, authed: true, grants: map[uint32]*grant{}}, out: r, access: access,
		ev: make(chan struct{}, 1), rkey: fakeRKey}
	c := &Client{cfg: ClientConfig{StagingSize: staging}, lockSlots: make(chan struct{}, maxLockWaits), atomics: true}
	c.initLanes()
	buf, err := verbs.Alloc(c.resumeOff() + resumeLen) // Close frees it
	if err != nil {
		t.Fatal(err)
	}
	c.buf = buf
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.closed {
			verbs.Free(buf)
		}
	})
	c.cc, c.cq, c.qp, c.mr = f, f, f, f
	f.c = c
	fs.mu.Lock()
	fs.conns = append(fs.conns, f)
	fs.mu.Unlock()
	for i := 0; i < clientRecv; i++ {
		if err := c.qp.PostRecv(recvTag|uint64(i), c.mr.Local(recvOff+i*recvSize, recvSize)); err != nil {
			t.Fatal(err)
		}
	}
	return c, f
}

func (f *fakeConn) Local(off, n int) verbs.Local {
	return verbs.Local{Addr: uint64(off), Len: uint32(n)}
}

func (f *fakeConn) PostList(wrs []verbs.SendWR) (int, error) {
	for k, wr := range wrs {
		w := fakeWR{id: wr.WRID, l: wr.Local, raddr: wr.RAddr, rkey: wr.RKey, a: wr.A, b: wr.B}
		switch wr.Op {
		case verbs.OpSend:
			w.op = verbs.WCSend
		case verbs.OpWrite:
			w.op = verbs.WCRDMAWrite
		case verbs.OpRead:
			w.op = verbs.WCRDMARead
		case verbs.OpFetchAdd:
			w.op = verbs.WCFetchAdd
		case verbs.OpCompareSwap:
			w.op = verbs.WCCompSwap
		}
		if err := f.post(w); err != nil {
			return k, err
		}
	}
	return len(wrs), nil
}

func (f *fakeConn) PostSend(id uint64, l verbs.Local, flags verbs.SendFlags) error {
	return f.post(fakeWR{op: verbs.WCSend, id: id, l: l})
}

func (f *fakeConn) PostWrite(id uint64, l verbs.Local, raddr uint64, rkey uint32, flags verbs.SendFlags) error {
	return f.post(fakeWR{op: verbs.WCRDMAWrite, id: id, l: l, raddr: raddr, rkey: rkey})
}

func (f *fakeConn) PostRead(id uint64, l verbs.Local, raddr uint64, rkey uint32, flags verbs.SendFlags) error {
	return f.post(fakeWR{op: verbs.WCRDMARead, id: id, l: l, raddr: raddr, rkey: rkey})
}

func (f *fakeConn) PostFetchAdd(id uint64, l verbs.Local, raddr uint64, rkey uint32, add uint64, flags verbs.SendFlags) error {
	return f.post(fakeWR{op: verbs.WCFetchAdd, id: id, l: l, raddr: raddr, rkey: rkey, a: add})
}

func (f *fakeConn) PostCompareSwap(id uint64, l verbs.Local, raddr uint64, rkey uint32, compare, swap uint64, flags verbs.SendFlags) error {
	return f.post(fakeWR{op: verbs.WCCompSwap, id: id, l: l, raddr: raddr, rkey: rkey, a: compare, b: swap})
}

func (f *fakeConn) PostRecv(id uint64, l verbs.Local) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.broken {
		f.complete(verbs.WC{WRID: id, Status: verbs.WCWRFlushErr})
		return nil
	}
	f.recvs = append(f.recvs, fakeWR{op: verbs.WCRecv, id: id, l: l})
	f.fs.deliver()
	return nil
}

func (f *fakeConn) Poll(wcs []verbs.WC) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	n := copy(wcs, f.wcs)
	f.wcs = f.wcs[n:]
	return n, nil
}

func (f *fakeConn) ReqNotify() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	f.armed = true
	if len(f.wcs) > 0 {
		f.notify()
	}
	return nil
}

func (f *fakeConn) Wait(ctx context.Context) error {
	select {
	case <-f.ev:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fakeConn) Wake() { f.signal() }

func (f *fakeConn) signal() {
	select {
	case f.ev <- struct{}{}:
	default:
	}
}

// notify signals the channel if the CQ is armed; fs.mu is held.
func (f *fakeConn) notify() {
	if f.armed {
		f.armed = false
		f.signal()
	}
}

// complete queues a completion; fs.mu is held.
func (f *fakeConn) complete(wc verbs.WC) {
	wc.QPNum = f.num
	f.wcs = append(f.wcs, wc)
	f.notify()
}

// post carries out wr, or keeps it while the connection holds.
func (f *fakeConn) post(wr fakeWR) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.postErr != nil {
		return f.postErr
	}
	if wr.id&laneTag != 0 {
		f.lanes++
	} else {
		f.others++
	}
	if f.hold || len(f.held) > 0 {
		f.held = append(f.held, wr)
		return nil
	}
	f.run(wr)
	return nil
}

// setHold makes the connection keep the work requests posted from now
// on (on), or carries out those kept, in order (off).
func (f *fakeConn) setHold(on bool) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	f.hold = on
	if !on {
		for _, wr := range f.held {
			f.run(wr)
		}
		f.held = nil
	}
}

// failNext makes the next work request carried out fail with status,
// and the QP go to the error state.
func (f *fakeConn) failNext(status verbs.WCStatus) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	f.failing = status
}

// counts returns the work requests posted by lanes and by the others.
func (f *fakeConn) counts() (lanes, others int) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return f.lanes, f.others
}

// run carries out wr; fs.mu is held.
func (f *fakeConn) run(wr fakeWR) {
	wc := verbs.WC{WRID: wr.id, Opcode: wr.op, ByteLen: wr.l.Len}
	if f.broken {
		wc.Status = verbs.WCWRFlushErr
		f.complete(wc)
		return
	}
	if f.failing != verbs.WCSuccess && f.runOK > 0 {
		f.runOK--
	} else if f.failing != verbs.WCSuccess {
		wc.Status, f.failing = f.failing, verbs.WCSuccess
		if f.applyBad { // carried out, its completion lost
			f.broken = true // its reply, if any, is lost too
			f.apply(wr, nil)
		}
		f.breakQP(wc)
		return
	}
	f.apply(wr, &wc)
}

// apply carries out wr and completes it with wc (nil: no completion);
// fs.mu is held.
func (f *fakeConn) apply(wr fakeWR, wc *verbs.WC) {
	complete := func() {
		if wc != nil {
			f.complete(*wc)
		}
	}
	local := f.c.buf[wr.l.Addr : wr.l.Addr+uint64(wr.l.Len)]
	if wr.op == verbs.WCSend {
		complete()
		f.fs.message(f, append([]byte(nil), local...))
		return
	}
	mem := f.fs.s.win.mem
	n := uint64(wr.l.Len)
	if wr.op == verbs.WCFetchAdd || wr.op == verbs.WCCompSwap {
		n = 8
	}
	if wr.rkey != f.rkey || wr.raddr < fakeBase || wr.raddr-fakeBase > uint64(len(mem)) || uint64(len(mem))-(wr.raddr-fakeBase) < n ||
		(n == 8 && wr.op != verbs.WCRDMAWrite && wr.op != verbs.WCRDMARead && (wr.raddr%8 != 0 || wr.l.Len != 8)) {
		if wc != nil {
			wc.Status = verbs.WCRemAccessErr
			f.breakQP(*wc)
		}
		return
	}
	target := mem[wr.raddr-fakeBase : wr.raddr-fakeBase+n]
	switch wr.op {
	case verbs.WCRDMAWrite:
		copy(target, local)
	case verbs.WCRDMARead:
		copy(local, target)
	case verbs.WCFetchAdd:
		old := binary.NativeEndian.Uint64(target)
		binary.NativeEndian.PutUint64(target, old+wr.a)
		binary.NativeEndian.PutUint64(local, old)
	case verbs.WCCompSwap:
		old := binary.NativeEndian.Uint64(target)
		if old == wr.a {
			binary.NativeEndian.PutUint64(target, wr.b)
		}
		binary.NativeEndian.PutUint64(local, old)
	}
	complete()
}

// breakQP completes wc (a failure) and flushes the receives posted; fs.mu
// is held.
func (f *fakeConn) breakQP(wc verbs.WC) {
	f.broken = true
	f.complete(wc)
	for _, r := range f.recvs {
		f.complete(verbs.WC{WRID: r.id, Status: verbs.WCWRFlushErr})
	}
	f.recvs = nil
}

// message hands msg, sent by f's client, to the server, and the replies
// it sends to the connections' receives; fs.mu is held.
func (fs *fakeServer) message(f *fakeConn, msg []byte) {
	var reply [maxReply]byte
	if typ, seq, ok := header(msg); ok && typ == msgOpen {
		// The server's open binds a memory window: answered here.
		w := fs.s.win
		name, ok := parseOpen(msg)
		switch {
		case !ok || string(name) != w.name:
			putHeader(reply[:], msgOpenErr, seq)
			reply[headerLen] = openUnknown
			f.out.msgs = append(f.out.msgs, append([]byte(nil), reply[:openErrLen]...))
		case f.access == 0:
			putHeader(reply[:], msgOpenErr, seq)
			reply[headerLen] = openDenied
			f.out.msgs = append(f.out.msgs, append([]byte(nil), reply[:openErrLen]...))
		default:
			f.sc.grants[w.id] = &grant{access: f.access, rkey: f.rkey}
			var flags uint8
			if fs.atomics {
				flags = flagAtomics
			}
			n := putOpenOK(reply[:], seq, openOK{addr: fakeBase, rkey: f.rkey, id: w.id, size: uint64(len(w.mem)),
				flags: flags | uint8(f.access)<<accessShift})
			f.out.msgs = append(f.out.msgs, append([]byte(nil), reply[:n]...))
		}
	} else {
		fs.s.mu.Lock()
		fs.s.message(f.sc, msg, reply[:])
		fs.s.mu.Unlock()
	}
	for _, g := range fs.conns {
		g.replies = append(g.replies, g.out.take()...)
		g.sc.sends = 0 // their sends complete at once
	}
	fs.deliver()
}

// deliver puts the replies waiting into the receives posted; fs.mu is
// held.
func (fs *fakeServer) deliver() {
	for _, g := range fs.conns {
		for len(g.replies) > 0 && len(g.recvs) > 0 && !g.broken {
			m, r := g.replies[0], g.recvs[0]
			g.replies, g.recvs = g.replies[1:], g.recvs[1:]
			if len(m) > int(r.l.Len) {
				panic("a reply longer than the receive buffer")
			}
			copy(g.c.buf[r.l.Addr:], m)
			g.complete(verbs.WC{WRID: r.id, Opcode: verbs.WCRecv, ByteLen: uint32(len(m))})
		}
	}
}

// open opens window "w" on c.
func open(t *testing.T, c *Client) *Window {
	t.Helper()
	w, err := c.Open(context.Background(), "w")
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// pattern returns n bytes that differ from those of another seed.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

// allLanes takes every lane (the calls then take the serialized path) and
// returns a function that gives them back.
func allLanes(c *Client) func() {
	f := c.free.Swap(0)
	return func() { c.free.Store(f) }
}

// Put and Get round trips: 1 to 256 bytes on a lane, or on the serialized
// path when every lane is taken; more than 256 bytes on the serialized
// path, in pieces of the staging size.
func TestClientPutGet(t *testing.T) {
	const staging = 4096
	fs := newFakeServer(t, 3*staging+512)
	c, f := fs.client(t, AccessAll, staging)
	w := open(t, c)
	if w.Size() != 3*staging+512 || w.Access() != AccessAll || c.NICAtomics() != nil {
		t.Fatalf("window of %d bytes, access %v", w.Size(), w.Access())
	}
	ctx := context.Background()
	seed := byte(1)
	for _, n := range []int{1, 7, 8, 255, 256, 257, staging - 1, staging, staging + 1, 3*staging + 100} {
		for _, serial := range []bool{false, true} {
			disp := 3
			if n > 2*staging {
				disp = 0
			}
			seed++
			src := pattern(n, seed)
			var back func()
			if serial {
				back = allLanes(c)
			}
			l0, o0 := f.counts()
			err := w.Put(ctx, src, disp)
			if err == nil {
				if got := fs.mem(disp, n); string(got) != string(src) {
					err = errString("the window does not hold what was put")
				}
			}
			dst := make([]byte, n)
			if err == nil {
				err = w.Get(ctx, dst, disp)
			}
			if back != nil {
				back()
			}
			if err == nil && string(dst) != string(src) {
				err = errString("Get returned other bytes")
			}
			if err != nil {
				t.Fatalf("%d bytes (serialized %v): %v", n, serial, err)
			}
			l1, o1 := f.counts()
			lanes, others := l1-l0, o1-o0
			pieces := (n + staging - 1) / staging
			want := [2]int{0, 2 * pieces}
			if n <= laneData && !serial {
				want = [2]int{2, 0}
			}
			if [2]int{lanes, others} != want {
				t.Errorf("%d bytes (serialized %v): %d work requests on lanes and %d others, want %v", n, serial, lanes, others, want)
			}
		}
	}
	// Out of the window, and zero bytes.
	if err := w.Put(ctx, make([]byte, 8), w.Size()-7); !errors.Is(err, rma.ErrOutOfWindow) {
		t.Errorf("a Put past the end: %v", err)
	}
	if err := w.Get(ctx, nil, 0); err != nil {
		t.Errorf("a Get of nothing: %v", err)
	}
	if free := c.free.Load(); free != 1<<maxLanes-1 {
		t.Errorf("lanes free after the calls: %#x", free)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

func u64(v uint64) []byte { return binary.NativeEndian.AppendUint64(nil, v) }

func f64(v float64) []byte { return binary.NativeEndian.AppendUint64(nil, math.Float64bits(v)) }

func i32(v int32) []byte { return binary.NativeEndian.AppendUint32(nil, uint32(v)) }

// FetchAndOp and CompareAndSwap take their routes: on 64-bit integers
// SUM, NO_OP and compare-and-swap are NIC atomics on lanes, REPLACE and
// MAX compare-and-swap loops on the serialized path; float64 and int32
// go to the engine, on a lane or, with every lane taken, on the
// serialized path.
func TestClientAtomics(t *testing.T) {
	fs := newFakeServer(t, 256)
	c, f := fs.client(t, AccessAll, 4096)
	w := open(t, c)
	ctx := context.Background()
	for _, serial := range []bool{false, true} {
		fs.setMem(0, make([]byte, 256))
		var back func()
		if serial {
			back = allLanes(c)
		}
		res := make([]byte, 8)
		step := func(what string, err error, gotOld, wantOld, word, wantWord uint64) {
			t.Helper()
			if err != nil || gotOld != wantOld || word != wantWord {
				t.Fatalf("%s (serialized %v): %v, old %d (want %d), word %d (want %d)", what, serial, err, gotOld, wantOld, word, wantWord)
			}
		}
		l0, _ := f.counts()
		err := w.FetchAndOp(ctx, u64(5), res, datatype.Int64, 8, op.Sum)
		step("SUM 5", err, binary.NativeEndian.Uint64(res), 0, fs.word(8), 5)
		err = w.FetchAndOp(ctx, u64(^uint64(1)), res, datatype.Int64, 8, op.Sum) // -2
		step("SUM -2", err, binary.NativeEndian.Uint64(res), 5, fs.word(8), 3)
		err = w.FetchAndOp(ctx, nil, res, datatype.Int64, 8, op.NoOp)
		step("NO_OP", err, binary.NativeEndian.Uint64(res), 3, fs.word(8), 3)
		err = w.CompareAndSwap(ctx, u64(9), u64(3), res, datatype.Int64, 8)
		step("CAS 3->9", err, binary.NativeEndian.Uint64(res), 3, fs.word(8), 9)
		err = w.CompareAndSwap(ctx, u64(1), u64(3), res, datatype.Int64, 8)
		step("CAS 3->1 failing", err, binary.NativeEndian.Uint64(res), 9, fs.word(8), 9)
		l1, _ := f.counts()
		if want := 5; !serial && l1-l0 != want {
			t.Errorf("%d work requests on lanes for 5 NIC atomics", l1-l0)
		} else if serial && l1 != l0 {
			t.Errorf("%d work requests on lanes with every lane taken", l1-l0)
		}
		err = w.FetchAndOp(ctx, u64(4), res, datatype.Int64, 8, op.Replace)
		step("REPLACE 4", err, binary.NativeEndian.Uint64(res), 9, fs.word(8), 4)
		err = w.FetchAndOp(ctx, u64(7), res, datatype.Int64, 8, op.Max)
		step("MAX 7", err, binary.NativeEndian.Uint64(res), 4, fs.word(8), 7)
		err = w.FetchAndOp(ctx, u64(2), res, datatype.Int64, 8, op.Min)
		step("MIN 2", err, binary.NativeEndian.Uint64(res), 7, fs.word(8), 2)

		// The engine: float64 at 16, int32 at 24.
		fs.setMem(16, f64(1.5))
		err = w.FetchAndOp(ctx, f64(2.25), res, datatype.Float64, 16, op.Sum)
		step("float64 SUM 2.25", err, binary.NativeEndian.Uint64(res), math.Float64bits(1.5), fs.word(16), math.Float64bits(3.75))
		err = w.FetchAndOp(ctx, f64(-1), res, datatype.Float64, 16, op.Max)
		step("float64 MAX -1", err, binary.NativeEndian.Uint64(res), math.Float64bits(3.75), fs.word(16), math.Float64bits(3.75))
		r4 := make([]byte, 4)
		fs.setMem(24, i32(-7))
		err = w.CompareAndSwap(ctx, i32(11), i32(-7), r4, datatype.Int32, 24)
		step("int32 CAS -7->11", err, uint64(binary.NativeEndian.Uint32(r4)), uint64(uint32(0xfffffff9)), uint64(binary.NativeEndian.Uint32(fs.mem(24, 4))), 11)
		err = w.CompareAndSwap(ctx, i32(5), i32(-7), r4, datatype.Int32, 24)
		step("int32 CAS -7->5 failing", err, uint64(binary.NativeEndian.Uint32(r4)), 11, uint64(binary.NativeEndian.Uint32(fs.mem(24, 4))), 11)
		err = w.FetchAndOp(ctx, i32(100), r4, datatype.Int32, 28, op.Sum)
		step("int32 SUM 100", err, uint64(binary.NativeEndian.Uint32(r4)), 0, uint64(binary.NativeEndian.Uint32(fs.mem(28, 4))), 100)
		if back != nil {
			back()
		}
		// The checks before anything is sent.
		for _, disp := range []int{4, 252} {
			err = w.FetchAndOp(ctx, u64(1), res, datatype.Int64, disp, op.Sum)
			if want := map[int]error{4: rma.ErrAlignment, 252: rma.ErrOutOfWindow}[disp]; !errors.Is(err, want) {
				t.Errorf("SUM at %d: %v, want %v", disp, err, want)
			}
		}
	}
	if st := c.Stats(); st.EngineOps == 0 || st.NICAtomics == 0 {
		t.Errorf("stats %+v: no engine ops or NIC atomics counted", st)
	}
}

// Accumulate and GetAccumulate: one message on a lane when it fits, more
// on the serialized path (pieces of maxAccData and maxFetchData bytes);
// 64-bit integers through the NIC, element by element.
func TestClientAccumulate(t *testing.T) {
	fs := newFakeServer(t, 4096)
	c, f := fs.client(t, AccessAll, 4096)
	w := open(t, c)
	ctx := context.Background()
	for _, count := range []int{1, 3, 29, 30, 59, 60, 61, 200} {
		fs.setMem(0, make([]byte, 4096))
		origin, old := make([]byte, 8*count), make([]byte, 8*count)
		for i := 0; i < count; i++ {
			binary.NativeEndian.PutUint64(origin[8*i:], math.Float64bits(float64(i)+0.5))
			binary.NativeEndian.PutUint64(old[8*i:], math.Float64bits(float64(2*i)))
		}
		fs.setMem(64, old)
		l0, o0 := f.counts()
		if err := w.Accumulate(ctx, origin, datatype.Float64, 64, op.Sum); err != nil {
			t.Fatalf("Accumulate of %d float64: %v", count, err)
		}
		l1, o1 := f.counts()
		msgs := (8*count + maxAccData/8*8 - 1) / (maxAccData / 8 * 8)
		if headerLen+fallback.RequestHeaderSize+8*count <= laneData {
			if l1-l0 != 1 || o1 != o0 {
				t.Errorf("Accumulate of %d float64: %d messages on lanes, %d others; want one on a lane", count, l1-l0, o1-o0)
			}
		} else if l1 != l0 || o1-o0 != msgs {
			t.Errorf("Accumulate of %d float64: %d messages on lanes, %d others; want %d others", count, l1-l0, o1-o0, msgs)
		}
		result := make([]byte, 8*count)
		if err := w.GetAccumulate(ctx, origin, result, datatype.Float64, 64, op.Sum); err != nil {
			t.Fatalf("GetAccumulate of %d float64: %v", count, err)
		}
		got := fs.mem(64, 8*count)
		for i := 0; i < count; i++ {
			o := math.Float64frombits(binary.NativeEndian.Uint64(result[8*i:]))
			v := math.Float64frombits(binary.NativeEndian.Uint64(got[8*i:]))
			if o != float64(3*i)+0.5 || v != float64(4*i)+1 {
				t.Fatalf("%d float64, element %d: old %v (want %v), now %v (want %v)", count, i, o, float64(3*i)+0.5, v, float64(4*i)+1)
			}
		}
		if fs.word(56) != 0 || fs.word(64+8*count) != 0 {
			t.Fatalf("%d float64: the words around changed", count)
		}
	}
	// 64-bit integers through the NIC, several elements.
	fs.setMem(0, make([]byte, 4096))
	origin := append(append(u64(1), u64(2)...), u64(3)...)
	if err := w.Accumulate(ctx, origin, datatype.Int64, 0, op.Sum); err != nil {
		t.Fatal(err)
	}
	result := make([]byte, 24)
	if err := w.GetAccumulate(ctx, origin, result, datatype.Int64, 0, op.Replace); err != nil {
		t.Fatal(err)
	}
	if string(result) != string(origin) || string(fs.mem(0, 24)) != string(origin) {
		t.Errorf("int64 SUM then REPLACE: old %x, now %x; want %x both", result, fs.mem(0, 24), origin)
	}
	if err := w.GetAccumulate(ctx, nil, result, datatype.Int64, 0, op.NoOp); err != nil || string(result) != string(origin) {
		t.Errorf("int64 NO_OP: %v, %x", err, result)
	}
	if err := w.Accumulate(ctx, nil, datatype.Int64, 0, op.Sum); err != nil {
		t.Errorf("an Accumulate of nothing: %v", err)
	}
}

// Goroutines sharing a client: every old value of a counter comes back
// exactly once, through the NIC and through the engine, beside Puts and
// Gets of their own bytes.
func TestClientConcurrent(t *testing.T) {
	const goroutines, each = 24, 150
	for _, nic := range []bool{true, false} {
		fs := newFakeServer(t, 4096)
		fs.atomics = nic
		c, _ := fs.client(t, AccessAll, 4096)
		w := open(t, c)
		ctx := context.Background()
		olds := make([][]uint64, goroutines)
		errs := make([]error, goroutines)
		var wg sync.WaitGroup
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res := make([]byte, 8)
				mine := pattern(16+g, byte(g))
				back := make([]byte, len(mine))
				for i := 0; i < each; i++ {
					if err := w.FetchAndOp(ctx, u64(1), res, datatype.Int64, 0, op.Sum); err != nil {
						errs[g] = err
						return
					}
					olds[g] = append(olds[g], binary.NativeEndian.Uint64(res))
					if i%10 == 0 {
						if err := w.Put(ctx, mine, 64+64*g); err != nil {
							errs[g] = err
							return
						}
						if err := w.Get(ctx, back, 64+64*g); err != nil || string(back) != string(mine) {
							errs[g] = fmt.Errorf("Get %x, %v; want %x", back, err, mine)
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		seen := make([]bool, goroutines*each)
		for g := range olds {
			if errs[g] != nil {
				t.Fatalf("NIC %v, goroutine %d: %v", nic, g, errs[g])
			}
			for _, v := range olds[g] {
				if v >= uint64(len(seen)) || seen[v] {
					t.Fatalf("NIC %v: old value %d twice or out of range", nic, v)
				}
				seen[v] = true
			}
		}
		if got := fs.word(0); got != goroutines*each {
			t.Errorf("NIC %v: counter %d, want %d", nic, got, goroutines*each)
		}
		if c.NICAtomics() != nil || (w.policy.FetchAndOp(op.Sum, datatype.Int64) == atomics.NICFetchAdd) != nic {
			t.Errorf("NIC %v: window policy %v", nic, w.policy)
		}
		if free, eng := c.free.Load(), c.engines.Load(); free != 1<<maxLanes-1 || eng != 0 {
			t.Errorf("NIC %v: lanes free %#x, engine lanes %d after the calls", nic, free, eng)
		}
	}
}

// Lock and Unlock through the server's lock manager: a second client's
// exclusive Lock waits until the first unlocks; a Lock whose context ends
// while it waits is withdrawn; the client's own checks and the server's
// refusals map to rma.ErrEpoch.
func TestClientLock(t *testing.T) {
	fs := newFakeServer(t, 64)
	a, _ := fs.client(t, AccessAll, 4096)
	b, _ := fs.client(t, AccessAll, 4096)
	wa, wb := open(t, a), open(t, b)
	ctx := context.Background()
	if err := wa.Lock(ctx, rma.LockExclusive); err != nil {
		t.Fatal(err)
	}
	if err := wa.Lock(ctx, rma.LockShared); !errors.Is(err, rma.ErrEpoch) {
		t.Errorf("a second Lock: %v, want ErrEpoch", err)
	}
	if err := wa.UnlockAll(ctx); !errors.Is(err, rma.ErrEpoch) {
		t.Errorf("UnlockAll after Lock: %v, want ErrEpoch", err)
	}
	// B's Lock whose context ends is withdrawn.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	err := wb.Lock(short, rma.LockExclusive)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("B's Lock with A holding: %v, want DeadlineExceeded", err)
	}
	fs.mu.Lock()
	queued := len(fs.s.win.locks.queue)
	fs.mu.Unlock()
	if queued != 0 {
		t.Fatalf("%d requests queued after B's withdrawal", queued)
	}
	// B waits; A unlocks; B gets it; A's calls go on meanwhile.
	got := make(chan error, 1)
	go func() { got <- wb.Lock(ctx, rma.LockExclusive) }()
	for {
		fs.mu.Lock()
		queued = len(fs.s.win.locks.queue)
		fs.mu.Unlock()
		if queued == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err := wa.Put(ctx, u64(77), 0); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		t.Fatalf("B's Lock returned %v with A holding the lock", err)
	default:
	}
	if err := wa.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("B's Lock after A's Unlock: %v", err)
	}
	fs.mu.Lock()
	holder := fs.s.win.locks.excl
	fs.mu.Unlock()
	if holder != b.qp.(*fakeConn).sc {
		t.Fatalf("the server's exclusive holder is not B")
	}
	if err := wb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := wa.LockAll(ctx); err != nil {
		t.Fatal(err)
	}
	if err := wb.LockAll(ctx); err != nil {
		t.Fatal(err)
	}
	for _, w := range []*Window{wa, wb} {
		if err := w.Unlock(ctx); !errors.Is(err, rma.ErrEpoch) {
			t.Errorf("Unlock after LockAll: %v, want ErrEpoch", err)
		}
		if err := w.UnlockAll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The server disagrees: the client thinks it holds the lock.
	wa.lock = lockExclusive
	if err := wa.Unlock(ctx); !errors.Is(err, rma.ErrEpoch) || wa.lock != 0 {
		t.Errorf("Unlock the server refuses: %v (lock %d), want ErrEpoch", err, wa.lock)
	}
	if err := wa.Lock(ctx, rma.LockType(9)); !errors.Is(err, rma.ErrInvalid) {
		t.Errorf("Lock of type 9: %v", err)
	}
	if a.err != nil || b.err != nil {
		t.Errorf("the clients failed: %v, %v", a.err, b.err)
	}
}

// The request forms: RPut, RGet, RAccumulate and RGetAccumulate complete
// with Wait, Test, or the client's next call.
func TestClientRequests(t *testing.T) {
	fs := newFakeServer(t, 8192)
	c, _ := fs.client(t, AccessAll, 4096)
	w := open(t, c)
	ctx := context.Background()
	for _, n := range []int{8, 300, 5000} {
		src := pattern(n, byte(n))
		r, err := w.RPut(ctx, src, 16)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Wait(ctx); err != nil || string(fs.mem(16, n)) != string(src) {
			t.Fatalf("RPut of %d bytes: %v", n, err)
		}
		dst := make([]byte, n)
		r, err = w.RGet(ctx, dst, 16)
		if err != nil {
			t.Fatal(err)
		}
		for {
			done, err := r.Test()
			if err != nil {
				t.Fatalf("RGet of %d bytes: Test: %v", n, err)
			}
			if done {
				break
			}
		}
		if string(dst) != string(src) {
			t.Fatalf("RGet of %d bytes: other bytes", n)
		}
	}
	// An RAccumulate completed by the next call, then an RGetAccumulate.
	fs.setMem(0, f64(1))
	r1, err := w.RAccumulate(ctx, f64(2), datatype.Float64, 0, op.Sum)
	if err != nil {
		t.Fatal(err)
	}
	res := make([]byte, 8)
	r2, err := w.RGetAccumulate(ctx, f64(4), res, datatype.Float64, 0, op.Sum)
	if err != nil {
		t.Fatal(err)
	}
	if err := r2.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r1.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if old, now := math.Float64frombits(binary.NativeEndian.Uint64(res)), math.Float64frombits(fs.word(0)); old != 3 || now != 7 {
		t.Errorf("RAccumulate 2 then RGetAccumulate 4 on 1: old %v (want 3), now %v (want 7)", old, now)
	}
	// A 64-bit integer RGetAccumulate through the NIC, and an RPut the
	// next Get completes before it reads.
	fs.setMem(8, u64(10))
	r3, err := w.RGetAccumulate(ctx, u64(5), res, datatype.Int64, 8, op.Sum)
	if err != nil {
		t.Fatal(err)
	}
	if err := r3.Wait(ctx); err != nil || binary.NativeEndian.Uint64(res) != 10 || fs.word(8) != 15 {
		t.Errorf("int64 RGetAccumulate SUM 5 on 10: %v, old %d, now %d", err, binary.NativeEndian.Uint64(res), fs.word(8))
	}
	if _, err := w.RPut(ctx, u64(99), 8); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 8)
	if err := w.Get(ctx, got, 8); err != nil || binary.NativeEndian.Uint64(got) != 99 {
		t.Errorf("Get after RPut: %v, %d", err, binary.NativeEndian.Uint64(got))
	}
	if c.pend != nil || !c.quiet.Load() {
		t.Errorf("a request still pending: %+v", c.pend)
	}
}

// A call whose context ends while its lane is in flight returns the
// context's error and leaves the lane in flight; Flush waits for it, and
// the lane is free again once its completion came.
func TestClientAbandon(t *testing.T) {
	fs := newFakeServer(t, 1024)
	c, f := fs.client(t, AccessAll, 4096)
	w := open(t, c)
	ctx := context.Background()
	fs.setMem(16, f64(1))
	res := make([]byte, 8)
	for _, engine := range []bool{false, true} {
		f.setHold(true)
		short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		var err error
		if engine {
			err = w.FetchAndOp(short, f64(2), res, datatype.Float64, 16, op.Sum)
		} else {
			err = w.FetchAndOp(short, u64(3), res, datatype.Int64, 0, op.Sum)
		}
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("engine %v: %v, want DeadlineExceeded", engine, err)
		}
		if c.free.Load() == 1<<maxLanes-1 || c.lanesIdle() {
			t.Fatalf("engine %v: no lane in flight after the abandon", engine)
		}
		// Flush waits until the work request is carried out.
		flushed := make(chan error, 1)
		go func() { flushed <- w.Flush(ctx) }()
		time.Sleep(5 * time.Millisecond)
		select {
		case err := <-flushed:
			t.Fatalf("engine %v: Flush returned %v with the lane in flight", engine, err)
		default:
		}
		f.setHold(false)
		if err := <-flushed; err != nil {
			t.Fatalf("engine %v: Flush: %v", engine, err)
		}
		if c.free.Load() != 1<<maxLanes-1 || !c.lanesIdle() || c.engines.Load() != 0 {
			t.Fatalf("engine %v: after Flush, free %#x, engine lanes %d", engine, c.free.Load(), c.engines.Load())
		}
		if engine && res[0] != 0 {
			t.Errorf("the abandoned call wrote its result")
		}
	}
	if fs.word(0) != 3 || math.Float64frombits(fs.word(16)) != 3 {
		t.Errorf("the abandoned calls: word 0 is %d (want 3), float at 16 %v (want 3)", fs.word(0), math.Float64frombits(fs.word(16)))
	}
	// A request whose Wait's context ends is abandoned; the next call
	// completes it without writing its result.
	f.setHold(true)
	dst := make([]byte, 8)
	r, err := w.RGet(ctx, dst, 0)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
	err = r.Wait(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait of a held RGet: %v", err)
	}
	f.setHold(false)
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) || binary.NativeEndian.Uint64(dst) != 0 {
		t.Errorf("the abandoned RGet: %v, result %x", err, dst)
	}
	// A call whose context has ended sends nothing.
	done, cancel := context.WithCancel(ctx)
	cancel()
	_, o0 := f.counts()
	if err := w.Put(done, u64(1), 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Put with an ended context: %v", err)
	}
	if err := w.Put(done, make([]byte, 1000), 0); !errors.Is(err, context.Canceled) {
		t.Errorf("a large Put with an ended context: %v", err)
	}
	if _, o1 := f.counts(); o1 != o0 {
		t.Errorf("calls with an ended context posted %d work requests", o1-o0)
	}
}

// Failures: a completion with an error status fails the client, that call
// and every later one, with an error matching verbs.ErrPeerLost; the
// server's refusals map to ErrUnknownWindow, ErrDenied and rma.ErrEpoch.
func TestClientErrors(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		call func(w *Window) error
	}{
		{"lane Put", func(w *Window) error { return w.Put(ctx, u64(1), 0) }},
		{"serialized Get", func(w *Window) error { return w.Get(ctx, make([]byte, 1000), 0) }},
		{"NIC atomic", func(w *Window) error {
			return w.FetchAndOp(ctx, u64(1), make([]byte, 8), datatype.Int64, 0, op.Sum)
		}},
		{"engine lane", func(w *Window) error {
			return w.Accumulate(ctx, f64(1), datatype.Float64, 0, op.Sum)
		}},
		{"serialized engine", func(w *Window) error {
			return w.Accumulate(ctx, make([]byte, 800), datatype.Float64, 0, op.Sum)
		}},
		{"Lock", func(w *Window) error { return w.Lock(ctx, rma.LockShared) }},
	} {
		fs := newFakeServer(t, 4096)
		c, f := fs.client(t, AccessAll, 4096)
		w := open(t, c)
		f.failNext(verbs.WCRetryExcErr)
		err := tc.call(w)
		var ce *verbs.CompletionError
		if !errors.Is(err, verbs.ErrPeerLost) || !errors.As(err, &ce) || ce.Status != verbs.WCRetryExcErr {
			t.Errorf("%s: %v, want ErrPeerLost from the failed completion", tc.name, err)
		}
		if err := w.Put(ctx, u64(1), 0); !errors.Is(err, verbs.ErrPeerLost) {
			t.Errorf("%s: the next call: %v, want ErrPeerLost", tc.name, err)
		}
		if err := w.Get(ctx, make([]byte, 1000), 0); !errors.Is(err, verbs.ErrPeerLost) {
			t.Errorf("%s: the next serialized call: %v, want ErrPeerLost", tc.name, err)
		}
	}
	// A status that is not itself a lost peer still fails the client with
	// ErrPeerLost.
	fs := newFakeServer(t, 64)
	c, _ := fs.client(t, AccessAll, 4096)
	w := open(t, c)
	if err := w.Put(ctx, u64(1), 60); !errors.Is(err, rma.ErrOutOfWindow) {
		t.Errorf("a Put past the end: %v", err)
	}
	w.size = 128 // the client thinks the window is larger: the NIC refuses
	if err := w.Put(ctx, u64(1), 64); !errors.Is(err, verbs.ErrPeerLost) || !errors.Is(err, verbs.ErrRemoteAccess) {
		t.Errorf("a WRITE the NIC refuses: %v, want ErrPeerLost and ErrRemoteAccess", err)
	}

	// Refusals.
	fs = newFakeServer(t, 1024)
	c, f := fs.client(t, AccessAll, 4096)
	if _, err := c.Open(ctx, "nothing"); !errors.Is(err, ErrUnknownWindow) {
		t.Errorf("Open of an unknown name: %v", err)
	}
	if _, err := c.Open(ctx, ""); !errors.Is(err, rma.ErrInvalid) {
		t.Errorf("Open of an empty name: %v", err)
	}
	f.access = 0
	if _, err := c.Open(ctx, "w"); !errors.Is(err, ErrDenied) {
		t.Errorf("Open the server denies: %v", err)
	}
	f.access = AccessRead
	w = open(t, c)
	if err := w.Put(ctx, u64(1), 0); !errors.Is(err, ErrDenied) {
		t.Errorf("Put with read access: %v", err)
	}
	w.access = AccessAll // the client thinks it may: the server refuses
	for _, big := range []bool{false, true} {
		n := 8
		if big {
			n = 800
		}
		if err := w.Accumulate(ctx, make([]byte, n), datatype.Float64, 0, op.Sum); !errors.Is(err, ErrDenied) {
			t.Errorf("Accumulate of %d bytes the server denies: %v", n, err)
		}
	}
	fs.mu.Lock()
	delete(f.sc.grants, 0)
	fs.mu.Unlock()
	for _, big := range []bool{false, true} {
		n := 8
		if big {
			n = 800
		}
		if err := w.Accumulate(ctx, make([]byte, n), datatype.Float64, 0, op.Sum); !errors.Is(err, ErrUnknownWindow) {
			t.Errorf("Accumulate of %d bytes on a window the server forgot: %v", n, err)
		}
	}
	if err := w.Lock(ctx, rma.LockShared); !errors.Is(err, ErrUnknownWindow) {
		t.Errorf("Lock on a window the server forgot: %v", err)
	}
	if c.err != nil {
		t.Errorf("refusals failed the client: %v", c.err)
	}
	if st := c.Stats(); st.EngineRejects != 4 {
		t.Errorf("EngineRejects = %d, want 4", st.EngineRejects)
	}
}

// A post that fails returns its error and leaves the client usable: the
// work request it did not post is not waited for.
func TestClientPostError(t *testing.T) {
	fs := newFakeServer(t, 1024)
	c, f := fs.client(t, AccessAll, 4096)
	w := open(t, c)
	ctx := context.Background()
	res := make([]byte, 8)
	calls := []struct {
		name string
		call func() error
	}{
		{"lane Put", func() error { return w.Put(ctx, u64(1), 0) }},
		{"lane Get", func() error { return w.Get(ctx, res, 0) }},
		{"serialized Put", func() error { return w.Put(ctx, make([]byte, 600), 0) }},
		{"serialized Get", func() error { return w.Get(ctx, make([]byte, 600), 0) }},
		{"NIC SUM", func() error { return w.FetchAndOp(ctx, u64(1), res, datatype.Int64, 0, op.Sum) }},
		{"NIC CAS", func() error { return w.CompareAndSwap(ctx, u64(1), u64(0), res, datatype.Int64, 0) }},
		{"CAS loop", func() error { return w.FetchAndOp(ctx, u64(1), res, datatype.Int64, 0, op.Max) }},
		{"engine lane", func() error { return w.Accumulate(ctx, f64(1), datatype.Float64, 8, op.Sum) }},
		{"engine CAS", func() error { return w.CompareAndSwap(ctx, i32(1), i32(0), res[:4], datatype.Int32, 16) }},
		{"serialized engine", func() error { return w.Accumulate(ctx, make([]byte, 600), datatype.Float64, 0, op.Sum) }},
		{"RPut", func() error { _, err := w.RPut(ctx, u64(1), 0); return err }},
		{"RGet", func() error { _, err := w.RGet(ctx, res, 0); return err }},
		{"RAccumulate", func() error { _, err := w.RAccumulate(ctx, f64(1), datatype.Float64, 8, op.Sum); return err }},
		{"RGetAccumulate", func() error {
			_, err := w.RGetAccumulate(ctx, u64(1), res, datatype.Int64, 0, op.Sum)
			return err
		}},
		{"Lock", func() error { return w.Lock(ctx, rma.LockShared) }},
	}
	for _, serial := range []bool{false, true} {
		for _, tc := range calls {
			var back func()
			if serial {
				back = allLanes(c)
			}
			fs.mu.Lock()
			f.postErr = verbs.ErrQueueFull
			fs.mu.Unlock()
			err := tc.call()
			fs.mu.Lock()
			f.postErr = nil
			fs.mu.Unlock()
			if !errors.Is(err, verbs.ErrQueueFull) {
				t.Errorf("%s (serialized %v): %v, want ErrQueueFull", tc.name, serial, err)
			}
			if err := tc.call(); err != nil {
				t.Errorf("%s (serialized %v): again: %v", tc.name, serial, err)
			}
			if err := w.Flush(ctx); err != nil {
				t.Errorf("%s (serialized %v): Flush: %v", tc.name, serial, err)
			}
			if tc.name == "Lock" {
				if err := w.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if back != nil {
				back()
			}
			if c.free.Load() != 1<<maxLanes-1 || c.engines.Load() != 0 || c.err != nil {
				t.Fatalf("%s (serialized %v): lanes free %#x, engine lanes %d, client error %v", tc.name, serial, c.free.Load(), c.engines.Load(), c.err)
			}
		}
	}
}

// Close: a lane call waiting for its completion, and a request in
// flight, return ErrClosed, and so do later calls.
func TestClientClose(t *testing.T) {
	ctx := context.Background()
	for _, lane := range []bool{true, false} {
		fs := newFakeServer(t, 1024)
		c, f := fs.client(t, AccessAll, 4096)
		w := open(t, c)
		f.setHold(true)
		var wait func() error
		if lane {
			got := make(chan error, 1)
			go func() { got <- w.FetchAndOp(ctx, u64(1), make([]byte, 8), datatype.Int64, 0, op.Sum) }()
			for {
				if l, _ := f.counts(); l == 1 {
					break
				}
				time.Sleep(time.Millisecond)
			}
			wait = func() error { return <-got }
		} else {
			r, err := w.RPut(ctx, u64(1), 8)
			if err != nil {
				t.Fatal(err)
			}
			wait = func() error { return r.Wait(ctx) }
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if err := wait(); !errors.Is(err, ErrClosed) {
			t.Errorf("lane %v: the call in flight: %v, want ErrClosed", lane, err)
		}
		if err := w.Put(ctx, u64(1), 0); !errors.Is(err, ErrClosed) {
			t.Errorf("lane %v: a Put after Close: %v", lane, err)
		}
		if err := w.Get(ctx, make([]byte, 600), 0); !errors.Is(err, ErrClosed) {
			t.Errorf("lane %v: a Get after Close: %v", lane, err)
		}
		if err := c.Close(); !errors.Is(err, ErrClosed) {
			t.Errorf("lane %v: a second Close: %v", lane, err)
		}
	}
}

// AccumulateTo and GetAccumulateTo on a strided layout: float64 through
// the engine (split into messages), int64 through the NIC.
func TestClientLayout(t *testing.T) {
	fs := newFakeServer(t, 4096)
	c, _ := fs.client(t, AccessAll, 4096)
	w := open(t, c)
	ctx := context.Background()
	for _, dt := range []datatype.Basic{datatype.Float64, datatype.Int64} {
		fs.setMem(0, make([]byte, 4096))
		vec, err := datatype.Vector(100, 1, 3, dt.Type()) // every third element
		if err != nil {
			t.Fatal(err)
		}
		l := rma.Layout{Disp: 8, Type: vec, Count: 1}
		origin := make([]byte, 800)
		for i := 0; i < 100; i++ {
			v := uint64(i + 1)
			if dt == datatype.Float64 {
				v = math.Float64bits(float64(i) + 0.5)
			}
			binary.NativeEndian.PutUint64(origin[8*i:], v)
		}
		if err := w.AccumulateTo(ctx, rma.Contiguous(origin, dt), l, op.Sum); err != nil {
			t.Fatalf("%v: AccumulateTo: %v", dt, err)
		}
		result := make([]byte, 800)
		if err := w.GetAccumulateTo(ctx, rma.Contiguous(origin, dt), rma.Contiguous(result, dt), l, op.Sum); err != nil {
			t.Fatalf("%v: GetAccumulateTo: %v", dt, err)
		}
		mem := fs.mem(0, 4096)
		for i := 0; i < 300; i++ {
			got := binary.NativeEndian.Uint64(mem[8+8*i:])
			var want uint64
			if i%3 == 0 {
				o := binary.NativeEndian.Uint64(origin[8*(i/3):])
				want = 2 * o
				if dt == datatype.Float64 {
					want = math.Float64bits(2 * math.Float64frombits(o))
				}
				if old := binary.NativeEndian.Uint64(result[8*(i/3):]); old != o {
					t.Fatalf("%v: element %d: old %#x, want %#x", dt, i/3, old, o)
				}
			}
			if got != want {
				t.Fatalf("%v: word %d is %#x, want %#x", dt, i, got, want)
			}
		}
		if err := w.AccumulateTo(ctx, rma.Contiguous(origin[:8], dt), l, op.Sum); !errors.Is(err, rma.ErrInvalid) {
			t.Errorf("%v: AccumulateTo with a short origin: %v", dt, err)
		}
	}
}

// PutTo and GetTo with derived datatypes on both sides: the origin's and
// the result's every other byte, the target's three blocks, one Put or
// Get per block; mismatched signatures and a layout past the end refused.
func TestClientPutGetTo(t *testing.T) {
	fs := newFakeServer(t, 4096)
	c, _ := fs.client(t, AccessAll, 4096)
	w := open(t, c)
	ctx := context.Background()
	fs.setMem(0, make([]byte, 4096))
	every2, err := datatype.Vector(6, 1, 2, datatype.Uint8.Type())
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := datatype.Indexed([]int{1, 2, 3}, []int{100, 0, 50}, datatype.Uint8.Type())
	if err != nil {
		t.Fatal(err)
	}
	l := rma.Layout{Disp: 8, Type: blocks, Count: 1}
	src := []byte{1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6}
	if err := w.PutTo(ctx, rma.Buffer{Data: src, Type: every2, Count: 1}, l); err != nil {
		t.Fatal(err)
	}
	mem := fs.mem(0, 4096)
	want := map[int]byte{108: 1, 8: 2, 9: 3, 58: 4, 59: 5, 60: 6}
	for i := range 200 {
		if mem[i] != want[i] {
			t.Fatalf("byte %d is %d after PutTo, want %d", i, mem[i], want[i])
		}
	}
	res := make([]byte, 11)
	if err := w.GetTo(ctx, rma.Buffer{Data: res, Type: every2, Count: 1}, l); err != nil || !bytes.Equal(res, src) {
		t.Fatalf("GetTo: %v, %v; want %v", res, err, src)
	}
	if err := w.PutTo(ctx, rma.Contiguous(src[:5], datatype.Uint8), l); !errors.Is(err, rma.ErrInvalid) {
		t.Errorf("PutTo of 5 bytes into 6: %v, want ErrInvalid", err)
	}
	if err := w.GetTo(ctx, rma.Contiguous(res[:6], datatype.Uint8), rma.Layout{Disp: 4000, Type: blocks, Count: 1}); !errors.Is(err, rma.ErrOutOfWindow) {
		t.Errorf("GetTo past the end: %v, want ErrOutOfWindow", err)
	}
}

// TestClientAuthenticate: the handshake's messages on the fake connection.
// With the server's secret the client is admitted (the server records its
// name and probe word) and, the server having no byte-order word to give
// (its key 0), the client's calls go to the engine, which NICAtomics
// says; with another secret the server refuses the proof (ErrAuth) and
// counts the failure; a server that drops the connection instead fails
// the handshake with the peer lost.
func TestClientAuthenticate(t *testing.T) {
	ctx := context.Background()
	var cNonce, sNonce [nonceLen]byte
	copy(cNonce[:], "client nonce....")
	copy(sNonce[:], "server nonce....")
	setup := func(secret string) (*fakeServer, *Client, *fakeConn) {
		fs := newFakeServer(t, 64)
		c, f := fs.client(t, AccessAll, 4096)
		f.sc.authed, f.sc.cNonce, f.sc.sNonce = false, cNonce, sNonce
		c.cfg.Secret, c.cfg.Name = []byte(secret), "tester"
		c.probeAddr, c.probeKey = 0x1000, 0x42
		return fs, c, f
	}

	fs, c, f := setup("the secret")
	if err := c.authenticate(ctx, &cNonce, &sNonce); err != nil {
		t.Fatalf("with the server's secret: %v", err)
	}
	if !f.sc.authed || f.sc.info.Name != "tester" || f.sc.probeAddr != 0x1000 || f.sc.probeRKey != 0x42 {
		t.Errorf("the server's record: authed %v, name %q, probe word %#x key %#x; want true, tester, 0x1000, 0x42",
			f.sc.authed, f.sc.info.Name, f.sc.probeAddr, f.sc.probeRKey)
	}
	if err := c.NICAtomics(); !errors.Is(err, verbs.ErrNotSupported) || c.atomics {
		t.Errorf("NICAtomics with a server that gave no byte-order word: %v (atomics %v), want ErrNotSupported", err, c.atomics)
	}
	if got := fs.s.stats.Connects; got != 1 {
		t.Errorf("the server counted %d connects, want 1", got)
	}

	fs, c, _ = setup("not the secret")
	if err := c.authenticate(ctx, &cNonce, &sNonce); !errors.Is(err, ErrAuth) {
		t.Errorf("with another secret: %v, want ErrAuth", err)
	}
	if got := fs.s.stats.AuthFailures; got != 1 {
		t.Errorf("the server counted %d failures, want 1", got)
	}

	// Nonces the server did not give: its check fails as with a wrong
	// secret.
	_, c, _ = setup("the secret")
	other := sNonce
	other[0] ^= 1
	if err := c.authenticate(ctx, &cNonce, &other); !errors.Is(err, ErrAuth) {
		t.Errorf("with another server nonce: %v, want ErrAuth", err)
	}

	// The connection fails under the proof (the server dropped it).
	_, c, f = setup("the secret")
	f.failNext(verbs.WCRetryExcErr)
	if err := c.authenticate(ctx, &cNonce, &sNonce); !errors.Is(err, verbs.ErrPeerLost) || !strings.Contains(err.Error(), "before authenticating") {
		t.Errorf("with the connection failing: %v, want ErrPeerLost, said to be before authenticating", err)
	}
}

// TestLaneCutBeforePost: a lane Put whose context ends while its work
// request is still enqueued (mu's holder has not posted it) sends
// nothing. Posted later, in one list with its caller's next Put on a
// lower lane, it would land after it and overwrite it.
func TestLaneCutBeforePost(t *testing.T) {
	fs := newFakeServer(t, 4096)
	c, _ := fs.client(t, AccessAll, 4096)
	w := open(t, c)
	first, second := pattern(64, 1), pattern(64, 2)
	low := c.takeLane() // lane 0 busy: the cut Put takes a higher one
	c.mu.Lock()         // a holder of mu that posts nothing for now
	ctx, cancel := context.WithCancel(context.Background())
	cut := make(chan error, 1)
	go func() { cut <- w.Put(ctx, first, 0) }()
	for c.toPost.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	time.Sleep(10 * time.Millisecond) // the cut Put waits for mu to give its lane up
	c.mu.Unlock()
	if err := <-cut; !errors.Is(err, context.Canceled) {
		t.Fatalf("cut Put: %v, want context.Canceled", err)
	}
	c.putLane(low)
	if err := w.Put(context.Background(), second, 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := fs.mem(0, 64); string(got) != string(second) {
		t.Fatalf("after a cut Put and then a Put, the window holds %x, want the second Put's %x", got, second)
	}
	if free := c.free.Load(); free != 1<<maxLanes-1 {
		t.Fatalf("free lanes %#x after both Puts, want all", free)
	}
}
