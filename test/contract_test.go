//go:build integration

package test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/onesided/rma"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/service"
	"github.com/onesided/rma/win"
)

// The contract (package rma) checked once and run on both modes: a group
// window's view of another rank (TestContractGroup) and a service window
// (TestContractService): every call by one goroutine (contractCalls),
// the calls refused whatever the mode (contractChecks), then many
// goroutines sharing the window (contractShared), and the request forms'
// rules (contractRequests).

func init() {
	workers["contract"] = workContract
	svcModes["contract"] = svcContract
}

// contractBytes is the region of the window that contractCalls uses, from
// its base.
const contractBytes = 1024

// contractCalls exercises every call of rma.Window on w's bytes base to
// base+contractBytes (nobody else uses them), through the typed helpers
// where they exist, and checks exact results: Lock, PutSlice and
// GetSlice, FetchAndOp on int64 (the NIC) and int32 (the engine),
// CompareAndSwap, AccumulateSlice and GetAccumulateSlice on float64, the
// request forms, and the cancellation rule of Request.Wait (a Wait whose
// context has ended abandons the call: it returns the context's error,
// Test then reports it, and the result buffer is not written afterwards).
func contractCalls(ctx context.Context, w rma.Window, base int) error {
	if err := w.Lock(ctx, rma.LockExclusive); err != nil {
		return fmt.Errorf("Lock: %w", err)
	}
	if err := w.Lock(ctx, rma.LockShared); !errors.Is(err, rma.ErrEpoch) {
		return fmt.Errorf("Lock while holding the lock: %v, want rma.ErrEpoch", err)
	}
	i64 := []int64{10, -20, 1 << 40, 0}
	if err := rma.PutSlice(ctx, w, i64, base); err != nil {
		return fmt.Errorf("PutSlice: %w", err)
	}
	if err := w.Flush(ctx); err != nil {
		return fmt.Errorf("Flush: %w", err)
	}
	got := make([]int64, len(i64))
	if err := rma.GetSlice(ctx, w, got, base); err != nil || !equalI64(got, i64) {
		return fmt.Errorf("GetSlice after PutSlice: %v, %v; want %v", got, err, i64)
	}
	if old, err := rma.FetchAndOp(ctx, w, int64(5), base, op.Sum); old != 10 || err != nil {
		return fmt.Errorf("FetchAndOp(SUM, int64): %d, %v; want 10", old, err)
	}
	if old, err := rma.CompareAndSwap(ctx, w, int64(-20), 7, base+8); old != -20 || err != nil {
		return fmt.Errorf("CompareAndSwap(int64, match): %d, %v; want -20", old, err)
	}
	if old, err := rma.CompareAndSwap(ctx, w, int64(-20), 9, base+8); old != 7 || err != nil {
		return fmt.Errorf("CompareAndSwap(int64, no match): %d, %v; want 7", old, err)
	}
	if old, err := rma.FetchAndOp(ctx, w, int32(3), base+24, op.Sum); old != 0 || err != nil {
		return fmt.Errorf("FetchAndOp(SUM, int32): %d, %v; want 0", old, err)
	}
	if old, err := rma.FetchAndOp(ctx, w, int32(0), base+24, op.NoOp); old != 3 || err != nil {
		return fmt.Errorf("FetchAndOp(NO_OP, int32): %d, %v; want 3", old, err)
	}
	if _, err := rma.FetchAndOp(ctx, w, int64(1), base+4, op.Sum); !errors.Is(err, rma.ErrAlignment) {
		return fmt.Errorf("FetchAndOp(SUM, int64) misaligned: %v, want rma.ErrAlignment", err)
	}
	f64 := []float64{1.5, -2, 1e10}
	if err := rma.PutSlice(ctx, w, f64, base+32); err != nil {
		return err
	}
	if err := rma.AccumulateSlice(ctx, w, []float64{1, 1, 1}, base+32, op.Sum); err != nil {
		return fmt.Errorf("AccumulateSlice(SUM, float64): %w", err)
	}
	oldf := make([]float64, 3)
	if err := rma.GetAccumulateSlice(ctx, w, []float64{0, 0, 0}, oldf, base+32, op.Max); err != nil {
		return fmt.Errorf("GetAccumulateSlice(MAX, float64): %w", err)
	}
	if want := []float64{2.5, -1, 1e10 + 1}; !equalF64(oldf, want) {
		return fmt.Errorf("GetAccumulateSlice(MAX) old values %v, want %v", oldf, want)
	}
	// Derived target layouts: an indexed float64 one (the engine) and an
	// indexed int64 one (the NIC), two instances each, then a vector of
	// 40 float64 elements (more than one engine message on a service
	// window).
	if err := w.Put(ctx, make([]byte, 768), base+256); err != nil {
		return err
	}
	for _, c := range []struct {
		name string
		dt   datatype.Basic
		disp int
	}{{"float64", datatype.Float64, base + 256}, {"int64", datatype.Int64, base + 320}} {
		idx, err := datatype.Indexed([]int{1, 2}, []int{3, 0}, c.dt.Type()) // elements at 24, 0, 8 of 32 bytes
		if err != nil {
			return err
		}
		l := rma.Layout{Disp: c.disp, Type: idx, Count: 2}
		in, add := make([]byte, 48), make([]byte, 48)
		for i := range 6 {
			if c.dt == datatype.Float64 {
				binary.NativeEndian.PutUint64(in[8*i:], math.Float64bits(float64(i+1)))
				binary.NativeEndian.PutUint64(add[8*i:], math.Float64bits(10))
			} else {
				binary.NativeEndian.PutUint64(in[8*i:], uint64(i+1))
				binary.NativeEndian.PutUint64(add[8*i:], 10)
			}
		}
		if err := w.AccumulateTo(ctx, rma.Contiguous(in, c.dt), l, op.Sum); err != nil {
			return fmt.Errorf("AccumulateTo(SUM, indexed %s): %w", c.name, err)
		}
		old := make([]byte, 48)
		if err := w.GetAccumulateTo(ctx, rma.Contiguous(add, c.dt), rma.Contiguous(old, c.dt), l, op.Sum); err != nil {
			return fmt.Errorf("GetAccumulateTo(SUM, indexed %s): %w", c.name, err)
		}
		if string(old) != string(in) {
			return fmt.Errorf("GetAccumulateTo(SUM, indexed %s) old values %x, want %x", c.name, old, in)
		}
		// In memory, instance by instance: elements 2, 3 at 0, 8; 1 at 24.
		mem := make([]byte, 64)
		if err := w.Get(ctx, mem, c.disp); err != nil {
			return err
		}
		for i, at := range []int{24, 0, 8, 56, 32, 40} {
			want := binary.NativeEndian.Uint64(in[8*i:])
			if c.dt == datatype.Float64 {
				want = math.Float64bits(math.Float64frombits(want) + 10)
			} else {
				want += 10
			}
			if got := binary.NativeEndian.Uint64(mem[at:]); got != want {
				return fmt.Errorf("indexed %s: element %d (byte %d) holds %#x, want %#x", c.name, i, at, got, want)
			}
		}
	}
	vec, err := datatype.Vector(40, 1, 2, datatype.Float64.Type())
	if err != nil {
		return err
	}
	l := rma.Layout{Disp: base + 384, Type: vec, Count: 1}
	in := make([]float64, 40)
	for i := range in {
		in[i] = float64(i) + 0.5
	}
	if err := w.AccumulateTo(ctx, rma.Contiguous(datatype.AsBytes(in), datatype.Float64), l, op.Sum); err != nil {
		return fmt.Errorf("AccumulateTo(SUM, vector of 40 float64): %w", err)
	}
	olds := make([]float64, 40)
	if err := w.GetAccumulateTo(ctx, rma.Buffer{}, rma.Contiguous(datatype.AsBytes(olds), datatype.Float64), l, op.NoOp); err != nil || !equalF64(olds, in) {
		return fmt.Errorf("GetAccumulateTo(NO_OP, vector of 40 float64): %v, %v; want %v", olds, err, in)
	}
	if err := contractDatatypes(ctx, w, base+128); err != nil {
		return err
	}
	// The request forms.
	pat := svcPattern(64, base)
	r, err := w.RPut(ctx, pat, base+64)
	if err == nil {
		err = r.Wait(ctx)
	}
	if err != nil {
		return fmt.Errorf("RPut: %w", err)
	}
	dst := make([]byte, 64)
	if r, err = w.RGet(ctx, dst, base+64); err == nil {
		err = r.Wait(ctx)
	}
	if err != nil || string(dst) != string(pat) {
		return fmt.Errorf("RGet after RPut: %x, %v; want %x", dst, err, pat)
	}
	if r, err = w.RAccumulate(ctx, datatype.AsBytes([]float64{10}), datatype.Float64, base+32, op.Sum); err == nil {
		err = r.Wait(ctx)
	}
	if err != nil {
		return fmt.Errorf("RAccumulate: %w", err)
	}
	res := make([]float64, 1)
	if r, err = w.RGetAccumulate(ctx, nil, datatype.AsBytes(res), datatype.Float64, base+32, op.NoOp); err == nil {
		err = r.Wait(ctx)
	}
	if err != nil || res[0] != 12.5 {
		return fmt.Errorf("RGetAccumulate(NO_OP) after RAccumulate: %v, %v; want 12.5", res[0], err)
	}
	// A Wait whose context has ended abandons the call.
	ended, cancel := context.WithCancel(ctx)
	cancel()
	clear(dst)
	if r, err = w.RGet(ctx, dst, base+64); err != nil {
		return fmt.Errorf("RGet: %w", err)
	}
	if err := r.Wait(ended); !errors.Is(err, context.Canceled) {
		return fmt.Errorf("Wait with an ended context: %v, want context.Canceled", err)
	}
	if done, err := r.Test(); !done || !errors.Is(err, context.Canceled) {
		return fmt.Errorf("Test of an abandoned request: %v, %v; want true, context.Canceled", done, err)
	}
	if err := w.Flush(ctx); err != nil {
		return fmt.Errorf("Flush after an abandoned RGet: %w", err)
	}
	if string(dst) != string(make([]byte, 64)) {
		return fmt.Errorf("an abandoned RGet wrote its result buffer: %x", dst)
	}
	if err := w.Unlock(ctx); err != nil {
		return fmt.Errorf("Unlock: %w", err)
	}
	if err := w.Unlock(ctx); !errors.Is(err, rma.ErrEpoch) {
		return fmt.Errorf("Unlock without the lock: %v, want rma.ErrEpoch", err)
	}
	return nil
}

