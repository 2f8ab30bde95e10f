//go:build integration

package test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/onesided/rma"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/service"
	"github.com/onesided/rma/win"
)

// svcEngineCalls is the part of test (a)'s round that goes through the
// server's engine and its locks, on alpha's bytes 1024 to 2047: exact
// results of Accumulate, GetAccumulate and CompareAndSwapBytes on float64,
// int32 and uint8 (the engine) and on an int64 array (the NIC, element by
// element), pieces longer than one message, Lock/Unlock both ways,
// LockAll/UnlockAll, and the refusals (errors.Is).
func svcEngineCalls(ctx context.Context, cl *service.Client, alpha, beta *service.Window, i int) error {
	// float64 SUM then MAX through GetAccumulate: exact old values.
	base := float64(i) + 0.5
	if err := alpha.Put(ctx, datatype.AsBytes([]float64{base, -base, 0}), 1024); err != nil {
		return err
	}
	if err := alpha.Accumulate(ctx, datatype.AsBytes([]float64{1, 2, 3}), datatype.Float64, 1024, op.Sum); err != nil {
		return fmt.Errorf("Accumulate(SUM, float64): %w", err)
	}
	old := make([]float64, 3)
	if err := alpha.GetAccumulate(ctx, datatype.AsBytes([]float64{0, 100, -7}), datatype.AsBytes(old), datatype.Float64, 1024, op.Max); err != nil {
		return fmt.Errorf("GetAccumulate(MAX, float64): %w", err)
	}
	if want := []float64{base + 1, 2 - base, 3}; !equalF64(old, want) {
		return fmt.Errorf("GetAccumulate(MAX) returned %v, want %v", old, want)
	}
	now := make([]float64, 3)
	if err := alpha.GetAccumulate(ctx, nil, datatype.AsBytes(now), datatype.Float64, 1024, op.NoOp); err != nil {
		return fmt.Errorf("GetAccumulate(NO_OP): %w", err)
	}
	if want := []float64{base + 1, 100, 3}; !equalF64(now, want) {
		return fmt.Errorf("after MAX the window holds %v, want %v", now, want)
	}
	// int32 over 200 elements (800 bytes: two Accumulate messages, five
	// GetAccumulate pieces), each element its own value.
	const n32 = 200
	init32, add32 := make([]int32, n32), make([]int32, n32)
	for k := range init32 {
		init32[k], add32[k] = int32(k*k-i), int32(3*k+1)
	}
	if err := alpha.Put(ctx, datatype.AsBytes(init32), 1100); err != nil {
		return err
	}
	if err := alpha.Accumulate(ctx, datatype.AsBytes(add32), datatype.Int32, 1100, op.Sum); err != nil {
		return fmt.Errorf("Accumulate(SUM, 200 int32): %w", err)
	}
	old32 := make([]int32, n32)
	if err := alpha.GetAccumulate(ctx, datatype.AsBytes(add32), datatype.AsBytes(old32), datatype.Int32, 1100, op.Replace); err != nil {
		return fmt.Errorf("GetAccumulate(REPLACE, 200 int32): %w", err)
	}
	for k := range old32 {
		if want := init32[k] + add32[k]; old32[k] != want {
			return fmt.Errorf("GetAccumulate(REPLACE) old element %d = %d, want %d", k, old32[k], want)
		}
	}
	// Compare-and-swap on an int32 and a uint8 (the engine): match, then not.
	var res [4]byte
	if err := alpha.CompareAndSwap(ctx, datatype.AsBytes([]int32{77}), datatype.AsBytes([]int32{add32[0]}), res[:], datatype.Int32, 1100); err != nil {
		return fmt.Errorf("CompareAndSwapBytes(int32): %w", err)
	}
	if got := int32(binary.NativeEndian.Uint32(res[:])); got != add32[0] {
		return fmt.Errorf("CompareAndSwapBytes(int32, match) returned %d, want %d", got, add32[0])
	}
	if err := alpha.CompareAndSwap(ctx, []byte{9}, []byte{1}, res[:1], datatype.Uint8, 1100); err != nil {
		return fmt.Errorf("CompareAndSwapBytes(uint8): %w", err)
	}
	if res[0] != 77 { // the low byte of the int32 77 just swapped in
		return fmt.Errorf("CompareAndSwapBytes(uint8, no match) returned %d, want 77", res[0])
	}
	// int64 array: the NIC, element by element (fetch-and-add; BOR as
	// compare-and-swap loops).
	i64 := []int64{int64(i), -5, 1 << 40}
	if err := alpha.Put(ctx, datatype.AsBytes(i64), 1920); err != nil {
		return err
	}
	if err := alpha.Accumulate(ctx, datatype.AsBytes([]int64{1, 1, 1}), datatype.Int64, 1920, op.Sum); err != nil {
		return fmt.Errorf("Accumulate(SUM, int64): %w", err)
	}
	old64 := make([]int64, 3)
	if err := alpha.GetAccumulate(ctx, datatype.AsBytes([]int64{6, 6, 6}), datatype.AsBytes(old64), datatype.Int64, 1920, op.Bor); err != nil {
		return fmt.Errorf("GetAccumulate(BOR, int64): %w", err)
	}
	for k := range old64 {
		if old64[k] != i64[k]+1 {
			return fmt.Errorf("GetAccumulate(BOR, int64) old element %d = %d, want %d", k, old64[k], i64[k]+1)
		}
	}
	// Locks: exclusive, then shared, then LockAll; the misuses.
	if err := alpha.Lock(ctx, win.LockExclusive); err != nil {
		return fmt.Errorf("Lock(exclusive): %w", err)
	}
	if err := alpha.Lock(ctx, win.LockShared); !errors.Is(err, win.ErrEpoch) {
		return fmt.Errorf("Lock while holding the lock: %v, want win.ErrEpoch", err)
	}
	if err := alpha.UnlockAll(ctx); !errors.Is(err, win.ErrEpoch) {
		return fmt.Errorf("UnlockAll after Lock: %v, want win.ErrEpoch", err)
	}
	if err := alpha.Unlock(ctx); err != nil {
		return fmt.Errorf("Unlock: %w", err)
	}
	if err := alpha.Unlock(ctx); !errors.Is(err, win.ErrEpoch) {
		return fmt.Errorf("Unlock without the lock: %v, want win.ErrEpoch", err)
	}
	if err := alpha.Lock(ctx, win.LockShared); err != nil {
		return fmt.Errorf("Lock(shared): %w", err)
	}
	if err := beta.Lock(ctx, win.LockExclusive); err != nil { // another window's lock
		return fmt.Errorf("Lock(exclusive) of beta while holding alpha's: %w", err)
	}
	if err := errors.Join(beta.Unlock(ctx), alpha.Unlock(ctx)); err != nil {
		return fmt.Errorf("Unlock: %w", err)
	}
	if err := alpha.LockAll(ctx); err != nil {
		return fmt.Errorf("LockAll: %w", err)
	}
	if err := alpha.Unlock(ctx); !errors.Is(err, win.ErrEpoch) {
		return fmt.Errorf("Unlock after LockAll: %v, want win.ErrEpoch", err)
	}
	if err := alpha.UnlockAll(ctx); err != nil {
		return fmt.Errorf("UnlockAll: %w", err)
	}
	if err := alpha.Lock(ctx, win.LockType(9)); !errors.Is(err, win.ErrInvalid) {
		return fmt.Errorf("Lock(9): %v, want win.ErrInvalid", err)
	}
	// Refusals of the accumulate family.
	userOp := op.FirstUser + 90 // registered nowhere
	for _, r := range []struct {
		what string
		err  error
		want error
	}{
		{"Accumulate(NO_OP)", alpha.Accumulate(ctx, make([]byte, 8), datatype.Float64, 1024, op.NoOp), op.ErrOpUse},
		{"Accumulate(BAND, float64)", alpha.Accumulate(ctx, make([]byte, 8), datatype.Float64, 1024, op.Band), op.ErrOpDatatype},
		{"Accumulate of 7 bytes of float64", alpha.Accumulate(ctx, make([]byte, 7), datatype.Float64, 1024, op.Sum), win.ErrInvalid},
		{"Accumulate across the end", alpha.Accumulate(ctx, make([]byte, 16), datatype.Float64, svcAlpha-8, op.Sum), win.ErrOutOfWindow},
		{"GetAccumulate with a short result", alpha.GetAccumulate(ctx, make([]byte, 16), make([]byte, 8), datatype.Float64, 1024, op.Sum), win.ErrInvalid},
		{"Accumulate(SUM, int64) misaligned", alpha.Accumulate(ctx, make([]byte, 8), datatype.Int64, 1028, op.Sum), win.ErrAlignment},
		{"CompareAndSwapBytes(float64)", alpha.CompareAndSwap(ctx, make([]byte, 8), make([]byte, 8), make([]byte, 8), datatype.Float64, 1024), op.ErrOpDatatype},
		{"Accumulate with an unknown user op", alpha.Accumulate(ctx, make([]byte, 8), datatype.Float64, 1024, userOp), op.ErrInvalid},
	} {
		if !errors.Is(r.err, r.want) {
			return fmt.Errorf("%s: %v, want %v", r.what, r.err, r.want)
		}
		if i == 1 {
			fmt.Printf("refused: %s: %v\n", r.what, r.err)
		}
	}
	if err := alpha.Accumulate(ctx, nil, datatype.Float64, svcAlpha+64, op.NoOp); err == nil {
		return errors.New("Accumulate(NO_OP) of nothing succeeded, want the op refused")
	}
	if err := alpha.Accumulate(ctx, nil, datatype.Float64, svcAlpha+64, op.Sum); err != nil {
		return fmt.Errorf("zero-size Accumulate beyond the end: %v, want nil (MPI: no-op)", err)
	}
	st := cl.Stats()
	if st.EngineOps == 0 || st.NICAtomics <= 1 || st.Locks < 4 { // Dial's byte-order probe is one NIC atomic
		return fmt.Errorf("client stats %+v: engine ops, NIC atomics and locks must be counted", st)
	}
	return nil
}

