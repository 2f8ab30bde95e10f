//go:build integration

package test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/onesided/rma"
	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/fallback"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/service"
	"github.com/onesided/rma/verbs"
)

// The service's door, tried as an attacker would: with raw verbs clients
// of the wire protocol (svcWire), against a server of this binary.

func init() {
	svcModes["door"] = svcDoor
	svcModes["grants"] = svcGrants
	svcModes["rotate"] = svcRotate
}

// svcAuthorize is the test server's ServerConfig.Authorize (RMA_SVC_AUTHZ):
// "reader" may only read, "nobody" may open nothing, "putter" may only
// write alpha; the others may do everything.
func svcAuthorize(c service.ClientInfo, window string) service.Access {
	switch c.Name {
	case "reader":
		return service.AccessRead
	case "nobody":
		return 0
	case "putter":
		if window == "alpha" {
			return service.AccessWrite
		}
		return 0
	}
	return service.AccessAll
}

// expectRefused fails unless every operation of kinds on a fresh
// connection (authenticated with secret under name, or not at all if
// secret is empty) fails at addr with key; each try needs its own
// connection, since a refused operation breaks the QP.
func expectRefused(ctx context.Context, addr, secret, name, what string, kinds []int, raddr uint64, rkey uint32) error {
	for _, k := range kinds {
		w, err := dialWire(ctx, addr)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if secret != "" {
			if err := w.auth(ctx, secret, name); err != nil {
				w.close()
				return fmt.Errorf("%s: %w", what, err)
			}
		}
		err = w.rdma(ctx, k, raddr, rkey)
		w.close()
		fmt.Printf("%s: %s at %#x key %#x: %v\n", what, rdmaNames[k], raddr, rkey, err)
		if err == nil {
			return fmt.Errorf("%s: %s at %#x with key %#x succeeded", what, rdmaNames[k], raddr, rkey)
		}
	}
	return nil
}

var allRDMA = []int{rdmaRead, rdmaWrite, rdmaFetchAdd, rdmaCompareSwap}

