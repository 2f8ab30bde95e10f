//go:build integration

package test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/win"
)

// Request-based RMA (MPI-4.1 12.3.5 and 12.4-12.5): an MPI_Rget,
// MPI_Rput, MPI_Raccumulate or MPI_Rget_accumulate belongs to the epoch it
// was issued in, a passive-target one (MPI allows them nowhere else), and
// the call that ends the epoch or flushes its target (unlock, unlock_all,
// flush, flush_all, flush_local, flush_local_all) completes it like any
// other RMA call: when that
// call returns, an Rget's buffer holds the data, and a later MPI_Wait or
// MPI_Test returns at once. Waitall, Waitany, Waitsome, Testall and Testany
// follow MPI-4.1 3.7.5.

func init() {
	workers["reqepochs"] = workReqEpochs
	workers["reqputs"] = workReqPuts
	workers["reqlists"] = workReqLists
	workers["reqcancel"] = workReqCancel
	workers["reqtyped"] = workReqTyped
}

// reqPat is byte j of rank r's window before any RMA call: no two offsets
// closer than 2^32 bytes share their value pattern, so a read from the wrong
// offset or rank shows.
func reqPat(r, j int) byte {
	x := uint32(j)*2654435761 + uint32(r)*40503
	return byte(x>>24) ^ byte(x>>13)
}

// reqWindow allocates a window of size bytes with byte unit displacements,
// fills this rank's part with reqPat and makes it visible to the others.
func reqWindow(ctx context.Context, g *group.Group, size int) (*win.Window, error) {
	w, err := win.Allocate(ctx, g, size, 1)
	if err != nil {
		return nil, err
	}
	mem := w.Bytes()
	for j := range mem {
		mem[j] = reqPat(g.Rank(), j)
	}
	return w, g.Barrier(ctx)
}

// reqRead is one RGet of the epoch tests: n bytes at disp.
type reqRead struct{ disp, n int }

// reqReads cover a piece in a slot's scratch (8 bytes), a staged piece
// (300), several chunks (100000) and more pieces than one read keeps in
// flight (1 MiB: the rest are posted as earlier ones complete).
var reqReads = []reqRead{{8, 8}, {1000, 300}, {12345, 100000}, {0, 1 << 20}}

const reqWinSize = 1<<20 + 4096

// reqIssue starts the reads of reqReads from target and returns their
// requests and buffers (filled with 0xEE first).
func reqIssue(ctx context.Context, w *win.Window, target int) ([]*win.Request, [][]byte, error) {
	var rs []*win.Request
	var bufs [][]byte
	for _, rd := range reqReads {
		b := bytes.Repeat([]byte{0xEE}, rd.n)
		r, err := w.RGet(ctx, b, target, rd.disp)
		if err != nil {
			return nil, nil, fmt.Errorf("RGet(%d bytes at %d of rank %d): %w", rd.n, rd.disp, target, err)
		}
		rs = append(rs, r)
		bufs = append(bufs, b)
	}
	return rs, bufs, nil
}

// reqCheck compares each buffer with target's pattern.
func reqCheck(what string, target int, bufs [][]byte) error {
	for i, b := range bufs {
		rd := reqReads[i]
		for j := range b {
			if want := reqPat(target, rd.disp+j); b[j] != want {
				return fmt.Errorf("%s: RGet of %d bytes at %d of rank %d: byte %d = %#x, want %#x (buffer not filled when the synchronisation returned)",
					what, rd.n, rd.disp, target, j, b[j], want)
			}
		}
	}
	return nil
}

// reqWaitDone waits on requests that must be complete already: each Wait,
// twice, and Test return nil at once.
func reqWaitDone(ctx context.Context, what string, rs []*win.Request) error {
	for i, r := range rs {
		for k := 0; k < 2; k++ {
			if err := r.Wait(ctx); err != nil {
				return fmt.Errorf("%s: Wait of request %d (call %d): %v, want nil", what, i, k+1, err)
			}
		}
		if done, err := r.Test(); !done || err != nil {
			return fmt.Errorf("%s: Test of request %d after Wait = %v, %v; want true, nil", what, i, done, err)
		}
	}
	return nil
}

