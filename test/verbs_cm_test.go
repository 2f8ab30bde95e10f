//go:build integration

package test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onesided/rma/verbs"
)

// The connection manager tests run a listener and dialers as processes of
// this binary, chosen by RMA_CM_ROLE (they form no group, so they do not go
// through runWorker): the listener listens on the rxe netdev's IPv4 address
// with an SRQ for all its connections; dialers connect with private data,
// SEND, WRITE and fetch-and-add into the listener's memory, and disconnect
// or die.

func init() {
	if role := os.Getenv("RMA_CM_ROLE"); role != "" {
		os.Exit(runCMRole(role))
	}
}

const (
	cmInitial  = 1000           // the listener's fetch-and-add word, before
	cmAdd      = 0x0123456789ab // what dialer 1 adds to it
	cmAcceptOK = "rmacm-ok"     // ends the accept's private data
	cmBusy     = "rma-cm-busy:try-later"
	cmRecvSize = 64 // bytes per SRQ receive buffer
	cmRecvs    = 16 // SRQ receives posted
	cmWriteOff = 64 // where dialer 1 writes in the listener's region
	cmWriteLen = 32
)

// cmHello is dialer n's connection request private data: exactly
// MaxConnectPrivateData bytes.
func cmHello(n int) []byte {
	b := []byte(fmt.Sprintf("rma-cm-dialer-%d:", n))
	for len(b) < verbs.MaxConnectPrivateData {
		b = append(b, byte(len(b)*7+n))
	}
	return b
}

func cmWritePattern() []byte {
	b := make([]byte, cmWriteLen)
	for i := range b {
		b[i] = byte(i*13 + 5)
	}
	return b
}

// cmPadded reports whether got is want followed only by zeros (the
// connection manager pads private data).
func cmPadded(got, want []byte) bool {
	if len(got) < len(want) || !bytes.Equal(got[:len(want)], want) {
		return false
	}
	for _, c := range got[len(want):] {
		if c != 0 {
			return false
		}
	}
	return true
}