// svcDoor: mode "door". A client A proves the secret and learns the
// counter window's address and key (its own READ with it works); then
// connections that never prove the secret, and another client B that
// does, try READ, WRITE, FETCH_ADD and CMP_SWAP with that address and key
// and all fail; after A disconnects, its key fails on every connection; a
// bounded loop guessing keys near A's gets nothing; A's key to its
// byte-order word reads it but does not write, and works for A alone;
// and the counter
// never changed (1000, as a legitimate client set it).
func svcDoor(ctx context.Context, addr string) error {
	secret := os.Getenv("RMA_SVC_SECRET")
	cl, err := service.Dial(ctx, addr, svcConfig())
	if err != nil {
		return err
	}
	defer cl.Close()
	counter, err := cl.Open(ctx, "counter")
	if err != nil {
		return err
	}
	if err := counter.Put(ctx, binary.NativeEndian.AppendUint64(nil, 1000), 0); err != nil {
		return err
	}
	a, err := dialWire(ctx, addr)
	if err != nil {
		return err
	}
	if err := a.auth(ctx, secret, "a"); err != nil {
		return err
	}
	win, err := a.open(ctx, "counter")
	if err != nil {
		return err
	}
	fmt.Printf("client A: counter at %#x, key %#x, access %#x\n", win.addr, win.rkey, win.access)
	// The positive control: the key works for A.
	if err := a.rdma(ctx, rdmaRead, win.addr, win.rkey); err != nil {
		return fmt.Errorf("client A's READ with its own key: %w", err)
	}
	if got := binary.NativeEndian.Uint64(a.s.mem); got != 1000 {
		return fmt.Errorf("client A read %d, want 1000", got)
	}
	if err := expectRefused(ctx, addr, "", "", "unauthenticated, A's key", allRDMA, win.addr, win.rkey); err != nil {
		return err
	}
	if err := expectRefused(ctx, addr, secret, "b", "client B, A's key", allRDMA, win.addr, win.rkey); err != nil {
		return err
	}
	if err := a.rdma(ctx, rdmaRead, win.addr, win.rkey); err != nil {
		return fmt.Errorf("client A's READ after the others' tries: %w", err)
	}
	// A's byte-order word (msgAuthOK): A reads it, holding
	// atomics.ProbeValue; others' keys to it fail, and so does a WRITE
	// by A, which its key does not grant (it ends A's connection).
	if err := a.rdma(ctx, rdmaRead, a.orderAddr, a.orderRKey); err != nil {
		return fmt.Errorf("client A's READ of its byte-order word: %w", err)
	}
	if got := binary.NativeEndian.Uint64(a.s.mem); got != atomics.ProbeValue {
		return fmt.Errorf("client A's byte-order word holds %#x, want %#x", got, uint64(atomics.ProbeValue))
	}
	if err := expectRefused(ctx, addr, secret, "b", "client B, A's byte-order key", allRDMA, a.orderAddr, a.orderRKey); err != nil {
		return err
	}
	if err := a.rdma(ctx, rdmaWrite, a.orderAddr, a.orderRKey); err == nil {
		return errors.New("client A's WRITE to its byte-order word succeeded")
	}
	if err := a.close(); err != nil {
		return err
	}
	time.Sleep(200 * time.Millisecond) // the server tears A's connection down
	if err := expectRefused(ctx, addr, "", "", "unauthenticated, A's key after A left", allRDMA, win.addr, win.rkey); err != nil {
		return err
	}
	if err := expectRefused(ctx, addr, secret, "c", "client C, A's key after A left", allRDMA, win.addr, win.rkey); err != nil {
		return err
	}
	// Guessing: the window's address with keys of nearby indices and
	// other low bytes, 48 unauthenticated tries and 16 by a client that
	// proved the secret but opened nothing.
	tries := 0
	for i := -3; i <= 2; i++ {
		for _, low := range []uint32{0, 1, 0x80, 0xff, win.rkey & 0xff, (win.rkey + 1) & 0xff, (win.rkey + 0x40) & 0xff, 0x5a} {
			key := uint32(int64(win.rkey&^0xff)+int64(i)<<8) | low
			if err := expectRefused(ctx, addr, "", "", "guess", []int{tries % 4}, win.addr, key); err != nil {
				return err
			}
			tries++
		}
	}
	for i := 0; i < 16; i++ {
		key := win.rkey&^0xff + uint32(i-8)<<8 | uint32(i*37)&0xff
		if err := expectRefused(ctx, addr, secret, "guesser", "authenticated guess", []int{i % 4}, win.addr, key); err != nil {
			return err
		}
		tries++
	}
	fmt.Printf("guesses=%d\n", tries)
	v, err := rma.FetchAndOp(ctx, counter, int64(0), 0, op.NoOp)
	if err != nil {
		return err
	}
	fmt.Printf("counter=%d\n", v)
	if v != 1000 {
		return fmt.Errorf("the counter is %d after the refused operations, want 1000", v)
	}
	return nil
}