func equalF64(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if a[k] != b[k] && !(math.IsNaN(a[k]) && math.IsNaN(b[k])) {
			return false
		}
	}
	return true
}

// The lock and death tests' clients, by mode:
//
//	holder   takes alpha's exclusive lock, writes "holding", and waits to be killed
//	waiter   writes "waiting", then takes the exclusive lock (which the
//	         holder has) and prints when it got it (granted=unix ns); then
//	         unlocks, takes it shared and exclusive again, and checks that
//	         a Lock whose context ends is withdrawn (the next Lock of another
//	         client is granted)
//	accdie   accumulates +1 into 100 int32 of alpha (one message each)
//	         until killed, writing "running" after 50
//	acccheck checks that those 100 int32 are all equal and nonzero
func svcLockClient(ctx context.Context, addr, mode string) error {
	cl, err := service.Dial(ctx, addr, svcConfig())
	if err != nil {
		return err
	}
	defer cl.Close()
	w, err := cl.Open(ctx, "alpha")
	if err != nil {
		return err
	}
	switch mode {
	case "holder":
		if err := w.Lock(ctx, win.LockExclusive); err != nil {
			return err
		}
		if err := svcWrite("holding", strconv.FormatInt(time.Now().UnixNano(), 10)); err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	case "waiter":
		// A Lock that gives up while the holder holds: withdrawn.
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := w.Lock(short, win.LockExclusive)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("Lock with a 200 ms deadline while another client holds the lock: %v, want DeadlineExceeded", err)
		}
		if err := svcWrite("waiting", ""); err != nil {
			return err
		}
		// Another goroutine of the same client goes on while Lock waits.
		granted := make(chan struct{})
		during := make(chan int, 1)
		go func() {
			n := 0
			for {
				select {
				case <-granted:
					during <- n
					return
				default:
				}
				if _, err := rma.FetchAndOp(ctx, w, int64(1), 3072, op.Sum); err != nil {
					during <- -1
					<-granted
					return
				}
				n++
			}
		}()
		err = w.Lock(ctx, win.LockExclusive)
		close(granted)
		n := <-during
		if err != nil {
			return fmt.Errorf("Lock(exclusive) waiting for the holder: %w", err)
		}
		fmt.Printf("granted=%d\n", time.Now().UnixNano())
		fmt.Printf("during_wait=%d\n", n)
		if err := svcWrite("granted", ""); err != nil {
			return err
		}
		if n < 10 {
			return fmt.Errorf("another goroutine of the client did %d FetchAndOps while Lock waited, want it to go on (at least 10)", n)
		}
		if err := w.Unlock(ctx); err != nil {
			return err
		}
		for _, lt := range []win.LockType{win.LockShared, win.LockExclusive} {
			if err := w.Lock(ctx, lt); err != nil {
				return fmt.Errorf("Lock(%d) after the holder died: %w", lt, err)
			}
			if err := w.Unlock(ctx); err != nil {
				return err
			}
		}
		return nil
	case "accdie":
		ones := make([]int32, 100)
		for k := range ones {
			ones[k] = 1
		}
		for it := 1; ; it++ {
			if err := w.Accumulate(ctx, datatype.AsBytes(ones), datatype.Int32, 1024, op.Sum); err != nil {
				return err
			}
			if it == 50 {
				if err := svcWrite("running", ""); err != nil {
					return err
				}
			}
		}
	case "acccheck":
		got := make([]int32, 100)
		if err := w.Get(ctx, datatype.AsBytes(got), 1024); err != nil {
			return err
		}
		for k := range got {
			if got[k] != got[0] || got[0] < 50 {
				return fmt.Errorf("after the accumulating client died: elements %v; want 100 equal values of at least 50 (each message applied whole or not at all)", got)
			}
		}
		fmt.Printf("applied=%d\n", got[0])
		// The dead client's lock-free accumulates left the engine usable.
		if err := w.Accumulate(ctx, datatype.AsBytes([]int32{1}), datatype.Int32, 1024, op.Sum); err != nil {
			return err
		}
		return nil
	}
	return fmt.Errorf("unknown mode %q", mode)
}

