//go:build integration

package test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/onesided/rma"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
)

// contractCheckBytes is the region of the window that contractChecks uses,
// from its base.
const contractCheckBytes = 64

// contractChecks makes, on w (size bytes long) under an exclusive lock,
// the calls that are wrong whatever the mode, and checks that each is
// refused at the call with the sentinel the contract names (errors.Is):
// a target outside the window (ErrOutOfWindow), a NIC atomic off 8-byte
// alignment (ErrAlignment), an op that is no op, an op that the call or the
// datatype does not take (op.ErrOpUse, op.ErrOpDatatype), buffers whose
// lengths do not fit the datatype or each other (ErrInvalid), a request
// form of any of them (no request). Every refusal must leave the window
// as it was (its bytes base to base+contractCheckBytes are read back), and
// the window must work after it. Then accumulates of the engine's
// datatypes at displacements off their alignment are exact.
func contractChecks(ctx context.Context, w rma.Window, base, size int) error {
	if err := w.Lock(ctx, rma.LockExclusive); err != nil {
		return fmt.Errorf("Lock: %w", err)
	}
	pat := svcPattern(contractCheckBytes, base+7)
	if err := w.Put(ctx, pat, base); err != nil {
		return fmt.Errorf("Put: %w", err)
	}
	if err := w.Flush(ctx); err != nil {
		return fmt.Errorf("Flush: %w", err)
	}
	b8, r8, r16 := make([]byte, 8), make([]byte, 8), make([]byte, 16)
	i64, f64, i32 := datatype.Int64, datatype.Float64, datatype.Int32
	var fails []string
	is := func(what string, err, want error) {
		if !errors.Is(err, want) {
			fails = append(fails, fmt.Sprintf("%s: %v, want %v", what, err, want))
		}
	}
	isReq := func(what string, r rma.Request, err, want error) {
		is(what, err, want)
		if r != nil {
			fails = append(fails, what+": returned a request with its error")
		}
	}
	// Outside the window: before it, across its end, far beyond.
	for _, c := range []struct {
		name string
		disp int
	}{{"at -1", -1}, {"across the end", size - 4}, {"at 2^40", 1 << 40}} {
		is("Put "+c.name, w.Put(ctx, b8, c.disp), rma.ErrOutOfWindow)
		is("Get "+c.name, w.Get(ctx, r8, c.disp), rma.ErrOutOfWindow)
		is("Accumulate(SUM, int64) "+c.name, w.Accumulate(ctx, b8, i64, c.disp, op.Sum), rma.ErrOutOfWindow)
		is("Accumulate(SUM, float64) "+c.name, w.Accumulate(ctx, b8, f64, c.disp, op.Sum), rma.ErrOutOfWindow)
		is("GetAccumulate(SUM, float64) "+c.name, w.GetAccumulate(ctx, b8, r8, f64, c.disp, op.Sum), rma.ErrOutOfWindow)
		is("FetchAndOp(SUM, int64) "+c.name, w.FetchAndOp(ctx, b8, r8, i64, c.disp, op.Sum), rma.ErrOutOfWindow)
		is("CompareAndSwap(int64) "+c.name, w.CompareAndSwap(ctx, b8, b8, r8, i64, c.disp), rma.ErrOutOfWindow)
		r, err := w.RPut(ctx, b8, c.disp)
		isReq("RPut "+c.name, r, err, rma.ErrOutOfWindow)
		r, err = w.RGet(ctx, r8, c.disp)
		isReq("RGet "+c.name, r, err, rma.ErrOutOfWindow)
	}
	// NIC atomics off alignment (the engine's datatypes need none).
	is("FetchAndOp(SUM, int64) at base+4", w.FetchAndOp(ctx, b8, r8, i64, base+4, op.Sum), rma.ErrAlignment)
	is("CompareAndSwap(int64) at base+4", w.CompareAndSwap(ctx, b8, b8, r8, i64, base+4), rma.ErrAlignment)
	// Ops: no op at all, one the call does not take, one the datatype
	// does not take.
	is("Accumulate with Op(99)", w.Accumulate(ctx, b8, i64, base, op.Op(99)), rma.ErrInvalid)
	is("FetchAndOp with Op(99)", w.FetchAndOp(ctx, b8, r8, i64, base, op.Op(99)), rma.ErrInvalid)
	is("Accumulate(BAND, float64)", w.Accumulate(ctx, b8, f64, base, op.Band), op.ErrOpDatatype)
	is("Accumulate(MAXLOC, int64)", w.Accumulate(ctx, b8, i64, base, op.Maxloc), rma.ErrInvalid)
	is("Accumulate(NO_OP, int64)", w.Accumulate(ctx, b8, i64, base, op.NoOp), rma.ErrInvalid)
	is("CompareAndSwap(float64)", w.CompareAndSwap(ctx, b8, b8, r8, f64, base), op.ErrOpDatatype)
	is("CompareAndSwap on Basic(0)", w.CompareAndSwap(ctx, b8, b8, r8, datatype.Basic(0), base), rma.ErrInvalid)
	r, err := w.RAccumulate(ctx, b8, f64, base, op.Band)
	isReq("RAccumulate(BAND, float64)", r, err, op.ErrOpDatatype)
	// Lengths.
	is("Accumulate of 7 bytes of int64", w.Accumulate(ctx, b8[:7], i64, base, op.Sum), rma.ErrInvalid)
	is("Accumulate of 6 bytes of int32", w.Accumulate(ctx, b8[:6], i32, base, op.Sum), rma.ErrInvalid)
	for _, dt := range []datatype.Basic{i64, f64} {
		is(fmt.Sprintf("GetAccumulate(SUM) of 2 %v into 1", dt), w.GetAccumulate(ctx, r16, r8, dt, base, op.Sum), rma.ErrInvalid)
		is(fmt.Sprintf("GetAccumulate(SUM) of 1 %v into 2", dt), w.GetAccumulate(ctx, b8, r16, dt, base, op.Sum), rma.ErrInvalid)
		r, err := w.RGetAccumulate(ctx, r16, r8, dt, base, op.Sum)
		isReq(fmt.Sprintf("RGetAccumulate(SUM) of 2 %v into 1", dt), r, err, rma.ErrInvalid)
		is(fmt.Sprintf("FetchAndOp(SUM, %v) of 4 bytes", dt), w.FetchAndOp(ctx, b8[:4], r8, dt, base, op.Sum), rma.ErrInvalid)
		is(fmt.Sprintf("FetchAndOp(SUM, %v) into 4 bytes", dt), w.FetchAndOp(ctx, b8, r8[:4], dt, base, op.Sum), rma.ErrInvalid)
	}
	is("CompareAndSwap(int64) with a 4-byte compare", w.CompareAndSwap(ctx, b8, b8[:4], r8, i64, base), rma.ErrInvalid)
	// Datatypes: signatures that differ, a buffer too short for its
	// datatype, a result whose entries overlap, a layout past the end.
	vec, err := datatype.Vector(2, 1, 2, datatype.Int64.Type())
	if err != nil {
		return err
	}
	zero, err := datatype.Resized(datatype.Int64.Type(), 0, 0) // every instance at one place
	if err != nil {
		return err
	}
	l2 := rma.Layout{Disp: base, Type: vec, Count: 1}
	is("AccumulateTo of 3 int32 into 2 int64", w.AccumulateTo(ctx, rma.Contiguous(make([]byte, 12), i32), l2, op.Sum), rma.ErrInvalid)
	is("AccumulateTo of 1 int64 into 2", w.AccumulateTo(ctx, rma.Contiguous(b8, i64), l2, op.Sum), rma.ErrInvalid)
	is("PutTo of 2 float64 into 2 int64", w.PutTo(ctx, rma.Contiguous(r16, f64), l2), rma.ErrInvalid)
	is("PutTo of 2 int64 from 8 bytes", w.PutTo(ctx, rma.Buffer{Data: b8, Type: i64.Type(), Count: 2}, l2), rma.ErrInvalid)
	is("GetTo into 2 int64 at one place", w.GetTo(ctx, rma.Buffer{Data: r16, Type: zero, Count: 2}, l2), rma.ErrInvalid)
	is("GetAccumulateTo into 2 int64 at one place", w.GetAccumulateTo(ctx, rma.Contiguous(r16, i64), rma.Buffer{Data: r16, Type: zero, Count: 2}, l2, op.Sum), rma.ErrInvalid)
	past := rma.Layout{Disp: size - 16, Type: vec, Count: 1}
	is("AccumulateTo past the end", w.AccumulateTo(ctx, rma.Contiguous(r16, i64), past, op.Sum), rma.ErrOutOfWindow)
	is("PutTo past the end", w.PutTo(ctx, rma.Contiguous(r16, i64), past), rma.ErrOutOfWindow)
	is("GetTo past the end", w.GetTo(ctx, rma.Contiguous(r16, i64), past), rma.ErrOutOfWindow)

	// Nothing refused changed the window, and it works.
	got := make([]byte, contractCheckBytes)
	if err := w.Get(ctx, got, base); err != nil {
		return fmt.Errorf("Get after the refusals: %w", err)
	}
	if string(got) != string(pat) {
		fails = append(fails, fmt.Sprintf("the refused calls changed the window: %x, want %x", got, pat))
	}
	if err := w.FetchAndOp(ctx, b8, r8, i64, base+8, op.NoOp); err != nil {
		fails = append(fails, fmt.Sprintf("FetchAndOp(NO_OP) after the refusals: %v", err))
	}
	if err := w.GetAccumulate(ctx, nil, r16, f64, base+16, op.NoOp); err != nil || string(r16) != string(pat[16:32]) {
		fails = append(fails, fmt.Sprintf("GetAccumulate(NO_OP) of no origin after the refusals: %x, %v; want %x", r16, err, pat[16:32]))
	}
	// The engine's datatypes need no alignment: a float64 at base+36 and
	// an int32 at base+50, each updated twice.
	if err := w.Put(ctx, make([]byte, 32), base+32); err != nil {
		return fmt.Errorf("Put: %w", err)
	}
	for i := range 2 {
		if err := w.Accumulate(ctx, datatype.AsBytes([]float64{1.5}), f64, base+36, op.Sum); err != nil {
			fails = append(fails, fmt.Sprintf("Accumulate(SUM, float64) at base+36: %v", err))
		}
		old := make([]int32, 1)
		if err := w.FetchAndOp(ctx, datatype.AsBytes([]int32{7}), datatype.AsBytes(old), i32, base+50, op.Sum); err != nil || old[0] != int32(7*i) {
			fails = append(fails, fmt.Sprintf("FetchAndOp(SUM, int32) %d at base+50: %d, %v; want %d", i, old[0], err, 7*i))
		}
	}
	mem := make([]byte, 32)
	if err := w.Get(ctx, mem, base+32); err != nil {
		return fmt.Errorf("Get: %w", err)
	}
	want := make([]byte, 32)
	copy(want[4:], datatype.AsBytes([]float64{3}))
	copy(want[18:], datatype.AsBytes([]int32{14}))
	if string(mem) != string(want) {
		fails = append(fails, fmt.Sprintf("after the misaligned engine calls: %x, want %x", mem, want))
	}
	if err := w.Unlock(ctx); err != nil {
		return fmt.Errorf("Unlock: %w", err)
	}
	if len(fails) > 0 {
		return fmt.Errorf("%d checks failed:\n\t%s", len(fails), strings.Join(fails, "\n\t"))
	}
	return nil
}