// svcGrants: mode "grants" (the server's svcAuthorize). "reader" gets a
// read-only window: Get and NO_OP work, Put and the accumulates are
// refused with ErrDenied before anything is sent, and on the wire its key
// does not WRITE and the engine refuses its accumulate; "nobody" opens
// nothing; "putter" only writes alpha; a connection's messages on a window
// it has not opened are refused.
func svcGrants(ctx context.Context, addr string) error {
	secret := os.Getenv("RMA_SVC_SECRET")
	full, err := service.Dial(ctx, addr, svcConfig())
	if err != nil {
		return err
	}
	defer full.Close()
	fa, err := full.Open(ctx, "alpha")
	if err != nil {
		return err
	}
	if fa.Access() != service.AccessAll {
		return fmt.Errorf("a full client's access %v, want %v", fa.Access(), service.AccessAll)
	}
	pattern := svcPattern(64, 5)
	if err := fa.Put(ctx, pattern, 0); err != nil {
		return err
	}

	rc, err := service.Dial(ctx, addr, service.ClientConfig{Secret: []byte(secret), Name: "reader"})
	if err != nil {
		return err
	}
	defer rc.Close()
	ra, err := rc.Open(ctx, "alpha")
	if err != nil {
		return err
	}
	fmt.Printf("reader: access %v\n", ra.Access())
	if ra.Access() != service.AccessRead {
		return fmt.Errorf("reader's access %v, want read", ra.Access())
	}
	got := make([]byte, 64)
	if err := ra.Get(ctx, got, 0); err != nil || !bytes.Equal(got, pattern) {
		return fmt.Errorf("reader's Get: %v, %x want %x", err, got, pattern)
	}
	if v, err := rma.FetchAndOp(ctx, ra, int64(0), 8, op.NoOp); err != nil || v != int64(binary.NativeEndian.Uint64(pattern[8:])) {
		return fmt.Errorf("reader's FetchAndOp(NO_OP): %d, %v", v, err)
	}
	one := binary.NativeEndian.AppendUint64(nil, 1)
	for name, err := range map[string]error{
		"Put":            ra.Put(ctx, one, 0),
		"FetchAndOp SUM": func() error { _, err := rma.FetchAndOp(ctx, ra, int64(1), 0, op.Sum); return err }(),
		"CompareAndSwap": func() error { _, err := rma.CompareAndSwap(ctx, ra, int64(0), int64(1), 0); return err }(),
		"Accumulate":     ra.Accumulate(ctx, datatype.AsBytes([]float64{1}), datatype.Float64, 16, op.Sum),
		"RPut":           func() error { _, err := ra.RPut(ctx, one, 0); return err }(),
	} {
		fmt.Printf("reader's %s: %v\n", name, err)
		if !errors.Is(err, service.ErrDenied) {
			return fmt.Errorf("reader's %s: %v, want ErrDenied", name, err)
		}
	}

	// On the wire, as a reader that does not check its own access: each
	// of WRITE, FETCH_ADD and CMP_SWAP on a connection of its own (a
	// refusal breaks the QP), after a READ with the same key that works.
	for _, k := range []int{rdmaWrite, rdmaFetchAdd, rdmaCompareSwap} {
		w, err := dialWire(ctx, addr)
		if err != nil {
			return err
		}
		if err := w.auth(ctx, secret, "reader"); err != nil {
			w.close()
			return err
		}
		alpha, err := w.open(ctx, "alpha")
		if err != nil {
			w.close()
			return err
		}
		if alpha.access != 1 {
			w.close()
			return fmt.Errorf("the wire reader's access %#x, want 1 (read)", alpha.access)
		}
		if k == rdmaWrite {
			if err := svcWireEngine(ctx, w, alpha.id); err != nil {
				w.close()
				return err
			}
		}
		if err := w.rdma(ctx, rdmaRead, alpha.addr, alpha.rkey); err != nil {
			w.close()
			return fmt.Errorf("the wire reader's READ: %w", err)
		}
		err = w.rdma(ctx, k, alpha.addr, alpha.rkey)
		w.close()
		fmt.Printf("the wire reader's %s with its read-only key: %v\n", rdmaNames[k], err)
		if err == nil {
			return fmt.Errorf("the wire reader's %s with its read-only key succeeded", rdmaNames[k])
		}
	}
	if err := fa.Get(ctx, got, 0); err != nil || !bytes.Equal(got, pattern) {
		return fmt.Errorf("alpha after the reader's tries: %v, %x want %x", err, got, pattern)
	}

	nc, err := service.Dial(ctx, addr, service.ClientConfig{Secret: []byte(secret), Name: "nobody"})
	if err != nil {
		return err
	}
	_, err = nc.Open(ctx, "alpha")
	nc.Close()
	fmt.Printf("nobody's Open: %v\n", err)
	if !errors.Is(err, service.ErrDenied) {
		return fmt.Errorf("nobody's Open: %v, want ErrDenied", err)
	}

	pc, err := service.Dial(ctx, addr, service.ClientConfig{Secret: []byte(secret), Name: "putter"})
	if err != nil {
		return err
	}
	defer pc.Close()
	if _, err := pc.Open(ctx, "beta"); !errors.Is(err, service.ErrDenied) {
		return fmt.Errorf("putter's Open of beta: %v, want ErrDenied", err)
	}
	pa, err := pc.Open(ctx, "alpha")
	if err != nil {
		return err
	}
	if err := pa.Put(ctx, one, 56); err != nil {
		return fmt.Errorf("putter's Put: %w", err)
	}
	if err := pa.Get(ctx, got[:8], 56); !errors.Is(err, service.ErrDenied) {
		return fmt.Errorf("putter's Get: %v, want ErrDenied", err)
	}
	if err := fa.Get(ctx, got[:8], 56); err != nil || !bytes.Equal(got[:8], one) {
		return fmt.Errorf("alpha[56:64] after putter's Put: %x, %v", got[:8], err)
	}
	fmt.Println("grants=ok")
	return nil
}