// TestServiceLockHolderKilled (item 4): client A holds alpha's exclusive
// lock; client B's Lock with a 200 ms deadline gives up (and is
// withdrawn), then B waits for the lock. B must not get it while A lives
// (2 s, four of the server's probes of A), and must get it within the
// peer timeout (1 s) of A's SIGKILL; then shared and exclusive locks
// work. The server counts one lock recovery.
func TestServiceLockHolderKilled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := newSvcTest(t, ctx)
	srv, addr := s.server("server", 0)
	holder := s.client("holder", addr, "holder")
	waitCMFile(ctx, t, filepath.Join(s.dir, "holding"), holder)
	waiter := s.client("waiter", addr, "waiter")
	waitCMFile(ctx, t, filepath.Join(s.dir, "waiting"), waiter)
	select {
	case err := <-waiter.done:
		waiter.done <- err
		waiter.wait(t, false)
		t.Fatal("the waiter ended while the holder held the lock")
	case <-time.After(2 * time.Second):
	}
	if _, err := os.Stat(filepath.Join(s.dir, "granted")); err == nil {
		t.Fatal("the waiter got the lock while the holder lived")
	}
	killed := time.Now()
	if err := holder.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	holder.wait(t, true)
	out := waiter.wait(t, false)
	took := cmUnixNano(t, out, "granted").Sub(killed)
	t.Logf("lock granted to the waiter %v after the holder's SIGKILL", took)
	fmt.Printf("service: lock free %v after its holder's SIGKILL\n", took)
	if took < 0 || took > time.Second {
		t.Errorf("the lock was granted %v after the holder's SIGKILL, want within the peer timeout (1 s)", took)
	}
	if got := value(t, s.stop(srv), "lockrecoveries"); got != "1" {
		t.Errorf("server lock recoveries %s, want 1", got)
	}
}

