//go:build integration

package test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/onesided/rma"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/service"
	"github.com/onesided/rma/verbs"
	"github.com/onesided/rma/win"
)

// twoHostSvcAddr is the service server of TestTwoHostServiceProbe, on host0.
const twoHostSvcAddr = "10.77.0.1:17078"

// TestTwoHostServiceProbe: a client on host1 holds a service lock while
// every frame host0 sends is duplicated on the wire for 2 s (netem on
// host0's eth0), so that each of the server's probes of the lock holder
// (every 50 ms) reaches the client's NIC twice. The client keeps its
// connection and its lock: its FetchAndOp and Unlock after the
// duplication succeed, the counter is exact, and the server recovered no
// lock. It is skipped unless rxevm -hosts 2 runs it (with the sch_netem
// module).
func TestTwoHostServiceProbe(t *testing.T) {
	host := twoHostRank(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	secret := []byte("rma-two-host-probe")
	if host == 1 {
		if err := twoHostProbeClient(ctx, secret); err != nil {
			t.Fatal(err)
		}
		return
	}
	srv, mem := twoHostServer(t, ctx, twoHostSvcAddr, secret, 50*time.Millisecond)
	twoHostLockHeld(t, ctx, srv)
	twoHostTC(t, "qdisc", "add", "dev", "eth0", "root", "netem", "duplicate", "100%")
	t.Log("host0: every frame sent is duplicated, for 2 s")
	time.Sleep(2 * time.Second)
	twoHostTC(t, "qdisc", "del", "dev", "eth0", "root")
	for srv.Stats().Disconnects == 0 {
		if ctx.Err() != nil {
			t.Fatal("the client did not disconnect")
		}
		time.Sleep(10 * time.Millisecond)
	}
	st := srv.Stats()
	counter := binary.NativeEndian.Uint64(mem)
	t.Logf("host0: lock recoveries %d, lock grants %d, counter %d", st.LockRecoveries, st.Windows["w"].LockGrants, counter)
	if st.LockRecoveries != 0 || counter != 2 {
		t.Errorf("lock recoveries %d (want 0: the holder kept its lock), counter %d (want 2)", st.LockRecoveries, counter)
	}
}

// twoHostProbeClient is host1's part: lock, add 1, hold the lock 5 s
// (the server duplicates its frames meanwhile), add 1, unlock.
func twoHostProbeClient(ctx context.Context, secret []byte) error {
	return twoHostHoldClient(ctx, twoHostSvcAddr, secret, 5*time.Second, "the duplicated probes")
}

// twoHostHoldClient dials addr, locks window "w", adds 1 to its first
// word, holds the lock for hold without a call while the wire is tried
// (what), adds 1 again (whose old value must be 1) and unlocks.
func twoHostHoldClient(ctx context.Context, addr string, secret []byte, hold time.Duration, what string) error {
	cl, err := twoHostDial(ctx, addr, secret)
	if err != nil {
		return err
	}
	defer cl.Close()
	w, err := cl.Open(ctx, "w")
	if err != nil {
		return err
	}
	if err := w.Lock(ctx, win.LockExclusive); err != nil {
		return err
	}
	if _, err := rma.FetchAndOp(ctx, w, int64(1), 0, op.Sum); err != nil {
		return err
	}
	time.Sleep(hold)
	v, err := rma.FetchAndOp(ctx, w, int64(1), 0, op.Sum)
	if err != nil {
		return fmt.Errorf("FetchAndOp after %s: %w", what, err)
	}
	if err := w.Unlock(ctx); err != nil {
		return fmt.Errorf("Unlock after %s: %w", what, err)
	}
	fmt.Fprintf(os.Stderr, "host1: the lock holder's calls after %s: old value %d, unlock ok\n", what, v)
	if v != 1 {
		return fmt.Errorf("FetchAndOp after %s returned %d, want 1", what, v)
	}
	return nil
}

// twoHostResumeAddr is the service server of TestTwoHostServiceResume, on host0.
const twoHostResumeAddr = "10.77.0.1:17079"

// twoHostResumeCut is how long host0 sends nothing in TestTwoHostServiceResume.
const twoHostResumeCut = 1500 * time.Millisecond

// TestTwoHostServiceResume: a client on host1 holds a service lock and
// calls on, in a loop, a NIC FetchAndOp, an engine Accumulate and a
// locked read-modify-write (Get, then Put of the value plus one), while
// every frame host0 sends is dropped for twoHostResumeCut (netem on
// host0's eth0): the connection fails on the transport (the client's and
// the server's retries run out) with calls in flight. The client resumes
// its session on a new connection: no call fails but a FetchAndOp whose
// outcome is unknown (verbs.ErrOutcomeUnknown), the server gave its lock
// to nobody (no recovery), the engine's counter and the locked counter
// are exact, and the NIC counter lies between the FetchAndOps that
// returned and those plus the unknown ones. The client writes its counts
// into the window before it unlocks; the server checks them. It is
// skipped unless rxevm -hosts 2 runs it (with the sch_netem module).
func TestTwoHostServiceResume(t *testing.T) {
	host := twoHostRank(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	secret := []byte("rma-two-host-resume")
	if host == 1 {
		if err := twoHostResumeClient(ctx, secret); err != nil {
			t.Fatal(err)
		}
		return
	}
	srv, mem := twoHostServer(t, ctx, twoHostResumeAddr, secret, 100*time.Millisecond)
	for srv.Stats().Windows["w"].EngineOps < 100 {
		if ctx.Err() != nil {
			t.Fatal("the client did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	twoHostTC(t, "qdisc", "add", "dev", "eth0", "root", "netem", "loss", "100%")
	t.Logf("host0: every frame sent is dropped, for %v", twoHostResumeCut)
	time.Sleep(twoHostResumeCut)
	twoHostTC(t, "qdisc", "del", "dev", "eth0", "root")
	for srv.Stats().Disconnects == 0 || srv.Conns() > 0 {
		if ctx.Err() != nil {
			t.Fatal("the client did not finish")
		}
		time.Sleep(10 * time.Millisecond)
	}
	st := srv.Stats()
	word := func(disp int) uint64 { return binary.NativeEndian.Uint64(mem[disp:]) }
	nic, engine, locked := word(0), uint64(binary.NativeEndian.Uint32(mem[8:])), word(16)
	ok, unknown, accs, rmws := word(64), word(72), word(80), word(88)
	t.Logf("host0: sessions held %d, resumed %d, lock recoveries %d; NIC counter %d (%d returned, %d unknown), engine %d of %d, locked %d of %d",
		st.Held, st.Resumed, st.LockRecoveries, nic, ok, unknown, engine, accs, locked, rmws)
	fmt.Printf("service resume: sessions held %d, resumed %d; FetchAndOps %d returned, %d unknown\n", st.Held, st.Resumed, ok, unknown)
	if st.Resumed == 0 || st.LockRecoveries != 0 {
		t.Errorf("%d sessions resumed, %d locks recovered; want at least 1 and 0", st.Resumed, st.LockRecoveries)
	}
	if accs == 0 || engine != accs || locked != rmws || nic < ok || nic > ok+unknown {
		t.Errorf("counters: engine %d (want %d), locked %d (want %d), NIC %d (want %d to %d)", engine, accs, locked, rmws, nic, ok, ok+unknown)
	}
}

// twoHostResumeClient is host1's part: lock, then call in a loop until
// 4 s after its connection was resumed (or 60 s), then write its counts
// into the window (disp 64: FetchAndOps returned, unknown, Accumulates,
// locked increments), unlock and close.
func twoHostResumeClient(ctx context.Context, secret []byte) error {
	cl, err := twoHostDial(ctx, twoHostResumeAddr, secret)
	if err != nil {
		return err
	}
	defer cl.Close()
	w, err := cl.Open(ctx, "w")
	if err != nil {
		return err
	}
	if err := w.Lock(ctx, win.LockExclusive); err != nil {
		return err
	}
	var ok, unknown, accs, rmws uint64
	start, slow := time.Now(), time.Duration(0)
	var until time.Time
	for i := 0; time.Now().Before(start.Add(time.Minute)) && (until.IsZero() || time.Now().Before(until)); i++ {
		t0 := time.Now()
		_, err := rma.FetchAndOp(ctx, w, int64(1), 0, op.Sum)
		switch {
		case err == nil:
			ok++
		case errors.Is(err, verbs.ErrOutcomeUnknown):
			unknown++
		default:
			return fmt.Errorf("FetchAndOp %d: %w", i, err)
		}
		// An int32 sum: the server's engine applies it.
		if err := w.Accumulate(ctx, binary.NativeEndian.AppendUint32(nil, 1), datatype.Int32, 8, op.Sum); err != nil {
			return fmt.Errorf("Accumulate %d: %w", i, err)
		}
		accs++
		var b [8]byte
		if err := w.Get(ctx, b[:], 16); err != nil {
			return fmt.Errorf("Get %d: %w", i, err)
		}
		if err := w.Put(ctx, binary.NativeEndian.AppendUint64(nil, binary.NativeEndian.Uint64(b[:])+1), 16); err != nil {
			return fmt.Errorf("Put %d: %w", i, err)
		}
		rmws++
		if d := time.Since(t0); d > slow {
			slow = d
		}
		if until.IsZero() && time.Since(t0) > 500*time.Millisecond {
			until = time.Now().Add(4 * time.Second) // resumed: go on a while
		}
	}
	fmt.Fprintf(os.Stderr, "host1: %d iterations, the slowest %v; FetchAndOps %d returned, %d unknown\n", rmws, slow, ok, unknown)
	if until.IsZero() {
		return errors.New("no call waited for a resumption: the wire was not cut")
	}
	var counts []byte
	for _, v := range []uint64{ok, unknown, accs, rmws} {
		counts = binary.NativeEndian.AppendUint64(counts, v)
	}
	if err := w.Put(ctx, counts, 64); err != nil {
		return err
	}
	if err := w.Unlock(ctx); err != nil {
		return fmt.Errorf("Unlock after the resumption: %w", err)
	}
	return nil
}

// TestTwoHostServiceResumeIdle: as TestTwoHostServiceResume, but the
// client holds its lock idle, with no call in flight, while host0 drops
// every frame it sends for twoHostResumeCut; the server's probes of the
// lock holder fail and it holds the session. The client, told by the
// server's disconnect once the wire is back, resumes it before the
// server lets it go, although it makes no call: its calls after 8 s
// succeed, on the lock it held, and the server recovered no lock.
func TestTwoHostServiceResumeIdle(t *testing.T) {
	host := twoHostRank(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	secret := []byte("rma-two-host-resume-idle")
	if host == 1 {
		if err := twoHostResumeIdleClient(ctx, secret); err != nil {
			t.Fatal(err)
		}
		return
	}
	srv, mem := twoHostServer(t, ctx, twoHostResumeAddr, secret, 100*time.Millisecond)
	twoHostLockHeld(t, ctx, srv)
	time.Sleep(500 * time.Millisecond)
	twoHostTC(t, "qdisc", "add", "dev", "eth0", "root", "netem", "loss", "100%")
	t.Logf("host0: every frame sent is dropped, for %v", twoHostResumeCut)
	time.Sleep(twoHostResumeCut)
	twoHostTC(t, "qdisc", "del", "dev", "eth0", "root")
	for srv.Stats().Disconnects == 0 || srv.Conns() > 0 {
		if ctx.Err() != nil {
			t.Fatal("the client did not finish")
		}
		time.Sleep(10 * time.Millisecond)
	}
	st := srv.Stats()
	counter := binary.NativeEndian.Uint64(mem)
	t.Logf("host0: sessions held %d, resumed %d, lock recoveries %d, counter %d", st.Held, st.Resumed, st.LockRecoveries, counter)
	fmt.Printf("service resume idle: sessions held %d, resumed %d, lock recoveries %d\n", st.Held, st.Resumed, st.LockRecoveries)
	if st.Held == 0 || st.Resumed == 0 || st.LockRecoveries != 0 || counter != 2 {
		t.Errorf("sessions held %d and resumed %d (want at least 1 each), lock recoveries %d (want 0), counter %d (want 2)",
			st.Held, st.Resumed, st.LockRecoveries, counter)
	}
}

// twoHostResumeIdleClient is host1's part: lock, add 1, hold the lock 8 s
// without a call, add 1, unlock.
func twoHostResumeIdleClient(ctx context.Context, secret []byte) error {
	return twoHostHoldClient(ctx, twoHostResumeAddr, secret, 8*time.Second, "the idle cut")
}

// twoHostServer is host0's service server on addr, with a window "w" of
// 4096 bytes (its memory returned); both go when the test ends.
func twoHostServer(t *testing.T, ctx context.Context, addr string, secret []byte, probe time.Duration) (*service.Server, []byte) {
	t.Helper()
	mem, err := verbs.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { verbs.Free(mem) })
	srv, err := service.Listen(ctx, addr, service.ServerConfig{Secret: secret, ProbeInterval: probe})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if err := srv.Expose("w", mem); err != nil {
		t.Fatal(err)
	}
	return srv, mem
}

// twoHostDial dials host0's server at addr until it listens.
func twoHostDial(ctx context.Context, addr string, secret []byte) (*service.Client, error) {
	for {
		cl, err := service.Dial(ctx, addr, service.ClientConfig{Secret: secret})
		if err == nil {
			return cl, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("dial: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// twoHostTC runs tc with args (netem on host0's eth0).
func twoHostTC(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("tc", args...).CombinedOutput(); err != nil {
		t.Fatalf("tc %v: %v\n%s", args, err, out)
	}
}

// twoHostLockHeld waits until a client of srv holds a lock.
func twoHostLockHeld(t *testing.T, ctx context.Context, srv *service.Server) {
	t.Helper()
	for {
		for _, c := range srv.Stats().Connections {
			if c.LocksHeld > 0 {
				return
			}
		}
		if ctx.Err() != nil {
			t.Fatal("no client took the lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
