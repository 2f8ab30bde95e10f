//go:build integration

package test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onesided/rma"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/service"
)

func init() { svcModes["shared"] = svcShared }

const (
	sharedGoroutines = 16
	sharedCalls      = 200 // FetchAndOps per goroutine
	sharedCAS        = 4   // goroutines incrementing by compare-and-swap
	sharedCASCalls   = 50
)

// svcShared (one Client, many goroutines): sharedGoroutines goroutines do
// sharedCalls FetchAndOp(SUM, int64) each on one counter of window
// "counter", sharedCAS goroutines increment a second counter by
// CompareAndSwap loops and a third by FetchAndOp(MAX) (a NIC
// compare-and-swap loop), and one goroutine meanwhile does the client's
// serialized calls (Put, Get, an engine Accumulate, Lock and Unlock).
// Every old value of the first counter comes back exactly once, the
// counters end exact, and a FetchAndOp whose context has ended returns
// its error and sends nothing. Before, it prints the FetchAndOp rate of
// one goroutine and of sharedGoroutines on the client.
func svcShared(ctx context.Context, addr string) error {
	cl, err := service.Dial(ctx, addr, svcConfig())
	if err != nil {
		return err
	}
	defer cl.Close()
	w, err := cl.Open(ctx, "counter")
	if err != nil {
		return err
	}
	alpha, err := cl.Open(ctx, "alpha")
	if err != nil {
		return err
	}
	// Phase 1: one goroutine, then sharedGoroutines, FetchAndOp alone on
	// word 24: the rates.
	rate := func(goroutines, calls int) (float64, error) {
		var wg sync.WaitGroup
		errs := make([]error, goroutines)
		start := time.Now()
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range calls {
					if _, err := rma.FetchAndOp(ctx, w, int64(1), 24, op.Sum); err != nil {
						errs[g] = err
						return
					}
				}
			}()
		}
		wg.Wait()
		return float64(goroutines*calls) / time.Since(start).Seconds() / 1e6, errors.Join(errs...)
	}
	if _, err := rate(1, 50); err != nil { // warm-up
		return err
	}
	one, err := rate(1, sharedCalls)
	if err != nil {
		return err
	}
	many, err := rate(sharedGoroutines, sharedCalls/4)
	if err != nil {
		return err
	}
	fmt.Printf("shared: FetchAndOp rate %.4f Mops from 1 goroutine, %.4f Mops from %d on one client\n", one, many, sharedGoroutines)
	// Phase 2: everything at once.
	const n = sharedGoroutines * sharedCalls
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		seen  = make([]int, n)
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
	}
	start := time.Now()
	for g := range sharedGoroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range sharedCalls {
				old, err := rma.FetchAndOp(ctx, w, int64(1), 0, op.Sum)
				if err != nil {
					fail(fmt.Errorf("goroutine %d FetchAndOp %d: %w", g, k, err))
					return
				}
				if old < 0 || old >= n {
					fail(fmt.Errorf("goroutine %d FetchAndOp %d: old value %d, want 0 to %d", g, k, old, n-1))
					return
				}
				mu.Lock()
				seen[old]++
				mu.Unlock()
			}
		}()
	}
	for g := range sharedCAS {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range sharedCASCalls {
				cur, err := rma.FetchAndOp(ctx, w, int64(0), 8, op.NoOp)
				for err == nil {
					var old int64
					if old, err = rma.CompareAndSwap(ctx, w, cur, cur+1, 8); err == nil && old == cur {
						break
					}
					cur = old
				}
				if err == nil {
					_, err = rma.FetchAndOp(ctx, w, int64(g*sharedCASCalls+k), 16, op.Max)
				}
				if err != nil {
					fail(fmt.Errorf("compare-and-swap goroutine %d call %d: %w", g, k, err))
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		pat := svcPattern(64, 3)
		got := make([]byte, 64)
		for k := 0; k < 50; k++ {
			err := alpha.Lock(ctx, rma.LockExclusive)
			if err == nil {
				err = alpha.Put(ctx, pat, 512)
			}
			if err == nil {
				err = alpha.Get(ctx, got, 512)
			}
			if err == nil && string(got) != string(pat) {
				err = fmt.Errorf("Get after Put: %x, want %x", got, pat)
			}
			if err == nil {
				err = alpha.Accumulate(ctx, datatype.AsBytes([]float64{1}), datatype.Float64, 1024, op.Sum)
			}
			if err == nil {
				err = alpha.Unlock(ctx)
			}
			if err != nil {
				fail(fmt.Errorf("serialized call %d: %w", k, err))
				return
			}
		}
	}()
	wg.Wait()
	elapsed := time.Since(start)
	if first != nil {
		return first
	}
	for v, c := range seen {
		if c != 1 {
			return fmt.Errorf("FetchAndOp returned old value %d %d times, want once", v, c)
		}
	}
	var b [24]byte
	if err := w.Get(ctx, b[:], 0); err != nil {
		return err
	}
	sum, cas, mx := binary.NativeEndian.Uint64(b[:]), binary.NativeEndian.Uint64(b[8:]), binary.NativeEndian.Uint64(b[16:])
	var acc [8]byte
	if err := alpha.Get(ctx, acc[:], 1024); err != nil {
		return err
	}
	fmt.Printf("shared: %d FetchAndOps from %d goroutines on one client in %v (%.3f Mops); counters %d, %d, %d; engine sum %v\n",
		n, sharedGoroutines, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds()/1e6, sum, cas, mx, math.Float64frombits(binary.NativeEndian.Uint64(acc[:])))
	if sum != n || cas != sharedCAS*sharedCASCalls || mx != sharedCAS*sharedCASCalls-1 {
		return fmt.Errorf("counters %d, %d, %d; want %d, %d, %d", sum, cas, mx, n, sharedCAS*sharedCASCalls, sharedCAS*sharedCASCalls-1)
	}
	// A FetchAndOp whose context has ended fails with its error and sends
	// nothing.
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := rma.FetchAndOp(ended, w, int64(1), 0, op.Sum); !errors.Is(err, context.Canceled) {
		return fmt.Errorf("FetchAndOp with an ended context: %v, want context.Canceled", err)
	}
	if err := w.Flush(ctx); err != nil {
		return fmt.Errorf("Flush after a cancelled FetchAndOp: %w", err)
	}
	if err := w.Get(ctx, b[:8], 0); err != nil || binary.NativeEndian.Uint64(b[:]) != n {
		return fmt.Errorf("the counter after a cancelled FetchAndOp: %d, %v; want %d", binary.NativeEndian.Uint64(b[:]), err, n)
	}
	// FetchAndOps whose contexts end while they are in flight, from
	// sharedGoroutines goroutines: each either succeeds with an old value
	// of its own or fails with its context's error, having been applied or
	// not; Flush then waits for those still in flight, and the counter
	// ends between the successes and the successes plus the cut ones.
	ok, cut, err := cutCalls(ctx, 40, 40, "FetchAndOp", func(cctx context.Context, g, k int) error {
		_, err := rma.FetchAndOp(cctx, w, int64(1), 0, op.Sum)
		return err
	})
	if err != nil {
		return err
	}
	if err := w.Flush(ctx); err != nil {
		return fmt.Errorf("Flush after cut FetchAndOps: %w", err)
	}
	if err := w.Get(ctx, b[:8], 0); err != nil {
		return err
	}
	got := int64(binary.NativeEndian.Uint64(b[:])) - n
	fmt.Printf("shared: cut FetchAndOps: %d succeeded, %d cut, the counter grew by %d\n", ok, cut, got)
	if got < ok || got > ok+cut {
		return fmt.Errorf("the counter grew by %d with %d FetchAndOps succeeded and %d cut", got, ok, cut)
	}
	if _, err := rma.FetchAndOp(ctx, w, int64(1), 0, op.Sum); err != nil {
		return fmt.Errorf("a FetchAndOp after the cut ones: %w", err)
	}
	if err := sharedPutGet(ctx, cl); err != nil {
		return err
	}
	if err := sharedEngine(ctx, cl); err != nil {
		return err
	}
	fmt.Println("shared=ok")
	return nil
}

// sharedPutGet: sharedGoroutines goroutines Put and Get on one Client at
// once, each in its own 256 bytes of window "beta", with sizes of 1 to
// 256 bytes (the lanes) and one goroutine beside them with 300 (the
// serialized path); every Get returns what its goroutine put. Then Puts
// whose contexts end in flight: after Flush each region holds the last
// Put that succeeded or a later cut one (or zeros if none was sent),
// never an earlier one.
func sharedPutGet(ctx context.Context, cl *service.Client) error {
	w, err := cl.Open(ctx, "beta")
	if err != nil {
		return err
	}
	pattern := func(g, k, n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(g*31 + k*7 + i + 1)
		}
		return b
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
	}
	const calls = 100
	start := time.Now()
	for g := range sharedGoroutines + 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range calls {
				n, disp := 1+(g*37+k*13)%256, g*256
				if g == sharedGoroutines {
					n = 300
				}
				pat, got := pattern(g, k, n), make([]byte, n)
				if err := w.Put(ctx, pat, disp); err != nil {
					fail(fmt.Errorf("goroutine %d Put %d of %d bytes: %w", g, k, n, err))
					return
				}
				if err := w.Get(ctx, got, disp); err != nil {
					fail(fmt.Errorf("goroutine %d Get %d of %d bytes: %w", g, k, n, err))
					return
				}
				if string(got) != string(pat) {
					fail(fmt.Errorf("goroutine %d call %d: Get after Put of %d bytes at %d: %x, want %x", g, k, n, disp, got, pat))
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	fmt.Printf("shared: %d Put+Get pairs from %d goroutines on one client in %v\n", (sharedGoroutines+1)*calls, sharedGoroutines+1, time.Since(start).Round(time.Millisecond))
	const cutN = 64
	for g := range sharedGoroutines {
		if err := w.Put(ctx, make([]byte, cutN), g*256); err != nil {
			return err
		}
	}
	lastOK := make([]int, sharedGoroutines)
	for g := range lastOK {
		lastOK[g] = -1
	}
	ok, cut, err := cutCalls(ctx, 40, 40, "Put", func(cctx context.Context, g, k int) error {
		err := w.Put(cctx, pattern(g, k, cutN), g*256)
		if err == nil {
			lastOK[g] = k
		}
		return err
	})
	if err != nil {
		return err
	}
	if err := w.Flush(ctx); err != nil {
		return fmt.Errorf("Flush after cut Puts: %w", err)
	}
	for g := range sharedGoroutines {
		got := make([]byte, cutN)
		if err := w.Get(ctx, got, g*256); err != nil {
			return err
		}
		k := max(lastOK[g], 0)
		for ; k < 40 && string(got) != string(pattern(g, k, cutN)); k++ {
		}
		if k == 40 && (lastOK[g] >= 0 || string(got) != string(make([]byte, cutN))) {
			return fmt.Errorf("goroutine %d: after cut Puts (last success %d) its region holds %x, no Put from the last success on", g, lastOK[g], got)
		}
	}
	fmt.Printf("shared: cut Puts: %d succeeded, %d cut\n", ok, cut)
	return nil
}

// TestServiceShared: many goroutines share one Client; see svcShared.
func TestServiceShared(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := newSvcTest(t, ctx)
	srv, addr := s.server("server", 0)
	out := s.client("client", addr, "shared").wait(t, false)
	s.stop(srv)
	if v := value(t, out, "shared"); v != "ok" {
		t.Errorf("shared=%s", v)
	}
}

// sharedEngine: sharedGoroutines goroutines call the server's engine on
// one Client at once (up to 8 of them in flight on lanes, the rest on
// the serialized path): FetchAndOp(SUM, float64) of 1 on one word, every
// old value 0 to n-1 coming back exactly once, and Accumulate(SUM,
// float64) of 3 elements on another, which ends exact, and 5
// increments each of an int32 counter by CompareAndSwap loops (the
// engine's compare-and-swap), which ends exact too. Then FetchAndOps
// whose contexts end in flight: after Flush the word grew by at least
// those that succeeded and at most those plus the cut ones.
func sharedEngine(ctx context.Context, cl *service.Client) error {
	w, err := cl.Open(ctx, "alpha")
	if err != nil {
		return err
	}
	const (
		word    = 2048 // FetchAndOp's
		accs    = 2056 // Accumulate's 3 elements
		cas32   = 2080 // an int32 counter incremented by engine CompareAndSwap loops
		calls   = 50
		casIncs = 5 // per goroutine
		n       = sharedGoroutines * calls
	)
	zero := make([]byte, 32)
	if err := w.Put(ctx, zero, word); err != nil {
		return err
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		seen  = make([]int, n)
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
	}
	before := cl.Stats().EngineOps
	start := time.Now()
	for g := range sharedGoroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			one := datatype.AsBytes([]float64{1, 1, 1})
			for k := range calls {
				old, err := rma.FetchAndOp(ctx, w, 1.0, word, op.Sum)
				if err == nil && (old != math.Trunc(old) || old < 0 || old >= n) {
					err = fmt.Errorf("old value %v, want a whole number from 0 to %d", old, n-1)
				}
				if err == nil {
					mu.Lock()
					seen[int(old)]++
					mu.Unlock()
					err = w.Accumulate(ctx, one, datatype.Float64, accs, op.Sum)
				}
				if err == nil && k < casIncs {
					err = casIncrement32(ctx, w, cas32)
				}
				if err != nil {
					fail(fmt.Errorf("goroutine %d engine call %d: %w", g, k, err))
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	elapsed := time.Since(start)
	for v, c := range seen {
		if c != 1 {
			return fmt.Errorf("FetchAndOp(SUM, float64) returned old value %d %d times, want once", v, c)
		}
	}
	got := make([]float64, 4)
	if err := w.Get(ctx, datatype.AsBytes(got), word); err != nil {
		return err
	}
	fmt.Printf("shared: %d engine FetchAndOp+Accumulate pairs from %d goroutines on one client in %v; words %v; engine ops %d\n",
		n, sharedGoroutines, elapsed.Round(time.Millisecond), got, cl.Stats().EngineOps-before)
	if got[0] != n || got[1] != n || got[2] != n || got[3] != n {
		return fmt.Errorf("words %v after %d FetchAndOps and Accumulates, want all %d", got, n, n)
	}
	var c32 [4]byte
	if err := w.Get(ctx, c32[:], cas32); err != nil {
		return err
	}
	if v := int32(binary.NativeEndian.Uint32(c32[:])); v != sharedGoroutines*casIncs {
		return fmt.Errorf("int32 counter %d after %d engine CompareAndSwap increments", v, sharedGoroutines*casIncs)
	}
	ok, cut, err := cutCalls(ctx, 20, 60, "engine FetchAndOp", func(cctx context.Context, g, k int) error {
		_, err := rma.FetchAndOp(cctx, w, 1.0, word, op.Sum)
		return err
	})
	if err != nil {
		return err
	}
	if err := w.Flush(ctx); err != nil {
		return fmt.Errorf("Flush after cut engine calls: %w", err)
	}
	if err := w.Get(ctx, datatype.AsBytes(got[:1]), word); err != nil {
		return err
	}
	grew := int64(got[0]) - n
	fmt.Printf("shared: cut engine FetchAndOps: %d succeeded, %d cut, the word grew by %d\n", ok, cut, grew)
	if grew < ok || grew > ok+cut {
		return fmt.Errorf("the word grew by %d with %d engine FetchAndOps succeeded and %d cut", grew, ok, cut)
	}
	if _, err := rma.FetchAndOp(ctx, w, 1.0, word, op.Sum); err != nil {
		return fmt.Errorf("an engine FetchAndOp after the cut ones: %w", err)
	}
	return nil
}

// casIncrement32 adds 1 to the int32 at disp by a CompareAndSwap loop.
func casIncrement32(ctx context.Context, w rma.Window, disp int) error {
	cur, err := rma.FetchAndOp(ctx, w, int32(0), disp, op.NoOp)
	for err == nil {
		var old int32
		if old, err = rma.CompareAndSwap(ctx, w, cur, cur+1, disp); err == nil && old == cur {
			return nil
		}
		cur = old
	}
	return err
}

// cutCalls has sharedGoroutines goroutines make rounds calls each of
// call, every one with a context that ends 5 to 5+spread-1 microseconds
// in (so that many end while their call is in flight), and counts the
// calls that succeeded and those that failed with their context's error;
// any other error is returned, naming the goroutine and call.
func cutCalls(ctx context.Context, rounds, spread int, what string, call func(ctx context.Context, g, k int) error) (ok, cut int64, err error) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		nOK   atomic.Int64
		nCut  atomic.Int64
		first error
	)
	for g := range sharedGoroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range rounds {
				cctx, cancel := context.WithTimeout(ctx, time.Duration(5+(g*rounds+k)%spread)*time.Microsecond)
				err := call(cctx, g, k)
				cancel()
				switch {
				case err == nil:
					nOK.Add(1)
				case errors.Is(err, context.DeadlineExceeded):
					nCut.Add(1)
				default:
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("goroutine %d cut %s %d: %w", g, what, k, err)
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return nOK.Load(), nCut.Load(), first
}