// svcWireEngine: a reader's engine accumulate (float64 SUM at 16) is
// refused with reason 7 (denied), and one on a window its connection has
// not opened (the counter, id 2) with reason 2 (unknown window).
func svcWireEngine(ctx context.Context, w *svcWire, alpha uint32) error {
	req := fallback.Request{Kind: fallback.KindAccumulate, Op: op.Sum, Window: alpha, Disp: 16, Type: datatype.Float64.Type(), Count: 1, Data: datatype.AsBytes([]float64{1})}
	acc, err := fallback.AppendRequest(nil, &req)
	if err != nil {
		return err
	}
	r, err := w.call(ctx, 3, acc)
	fmt.Printf("the wire reader's engine accumulate: reply % x, %v\n", r, err)
	if err != nil || r[0] != 0x86 || len(r) != 9 || r[8] != 7 {
		return fmt.Errorf("the wire reader's engine accumulate: reply % x, %v; want an error reply of reason 7 (denied)", r, err)
	}
	req.Window = 2
	if acc, err = fallback.AppendRequest(nil, &req); err != nil {
		return err
	}
	r, err = w.call(ctx, 3, acc)
	if err != nil || r[0] != 0x86 || len(r) != 9 || r[8] != 2 {
		return fmt.Errorf("an accumulate on a window not opened: reply % x, %v; want an error reply of reason 2 (unknown window)", r, err)
	}
	return nil
}