// TestServiceAccumulateDeath (item 4): a client killed while it
// accumulates +1 into 100 int32 (one engine message each): afterwards the
// 100 elements are equal (each message was applied whole or not at all),
// and another client's calls work.
func TestServiceAccumulateDeath(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := newSvcTest(t, ctx)
	srv, addr := s.server("server", 0)
	acc := s.client("accdie", addr, "accdie")
	waitCMFile(ctx, t, filepath.Join(s.dir, "running"), acc)
	time.Sleep(300 * time.Millisecond)
	if err := acc.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	acc.wait(t, true)
	out := s.client("acccheck", addr, "acccheck").wait(t, false)
	t.Logf("messages applied before the kill: %s", value(t, out, "applied"))
	if got := value(t, s.stop(srv), "lockrecoveries"); got != "0" {
		t.Errorf("server lock recoveries %s, want 0", got)
	}
}

// svcFrozenHolder is a client of the wire protocol on raw verbs that
// authenticates, opens alpha and takes its exclusive lock, then moves its
// QP to the error state without disconnecting, as when its host dies: its
// NIC no longer answers, and nothing tells the server. It waits to be
// killed.
func svcFrozenHolder(ctx context.Context, addr string) (err error) {
	w, err := dialWire(ctx, addr)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := w.close(); err == nil {
			err = cerr
		}
	}()
	if err := w.auth(ctx, os.Getenv("RMA_SVC_SECRET"), "frozen"); err != nil {
		return err
	}
	alpha, err := w.open(ctx, "alpha")
	if err != nil {
		return err
	}
	r, err := w.call(ctx, 4, append(binary.LittleEndian.AppendUint32(nil, alpha.id), 2, 0, 0, 0)) // exclusive
	if err != nil || r[0] != 0x85 {
		return fmt.Errorf("lock: % x, %v", r, err)
	}
	if err := svcWrite("holding", ""); err != nil {
		return err
	}
	if _, err := svcAwait(ctx, "freeze"); err != nil {
		return err
	}
	if err := w.qp.SetError(); err != nil {
		return err
	}
	fmt.Printf("frozen=%d\n", time.Now().UnixNano())
	if err := svcWrite("frozen", ""); err != nil {
		return err
	}
	<-ctx.Done()
	return ctx.Err()
}