func runCMRole(role string) int {
	verbs.TrackObjects(true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var err error
	switch role {
	case "listener":
		err = cmListener(ctx)
	case "dialer":
		err = cmDialer(ctx, os.Getenv("RMA_CM_MODE"))
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err == nil {
		if open := verbs.OpenObjects(); len(open) > 0 {
			err = fmt.Errorf("%d verbs objects left open:\n%s", len(open), strings.Join(open, "\n"))
		}
	}
	if err != nil {
		fmt.Printf("FAIL: %s: %v\n", role, err)
		return 1
	}
	return 0
}

// cmCloser runs its functions in reverse order, keeping the first error.
type cmCloser []func() error

func (c *cmCloser) add(f func() error) { *c = append(*c, f) }
func (c cmCloser) close(err *error) {
	for i := len(c) - 1; i >= 0; i-- {
		if e := c[i](); e != nil && *err == nil {
			*err = e
		}
	}
}

// cmSide is what both sides build on the connection manager's context of
// the device an id is bound to.
type cmSide struct {
	dev *verbs.Context
	pd  *verbs.PD
	cq  *verbs.CQ
	mem []byte
	mr  *verbs.MR
}

func newCMSide(c *cmCloser, device string, access verbs.Access) (*cmSide, error) {
	s := &cmSide{}
	var err error
	if s.dev, err = verbs.OpenCM(device); err != nil {
		return nil, err
	}
	c.add(s.dev.Close)
	if s.pd, err = s.dev.AllocPD(); err != nil {
		return nil, err
	}
	c.add(s.pd.Close)
	if s.cq, err = s.dev.CreateCQ(64, nil); err != nil {
		return nil, err
	}
	c.add(s.cq.Close)
	if s.mem, err = verbs.Alloc(4096); err != nil {
		return nil, err
	}
	c.add(func() error { return verbs.Free(s.mem) })
	if s.mr, err = s.pd.RegisterMR(s.mem, access|verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	c.add(s.mr.Close)
	return s, nil
}

// poll waits for one completion, polling every millisecond.
func (s *cmSide) poll(ctx context.Context) (verbs.WC, error) {
	var wcs [1]verbs.WC
	for {
		n, err := s.cq.Poll(wcs[:])
		if err != nil {
			return verbs.WC{}, err
		}
		if n == 1 {
			return wcs[0], nil
		}
		select {
		case <-ctx.Done():
			return verbs.WC{}, fmt.Errorf("no completion: %w", ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// cmListener serves three connection requests on one SRQ: it accepts
// dialer 1, checks what its SEND, WRITE and fetch-and-add did and waits for
// its disconnect; rejects dialer 2 with private data; accepts dialer 3 and
// waits for the disconnect that its death causes. It prints key=value
// lines for the test.
func cmListener(ctx context.Context) (err error) {
	var c cmCloser
	defer func() { c.close(&err) }()
	ip, err := netip.ParseAddr(os.Getenv("RMA_CM_IP"))
	if err != nil {
		return err
	}
	ch, err := verbs.NewEventChannel()
	if err != nil {
		return err
	}
	c.add(ch.Close)
	lid, err := ch.CreateID()
	if err != nil {
		return err
	}
	c.add(lid.Close)
	if err := lid.SetReuseAddr(true); err != nil {
		return err
	}
	if err := lid.Listen(netip.AddrPortFrom(ip, 0), 4); err != nil {
		return err
	}
	la := lid.LocalAddr()
	if la.Addr() != ip || la.Port() == 0 {
		return fmt.Errorf("listening on %v, want %v and a port", la, ip)
	}
	route, err := lid.Route()
	if err != nil {
		return err
	}
	fmt.Printf("listener: %v on %s port %d, GID %v\n", la, route.Device, route.Port, route.SrcGID)
	s, err := newCMSide(&c, route.Device, verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	if err != nil {
		return err
	}
	srq, err := s.pd.CreateSRQ(verbs.SRQConfig{MaxWR: cmRecvs})
	if err != nil {
		return err
	}
	c.add(srq.Close)
	if srq.MaxWR() < cmRecvs {
		return fmt.Errorf("SRQ granted %d receives, asked %d", srq.MaxWR(), cmRecvs)
	}
	var wrs [cmRecvs]verbs.RecvWR
	for i := range wrs {
		wrs[i] = verbs.RecvWR{WRID: uint64(100 + i), Local: s.mr.Local(1024+i*cmRecvSize, cmRecvSize)}
	}
	if n, err := srq.PostRecvs(wrs[:]); err != nil || n != cmRecvs {
		return fmt.Errorf("posted %d of %d SRQ receives: %v", n, cmRecvs, err)
	}
	binary.NativeEndian.PutUint64(s.mem[0:], cmInitial)
	accept := binary.LittleEndian.AppendUint64(nil, s.mr.Addr())
	accept = binary.LittleEndian.AppendUint32(accept, s.mr.RKey())
	accept = binary.LittleEndian.AppendUint64(accept, cmInitial)
	accept = append(accept, cmAcceptOK...)

	dir := os.Getenv("RMA_TEST_DIR")
	if err := os.WriteFile(filepath.Join(dir, "port.tmp"), []byte(strconv.Itoa(int(la.Port()))), 0o644); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(dir, "port.tmp"), filepath.Join(dir, "port")); err != nil {
		return err
	}

	// recv takes the next SEND from the SRQ and checks it came on qp.
	recv := func(qp *verbs.QP, want string) error {
		wc, err := s.poll(ctx)
		if err != nil {
			return fmt.Errorf("waiting for %q: %w", want, err)
		}
		if err := wc.Err(); err != nil || wc.Opcode != verbs.WCRecv || wc.QPNum != qp.Num() ||
			wc.WRID < 100 || wc.WRID >= 100+cmRecvs || wc.ByteLen != uint32(len(want)) {
			return fmt.Errorf("receive completion %+v (%v), want %q on QP %d", wc, err, want, qp.Num())
		}
		off := 1024 + int(wc.WRID-100)*cmRecvSize
		if got := string(s.mem[off : off+len(want)]); got != want {
			return fmt.Errorf("SRQ buffer %d holds %q, want %q", wc.WRID, got, want)
		}
		fmt.Printf("listener: %q landed in SRQ buffer %d (QP %d)\n", want, wc.WRID, wc.QPNum)
		return srq.PostRecv(wc.WRID, s.mr.Local(off, cmRecvSize))
	}
	// request takes the next connection request, which must carry dialer n's hello.
	request := func(n int) (*verbs.CMID, error) {
		ev, err := lid.Event(ctx)
		if err != nil {
			return nil, err
		}
		if ev.Type != verbs.CMConnectRequest || ev.ID == nil || ev.Listener != lid {
			return nil, fmt.Errorf("event %v (%+v), want a connection request", ev.Type, ev)
		}
		if !cmPadded(ev.PrivateData, cmHello(n)) {
			ev.ID.Reject(nil)
			ev.ID.Close()
			return nil, fmt.Errorf("request private data %q, want %q", ev.PrivateData, cmHello(n))
		}
		r, err := ev.ID.Route()
		if err != nil || r.Device != route.Device {
			return nil, fmt.Errorf("request's route %+v, %v: want device %s", r, err, route.Device)
		}
		fmt.Printf("listener: request %d from %v (initiator depth %d, responder resources %d)\n",
			n, ev.ID.PeerAddr(), ev.InitiatorDepth, ev.ResponderResources)
		return ev.ID, nil
	}
	// serve accepts a request on a QP of the SRQ and watches for its end.
	type conn struct {
		id   *verbs.CMID
		qp   *verbs.QP
		gone chan error // the disconnect, at the time it was seen
		at   time.Time
	}
	serve := func(id *verbs.CMID) (*conn, error) {
		qp, err := id.CreateQP(s.pd, verbs.QPConfig{SendCQ: s.cq, RecvCQ: s.cq, SRQ: srq, MaxSendWR: 8})
		if err != nil {
			id.Close()
			return nil, err
		}
		cn := &conn{id: id, qp: qp, gone: make(chan error, 1)}
		if _, err := id.Accept(ctx, verbs.ConnParam{PrivateData: accept}); err != nil {
			qp.Close()
			id.Close()
			return nil, err
		}
		if st, err := qp.State(); err != nil || st != verbs.QPRTS {
			return nil, fmt.Errorf("accepted QP in state %v (%v), want RTS", st, err)
		}
		if err := qp.SetMinRNRTimer(12); err != nil {
			return nil, err
		}
		// Another goroutine waits for the disconnect while this one waits on
		// the listener and the CQ: one of them reads the channel for both.
		go func() {
			ev, err := id.Event(ctx)
			cn.at = time.Now()
			if err == nil && ev.Type != verbs.CMDisconnected {
				err = fmt.Errorf("event %v, want DISCONNECTED", ev.Type)
			}
			cn.gone <- err
		}()
		return cn, nil
	}
	end := func(cn *conn, key string) error {
		if err := <-cn.gone; err != nil {
			return err
		}
		fmt.Printf("%s=%d\n", key, cn.at.UnixNano())
		if err := cn.id.Disconnect(); err != nil {
			fmt.Printf("listener: disconnect after DISCONNECTED: %v\n", err)
		}
		if err := cn.qp.Close(); err != nil {
			return err
		}
		return cn.id.Close()
	}

	// Dialer 1: SEND, WRITE, fetch-and-add, SEND, disconnect.
	id1, err := request(1)
	if err != nil {
		return err
	}
	c1, err := serve(id1)
	if err != nil {
		return err
	}
	if err := recv(c1.qp, "hello through the SRQ"); err != nil {
		return err
	}
	if err := recv(c1.qp, "done"); err != nil {
		return err
	}
	if got := s.mem[cmWriteOff : cmWriteOff+cmWriteLen]; !bytes.Equal(got, cmWritePattern()) {
		return fmt.Errorf("after the WRITE: % x, want % x", got, cmWritePattern())
	}
	if got := binary.NativeEndian.Uint64(s.mem[0:]); got != cmInitial+cmAdd {
		return fmt.Errorf("after the fetch-and-add: %#x, want %#x", got, uint64(cmInitial+cmAdd))
	}
	fmt.Println("listener: WRITE and fetch-and-add landed exactly")
	if err := end(c1, "disconnected1_at"); err != nil {
		return err
	}

	// Dialer 2: rejected, with private data.
	id2, err := request(2)
	if err != nil {
		return err
	}
	if err := id2.Reject([]byte(cmBusy)); err != nil {
		return err
	}
	if err := id2.Close(); err != nil {
		return err
	}

	// Dialer 3: accepted; it says it is ready, then the test kills it.
	id3, err := request(3)
	if err != nil {
		return err
	}
	c3, err := serve(id3)
	if err != nil {
		return err
	}
	if err := recv(c3.qp, "ready"); err != nil {
		return err
	}
	return end(c3, "disconnected3_at")
}

// cmDialer connects to RMA_CM_ADDR as dialer n (mode "1": accepted, then
// SEND, WRITE, fetch-and-add, SEND and disconnect; "2": rejected; "3":
// accepted, SENDs "ready", writes RMA_TEST_DIR/ready and waits to be
// killed).
func cmDialer(ctx context.Context, mode string) (err error) {
	n, err := strconv.Atoi(mode)
	if err != nil || n < 1 || n > 3 {
		return fmt.Errorf("dialer mode %q", mode)
	}
	var c cmCloser
	defer func() { c.close(&err) }()
	dst, err := netip.ParseAddrPort(os.Getenv("RMA_CM_ADDR"))
	if err != nil {
		return err
	}
	ch, err := verbs.NewEventChannel()
	if err != nil {
		return err
	}
	c.add(ch.Close)
	id, err := ch.CreateID()
	if err != nil {
		return err
	}
	c.add(id.Close)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := id.ResolveAddr(rctx, netip.Addr{}, dst); err != nil {
		return err
	}
	if err := id.ResolveRoute(rctx); err != nil {
		return err
	}
	resolved := time.Since(start)
	route, err := id.Route()
	if err != nil {
		return err
	}
	fmt.Printf("dialer %d: %v -> %v on %s port %d, GIDs %v -> %v, path MTU %v, resolved in %v\n",
		n, id.LocalAddr(), id.PeerAddr(), route.Device, route.Port, route.SrcGID, route.DstGID, route.MTU, resolved)
	if id.PeerAddr() != dst {
		return fmt.Errorf("peer address %v, want %v", id.PeerAddr(), dst)
	}
	s, err := newCMSide(&c, route.Device, 0)
	if err != nil {
		return err
	}
	// A PD of a context of the device's own (Open, not OpenCM) is refused.
	if own, err := verbs.Open(route.Device); err == nil {
		pd, err := own.AllocPD()
		if err == nil {
			if qp, err := id.CreateQP(pd, verbs.QPConfig{SendCQ: s.cq, RecvCQ: s.cq, MaxSendWR: 1, MaxRecvWR: 1}); !errors.Is(err, verbs.ErrInvalid) {
				if qp != nil {
					qp.Close()
				}
				return fmt.Errorf("QP on a PD of another context: %v, want ErrInvalid", err)
			}
			pd.Close()
		}
		own.Close()
	}
	if err := id.SetAckTimeout(14); err != nil {
		return err
	}
	qp, err := id.CreateQP(s.pd, verbs.QPConfig{SendCQ: s.cq, RecvCQ: s.cq, MaxSendWR: 8, MaxRecvWR: 2})
	if err != nil {
		return err
	}
	c.add(qp.Close)
	if err := id.Close(); !errors.Is(err, verbs.ErrInvalid) {
		return fmt.Errorf("closing an id before its QP: %v, want ErrInvalid", err)
	}
	if _, err := id.Connect(ctx, verbs.ConnParam{PrivateData: make([]byte, verbs.MaxConnectPrivateData+1)}); !errors.Is(err, verbs.ErrInvalid) {
		return fmt.Errorf("connect with %d bytes of private data: %v, want ErrInvalid", verbs.MaxConnectPrivateData+1, err)
	}
	start = time.Now()
	ev, err := id.Connect(ctx, verbs.ConnParam{PrivateData: cmHello(n)})
	if n == 2 {
		var ce *verbs.CMError
		if !errors.Is(err, verbs.ErrRejected) || errors.Is(err, verbs.ErrNoListener) || !errors.As(err, &ce) {
			return fmt.Errorf("connect: %v, want a reject by the listener", err)
		}
		if !cmPadded(ce.PrivateData, []byte(cmBusy)) {
			return fmt.Errorf("reject private data %q, want %q", ce.PrivateData, cmBusy)
		}
		fmt.Printf("dialer 2: rejected in %v: %v, private data %q\n", time.Since(start), err, bytes.TrimRight(ce.PrivateData, "\x00"))
		fmt.Printf("rejected=%s\n", bytes.TrimRight(ce.PrivateData, "\x00"))
		return nil
	}
	if err != nil {
		return err
	}
	if len(ev.PrivateData) < 28 || string(ev.PrivateData[20:28]) != cmAcceptOK {
		return fmt.Errorf("accept private data %q", ev.PrivateData)
	}
	raddr := binary.LittleEndian.Uint64(ev.PrivateData[0:])
	rkey := binary.LittleEndian.Uint32(ev.PrivateData[8:])
	if initial := binary.LittleEndian.Uint64(ev.PrivateData[12:]); initial != cmInitial {
		return fmt.Errorf("accept says the word holds %d, want %d", initial, cmInitial)
	}
	if !ev.RemoteSRQ {
		return fmt.Errorf("the listener's QP does not say it uses an SRQ")
	}
	if st, err := qp.State(); err != nil || st != verbs.QPRTS {
		return fmt.Errorf("connected QP in state %v (%v), want RTS", st, err)
	}
	fmt.Printf("dialer %d: connected in %v to QP %d (remote region %#x, rkey %#x)\n", n, time.Since(start), ev.RemoteQPN, raddr, rkey)
	// op posts one signaled work request and waits for its completion.
	op := func(what string, post func() error, want verbs.WCOpcode) error {
		if err := post(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		wc, err := s.poll(ctx)
		if err == nil {
			err = wc.Err()
		}
		if err == nil && wc.Opcode != want {
			err = fmt.Errorf("completion %v, want %v", wc.Opcode, want)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	send := func(msg string) error {
		copy(s.mem[512:], msg)
		return op("SEND "+msg, func() error { return qp.PostSend(1, s.mr.Local(512, len(msg)), verbs.SendSignaled) }, verbs.WCSend)
	}
	if n == 3 {
		if err := send("ready"); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(os.Getenv("RMA_TEST_DIR"), "ready"), nil, 0o644); err != nil {
			return err
		}
		fmt.Println("dialer 3: ready to be killed")
		<-ctx.Done()
		return fmt.Errorf("not killed: %w", ctx.Err())
	}
	if err := send("hello through the SRQ"); err != nil {
		return err
	}
	copy(s.mem[0:], cmWritePattern())
	if err := op("WRITE", func() error {
		return qp.PostWrite(2, s.mr.Local(0, cmWriteLen), raddr+cmWriteOff, rkey, verbs.SendSignaled)
	}, verbs.WCRDMAWrite); err != nil {
		return err
	}
	if err := op("FETCH_ADD", func() error {
		return qp.PostFetchAdd(3, s.mr.Local(256, 8), raddr, rkey, cmAdd, verbs.SendSignaled)
	}, verbs.WCFetchAdd); err != nil {
		return err
	}
	if old := binary.NativeEndian.Uint64(s.mem[256:]); old != cmInitial {
		return fmt.Errorf("fetch-and-add returned %d, want %d", old, cmInitial)
	}
	if err := send("done"); err != nil {
		return err
	}
	fmt.Printf("disconnect_at=%d\n", time.Now().UnixNano())
	if err := id.Disconnect(); err != nil {
		return err
	}
	dctx, cancel2 := context.WithTimeout(ctx, 10*time.Second)
	defer cancel2()
	ev, err = id.Event(dctx)
	if err != nil || ev.Type != verbs.CMDisconnected {
		return fmt.Errorf("after Disconnect: %v %v, want DISCONNECTED", ev.Type, err)
	}
	if st, err := qp.State(); err != nil || st != verbs.QPErr {
		return fmt.Errorf("disconnected QP in state %v (%v), want ERR", st, err)
	}
	fmt.Println("dialer 1: disconnected")
	return nil
}

// cmIPv4 is the IPv4 address of the RDMA device's network device.
func cmIPv4(t *testing.T) netip.Addr {
	t.Helper()
	devs, err := verbs.Devices()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		for _, nd := range d.Netdevs {
			ifc, err := net.InterfaceByName(nd)
			if err != nil {
				continue
			}
			addrs, _ := ifc.Addrs()
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
					ip, _ := netip.AddrFromSlice(n.IP.To4())
					t.Logf("device %s: netdev %s, %v", d.Name, nd, ip)
					return ip
				}
			}
		}
	}
	t.Fatalf("no IPv4 address on the netdevs of %+v", devs)
	return netip.Addr{}
}

// cmProc is one started role.
type cmProc struct {
	name   string
	cmd    *exec.Cmd
	out    bytes.Buffer
	done   chan error
	waited atomic.Bool // wait has taken its exit
}

func startCM(ctx context.Context, t *testing.T, name, role, dir string, env ...string) *cmProc {
	t.Helper()
	p := &cmProc{name: name, done: make(chan error, 1)}
	p.cmd = exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	p.cmd.Cancel = quitProcess(p.cmd)
	p.cmd.Env = append(os.Environ(), "RMA_CM_ROLE="+role, "RMA_TEST_DIR="+dir)
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stdout = &p.out
	p.cmd.Stderr = &p.out
	p.cmd.WaitDelay = time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	return p
}

// wait waits for the process to end; it fails the test if it failed,
// unless killed is set, and returns its output.
func (p *cmProc) wait(t *testing.T, killed bool) string {
	t.Helper()
	err := <-p.done
	p.waited.Store(true)
	out := p.out.String()
	t.Logf("%s output:\n%s", p.name, out)
	if err != nil && !killed {
		t.Fatalf("%s: %v", p.name, err)
	}
	return out
}

// waitCMFile waits for a file that a process writes, failing if the process
// ends first.
func waitCMFile(ctx context.Context, t *testing.T, file string, p *cmProc) []byte {
	t.Helper()
	for {
		if b, err := os.ReadFile(file); err == nil {
			return b
		}
		select {
		case err := <-p.done:
			p.done <- err
			p.wait(t, false)
			t.Fatalf("%s ended before writing %s", p.name, file)
		case <-ctx.Done():
			t.Fatalf("no %s: %v", file, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func cmUnixNano(t *testing.T, out, key string) time.Time {
	t.Helper()
	n, err := strconv.ParseInt(value(t, out, key), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return time.Unix(0, n)
}

// TestVerbsCM: a listener process on the rxe netdev's address and three
// dialer processes. Dialer 1 is accepted (the private data of both sides
// checked), its SEND lands in the listener's SRQ, its WRITE and 64-bit
// fetch-and-add land in the listener's memory with exact values, and its
// disconnect reaches the listener; dialer 2 is rejected with private data
// it sees; dialer 3 is killed with SIGKILL, which the listener sees as a
// disconnect. Both disconnects must arrive within 10 s.
func TestVerbsCM(t *testing.T) {
	requireDevice(t)
	ip := cmIPv4(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	listener := startCM(ctx, t, "listener", "listener", dir, "RMA_CM_IP="+ip.String())
	port := string(waitCMFile(ctx, t, filepath.Join(dir, "port"), listener))
	addr := ip.String() + ":" + port
	t.Logf("listener at %s", addr)

	d1 := startCM(ctx, t, "dialer 1", "dialer", dir, "RMA_CM_ADDR="+addr, "RMA_CM_MODE=1")
	out1 := d1.wait(t, false)
	d2 := startCM(ctx, t, "dialer 2", "dialer", dir, "RMA_CM_ADDR="+addr, "RMA_CM_MODE=2")
	out2 := d2.wait(t, false)
	if got := value(t, out2, "rejected"); got != cmBusy {
		t.Errorf("dialer 2 saw reject private data %q, want %q", got, cmBusy)
	}
	d3 := startCM(ctx, t, "dialer 3", "dialer", dir, "RMA_CM_ADDR="+addr, "RMA_CM_MODE=3")
	waitCMFile(ctx, t, filepath.Join(dir, "ready"), d3)
	killed := time.Now()
	if err := d3.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	d3.wait(t, true)
	lout := listener.wait(t, false)

	const bound = 10 * time.Second
	d1Gone := cmUnixNano(t, lout, "disconnected1_at").Sub(cmUnixNano(t, out1, "disconnect_at"))
	d3Gone := cmUnixNano(t, lout, "disconnected3_at").Sub(killed)
	t.Logf("DISCONNECTED at the listener %v after dialer 1's Disconnect, %v after dialer 3's SIGKILL", d1Gone, d3Gone)
	if d1Gone < 0 || d1Gone > bound || d3Gone < 0 || d3Gone > bound {
		t.Errorf("disconnects took %v and %v, want at most %v", d1Gone, d3Gone, bound)
	}
}

// TestVerbsCMNoListener: connecting to a port nobody listens on fails with
// ErrNoListener (the peer's connection manager rejects the request), well
// before the context's deadline.
func TestVerbsCMNoListener(t *testing.T) {
	t0 := time.Now()
	requireDevice(t)
	ip := cmIPv4(t)
	t.Logf("found the device in %v", time.Since(t0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	begin := time.Now()
	ch, err := verbs.NewEventChannel()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := ch.Close(); err != nil {
			t.Error(err)
		}
		t.Logf("channel closed at %v", time.Since(t0))
	}()
	// A port that was free a moment ago: listen on port 0, then close.
	l, err := ch.CreateID()
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(netip.AddrPortFrom(ip, 0), 1); err != nil {
		l.Close()
		t.Fatal(err)
	}
	dst := l.LocalAddr()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var c cmCloser
	defer func() {
		var err error
		start := time.Now()
		c.close(&err)
		if err != nil {
			t.Error(err)
		}
		t.Logf("closed in %v", time.Since(start))
	}()
	t.Logf("listened on and closed %v in %v", dst, time.Since(begin))
	id, err := ch.CreateID()
	if err != nil {
		t.Fatal(err)
	}
	c.add(id.Close)
	if err := id.ResolveAddr(ctx, netip.Addr{}, dst); err != nil {
		t.Fatal(err)
	}
	if err := id.ResolveRoute(ctx); err != nil {
		t.Fatal(err)
	}
	route, err := id.Route()
	if err != nil {
		t.Fatal(err)
	}
	s, err := newCMSide(&c, route.Device, 0)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := id.CreateQP(s.pd, verbs.QPConfig{SendCQ: s.cq, RecvCQ: s.cq, MaxSendWR: 1, MaxRecvWR: 1})
	if err != nil {
		t.Fatal(err)
	}
	c.add(qp.Close)
	t.Logf("resolved and made a QP in %v", time.Since(begin))
	start := time.Now()
	_, err = id.Connect(ctx, verbs.ConnParam{PrivateData: []byte("anyone?")})
	took := time.Since(start)
	t.Logf("connect to %v, where nothing listens: %v after %v", dst, err, took)
	if !errors.Is(err, verbs.ErrNoListener) || !errors.Is(err, verbs.ErrRejected) {
		t.Fatalf("connect to a port nobody listens on: %v, want ErrNoListener", err)
	}
	if took > 10*time.Second {
		t.Fatalf("the refusal took %v", took)
	}
	// An address no route leads to (TEST-NET-1, in a guest without a
	// default route): resolution fails with ErrNoRoute.
	unroutable := netip.MustParseAddrPort("192.0.2.1:9")
	if u, err := net.Dial("udp", unroutable.String()); err == nil {
		u.Close()
		t.Logf("this host routes to %v: unroutable addresses not checked", unroutable)
		return
	}
	id2, err := ch.CreateID()
	if err != nil {
		t.Fatal(err)
	}
	c.add(id2.Close)
	start = time.Now()
	err = id2.ResolveAddr(ctx, netip.Addr{}, unroutable)
	t.Logf("resolve %v: %v after %v", unroutable, err, time.Since(start))
	if !errors.Is(err, verbs.ErrNoRoute) {
		t.Fatalf("resolving an address no route leads to: %v, want ErrNoRoute", err)
	}
}

// TestVerbsSRQ: two QPs connected without the connection manager (the RC
// path), the receiving one on an SRQ: a batch of 40 receives (two calls to
// C) is posted, three SENDs land in the first three buffers in order, with
// completions on the receiving QP's CQ naming it.
func TestVerbsSRQ(t *testing.T) {
	requireDevice(t)
	dev, err := verbs.Open("")
	if err != nil {
		t.Fatal(err)
	}
	var c cmCloser
	defer func() {
		var err error
		c.close(&err)
		if err != nil {
			t.Error(err)
		}
	}()
	c.add(dev.Close)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	pa, err := dev.QueryPort(1)
	must(err)
	table, err := dev.GIDTable(1)
	must(err)
	gidIndex, err := verbs.DefaultGIDIndex(table)
	must(err)
	gid, err := dev.QueryGID(1, gidIndex)
	must(err)
	pd, err := dev.AllocPD()
	must(err)
	c.add(pd.Close)
	cq, err := dev.CreateCQ(128, nil)
	must(err)
	c.add(cq.Close)
	mem, err := verbs.Alloc(8192)
	must(err)
	c.add(func() error { return verbs.Free(mem) })
	mr, err := pd.RegisterMR(mem, verbs.AccessLocalWrite)
	must(err)
	c.add(mr.Close)
	srq, err := pd.CreateSRQ(verbs.SRQConfig{MaxWR: 64})
	must(err)
	c.add(srq.Close)
	a, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: 8, MaxRecvWR: 1})
	must(err)
	c.add(a.Close)
	b, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: 8, SRQ: srq})
	must(err)
	c.add(b.Close)
	path := verbs.Path{Port: 1, LinkLayer: pa.LinkLayer, GIDIndex: gidIndex, MTU: pa.ActiveMTU,
		MaxRdAtomic: 1, Timeout: 14, RetryCount: 7, RNRRetry: 7, MinRNRTimer: 12}
	ea := verbs.Endpoint{QPN: a.Num(), PSN: 1, LID: pa.LID, GID: gid.GID}
	eb := verbs.Endpoint{QPN: b.Num(), PSN: 2, LID: pa.LID, GID: gid.GID}
	must(a.Connect(&path, ea, eb))
	must(b.Connect(&path, eb, ea))

	const size = 64
	wrs := make([]verbs.RecvWR, 40)
	for i := range wrs {
		wrs[i] = verbs.RecvWR{WRID: uint64(1000 + i), Local: mr.Local(4096+i*size, size)}
	}
	if n, err := srq.PostRecvs(wrs); err != nil || n != len(wrs) {
		t.Fatalf("posted %d of %d: %v", n, len(wrs), err)
	}
	msgs := []string{"first", "second message", "third"}
	for i, m := range msgs {
		copy(mem[512+i*size:], m)
		must(a.PostSend(uint64(i), mr.Local(512+i*size, len(m)), verbs.SendSignaled))
	}
	var wcs [8]verbs.WC
	var recvs []verbs.WC
	sends := 0
	deadline := time.Now().Add(30 * time.Second)
	for (len(recvs) < len(msgs) || sends < len(msgs)) && time.Now().Before(deadline) {
		n, err := cq.Poll(wcs[:])
		must(err)
		for _, wc := range wcs[:n] {
			must(wc.Err())
			if wc.Opcode == verbs.WCRecv {
				recvs = append(recvs, wc)
			} else {
				sends++
			}
		}
		if n == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if len(recvs) != len(msgs) {
		t.Fatalf("%d receives, %d sends completed; want %d each", len(recvs), sends, len(msgs))
	}
	for i, wc := range recvs {
		off := 4096 + i*size
		if wc.WRID != uint64(1000+i) || wc.QPNum != b.Num() || wc.ByteLen != uint32(len(msgs[i])) ||
			string(mem[off:off+len(msgs[i])]) != msgs[i] {
			t.Errorf("receive %d: %+v, buffer %q; want WRID %d on QP %d holding %q",
				i, wc, mem[off:off+int(wc.ByteLen)], 1000+i, b.Num(), msgs[i])
		}
	}
}