// workReqEpochs (3 ranks): RGet completed by each synchronisation that
// ends or flushes an epoch, checked before the request is waited on.
func workReqEpochs(ctx context.Context, g *group.Group) error {
	me, n := g.Rank(), g.Size()
	w, err := reqWindow(ctx, g, reqWinSize)
	if err != nil {
		return err
	}
	everyone := func(f func(t int) error) error {
		for t := 0; t < n; t++ {
			if err := f(t); err != nil {
				return err
			}
		}
		return nil
	}
	type issued struct {
		rs   []*win.Request
		bufs [][]byte
	}
	all := make([]issued, n)
	issueAll := func() error {
		return everyone(func(t int) (err error) {
			all[t].rs, all[t].bufs, err = reqIssue(ctx, w, t)
			return err
		})
	}
	checkAll := func(what string) error {
		if err := everyone(func(t int) error { return reqCheck(what, t, all[t].bufs) }); err != nil {
			return err
		}
		return everyone(func(t int) error { return reqWaitDone(ctx, what, all[t].rs) })
	}

	// Lock / Unlock, per target (the own rank too).
	for t := 0; t < n; t++ {
		if err := w.Lock(ctx, win.LockShared, t, 0); err != nil {
			return err
		}
		rs, bufs, err := reqIssue(ctx, w, t)
		if err != nil {
			return err
		}
		if err := w.Unlock(ctx, t); err != nil {
			return fmt.Errorf("Unlock(%d) with RGets outstanding: %w", t, err)
		}
		if err := reqCheck("Unlock", t, bufs); err != nil {
			return err
		}
		if err := reqWaitDone(ctx, "Unlock", rs); err != nil {
			return err
		}
	}

	// LockAll / UnlockAll.
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	if err := issueAll(); err != nil {
		return err
	}
	if err := w.UnlockAll(ctx); err != nil {
		return fmt.Errorf("UnlockAll with RGets outstanding: %w", err)
	}
	if err := checkAll("UnlockAll"); err != nil {
		return err
	}

	// Flush, FlushLocal (per target), FlushAll, FlushLocalAll, inside one
	// LockAll epoch.
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	for _, c := range []struct {
		name  string
		flush func(t int) error
	}{{"Flush", func(t int) error { return w.Flush(ctx, t) }}, {"FlushLocal", func(t int) error { return w.FlushLocal(ctx, t) }}} {
		for t := 0; t < n; t++ {
			rs, bufs, err := reqIssue(ctx, w, t)
			if err != nil {
				return err
			}
			if err := c.flush(t); err != nil {
				return fmt.Errorf("%s(%d): %w", c.name, t, err)
			}
			if err := reqCheck(c.name, t, bufs); err != nil {
				return err
			}
			if err := reqWaitDone(ctx, c.name, rs); err != nil {
				return err
			}
		}
	}
	for _, c := range []struct {
		name  string
		flush func(context.Context) error
	}{{"FlushAll", w.FlushAll}, {"FlushLocalAll", w.FlushLocalAll}} {
		if err := issueAll(); err != nil {
			return err
		}
		if err := c.flush(ctx); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		if err := checkAll(c.name); err != nil {
			return err
		}
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}

	// Active-target epochs: MPI-4.1 12.3.5 allows the request-based calls
	// only in passive-target ones (MPICH: MPI_ERR_RMA_SYNC).
	refused := func(where string, t int) error {
		b := make([]byte, 8)
		f64 := datatype.Float64.Type()
		calls := map[string]func() (*win.Request, error){
			"RGet": func() (*win.Request, error) { return w.RGet(ctx, b, t, 0) },
			"RPut": func() (*win.Request, error) { return w.RPut(ctx, b, t, 0) },
			"RAccumulate": func() (*win.Request, error) {
				return w.RAccumulate(ctx, win.Buffer{Data: b, Type: f64, Count: 1}, win.Region{Rank: t, Type: f64, Count: 1}, op.Sum)
			},
			"RGetAccumulate": func() (*win.Request, error) {
				return w.RGetAccumulate(ctx, win.Buffer{Data: b, Type: f64, Count: 1}, win.Buffer{Data: make([]byte, 8), Type: f64, Count: 1}, win.Region{Rank: t, Type: f64, Count: 1}, op.Sum)
			},
		}
		for name, call := range calls {
			if r, err := call(); !errors.Is(err, win.ErrEpoch) || r != nil {
				return fmt.Errorf("%s to rank %d in %s: request %v, error %v; want no request and %v", name, t, where, r, err, win.ErrEpoch)
			}
		}
		return nil
	}
	if err := w.Fence(ctx, win.NoPrecede); err != nil {
		return err
	}
	if err := w.Get(ctx, make([]byte, 8), (me+1)%n, 0); err != nil { // the fence epoch starts
		return err
	}
	if err := everyone(func(t int) error { return refused("a fence epoch", t) }); err != nil {
		return err
	}
	if err := w.Fence(ctx, win.NoSucceed); err != nil {
		return err
	}

	// Post / Start / Complete / Wait, with every other rank.
	var others []int
	for t := 0; t < n; t++ {
		if t != me {
			others = append(others, t)
		}
	}
	if err := w.Post(ctx, others, 0); err != nil {
		return err
	}
	if err := w.Start(ctx, others, 0); err != nil {
		return err
	}
	for _, t := range others {
		if err := refused("a post-start-complete-wait epoch", t); err != nil {
			return err
		}
	}
	if err := w.Complete(ctx); err != nil {
		return err
	}
	if err := w.Wait(ctx); err != nil {
		return err
	}

	// RGetTo with datatypes, completed by Unlock: a strided target layout
	// into a contiguous result, and a contiguous target into a strided
	// result (unpacked when the request completes).
	t := (me + 1) % n
	u8 := datatype.Uint8.Type()
	every3rd, err := datatype.Vector(50, 2, 3, u8) // 100 bytes: 2 of every 3
	if err != nil {
		return err
	}
	if err := w.Lock(ctx, win.LockShared, t, 0); err != nil {
		return err
	}
	dense := bytes.Repeat([]byte{0xEE}, 100)
	r1, err := w.RGetTo(ctx, win.Buffer{Data: dense, Type: u8, Count: 100}, win.Region{Rank: t, Disp: 777, Type: every3rd, Count: 1})
	if err != nil {
		return err
	}
	sparse := bytes.Repeat([]byte{0xEE}, 150)
	r2, err := w.RGetTo(ctx, win.Buffer{Data: sparse, Type: every3rd, Count: 1}, win.Region{Rank: t, Disp: 5000, Type: u8, Count: 100})
	if err != nil {
		return err
	}
	if err := w.Unlock(ctx, t); err != nil {
		return err
	}
	for i := 0; i < 100; i++ {
		elem := 3*(i/2) + i%2 // the i-th byte of the vector layout
		if want := reqPat(t, 777+elem); dense[i] != want {
			return fmt.Errorf("RGetTo strided target: byte %d = %#x, want %#x", i, dense[i], want)
		}
		if want := reqPat(t, 5000+i); sparse[elem] != want {
			return fmt.Errorf("RGetTo strided result: byte %d = %#x, want %#x", elem, sparse[elem], want)
		}
	}
	for k := 2; k < 150; k += 3 {
		if sparse[k] != 0xEE {
			return fmt.Errorf("RGetTo strided result: gap byte %d = %#x, want it untouched (0xee)", k, sparse[k])
		}
	}
	if err := reqWaitDone(ctx, "RGetTo", []*win.Request{r1, r2}); err != nil {
		return err
	}

	// Free inside a LockAll epoch is refused (MPI: erroneous; MPICH:
	// MPI_ERR_RMA_SYNC) and leaves the RGets to UnlockAll.
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	if err := issueAll(); err != nil {
		return err
	}
	if err := w.Free(ctx); !errors.Is(err, win.ErrEpoch) {
		return fmt.Errorf("Free inside a LockAll epoch: %v, want %v", err, win.ErrEpoch)
	}
	if err := w.UnlockAll(ctx); err != nil {
		return fmt.Errorf("UnlockAll after the refused Free: %w", err)
	}
	if err := checkAll("UnlockAll after the refused Free"); err != nil {
		return err
	}
	if err := w.Free(ctx); err != nil {
		return err
	}
	fmt.Println("reqepochs=ok")
	return nil
}