// contractDatatypes checks PutTo, GetTo, AccumulateTo and GetAccumulateTo
// with datatypes on origin, result and target, on int64 (the NIC's) and
// float64 (the engine's), in w's bytes base to base+128: the origin and
// result take every other element of 8, the target two blocks of two
// elements, the second block first in memory.
func contractDatatypes(ctx context.Context, w rma.Window, base int) error {
	for i, dt := range []datatype.Basic{datatype.Int64, datatype.Float64} {
		every2, err := datatype.Vector(4, 1, 2, dt.Type())
		if err != nil {
			return err
		}
		blocks, err := datatype.Indexed([]int{2, 2}, []int{3, 0}, dt.Type()) // words 3, 4, then 0, 1
		if err != nil {
			return err
		}
		l := rma.Layout{Disp: base + 64*i, Type: blocks, Count: 1}
		val := func(v float64) uint64 {
			if dt == datatype.Float64 {
				return math.Float64bits(v)
			}
			return uint64(int64(v))
		}
		src := make([]byte, 64) // 1, 2, 3, 4 at even indices, -1 at odd
		for k := range 8 {
			v := -1.0
			if k%2 == 0 {
				v = float64(k/2 + 1)
			}
			binary.NativeEndian.PutUint64(src[8*k:], val(v))
		}
		origin := rma.Buffer{Data: src, Type: every2, Count: 1}
		// words: what the target's five words must hold, by element value.
		words := func(scale float64) []byte {
			m := make([]byte, 40)
			for k, at := range []int{3, 4, 0, 1} {
				binary.NativeEndian.PutUint64(m[8*at:], val(scale*float64(k+1)))
			}
			return m
		}
		result := func(scale float64) []byte {
			m := make([]byte, 64)
			for k := range 4 {
				binary.NativeEndian.PutUint64(m[16*k:], val(scale*float64(k+1)))
			}
			return m
		}
		mem := make([]byte, 40)
		if err := w.Put(ctx, mem, l.Disp); err != nil {
			return err
		}
		if err := w.PutTo(ctx, origin, l); err != nil {
			return fmt.Errorf("PutTo(%v): %w", dt, err)
		}
		if err := w.Flush(ctx); err != nil {
			return err
		}
		if err := w.Get(ctx, mem, l.Disp); err != nil || string(mem) != string(words(1)) {
			return fmt.Errorf("after PutTo(%v) of every other element into two blocks: %x, %v; want %x", dt, mem, err, words(1))
		}
		res := make([]byte, 64)
		if err := w.GetTo(ctx, rma.Buffer{Data: res, Type: every2, Count: 1}, l); err != nil || string(res) != string(result(1)) {
			return fmt.Errorf("GetTo(%v) into every other element: %x, %v; want %x", dt, res, err, result(1))
		}
		if err := w.AccumulateTo(ctx, origin, l, op.Sum); err != nil {
			return fmt.Errorf("AccumulateTo(SUM, %v): %w", dt, err)
		}
		clear(res)
		if err := w.GetAccumulateTo(ctx, origin, rma.Buffer{Data: res, Type: every2, Count: 1}, l, op.Sum); err != nil || string(res) != string(result(2)) {
			return fmt.Errorf("GetAccumulateTo(SUM, %v) into every other element: %x, %v; want %x", dt, res, err, result(2))
		}
		if err := w.Get(ctx, mem, l.Disp); err != nil || string(mem) != string(words(3)) {
			return fmt.Errorf("after AccumulateTo and GetAccumulateTo(SUM, %v): %x, %v; want %x", dt, mem, err, words(3))
		}
	}
	return nil
}

