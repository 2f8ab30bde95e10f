//go:build integration

package test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/onesided/rma"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
)

// contractRequestBytes is the region of the window that contractRequests
// uses, from its base.
const contractRequestBytes = 48 << 10

// contractRequests checks the request forms' rules on w, under a shared
// lock, on its bytes base to base+contractRequestBytes (nobody else writes
// them):
//   - 300 RGets of 1 byte to 40000 bytes and 100 engine RGetAccumulates
//     whose Wait is given an ended context either return its error (again
//     on a second Wait) and write nothing into their buffers afterwards, or
//     return nil (the call had completed) with exact data; the calls after
//     them work and read exact data;
//   - 64 requests of every form in flight at once, waited for in reverse
//     order and by Test, complete with exact results;
//   - Flush completes every request: a Wait after it returns at once.
func contractRequests(ctx context.Context, w rma.Window, base int) error {
	pat := svcPattern(contractRequestBytes, base)
	if err := w.Lock(ctx, rma.LockExclusive); err != nil {
		return fmt.Errorf("Lock: %w", err)
	}
	if err := w.Put(ctx, pat, base); err != nil {
		return fmt.Errorf("Put: %w", err)
	}
	if err := w.Unlock(ctx); err != nil {
		return fmt.Errorf("Unlock: %w", err)
	}
	if err := w.Lock(ctx, rma.LockShared); err != nil {
		return fmt.Errorf("Lock: %w", err)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	// abandoned checks the Wait of a request r whose result goes to b
	// (from want at the target) given an ended context; it returns what b
	// must still hold after the next Flush (nil: nothing to check).
	abandoned := func(what string, r rma.Request, b, want []byte) ([]byte, error) {
		err := r.Wait(ended)
		switch {
		case err == nil: // it had completed: its result is there
			if !bytes.Equal(b, want) {
				return nil, fmt.Errorf("%s: Wait with an ended context returned nil, the call complete, but its result differs", what)
			}
			return nil, nil
		case !errors.Is(err, context.Canceled):
			return nil, fmt.Errorf("%s: Wait with an ended context = %v, want context.Canceled (or nil)", what, err)
		}
		if err := r.Wait(ctx); !errors.Is(err, context.Canceled) {
			return nil, fmt.Errorf("%s: Wait after the abandon = %v, want context.Canceled again", what, err)
		}
		return bytes.Clone(b), nil
	}
	type held struct {
		what      string
		buf, then []byte
	}
	var holds []held
	flushHolds := func() error {
		if err := w.Flush(ctx); err != nil {
			return err
		}
		for _, h := range holds {
			if !bytes.Equal(h.buf, h.then) {
				return fmt.Errorf("%s: its buffer was written after its Wait returned context.Canceled", h.what)
			}
		}
		holds = holds[:0]
		return nil
	}
	sizes := []int{8, 300, 40000, 1, 4096}
	canceled := 0
	for i := range 300 {
		size := sizes[i%len(sizes)]
		b := bytes.Repeat([]byte{0xEE}, size)
		at := (i * 131) % (contractRequestBytes - 40000)
		r, err := w.RGet(ctx, b, base+at)
		if err != nil {
			return fmt.Errorf("RGet %d: %w", i, err)
		}
		what := fmt.Sprintf("RGet %d (%d bytes)", i, size)
		then, err := abandoned(what, r, b, pat[at:at+size])
		if err != nil {
			return err
		}
		if then != nil {
			canceled++
			holds = append(holds, held{what, b, then})
		}
		if i%100 == 99 {
			if err := flushHolds(); err != nil {
				return err
			}
		}
	}
	// Through the engine (int32): the replies may come after the abandon.
	for i := range 100 {
		b := bytes.Repeat([]byte{0xEE}, 8)
		r, err := w.RGetAccumulate(ctx, nil, b, datatype.Int32, base+8*i, op.NoOp)
		if err != nil {
			return fmt.Errorf("RGetAccumulate %d: %w", i, err)
		}
		what := fmt.Sprintf("RGetAccumulate(NO_OP) %d", i)
		then, err := abandoned(what, r, b, pat[8*i:8*i+8])
		if err != nil {
			return err
		}
		if then != nil {
			canceled++
			holds = append(holds, held{what, b, then})
		}
	}
	if err := flushHolds(); err != nil {
		return err
	}
	if canceled == 0 {
		return fmt.Errorf("all 400 requests had completed before their Wait: nothing was abandoned")
	}
	fmt.Printf("contract requests: %d of 400 abandoned, the others complete before their Wait\n", canceled)
	// Everything still works: a Get and an RGet of every size.
	for _, size := range sizes {
		b := make([]byte, size)
		if err := w.Get(ctx, b, base+64); err != nil {
			return fmt.Errorf("Get after the abandons: %w", err)
		}
		if !bytes.Equal(b, pat[64:64+size]) {
			return fmt.Errorf("Get of %d bytes after the abandons: wrong data", size)
		}
		clear(b)
		r, err := w.RGet(ctx, b, base+64)
		if err != nil {
			return err
		}
		if err := r.Wait(ctx); err != nil || !bytes.Equal(b, pat[64:64+size]) {
			return fmt.Errorf("RGet of %d bytes after the abandons: %v, or wrong data", size, err)
		}
	}

	// 64 requests in flight, of every form: RPut of 64 bytes each into its
	// own block from 8192, RGet of the pattern, RAccumulate of 1 to a float64
	// counter each, RGetAccumulate(SUM) of 1 to an int32 counter each.
	const n = 16
	const blocks, fcount, icount = 8192, 8192 + 64*n, 8192 + 64*n + 8*n
	if err := w.Put(ctx, make([]byte, 12*n), base+fcount); err != nil {
		return err
	}
	if err := w.Flush(ctx); err != nil {
		return err
	}
	var reqs []rma.Request
	gets := make([][]byte, n)
	olds := make([][]int32, n)
	for i := range n {
		put := svcPattern(64, i)
		r, err := w.RPut(ctx, put, base+blocks+64*i)
		if err != nil {
			return fmt.Errorf("RPut %d: %w", i, err)
		}
		reqs = append(reqs, r)
		gets[i] = make([]byte, 64)
		if r, err = w.RGet(ctx, gets[i], base+128*i); err != nil {
			return fmt.Errorf("RGet %d: %w", i, err)
		}
		reqs = append(reqs, r)
		if r, err = w.RAccumulate(ctx, datatype.AsBytes([]float64{1}), datatype.Float64, base+fcount+8*i, op.Sum); err != nil {
			return fmt.Errorf("RAccumulate %d: %w", i, err)
		}
		reqs = append(reqs, r)
		olds[i] = []int32{-1}
		if r, err = w.RGetAccumulate(ctx, datatype.AsBytes([]int32{1}), datatype.AsBytes(olds[i]), datatype.Int32, base+icount+4*i, op.Sum); err != nil {
			return fmt.Errorf("RGetAccumulate %d: %w", i, err)
		}
		reqs = append(reqs, r)
	}
	for i := len(reqs) - 1; i >= 0; i-- {
		if i%2 == 0 {
			if err := reqs[i].Wait(ctx); err != nil {
				return fmt.Errorf("request %d of %d, waited for in reverse order: %w", i, len(reqs), err)
			}
			continue
		}
		for {
			done, err := reqs[i].Test()
			if err != nil {
				return fmt.Errorf("request %d of %d, tested: %w", i, len(reqs), err)
			}
			if done {
				break
			}
		}
	}
	for i := range n {
		if !bytes.Equal(gets[i], pat[128*i:128*i+64]) {
			return fmt.Errorf("RGet %d among the 64 in flight: wrong data", i)
		}
		if olds[i][0] != 0 {
			return fmt.Errorf("RGetAccumulate %d among the 64 in flight: old value %d, want 0", i, olds[i][0])
		}
	}
	mem := make([]byte, 76*n)
	if err := w.Get(ctx, mem, base+blocks); err != nil {
		return err
	}
	for i := range n {
		if !bytes.Equal(mem[64*i:64*i+64], svcPattern(64, i)) {
			return fmt.Errorf("RPut %d among the 64 in flight: block %x, want %x", i, mem[64*i:64*i+64], svcPattern(64, i))
		}
		f := math.Float64frombits(binary.NativeEndian.Uint64(mem[64*n+8*i:]))
		c := int32(binary.NativeEndian.Uint32(mem[72*n+4*i:]))
		if f != 1 || c != 1 {
			return fmt.Errorf("counters %d after the 64 in flight: float64 %v, int32 %d; want 1 and 1", i, f, c)
		}
	}
	// Flush completes a request: its Wait then returns at once, even with
	// an ended context.
	b := make([]byte, 300)
	r, err := w.RGet(ctx, b, base+64)
	if err != nil {
		return err
	}
	if err := w.Flush(ctx); err != nil {
		return err
	}
	if done, err := r.Test(); !done || err != nil {
		return fmt.Errorf("Test of an RGet after Flush: %v, %v; want true, nil", done, err)
	}
	if err := r.Wait(ended); err != nil || !bytes.Equal(b, pat[64:364]) {
		return fmt.Errorf("Wait (ended context) of an RGet after Flush: %v, or wrong data; want nil", err)
	}
	if err := w.Unlock(ctx); err != nil {
		return fmt.Errorf("Unlock: %w", err)
	}
	return nil
}