// Layout of the reqputs window: a 64-byte block per origin rank.
const (
	rpBytes = 0  // 16 bytes, RPut
	rpF64   = 16 // float64, RAccumulate SUM (engine)
	rpI32   = 24 // int32, RAccumulate MAX (engine)
	rpI64   = 32 // int64, RGetAccumulate SUM (NIC by default)
	rpGF64  = 40 // float64, RGetAccumulate SUM (engine)
	rpBlock = 64
)

func rpPut(origin, target, round, k int) byte { return byte(origin*53 + target*19 + round*7 + k*3 + 1) }

// workReqPuts (3 ranks): RPut, RAccumulate and RGetAccumulate to every
// rank, completed by UnlockAll, by Unlock, by FlushAll and by Flush: the
// fetched old values are in place when the synchronisation returns, and
// each target sees every update after its next synchronisation.
func workReqPuts(ctx context.Context, g *group.Group) error {
	me, n := g.Rank(), g.Size()
	w, err := win.Allocate(ctx, g, n*rpBlock, 1)
	if err != nil {
		return err
	}
	if r := w.RouteFetchAndOp(op.Sum, datatype.Float64); r != atomics.Engine {
		return fmt.Errorf("SUM on float64 takes route %v, want the engine (the test relies on it)", r)
	}
	if r := w.RouteFetchAndOp(op.Sum, datatype.Int64); r == atomics.Engine {
		fmt.Println("note: int64 SUM goes through the engine on this device")
	}
	mem := w.Bytes()
	for o := 0; o < n; o++ {
		b := mem[o*rpBlock:]
		binary.NativeEndian.PutUint64(b[rpF64:], math.Float64bits(0.5))
		binary.NativeEndian.PutUint32(b[rpI32:], uint32(0xFFFFFC18)) // -1000
		binary.NativeEndian.PutUint64(b[rpGF64:], math.Float64bits(2))
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	f64, i32, i64 := datatype.Float64.Type(), datatype.Int32.Type(), datatype.Int64.Type()
	const rounds = 4
	olds := make([][2][8]byte, n) // per target: int64 and float64 results
	for round := 0; round < rounds; round++ {
		issue := func(t int) ([]*win.Request, error) {
			base := me * rpBlock
			var rs []*win.Request
			add := func(r *win.Request, err error) error {
				rs = append(rs, r)
				return err
			}
			data := make([]byte, 16)
			for k := range data {
				data[k] = rpPut(me, t, round, k)
			}
			if err := add(w.RPut(ctx, data, t, base+rpBytes)); err != nil {
				return nil, err
			}
			clear(data) // the data was copied: reusing the buffer must not matter
			fv := binary.NativeEndian.AppendUint64(nil, math.Float64bits(float64(me+1)*0.25))
			if err := add(w.RAccumulate(ctx, win.Buffer{Data: fv, Type: f64, Count: 1}, win.Region{Rank: t, Disp: base + rpF64, Type: f64, Count: 1}, op.Sum)); err != nil {
				return nil, err
			}
			iv := binary.NativeEndian.AppendUint32(nil, uint32(int32(round*10+me-5)))
			if err := add(w.RAccumulate(ctx, win.Buffer{Data: iv, Type: i32, Count: 1}, win.Region{Rank: t, Disp: base + rpI32, Type: i32, Count: 1}, op.Max)); err != nil {
				return nil, err
			}
			lv := binary.NativeEndian.AppendUint64(nil, uint64(me+1+round))
			olds[t] = [2][8]byte{}
			if err := add(w.RGetAccumulate(ctx, win.Buffer{Data: lv, Type: i64, Count: 1}, win.Buffer{Data: olds[t][0][:], Type: i64, Count: 1},
				win.Region{Rank: t, Disp: base + rpI64, Type: i64, Count: 1}, op.Sum)); err != nil {
				return nil, err
			}
			gv := binary.NativeEndian.AppendUint64(nil, math.Float64bits(1.5))
			if err := add(w.RGetAccumulate(ctx, win.Buffer{Data: gv, Type: f64, Count: 1}, win.Buffer{Data: olds[t][1][:], Type: f64, Count: 1},
				win.Region{Rank: t, Disp: base + rpGF64, Type: f64, Count: 1}, op.Sum)); err != nil {
				return nil, err
			}
			return rs, nil
		}
		// checkOld: the fetched values of this round, before Wait.
		checkOld := func(how string, t int) error {
			var wantI int64
			for j := 0; j < round; j++ {
				wantI += int64(me + 1 + j)
			}
			gotI := int64(binary.NativeEndian.Uint64(olds[t][0][:]))
			gotF := math.Float64frombits(binary.NativeEndian.Uint64(olds[t][1][:]))
			if wantF := 2 + 1.5*float64(round); gotI != wantI || gotF != wantF {
				return fmt.Errorf("round %d (%s): RGetAccumulate results from rank %d = %d, %v; want %d, %v",
					round, how, t, gotI, gotF, wantI, wantF)
			}
			return nil
		}
		var how string
		var reqs [][]*win.Request
		switch round % 4 {
		case 0:
			how = "UnlockAll"
			if err := w.LockAll(ctx); err != nil {
				return err
			}
			for t := 0; t < n; t++ {
				rs, err := issue(t)
				if err != nil {
					return err
				}
				reqs = append(reqs, rs)
			}
			if err := w.UnlockAll(ctx); err != nil {
				return err
			}
		case 1:
			how = "Unlock"
			for t := 0; t < n; t++ {
				if err := w.Lock(ctx, win.LockShared, t, 0); err != nil {
					return err
				}
				rs, err := issue(t)
				if err != nil {
					return err
				}
				reqs = append(reqs, rs)
				if err := w.Unlock(ctx, t); err != nil {
					return err
				}
				if err := checkOld(how, t); err != nil {
					return err
				}
			}
		case 2:
			how = "FlushAll"
			if err := w.LockAll(ctx); err != nil {
				return err
			}
			for t := 0; t < n; t++ {
				rs, err := issue(t)
				if err != nil {
					return err
				}
				reqs = append(reqs, rs)
			}
			if err := w.FlushAll(ctx); err != nil {
				return err
			}
		case 3:
			how = "Flush"
			if err := w.LockAll(ctx); err != nil {
				return err
			}
			for t := 0; t < n; t++ {
				rs, err := issue(t)
				if err != nil {
					return err
				}
				reqs = append(reqs, rs)
				if err := w.Flush(ctx, t); err != nil {
					return err
				}
			}
		}
		for t := 0; t < n; t++ {
			if err := checkOld(how, t); err != nil {
				return err
			}
			if err := reqWaitDone(ctx, fmt.Sprintf("round %d (%s) to rank %d", round, how, t), reqs[t]); err != nil {
				return err
			}
		}
		// The target sees the updates after its next synchronisation.
		if err := g.Barrier(ctx); err != nil {
			return err
		}
		for o := 0; o < n; o++ {
			b := mem[o*rpBlock:]
			for k := 0; k < 16; k++ {
				if want := rpPut(o, me, round, k); b[rpBytes+k] != want {
					return fmt.Errorf("round %d (%s): RPut from rank %d: byte %d = %#x, want %#x", round, how, o, k, b[rpBytes+k], want)
				}
			}
			if got, want := math.Float64frombits(binary.NativeEndian.Uint64(b[rpF64:])), 0.5+float64(round+1)*float64(o+1)*0.25; got != want {
				return fmt.Errorf("round %d (%s): RAccumulate SUM from rank %d: %v, want %v", round, how, o, got, want)
			}
			if got, want := int32(binary.NativeEndian.Uint32(b[rpI32:])), int32(round*10+o-5); got != max(want, -1000) {
				return fmt.Errorf("round %d (%s): RAccumulate MAX from rank %d: %d, want %d", round, how, o, got, max(want, -1000))
			}
			var wantI int64
			for j := 0; j <= round; j++ {
				wantI += int64(o + 1 + j)
			}
			if got := int64(binary.NativeEndian.Uint64(b[rpI64:])); got != wantI {
				return fmt.Errorf("round %d (%s): RGetAccumulate SUM (int64) from rank %d: %d, want %d", round, how, o, got, wantI)
			}
			if got, want := math.Float64frombits(binary.NativeEndian.Uint64(b[rpGF64:])), 2+1.5*float64(round+1); got != want {
				return fmt.Errorf("round %d (%s): RGetAccumulate SUM (float64) from rank %d: %v, want %v", round, how, o, got, want)
			}
		}
		if round%4 >= 2 {
			if err := w.UnlockAll(ctx); err != nil {
				return err
			}
		}
		if err := g.Barrier(ctx); err != nil { // checks done before the next round writes
			return err
		}
	}
	fmt.Println("reqputs=ok")
	return w.Free(ctx)
}

// workReqLists (3 ranks): Waitall over a mix of requests to every rank,
// Waitany and Testany returning each index once, Waitsome, Testall, and
// Waitall with an ended context.
func workReqLists(ctx context.Context, g *group.Group) error {
	me, n := g.Rank(), g.Size()
	const accBase = reqWinSize - 64 // int32 SUM counters, one per origin
	w, err := reqWindow(ctx, g, reqWinSize)
	if err != nil {
		return err
	}
	// The counters start at 0, made visible by the barrier.
	for o := 0; o < n; o++ {
		binary.NativeEndian.PutUint32(w.Bytes()[accBase+4*o:], 0)
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	i32 := datatype.Int32.Type()
	if r := w.RouteFetchAndOp(op.NoOp, datatype.Int32); r != atomics.Engine {
		return fmt.Errorf("NO_OP on int32 takes route %v, want the engine (the test relies on it)", r)
	}

	// A mix of 48 requests across the targets.
	type pending struct {
		buf    []byte
		target int
		disp   int
		fetch  bool // buf holds a NO_OP result: 8 bytes of the pattern
	}
	var reqs []*win.Request
	var checks []pending
	var sums [8]int32 // per target: what this rank added
	for k := 0; k < 48; k++ {
		t := k % n
		switch k % 4 {
		case 0: // RGet, small or large
			size, disp := 8+k, 3*k
			if k%8 == 0 {
				size, disp = 70000+k, 100+k
			}
			b := bytes.Repeat([]byte{0xEE}, size)
			r, err := w.RGet(ctx, b, t, disp)
			if err != nil {
				return err
			}
			reqs, checks = append(reqs, r), append(checks, pending{b, t, disp, false})
		case 1: // RPut into the tail, read back later
			r, err := w.RPut(ctx, []byte{byte(k)}, t, accBase-64+me*16+k/4%16)
			if err != nil {
				return err
			}
			reqs = append(reqs, r)
		case 2: // RAccumulate SUM on int32 (engine)
			v := int32(k*k - 7)
			sums[t] += v
			r, err := w.RAccumulate(ctx, win.Buffer{Data: binary.NativeEndian.AppendUint32(nil, uint32(v)), Type: i32, Count: 1},
				win.Region{Rank: t, Disp: accBase + 4*me, Type: i32, Count: 1}, op.Sum)
			if err != nil {
				return err
			}
			reqs = append(reqs, r)
		case 3: // RGetAccumulate NO_OP on int32 (engine): reads 8 pattern bytes
			b := bytes.Repeat([]byte{0xEE}, 8)
			disp := 4096 + 8*k
			r, err := w.RGetAccumulate(ctx, win.Buffer{}, win.Buffer{Data: b, Type: i32, Count: 2},
				win.Region{Rank: t, Disp: disp, Type: i32, Count: 2}, op.NoOp)
			if err != nil {
				return err
			}
			reqs, checks = append(reqs, r), append(checks, pending{b, t, disp, true})
		}
	}
	if err := win.Waitall(ctx, reqs); err != nil {
		return fmt.Errorf("Waitall over the mix: %w", err)
	}
	for i, r := range reqs {
		if r != nil {
			return fmt.Errorf("Waitall left entry %d set, want nil (MPI_REQUEST_NULL)", i)
		}
	}
	for _, c := range checks {
		for j := range c.buf {
			if want := reqPat(c.target, c.disp+j); c.buf[j] != want {
				return fmt.Errorf("after Waitall: %d bytes at %d of rank %d (fetch %v): byte %d = %#x, want %#x", len(c.buf), c.disp, c.target, c.fetch, j, c.buf[j], want)
			}
		}
	}

	// Waitany over RGets of varied sizes: each index once, its buffer
	// filled when it is returned.
	issue := func(count int) ([]*win.Request, []pending, error) {
		var rs []*win.Request
		var ps []pending
		for k := 0; k < count; k++ {
			t, size, disp := (me+k)%n, 1+(k*977)%5000, (k*7919)%(1<<19)
			if k%5 == 0 {
				size = 65536 + 300*k
			}
			b := bytes.Repeat([]byte{0xEE}, size)
			r, err := w.RGet(ctx, b, t, disp)
			if err != nil {
				return nil, nil, err
			}
			rs, ps = append(rs, r), append(ps, pending{b, t, disp, false})
		}
		return rs, ps, nil
	}
	check := func(what string, i int, p pending) error {
		for j := range p.buf {
			if want := reqPat(p.target, p.disp+j); p.buf[j] != want {
				return fmt.Errorf("%s: request %d (%d bytes at %d of rank %d): byte %d = %#x, want %#x", what, i, len(p.buf), p.disp, p.target, j, p.buf[j], want)
			}
		}
		return nil
	}
	rs, ps, err := issue(24)
	if err != nil {
		return err
	}
	seen := make([]bool, len(rs))
	for k := 0; ; k++ {
		i, err := win.Waitany(ctx, rs)
		if err != nil {
			return fmt.Errorf("Waitany: %w", err)
		}
		if i == win.Undefined {
			if k != len(rs) {
				return fmt.Errorf("Waitany returned Undefined after %d of %d requests", k, len(rs))
			}
			break
		}
		if i < 0 || i >= len(rs) || seen[i] {
			return fmt.Errorf("Waitany returned %d (seen before: %v)", i, i >= 0 && i < len(rs) && seen[i])
		}
		seen[i] = true
		if err := check("Waitany", i, ps[i]); err != nil {
			return err
		}
	}
	if i, err := win.Waitany(ctx, nil); i != win.Undefined || err != nil {
		return fmt.Errorf("Waitany on an empty list = %d, %v; want Undefined, nil", i, err)
	}

	// Testany, polled.
	rs, ps, err = issue(12)
	if err != nil {
		return err
	}
	clear(seen)
	for got := 0; got < len(rs); {
		i, done, err := win.Testany(rs)
		switch {
		case err != nil:
			return fmt.Errorf("Testany: %w", err)
		case !done:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		case i == win.Undefined:
			return fmt.Errorf("Testany said no request is active after %d of %d", got, len(rs))
		case seen[i]:
			return fmt.Errorf("Testany returned %d twice", i)
		}
		seen[i] = true
		got++
		if err := check("Testany", i, ps[i]); err != nil {
			return err
		}
	}
	if i, done, err := win.Testany(rs); i != win.Undefined || !done || err != nil {
		return fmt.Errorf("Testany on an all-nil list = %d, %v, %v; want Undefined, true, nil", i, done, err)
	}

	// Waitsome until none is active.
	rs, ps, err = issue(16)
	if err != nil {
		return err
	}
	clear(seen)
	for got := 0; ; {
		idx, err := win.Waitsome(ctx, rs, nil)
		if err != nil {
			return fmt.Errorf("Waitsome: %w", err)
		}
		if len(idx) == 0 {
			if got != len(rs) {
				return fmt.Errorf("Waitsome returned nothing after %d of %d", got, len(rs))
			}
			break
		}
		for _, i := range idx {
			if seen[i] {
				return fmt.Errorf("Waitsome returned %d twice", i)
			}
			seen[i] = true
			got++
			if err := check("Waitsome", i, ps[i]); err != nil {
				return err
			}
		}
	}

	// Testsome, polled until every entry is nil.
	rs, ps, err = issue(16)
	if err != nil {
		return err
	}
	clear(seen)
	for got := 0; got < len(rs); {
		idx, err := win.Testsome(rs, nil)
		if err != nil {
			return fmt.Errorf("Testsome: %w", err)
		}
		if len(idx) == 0 && ctx.Err() != nil {
			return fmt.Errorf("Testsome completed %d of %d: %w", got, len(rs), ctx.Err())
		}
		for _, i := range idx {
			if seen[i] || rs[i] != nil {
				return fmt.Errorf("Testsome returned %d twice, or left its entry set", i)
			}
			seen[i] = true
			got++
			if err := check("Testsome", i, ps[i]); err != nil {
				return err
			}
		}
	}
	if idx, err := win.Testsome(rs, nil); len(idx) != 0 || err != nil {
		return fmt.Errorf("Testsome on an all-nil list = %v, %v; want none, nil", idx, err)
	}

	// Testall, polled until true.
	rs, ps, err = issue(16)
	if err != nil {
		return err
	}
	for polls := 0; ; polls++ {
		done, err := win.Testall(rs)
		if err != nil {
			return fmt.Errorf("Testall: %w", err)
		}
		if done {
			break
		}
		for i, r := range rs {
			if r == nil {
				return fmt.Errorf("Testall returned false but set entry %d to nil", i)
			}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("Testall still false after %d polls: %w", polls, ctx.Err())
		}
	}
	for i, p := range ps {
		if rs[i] != nil {
			return fmt.Errorf("Testall returned true but left entry %d set", i)
		}
		if err := check("Testall", i, p); err != nil {
			return err
		}
	}

	// Waitall with an ended context: every request fails with its index,
	// and no buffer is written afterwards.
	rs, ps, err = issue(10)
	if err != nil {
		return err
	}
	rs = append(rs[:3], append([]*win.Request{nil}, rs[3:]...)...) // an inactive entry is skipped
	ended, cancel := context.WithCancel(ctx)
	cancel()
	werr := win.Waitall(ended, rs)
	if !errors.Is(werr, context.Canceled) {
		return fmt.Errorf("Waitall with an ended context: %v, want context.Canceled", werr)
	}
	var failed []int
	for _, e := range werr.(interface{ Unwrap() []error }).Unwrap() {
		var re *win.RequestError
		if !errors.As(e, &re) || !errors.Is(re, context.Canceled) {
			return fmt.Errorf("Waitall joined %v, want a *win.RequestError wrapping context.Canceled", e)
		}
		failed = append(failed, re.Index)
	}
	if want := []int{0, 1, 2, 4, 5, 6, 7, 8, 9, 10}; !slices.Equal(failed, want) {
		return fmt.Errorf("Waitall failed requests %v, want %v", failed, want)
	}
	if err := w.FlushAll(ctx); err != nil {
		return err
	}
	for i, p := range ps {
		if !bytes.Equal(p.buf, bytes.Repeat([]byte{0xEE}, len(p.buf))) {
			return fmt.Errorf("abandoned RGet %d (%d bytes) wrote its buffer after Waitall returned", i, len(p.buf))
		}
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}

	// The RPuts and RAccumulates of the mix, seen by the target after its
	// next synchronisation.
	mine := make([]byte, 0, 4*n)
	for t := 0; t < n; t++ {
		mine = binary.NativeEndian.AppendUint32(mine, uint32(sums[t]))
	}
	every, err := g.AllGather(ctx, mine)
	if err != nil {
		return err
	}
	for o := 0; o < n; o++ {
		want := int32(binary.NativeEndian.Uint32(every[o][4*me:]))
		if got := int32(binary.NativeEndian.Uint32(w.Bytes()[accBase+4*o:])); got != want {
			return fmt.Errorf("RAccumulate SUM from rank %d: %d, want %d", o, got, want)
		}
		for k := 1; k < 48; k += 4 {
			if k%n != me {
				continue
			}
			if got := w.Bytes()[accBase-64+o*16+k/4%16]; got != byte(k) {
				return fmt.Errorf("RPut %d from rank %d: %#x, want %#x", k, o, got, byte(k))
			}
		}
	}
	fmt.Println("reqlists=ok")
	return w.Free(ctx)
}

// workReqCancel (2 ranks): a thousand RGets whose Wait is given an ended
// context return its error, never write their buffers, and leave no slot
// or staging chunk behind; then RGetAccumulates the same way. The calls
// that follow still work.
func workReqCancel(ctx context.Context, g *group.Group) error {
	me := g.Rank()
	w, err := reqWindow(ctx, g, 1<<18)
	if err != nil {
		return err
	}
	t := 1 - me
	if me == 0 {
		if err := w.LockAll(ctx); err != nil {
			return err
		}
		ended, cancel := context.WithCancel(ctx)
		cancel()
		sizes := []int{8, 300, 70000, 1, 4096}
		const ring = 100
		bufs := make([][]byte, ring)
		for i := 0; i < 1000; i++ {
			size := sizes[i%len(sizes)]
			b := bytes.Repeat([]byte{0xEE}, size)
			bufs[i%ring] = b
			r, err := w.RGet(ctx, b, t, (i*131)%(1<<17))
			if err != nil {
				return fmt.Errorf("RGet %d: %w", i, err)
			}
			if err := r.Wait(ended); !errors.Is(err, context.Canceled) {
				return fmt.Errorf("RGet %d: Wait with an ended context = %v, want context.Canceled", i, err)
			}
			if err := r.Wait(ctx); !errors.Is(err, context.Canceled) {
				return fmt.Errorf("RGet %d: Wait after the abandon = %v, want context.Canceled again", i, err)
			}
			if i%ring == ring-1 {
				if err := w.FlushAll(ctx); err != nil {
					return err
				}
				for k, b := range bufs {
					if !bytes.Equal(b, bytes.Repeat([]byte{0xEE}, len(b))) {
						return fmt.Errorf("abandoned RGet %d (%d bytes) wrote its buffer", i-ring+1+k, len(b))
					}
				}
			}
		}
		// Through the engine: the replies may come after the abandon.
		i32 := datatype.Int32.Type()
		if r := w.RouteFetchAndOp(op.NoOp, datatype.Int32); r != atomics.Engine {
			return fmt.Errorf("NO_OP on int32 takes route %v, want the engine (the test relies on it)", r)
		}
		for i := 0; i < 200; i++ {
			var res [8]byte
			r, err := w.RGetAccumulate(ctx, win.Buffer{}, win.Buffer{Data: res[:], Type: i32, Count: 2},
				win.Region{Rank: t, Disp: 8 * i, Type: i32, Count: 2}, op.NoOp)
			if err != nil {
				return fmt.Errorf("RGetAccumulate %d: %w", i, err)
			}
			// nil if every reply had come before the Wait: the call is
			// complete, its result kept (see contractRequests).
			if err := r.Wait(ended); err != nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("RGetAccumulate %d: Wait with an ended context = %v, want context.Canceled or nil", i, err)
			}
		}
		// Everything still works: a Get, an RGet of every size, a fetch.
		for _, size := range append(sizes, 1<<17) {
			b := make([]byte, size)
			if err := w.Get(ctx, b, t, 64); err != nil {
				return fmt.Errorf("Get after the abandons: %w", err)
			}
			r, err := w.RGet(ctx, b, t, 64)
			if err != nil {
				return err
			}
			if err := r.Wait(ctx); err != nil {
				return fmt.Errorf("RGet of %d bytes after the abandons: %w", size, err)
			}
			for j := range b {
				if want := reqPat(t, 64+j); b[j] != want {
					return fmt.Errorf("RGet of %d bytes after the abandons: byte %d = %#x, want %#x", size, j, b[j], want)
				}
			}
		}
		var res [8]byte
		r, err := w.RGetAccumulate(ctx, win.Buffer{}, win.Buffer{Data: res[:], Type: i32, Count: 2},
			win.Region{Rank: t, Disp: 16, Type: i32, Count: 2}, op.NoOp)
		if err != nil {
			return err
		}
		if err := r.Wait(ctx); err != nil {
			return err
		}
		for j := range res {
			if want := reqPat(t, 16+j); res[j] != want {
				return fmt.Errorf("RGetAccumulate after the abandons: byte %d = %#x, want %#x", j, res[j], want)
			}
		}
		if err := w.UnlockAll(ctx); err != nil {
			return err
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	fmt.Println("reqcancel=ok")
	return w.Free(ctx)
}

// workReqTyped (2 ranks): PutSlice, GetSlice, AccumulateSlice and
// GetAccumulateSlice on int32, float64, uint8 and int64 move exact values.
func workReqTyped(ctx context.Context, g *group.Group) error {
	me := g.Rank()
	w, err := win.Allocate(ctx, g, 4096, 1)
	if err != nil {
		return err
	}
	t := 1 - me
	i32s := []int32{math.MinInt32, -1, 0, 1, 123456789, math.MaxInt32}
	f64s := []float64{math.Inf(-1), -math.MaxFloat64, math.Copysign(0, -1), math.SmallestNonzeroFloat64, 1.0 / 3, math.Pi, math.MaxFloat64, math.Inf(1)}
	u8s := []uint8{0, 1, 127, 128, 200, 255}
	i64s := []int64{math.MinInt64, -42, 0, 1 << 40, math.MaxInt64}
	const (
		offI32 = 0
		offF64 = 64
		offU8  = 192
		offI64 = 256
	)
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	if err := win.PutSlice(ctx, w, i32s, t, offI32); err != nil {
		return err
	}
	if err := win.PutSlice(ctx, w, f64s, t, offF64); err != nil {
		return err
	}
	if err := win.PutSlice(ctx, w, u8s, t, offU8); err != nil {
		return err
	}
	if err := win.PutSlice(ctx, w, i64s, t, offI64); err != nil {
		return err
	}
	if err := w.Flush(ctx, t); err != nil {
		return err
	}
	gi32, gf64, gu8, gi64 := make([]int32, len(i32s)), make([]float64, len(f64s)), make([]uint8, len(u8s)), make([]int64, len(i64s))
	if err := win.GetSlice(ctx, w, gi32, t, offI32); err != nil {
		return err
	}
	if err := win.GetSlice(ctx, w, gf64, t, offF64); err != nil {
		return err
	}
	if err := win.GetSlice(ctx, w, gu8, t, offU8); err != nil {
		return err
	}
	if err := win.GetSlice(ctx, w, gi64, t, offI64); err != nil {
		return err
	}
	if !slices.Equal(gi32, i32s) || !slices.Equal(gu8, u8s) || !slices.Equal(gi64, i64s) {
		return fmt.Errorf("GetSlice after PutSlice: %v %v %v, want %v %v %v", gi32, gu8, gi64, i32s, u8s, i64s)
	}
	for i := range f64s {
		if math.Float64bits(gf64[i]) != math.Float64bits(f64s[i]) {
			return fmt.Errorf("GetSlice float64 %d = %v (%#x), want %v (%#x)", i, gf64[i], math.Float64bits(gf64[i]), f64s[i], math.Float64bits(f64s[i]))
		}
	}

	// Accumulate SUM: each element becomes target + origin (C arithmetic:
	// uint8 wraps, int32 and int64 in two's complement).
	ai32 := []int32{1, 1, -5, 7, 1000, -1}
	af64 := []float64{1, 2, 0.5, 0, 1.0 / 3, -math.Pi, -math.MaxFloat64, 5}
	au8 := []uint8{1, 255, 1, 128, 100, 1}
	ai64 := []int64{1, 42, 7, -(1 << 40), -1} // no signed overflow (undefined in C)
	if err := win.AccumulateSlice(ctx, w, ai32, t, offI32, op.Sum); err != nil {
		return err
	}
	if err := win.AccumulateSlice(ctx, w, af64, t, offF64, op.Sum); err != nil {
		return err
	}
	if err := win.AccumulateSlice(ctx, w, au8, t, offU8, op.Sum); err != nil {
		return err
	}
	if err := win.AccumulateSlice(ctx, w, ai64, t, offI64, op.Sum); err != nil {
		return err
	}
	wi32, wf64, wu8, wi64 := make([]int32, len(i32s)), make([]float64, len(f64s)), make([]uint8, len(u8s)), make([]int64, len(i64s))
	for i := range i32s {
		wi32[i] = i32s[i] + ai32[i]
	}
	for i := range f64s {
		wf64[i] = f64s[i] + af64[i]
	}
	for i := range u8s {
		wu8[i] = u8s[i] + au8[i]
	}
	for i := range i64s {
		wi64[i] = i64s[i] + ai64[i]
	}
	// GetAccumulateSlice NO_OP reads them atomically (origin nil), then
	// REPLACE puts the originals back and returns the sums.
	if err := win.GetAccumulateSlice(ctx, w, nil, gi32, t, offI32, op.NoOp); err != nil {
		return err
	}
	if err := win.GetAccumulateSlice(ctx, w, nil, gf64, t, offF64, op.NoOp); err != nil {
		return err
	}
	if err := win.GetAccumulateSlice(ctx, w, nil, gu8, t, offU8, op.NoOp); err != nil {
		return err
	}
	if err := win.GetAccumulateSlice(ctx, w, nil, gi64, t, offI64, op.NoOp); err != nil {
		return err
	}
	if !slices.Equal(gi32, wi32) || !slices.Equal(gu8, wu8) || !slices.Equal(gi64, wi64) {
		return fmt.Errorf("AccumulateSlice SUM: %v %v %v, want %v %v %v", gi32, gu8, gi64, wi32, wu8, wi64)
	}
	for i := range wf64 {
		if math.Float64bits(gf64[i]) != math.Float64bits(wf64[i]) {
			return fmt.Errorf("AccumulateSlice SUM float64 %d = %v, want %v", i, gf64[i], wf64[i])
		}
	}
	if err := win.GetAccumulateSlice(ctx, w, i32s, gi32, t, offI32, op.Replace); err != nil {
		return err
	}
	if err := win.GetAccumulateSlice(ctx, w, u8s, gu8, t, offU8, op.Replace); err != nil {
		return err
	}
	if err := win.GetAccumulateSlice(ctx, w, f64s, gf64, t, offF64, op.Replace); err != nil {
		return err
	}
	if !slices.Equal(gi32, wi32) || !slices.Equal(gu8, wu8) || !slices.Equal(gf64, wf64) {
		return fmt.Errorf("GetAccumulateSlice REPLACE returned %v %v %v, want %v %v %v", gi32, gu8, gf64, wi32, wu8, wf64)
	}
	if err := win.GetSlice(ctx, w, gi32, t, offI32); err != nil {
		return err
	}
	if !slices.Equal(gi32, i32s) {
		return fmt.Errorf("after GetAccumulateSlice REPLACE: %v, want %v", gi32, i32s)
	}
	// Bad input is refused before anything is sent.
	if err := win.GetAccumulateSlice(ctx, w, ai32[:2], gi32, t, offI32, op.Sum); !errors.Is(err, win.ErrInvalid) {
		return fmt.Errorf("GetAccumulateSlice with 2 origin and %d result elements: %v, want ErrInvalid", len(gi32), err)
	}
	if err := win.PutSlice(ctx, w, make([]float64, 600), t, 0); !errors.Is(err, win.ErrOutOfWindow) {
		return fmt.Errorf("PutSlice past the window: %v, want ErrOutOfWindow", err)
	}
	// No allocation on the hot path: the typed forms and RPut not at all,
	// RGet only its request.
	var ferr error
	keep := func(err error) {
		if err != nil && ferr == nil {
			ferr = err
		}
	}
	one := make([]float64, 1)
	b8 := make([]byte, 8)
	for _, c := range []struct {
		name string
		max  float64
		call func()
	}{
		{"PutSlice", 0, func() { keep(win.PutSlice(ctx, w, i32s, t, offI32)) }},
		{"GetSlice", 0, func() { keep(win.GetSlice(ctx, w, gi32, t, offI32)) }},
		{"AccumulateSlice", 0, func() { keep(win.AccumulateSlice(ctx, w, one, t, offF64, op.Sum)) }},
		{"RPut+Wait", 0, func() {
			r, err := w.RPut(ctx, b8, t, offU8)
			keep(err)
			keep(r.Wait(ctx))
		}},
		{"RGet+Wait", 1, func() {
			r, err := w.RGet(ctx, b8, t, offU8)
			keep(err)
			keep(r.Wait(ctx))
		}},
	} {
		if n := testing.AllocsPerRun(200, c.call); n > c.max {
			return fmt.Errorf("%s: %v allocations per call, want at most %v", c.name, n, c.max)
		}
		if ferr != nil {
			return fmt.Errorf("%s: %w", c.name, ferr)
		}
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	fmt.Println("reqtyped=ok")
	return w.Free(ctx)
}

func TestConfRequestEpochs(t *testing.T) {
	for _, o := range newLaunch(t, "reqepochs", 3).run(3 * time.Minute) {
		value(t, o, "reqepochs")
	}
}

func TestConfRequestPuts(t *testing.T) {
	for _, o := range newLaunch(t, "reqputs", 3).run(2 * time.Minute) {
		value(t, o, "reqputs")
	}
}

func TestConfRequestLists(t *testing.T) {
	for _, o := range newLaunch(t, "reqlists", 3).run(3 * time.Minute) {
		value(t, o, "reqlists")
	}
}

func TestConfRequestCancel(t *testing.T) {
	for _, o := range newLaunch(t, "reqcancel", 2).run(3 * time.Minute) {
		value(t, o, "reqcancel")
	}
}

func TestConfRequestTyped(t *testing.T) {
	for _, o := range newLaunch(t, "reqtyped", 2).run(2 * time.Minute) {
		value(t, o, "reqtyped")
	}
}
