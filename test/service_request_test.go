//go:build integration

package test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/onesided/rma"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/service"
	"github.com/onesided/rma/win"
)

// svcRequestCalls is the part of test (a)'s round that uses the request
// forms, on beta's bytes 20000 to 29999 and alpha's 2560 to 3583: RPut and
// RGet across staging pieces, each completed by Wait, by Test and by the
// client's next call; RAccumulate and RGetAccumulate through the engine
// (pieces longer than one message) and through the NIC (fetch-and-add and
// a compare-and-swap loop), with exact values; a request completed by
// Unlock; zero-size requests; refusals (errors.Is).
func svcRequestCalls(ctx context.Context, alpha, beta *service.Window, i int) error {
	// RPut then RGet of 10000 bytes (three staging pieces), each waited for.
	src := svcPattern(10000, i+3)
	r, err := beta.RPut(ctx, src, 20000)
	if err != nil {
		return fmt.Errorf("RPut: %w", err)
	}
	if err := r.Wait(ctx); err != nil {
		return fmt.Errorf("RPut's Wait: %w", err)
	}
	dst := make([]byte, len(src))
	r, err = beta.RGet(ctx, dst, 20000)
	if err != nil {
		return fmt.Errorf("RGet: %w", err)
	}
	if err := r.Wait(ctx); err != nil {
		return fmt.Errorf("RGet's Wait: %w", err)
	}
	if !bytes.Equal(dst, src) {
		return fmt.Errorf("RGet after RPut: % x..., want % x...", dst[:8], src[:8])
	}
	// An RPut completed by the next call (a Get, which sees its data), then
	// an RGet completed by Test alone.
	src = svcPattern(3000, i+4)
	rp, err := beta.RPut(ctx, src, 21000)
	if err != nil {
		return fmt.Errorf("RPut: %w", err)
	}
	got := make([]byte, len(src))
	if err := beta.Get(ctx, got, 21000); err != nil {
		return fmt.Errorf("Get after RPut: %w", err)
	}
	if !bytes.Equal(got, src) {
		return fmt.Errorf("Get after RPut: % x..., want % x...", got[:8], src[:8])
	}
	if ok, err := rp.Test(); !ok || err != nil {
		return fmt.Errorf("RPut after the next call: Test = %v, %v; want complete", ok, err)
	}
	clear(got)
	rg, err := beta.RGet(ctx, got, 21000)
	if err != nil {
		return fmt.Errorf("RGet: %w", err)
	}
	for {
		ok, err := rg.Test()
		if err != nil {
			return fmt.Errorf("RGet's Test: %w", err)
		}
		if ok {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("RGet never tested complete: %w", ctx.Err())
		}
	}
	if !bytes.Equal(got, src) {
		return fmt.Errorf("RGet by Test: % x..., want % x...", got[:8], src[:8])
	}
	// RAccumulate(SUM) of 100 float64 (800 bytes: two engine messages),
	// then RGetAccumulate(NO_OP) of them (five pieces).
	const nf = 100
	base, add := make([]float64, nf), make([]float64, nf)
	for k := range base {
		base[k], add[k] = float64(k*i)+0.25, float64(2*k+1)
	}
	if err := alpha.Put(ctx, datatype.AsBytes(base), 2560); err != nil {
		return err
	}
	r, err = alpha.RAccumulate(ctx, datatype.AsBytes(add), datatype.Float64, 2560, op.Sum)
	if err != nil {
		return fmt.Errorf("RAccumulate(SUM, 100 float64): %w", err)
	}
	if err := r.Wait(ctx); err != nil {
		return fmt.Errorf("RAccumulate's Wait: %w", err)
	}
	now := make([]float64, nf)
	r, err = alpha.RGetAccumulate(ctx, nil, datatype.AsBytes(now), datatype.Float64, 2560, op.NoOp)
	if err != nil {
		return fmt.Errorf("RGetAccumulate(NO_OP, 100 float64): %w", err)
	}
	if err := r.Wait(ctx); err != nil {
		return fmt.Errorf("RGetAccumulate's Wait: %w", err)
	}
	for k := range now {
		if want := base[k] + add[k]; now[k] != want {
			return fmt.Errorf("after RAccumulate element %d = %v, want %v", k, now[k], want)
		}
	}
	// int64 through the NIC: RGetAccumulate(SUM) on three elements
	// (fetch-and-adds), RGetAccumulate(MAX) and RAccumulate(MIN) (compare-
	// and-swap loops, complete when the call returns).
	init64 := []int64{int64(i), -5, 1 << 40}
	if err := alpha.Put(ctx, datatype.AsBytes(init64), 3456); err != nil {
		return err
	}
	old64 := make([]int64, 3)
	r, err = alpha.RGetAccumulate(ctx, datatype.AsBytes([]int64{1, 2, 3}), datatype.AsBytes(old64), datatype.Int64, 3456, op.Sum)
	if err != nil {
		return fmt.Errorf("RGetAccumulate(SUM, int64): %w", err)
	}
	if err := r.Wait(ctx); err != nil {
		return fmt.Errorf("RGetAccumulate(SUM, int64)'s Wait: %w", err)
	}
	if !equalI64(old64, init64) {
		return fmt.Errorf("RGetAccumulate(SUM, int64) old values %v, want %v", old64, init64)
	}
	var maxOld [8]byte
	r, err = alpha.RGetAccumulate(ctx, datatype.AsBytes([]int64{100}), maxOld[:], datatype.Int64, 3464, op.Max)
	if err != nil {
		return fmt.Errorf("RGetAccumulate(MAX, int64): %w", err)
	}
	if ok, err := r.Test(); !ok || err != nil {
		return fmt.Errorf("RGetAccumulate(MAX, int64): Test = %v, %v; want complete at once", ok, err)
	}
	if got := int64(binary.NativeEndian.Uint64(maxOld[:])); got != -3 {
		return fmt.Errorf("RGetAccumulate(MAX, int64) old value %d, want -3", got)
	}
	// Under the exclusive lock: an RAccumulate(MIN) and an
	// RAccumulate(SUM) on int64; Unlock completes the SUM's request.
	if err := alpha.Lock(ctx, win.LockExclusive); err != nil {
		return err
	}
	if _, err := alpha.RAccumulate(ctx, datatype.AsBytes([]int64{-7}), datatype.Int64, 3456, op.Min); err != nil {
		return fmt.Errorf("RAccumulate(MIN, int64): %w", err)
	}
	rs, err := alpha.RAccumulate(ctx, datatype.AsBytes([]int64{10}), datatype.Int64, 3472, op.Sum)
	if err != nil {
		return fmt.Errorf("RAccumulate(SUM, int64): %w", err)
	}
	if err := alpha.Unlock(ctx); err != nil {
		return err
	}
	if ok, err := rs.Test(); !ok || err != nil {
		return fmt.Errorf("RAccumulate after Unlock: Test = %v, %v; want complete", ok, err)
	}
	after := make([]int64, 3)
	if err := alpha.Get(ctx, datatype.AsBytes(after), 3456); err != nil {
		return err
	}
	if want := []int64{-7, 100, 1<<40 + 3 + 10}; !equalI64(after, want) {
		return fmt.Errorf("int64 elements after the request forms %v, want %v", after, want)
	}
	// Zero-size requests are complete; refusals are the blocking calls'.
	for _, z := range []func() (rma.Request, error){
		func() (rma.Request, error) { return alpha.RPut(ctx, nil, 0) },
		func() (rma.Request, error) { return alpha.RGet(ctx, nil, 0) },
		func() (rma.Request, error) { return alpha.RAccumulate(ctx, nil, datatype.Float64, 0, op.Sum) },
		func() (rma.Request, error) {
			return alpha.RGetAccumulate(ctx, nil, nil, datatype.Float64, 0, op.Sum)
		},
	} {
		r, err := z()
		if err != nil {
			return fmt.Errorf("zero-size request: %w", err)
		}
		if ok, err := r.Test(); !ok || err != nil {
			return fmt.Errorf("zero-size request: Test = %v, %v", ok, err)
		}
	}
	if _, err := alpha.RGet(ctx, make([]byte, 16), svcAlpha-8); !errors.Is(err, win.ErrOutOfWindow) {
		return fmt.Errorf("RGet across the end: %v, want win.ErrOutOfWindow", err)
	}
	if _, err := alpha.RAccumulate(ctx, make([]byte, 8), datatype.Float64, 0, op.NoOp); !errors.Is(err, op.ErrOpUse) {
		return fmt.Errorf("RAccumulate(NO_OP): %v, want op's refusal", err)
	}
	if _, err := alpha.RGetAccumulate(ctx, make([]byte, 8), make([]byte, 8), datatype.Int64, 4, op.Sum); !errors.Is(err, win.ErrAlignment) {
		return fmt.Errorf("RGetAccumulate(SUM, int64) misaligned: %v, want win.ErrAlignment", err)
	}
	return nil
}

func equalI64(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if a[k] != b[k] {
			return false
		}
	}
	return true
}