// contractSharedBytes is the region of the window that contractShared
// uses, from its base: an int64 counter, a float64 counter, 3 float64
// sums, then 64 bytes per goroutine from 64.
const contractSharedBytes = 64 + contractGoroutines*64

const (
	contractGoroutines = 16
	contractRounds     = 25
)

// contractShared: contractGoroutines goroutines share w, under a shared
// lock, each doing contractRounds rounds of FetchAndOp(SUM, int64) (the
// NIC) and FetchAndOp(SUM, float64) (the engine) of 1 on two counters,
// an Accumulate of 1 on three float64 elements, and a Put then a Get of
// 1 to 64 bytes of its own; every old value of each counter comes back
// exactly once, each Get returns its goroutine's Put, and the counters and
// sums end exact.
func contractShared(ctx context.Context, w rma.Window, base int) error {
	if err := w.Lock(ctx, rma.LockShared); err != nil {
		return fmt.Errorf("Lock(shared): %w", err)
	}
	if err := w.Put(ctx, make([]byte, 64), base); err != nil {
		return fmt.Errorf("Put of zeros: %w", err)
	}
	const n = contractGoroutines * contractRounds
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		seenI = make([]int, n)
		seenF = make([]int, n)
	)
	note := func(seen []int, old int64, err error) error {
		if err != nil {
			return err
		}
		if old < 0 || old >= n {
			return fmt.Errorf("old value %d, want 0 to %d", old, n-1)
		}
		mu.Lock()
		seen[old]++
		mu.Unlock()
		return nil
	}
	for g := range contractGoroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ones := []float64{1, 1, 1}
			own := base + 64 + 64*g
			for k := range contractRounds {
				oi, err := rma.FetchAndOp(ctx, w, int64(1), base, op.Sum)
				err = note(seenI, oi, err)
				if err == nil {
					var of float64
					of, err = rma.FetchAndOp(ctx, w, 1.0, base+8, op.Sum)
					if err == nil && of != math.Trunc(of) {
						err = fmt.Errorf("old value %v of the float64 counter", of)
					}
					err = note(seenF, int64(of), err)
				}
				if err == nil {
					err = rma.AccumulateSlice(ctx, w, ones, base+16, op.Sum)
				}
				size := 1 + (g*13+k*7)%64
				put, got := make([]byte, size), make([]byte, size)
				for i := range put {
					put[i] = byte(g*31 + k*5 + i + 1)
				}
				if err == nil {
					err = w.Put(ctx, put, own)
				}
				if err == nil {
					err = w.Get(ctx, got, own)
				}
				if err == nil && string(got) != string(put) {
					err = fmt.Errorf("Get after Put of %d bytes: %x, want %x", size, got, put)
				}
				if err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("goroutine %d round %d: %w", g, k, err)
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	for v := range n {
		if seenI[v] != 1 || seenF[v] != 1 {
			return fmt.Errorf("old value %d came back %d times from the int64 counter and %d from the float64 one, want once", v, seenI[v], seenF[v])
		}
	}
	var b [40]byte
	if err := w.Get(ctx, b[:], base); err != nil {
		return err
	}
	ci := int64(binary.NativeEndian.Uint64(b[:]))
	var f [4]float64
	for i := range f {
		f[i] = math.Float64frombits(binary.NativeEndian.Uint64(b[8+8*i:]))
	}
	if ci != n || f != [4]float64{n, n, n, n} {
		return fmt.Errorf("after %d rounds: int64 counter %d, float64 counter and sums %v; want %d", n, ci, f, n)
	}
	if err := w.Unlock(ctx); err != nil {
		return fmt.Errorf("Unlock: %w", err)
	}
	return nil
}

