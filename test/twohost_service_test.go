//go:build integration

package test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/onesided/rma"
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
	mem, err := verbs.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer verbs.Free(mem)
	srv, err := service.Listen(ctx, twoHostSvcAddr, service.ServerConfig{Secret: secret, ProbeInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := srv.Expose("w", mem); err != nil {
		t.Fatal(err)
	}
	held := func() bool {
		for _, c := range srv.Stats().Connections {
			if c.LocksHeld > 0 {
				return true
			}
		}
		return false
	}
	for !held() {
		if ctx.Err() != nil {
			t.Fatal("no client took the lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	tc := func(args ...string) {
		out, err := exec.Command("tc", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("tc %v: %v\n%s", args, err, out)
		}
	}
	tc("qdisc", "add", "dev", "eth0", "root", "netem", "duplicate", "100%")
	t.Log("host0: every frame sent is duplicated, for 2 s")
	time.Sleep(2 * time.Second)
	tc("qdisc", "del", "dev", "eth0", "root")
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
	var cl *service.Client
	for {
		var err error
		if cl, err = service.Dial(ctx, twoHostSvcAddr, service.ClientConfig{Secret: secret}); err == nil {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("dial: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
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
	time.Sleep(5 * time.Second)
	v, err := rma.FetchAndOp(ctx, w, int64(1), 0, op.Sum)
	if err != nil {
		return fmt.Errorf("FetchAndOp after the duplicated probes: %w", err)
	}
	if err := w.Unlock(ctx); err != nil {
		return fmt.Errorf("Unlock after the duplicated probes: %w", err)
	}
	fmt.Fprintf(os.Stderr, "host1: the lock holder's calls after the duplicated probes: old value %d, unlock ok\n", v)
	if v != 1 {
		return fmt.Errorf("FetchAndOp after the duplicated probes returned %d, want 1", v)
	}
	return nil
}