// svcRotate: mode "rotate". A client of the first secret works; the
// server takes a second secret with no grace: that client's calls fail
// with ErrPeerLost, its key (used from the wire) is dead, the first
// secret is refused and the second works. Then a third secret with a
// grace of 2 s: a client of the second still works during the grace and
// is dropped after it.
func svcRotate(ctx context.Context, addr string) error {
	first := os.Getenv("RMA_SVC_SECRET")
	second, third := first+"-2", first+"-3"
	rotate := func(secret string, grace time.Duration) error {
		if err := svcWrite("rotate", secret+" "+grace.String()); err != nil {
			return err
		}
		_, err := svcAwait(ctx, "rotated")
		os.Remove(svcDir("rotated"))
		return err
	}
	old, err := service.Dial(ctx, addr, svcConfig())
	if err != nil {
		return err
	}
	defer old.Close()
	oc, err := old.Open(ctx, "counter")
	if err != nil {
		return err
	}
	if _, err := rma.FetchAndOp(ctx, oc, int64(1), 0, op.Sum); err != nil {
		return err
	}
	w, err := dialWire(ctx, addr)
	if err != nil {
		return err
	}
	defer w.close()
	if err := w.auth(ctx, first, "old"); err != nil {
		return err
	}
	win, err := w.open(ctx, "counter")
	if err != nil {
		return err
	}
	if err := rotate(second, 0); err != nil {
		return err
	}
	start := time.Now()
	added := int64(1) // by the old client, before the rotation and while the server had not dropped it yet
	for ; ; added++ {
		_, err := rma.FetchAndOp(ctx, oc, int64(1), 0, op.Sum)
		if errors.Is(err, verbs.ErrPeerLost) {
			fmt.Printf("old client after the rotation: %v after %v\n", err, time.Since(start).Round(time.Millisecond))
			break
		}
		if err != nil || time.Since(start) > 5*time.Second {
			return fmt.Errorf("old client's FetchAndOp %v after the rotation: %v, want ErrPeerLost", time.Since(start), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	rerr := w.rdma(ctx, rdmaRead, win.addr, win.rkey)
	fmt.Printf("old client's key after the rotation: %v\n", rerr)
	if rerr == nil {
		return errors.New("the old-secret client's key still reads after the rotation")
	}
	if _, err := service.Dial(ctx, addr, svcConfig()); !errors.Is(err, service.ErrAuth) {
		return fmt.Errorf("Dial with the retired secret: %v, want ErrAuth", err)
	}
	cl2, err := service.Dial(ctx, addr, service.ClientConfig{Secret: []byte(second)})
	if err != nil {
		return fmt.Errorf("Dial with the new secret: %w", err)
	}
	defer cl2.Close()
	c2, err := cl2.Open(ctx, "counter")
	if err != nil {
		return err
	}
	if _, err := rma.FetchAndOp(ctx, c2, int64(1), 0, op.Sum); err != nil {
		return fmt.Errorf("the new secret's client: %w", err)
	}
	// With a grace period.
	if err := rotate(third, 2*time.Second); err != nil {
		return err
	}
	start = time.Now()
	if _, err := rma.FetchAndOp(ctx, c2, int64(1), 0, op.Sum); err != nil {
		return fmt.Errorf("the second secret's client during the grace: %w", err)
	}
	cl2b, err := service.Dial(ctx, addr, service.ClientConfig{Secret: []byte(second)})
	if err != nil {
		return fmt.Errorf("Dial with the second secret during its grace: %w", err)
	}
	cl2b.Close()
	time.Sleep(2*time.Second - time.Since(start) + 500*time.Millisecond)
	if _, err := rma.FetchAndOp(ctx, c2, int64(1), 0, op.Sum); !errors.Is(err, verbs.ErrPeerLost) {
		return fmt.Errorf("the second secret's client after the grace: %v, want ErrPeerLost", err)
	}
	cl3, err := service.Dial(ctx, addr, service.ClientConfig{Secret: []byte(third)})
	if err != nil {
		return fmt.Errorf("Dial with the third secret: %w", err)
	}
	defer cl3.Close()
	c3, err := cl3.Open(ctx, "counter")
	if err != nil {
		return err
	}
	v, err := rma.FetchAndOp(ctx, c3, int64(0), 0, op.NoOp)
	fmt.Printf("counter=%d\nadded=%d\n", v, added+2)
	if err != nil || v != added+2 {
		return fmt.Errorf("counter after the rotations: %d, %v; want %d", v, err, added+2)
	}
	return nil
}

// TestServiceDoor: see svcDoor.
func TestServiceDoor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := newSvcTest(t, ctx)
	srv, addr := s.server("server", 0)
	out := s.client("client", addr, "door").wait(t, false)
	t.Logf("%s refused guesses; the counter stayed at %s", value(t, out, "guesses"), value(t, out, "counter"))
	st := s.stop(srv)
	t.Logf("server: %s connection requests, %s authentication timeouts", value(t, st, "requests"), value(t, st, "authtimeouts"))
}

// TestServiceGrants: see svcGrants.
func TestServiceGrants(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := newSvcTest(t, ctx)
	srv, addr := s.server("server", 0, "RMA_SVC_AUTHZ=1")
	s.client("client", addr, "grants").wait(t, false)
	s.stop(srv)
}

// TestServiceRotate: see svcRotate.
func TestServiceRotate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := newSvcTest(t, ctx)
	srv, addr := s.server("server", 0)
	out := s.client("client", addr, "rotate").wait(t, false)
	s.stop(srv)
	if got, want := value(t, out, "counter"), value(t, out, "added"); got != want {
		t.Errorf("counter=%s, want %s", got, want)
	}
}
