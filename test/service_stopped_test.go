//go:build integration

package test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/onesided/rma"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/service"
	"github.com/onesided/rma/verbs"
	"github.com/onesided/rma/win"
)

// A server whose process is stopped (SIGSTOP) while its kernel and NIC
// still answer: nothing the client waits for comes, and every wait must
// still end as its context or Close says.

// svcStoppedClient: mode "stopped". Two clients; once the harness has
// stopped the server: a Lock whose context ends while another call of
// the client waits for a reply returns within a second of its context
// (the withdrawal is bounded), and the connection is then lost; Close of
// a client while another goroutine waits for an engine reply returns at
// once, and that call fails with ErrClosed.
func svcStoppedClient(ctx context.Context, addr string) error {
	var cls []*service.Client
	var ws []*service.Window
	for i := 0; i < 2; i++ {
		cl, err := service.Dial(ctx, addr, svcConfig())
		if err != nil {
			return err
		}
		cls = append(cls, cl)
		w, err := cl.Open(ctx, "alpha")
		if err != nil {
			return err
		}
		ws = append(ws, w)
	}
	one := binary.NativeEndian.AppendUint64(nil, math.Float64bits(1))
	if err := ws[0].Accumulate(ctx, one, datatype.Float64, 0, op.Sum); err != nil {
		return fmt.Errorf("Accumulate before the stop: %w", err)
	}
	if err := svcWrite("ready", ""); err != nil {
		return err
	}
	if _, err := svcAwait(ctx, "stopped"); err != nil {
		return err
	}

	// A Lock waits; meanwhile an engine call gives up on its reply; then
	// the Lock's context ends and it withdraws its request.
	type result struct {
		err error
		d   time.Duration
	}
	locked := make(chan result, 1)
	start := time.Now()
	go func() {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		err := ws[1].Lock(lctx, win.LockExclusive)
		locked <- result{err, time.Since(start)}
	}()
	time.Sleep(300 * time.Millisecond)
	actx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := ws[1].Accumulate(actx, one, datatype.Float64, 8, op.Sum)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("Accumulate(200 ms) on the stopped server: %v, want context.DeadlineExceeded", err)
	}
	select {
	case r := <-locked:
		fmt.Printf("Lock(2 s) on the stopped server: %v after %v\n", r.err, r.d.Round(time.Millisecond))
		fmt.Printf("lock_ms=%d\n", r.d.Milliseconds())
		if !errors.Is(r.err, context.DeadlineExceeded) {
			return fmt.Errorf("Lock(2 s) on the stopped server: %v, want context.DeadlineExceeded", r.err)
		}
	case <-time.After(8 * time.Second):
		return fmt.Errorf("Lock(2 s) on the stopped server has not returned after %v", time.Since(start).Round(time.Millisecond))
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = rma.FetchAndOp(fctx, ws[1], int64(1), 0, op.Sum)
	cancel()
	if !errors.Is(err, verbs.ErrPeerLost) {
		return fmt.Errorf("call after the withdrawal failed: %v, want ErrPeerLost (the client disconnects)", err)
	}

	// Close while another goroutine waits for an engine reply.
	accumulated := make(chan error, 1)
	go func() { accumulated <- ws[0].Accumulate(context.Background(), one, datatype.Float64, 0, op.Sum) }()
	time.Sleep(300 * time.Millisecond)
	closed := make(chan error, 1)
	start = time.Now()
	go func() { closed <- cls[0].Close() }()
	select {
	case err := <-closed:
		fmt.Printf("Close with a call waiting on the stopped server: %v after %v\n", err, time.Since(start).Round(time.Millisecond))
		fmt.Printf("close_ms=%d\n", time.Since(start).Milliseconds())
	case <-time.After(5 * time.Second):
		return fmt.Errorf("Close with a call waiting on the stopped server has not returned after 5s")
	}
	select {
	case err := <-accumulated:
		if !errors.Is(err, service.ErrClosed) {
			return fmt.Errorf("the call waiting when Close came: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		return fmt.Errorf("the call waiting when Close came has not returned 5s after Close")
	}
	if err := cls[1].Close(); err != nil {
		fmt.Printf("Close of the client whose connection was lost: %v\n", err)
	}
	return svcWrite("done", "")
}

// svcStall: mode "stall". Forty connection requests that never complete
// their handshake (as from clients that froze mid-Dial, or an attacker)
// do not hold up a Dial after them: beyond MaxPending (32) the oldest
// handshakes are dropped, and each runs apart.
func svcStall(ctx context.Context, addr string) (err error) {
	var c cmCloser
	defer func() { c.close(&err) }()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return err
	}
	for i := 0; i < svcStalled; i++ {
		id, _, _, err := cmRawClient(ctx, &c, ap, verbs.AccessLocalWrite)
		if err != nil {
			return err
		}
		// The request goes out; its events are never read, so the
		// handshake never completes.
		hello := append([]byte("RMAS\x05\x00\x00\x00"), make([]byte, 32)...)
		cctx, cancel := context.WithTimeout(ctx, time.Millisecond)
		id.Connect(cctx, verbs.ConnParam{PrivateData: hello})
		cancel()
	}
	time.Sleep(100 * time.Millisecond)
	dctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	start := time.Now()
	cl, err := service.Dial(dctx, addr, svcConfig())
	fmt.Printf("Dial behind %d stalled handshakes: %v after %v\n", svcStalled, err, time.Since(start).Round(time.Millisecond))
	if err != nil {
		return fmt.Errorf("Dial (1 s) behind %d stalled handshakes: %w", svcStalled, err)
	}
	fmt.Printf("dial_ms=%d\n", time.Since(start).Milliseconds())
	w, err := cl.Open(ctx, "counter")
	if err == nil {
		_, err = rma.FetchAndOp(ctx, w, int64(1), 0, op.Sum)
	}
	if cerr := cl.Close(); err == nil {
		err = cerr
	}
	return err
}

// svcStalled is the number of stalled handshakes svcStall makes.
const svcStalled = 40

// cmRawClient makes an id resolved to dst and its QP (8 sends and
// receives on one CQ), ready to connect, for clients of the wire protocol
// on raw verbs. c closes them.
func cmRawClient(ctx context.Context, c *cmCloser, dst netip.AddrPort, access verbs.Access) (*verbs.CMID, *cmSide, *verbs.QP, error) {
	ch, err := verbs.NewEventChannel()
	if err != nil {
		return nil, nil, nil, err
	}
	c.add(ch.Close)
	id, err := ch.CreateID()
	if err != nil {
		return nil, nil, nil, err
	}
	c.add(id.Close)
	if err := id.ResolveAddr(ctx, netip.Addr{}, dst); err != nil {
		return nil, nil, nil, err
	}
	if err := id.ResolveRoute(ctx); err != nil {
		return nil, nil, nil, err
	}
	route, err := id.Route()
	if err != nil {
		return nil, nil, nil, err
	}
	s, err := newCMSide(c, route.Device, access)
	if err != nil {
		return nil, nil, nil, err
	}
	qp, err := id.CreateQP(s.pd, verbs.QPConfig{SendCQ: s.cq, RecvCQ: s.cq, MaxSendWR: 8, MaxRecvWR: 8})
	if err != nil {
		return nil, nil, nil, err
	}
	c.add(qp.Close)
	return id, s, qp, nil
}

// TestServiceStoppedServer: see svcStoppedClient.
func TestServiceStoppedServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := newSvcTest(t, ctx)
	srv, addr := s.server("server", 0)
	cl := s.client("client", addr, "stopped")
	waitCMFile(ctx, t, filepath.Join(s.dir, "ready"), cl)
	if err := srv.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, "stopped"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out := cl.wait(t, false)
	if err := srv.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	s.stop(srv)
	t.Logf("Lock(2 s) returned after %s ms; Close after %s ms", value(t, out, "lock_ms"), value(t, out, "close_ms"))
}

// TestServiceStalledHandshakes: see svcStall.
func TestServiceStalledHandshakes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := newSvcTest(t, ctx)
	srv, addr := s.server("server", 0)
	out := s.client("client", addr, "stall").wait(t, false)
	st := s.stop(srv)
	t.Logf("Dial behind %d stalled handshakes took %s ms", svcStalled, value(t, out, "dial_ms"))
	t.Logf("server: %s connection requests, %s evicted, %s authentication timeouts",
		value(t, st, "requests"), value(t, st, "evicted"), value(t, st, "authtimeouts"))
	if n, _ := strconv.Atoi(value(t, st, "evicted")); n < svcStalled-32 {
		t.Errorf("%d handshakes evicted, want at least %d (MaxPending 32)", n, svcStalled-32)
	}
}