// workContract (2 ranks): each rank runs contractCalls on the other's
// window through win.Window.Target.
func workContract(ctx context.Context, g *group.Group) error {
	const size = 2*contractBytes + 2*contractSharedBytes + 2*contractCheckBytes + 2*contractRequestBytes
	w, err := win.Allocate(ctx, g, size, 1)
	if err != nil {
		return err
	}
	me := g.Rank()
	if err := contractCalls(ctx, w.Target(1-me), contractBytes*me); err != nil {
		return fmt.Errorf("on rank %d's window: %w", 1-me, err)
	}
	if err := contractChecks(ctx, w.Target(1-me), size-contractCheckBytes*(1+me), size); err != nil {
		return fmt.Errorf("on rank %d's window: %w", 1-me, err)
	}
	if err := contractRequests(ctx, w.Target(1-me), 2*contractBytes+2*contractSharedBytes+contractRequestBytes*me); err != nil {
		return fmt.Errorf("on rank %d's window: %w", 1-me, err)
	}
	if err := contractShared(ctx, w.Target(1-me), 2*contractBytes+contractSharedBytes*me); err != nil {
		return fmt.Errorf("on rank %d's window: %w", 1-me, err)
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if err := w.Free(ctx); err != nil {
		return err
	}
	fmt.Println("contract=ok")
	return nil
}

func TestContractGroup(t *testing.T) {
	l := newLaunch(t, "contract", 2)
	finished(t, l.run(2*time.Minute), "contract")
}

// svcContract runs contractCalls on window alpha of the server, on its
// last contractBytes.
func svcContract(ctx context.Context, addr string) error {
	cl, err := service.Dial(ctx, addr, svcConfig())
	if err != nil {
		return err
	}
	defer cl.Close()
	alpha, err := cl.Open(ctx, "alpha")
	if err != nil {
		return err
	}
	if err := contractCalls(ctx, alpha, svcAlpha-contractBytes); err != nil {
		return err
	}
	if err := contractChecks(ctx, alpha, svcAlpha-contractBytes-contractCheckBytes, svcAlpha); err != nil {
		return err
	}
	beta, err := cl.Open(ctx, "beta")
	if err != nil {
		return err
	}
	if err := contractShared(ctx, beta, 0); err != nil {
		return err
	}
	if err := contractRequests(ctx, beta, svcBeta-contractRequestBytes); err != nil {
		return err
	}
	fmt.Println("contract=ok")
	return nil
}

func TestContractService(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := newSvcTest(t, ctx)
	srv, addr := s.server("server", 0)
	out := s.client("client", addr, "contract").wait(t, false)
	s.stop(srv)
	if v := value(t, out, "contract"); v != "ok" {
		t.Errorf("contract=%s", v)
	}
}