// TestServiceLockHolderHostDeath (item 4, a host that dies): the lock
// holder is a raw client whose QP goes to the error state without a
// disconnect, as when its host dies. The server's next probe of it (every
// ProbeInterval, 500 ms) fails after the transport's retries (7 ACK
// timeouts of 67 ms); the server then holds the holder's session for
// ServerConfig.ResumeWithin (3 s) in case it resumes, and frees the lock:
// the waiter must get it within 5 s of the freeze, and not before it.
func TestServiceLockHolderHostDeath(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := newSvcTest(t, ctx)
	srv, addr := s.server("server", 0)
	holder := s.client("frozen holder", addr, "frozenholder")
	waitCMFile(ctx, t, filepath.Join(s.dir, "holding"), holder)
	waiter := s.client("waiter", addr, "waiter")
	waitCMFile(ctx, t, filepath.Join(s.dir, "waiting"), waiter)
	time.Sleep(1500 * time.Millisecond) // three probes of a live holder
	if _, err := os.Stat(filepath.Join(s.dir, "granted")); err == nil {
		t.Fatal("the waiter got the lock while the holder lived")
	}
	if err := os.WriteFile(filepath.Join(s.dir, "freeze"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitCMFile(ctx, t, filepath.Join(s.dir, "frozen"), holder)
	out := waiter.wait(t, false)
	if err := holder.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	frozen := cmUnixNano(t, holder.wait(t, true), "frozen")
	took := cmUnixNano(t, out, "granted").Sub(frozen)
	t.Logf("lock granted to the waiter %v after its holder's NIC stopped answering", took)
	fmt.Printf("service: lock free %v after its holder's host stopped answering\n", took)
	if took < 3*time.Second || took > 5*time.Second {
		t.Errorf("the lock was granted %v after the holder froze, want within 3 to 5 s (ProbeInterval + 7 x 67 ms + ResumeWithin + margin)", took)
	}
	if got := value(t, s.stop(srv), "lockrecoveries"); got != "1" {
		t.Errorf("server lock recoveries %s, want 1", got)
	}
}

// svcShards: one process dials two servers (shards) and uses both at
// once: 4 goroutines share the two clients, each adding 1 to both
// counters 250 times (a NIC fetch-and-add on one, an engine accumulate
// of an int32 on the other).
func svcShards(ctx context.Context, addrs []string) error {
	var ws [2]*service.Window
	for i, a := range addrs {
		cl, err := service.Dial(ctx, a, svcConfig())
		if err != nil {
			return fmt.Errorf("dial shard %d: %w", i, err)
		}
		defer cl.Close()
		if ws[i], err = cl.Open(ctx, "counter"); err != nil {
			return err
		}
	}
	const gs, per = 4, 250
	errs := make(chan error, gs)
	for g := 0; g < gs; g++ {
		go func() {
			one := datatype.AsBytes([]int32{1})
			for k := 0; k < per; k++ {
				if _, err := rma.FetchAndOp(ctx, ws[0], int64(1), 0, op.Sum); err != nil {
					errs <- fmt.Errorf("shard 0: %w", err)
					return
				}
				if err := ws[1].Accumulate(ctx, one, datatype.Int32, 0, op.Sum); err != nil {
					errs <- fmt.Errorf("shard 1: %w", err)
					return
				}
			}
			errs <- nil
		}()
	}
	for g := 0; g < gs; g++ {
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

// TestServiceShards: a client of two servers at once; each server's
// counter ends at exactly 4 x 250.
func TestServiceShards(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := newSvcTest(t, ctx)
	srv0, addr0 := s.server("shard0", 0)
	srv1, addr1 := s.server("shard1", 0)
	s.client("client", addr0, "shards", "RMA_SVC_ADDR2="+addr1).wait(t, false)
	if err := os.WriteFile(filepath.Join(s.dir, "stop"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The counter word is an int64; shard 1's int32 accumulates land in its
	// low half (little endian).
	for i, srv := range []*cmProc{srv0, srv1} {
		if got := value(t, srv.wait(t, false), "counter"); got != "1000" {
			t.Errorf("shard %d: counter=%s, want 1000", i, got)
		}
	}
}
