//go:build integration

package test

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/internal/grouphooks"
	"github.com/onesided/rma/win"
)

func init() { workers["manyblocks"] = workManyBlocks }

const (
	mbBlocks = 3000 // blocks of the small-block target layout
	mbLen    = 3    // int32 per block (12 bytes)
	mbStride = 4    // int32 from one block to the next
	mbElems  = mbBlocks * mbLen
	mbBig    = 1024 // int32 per block of the big-block layout (4 KiB)
	mbWin    = 4 * mbBlocks * mbStride
)

// mbValue is element k written by rank r in step s: the target can tell
// which rank, which step and which element wrote a word.
func mbValue(r, s, k int) int32 { return int32(r<<28 | s<<20 | k) }

// mbOrigin is a buffer of 2*n int32 whose even elements are the values of
// rank r's step s, and the layout that selects them (every other int32).
func mbOrigin(r, s, n int) (win.Buffer, error) {
	every2nd, err := datatype.Vector(n, 1, 2, datatype.Int32.Type())
	if err != nil {
		return win.Buffer{}, err
	}
	b := make([]byte, 8*n)
	for k := 0; k < n; k++ {
		binary.NativeEndian.PutUint32(b[8*k:], uint32(mbValue(r, s, k)))
		binary.NativeEndian.PutUint32(b[8*k+4:], 0xdeadbeef)
	}
	return win.Buffer{Data: b, Type: every2nd, Count: 1}, nil
}

// mbCheckTarget checks that mem (from byte off) holds rank r's step s
// values in the small-block layout, and that the gaps between blocks hold
// gap.
func mbCheckTarget(what string, mem []byte, off, r, s int, gap uint32) error {
	k := 0
	for b := 0; b < mbBlocks; b++ {
		for j := 0; j < mbStride; j++ {
			got := binary.NativeEndian.Uint32(mem[off+4*(b*mbStride+j):])
			want := gap
			if j < mbLen {
				want = uint32(mbValue(r, s, k))
				k++
			}
			if got != want {
				return fmt.Errorf("%s: int32 %d of the target region (block %d, element %d) is %#x, want %#x",
					what, b*mbStride+j, b, j, got, want)
			}
		}
	}
	return nil
}

// mbCheckResult checks that a result buffer from mbResult holds rank r's
// step s values in its even elements and left its odd ones alone.
func mbCheckResult(what string, b []byte, r, s, n int) error {
	for k := 0; k < n; k++ {
		if got, want := int32(binary.NativeEndian.Uint32(b[8*k:])), mbValue(r, s, k); got != want {
			return fmt.Errorf("%s: element %d is %#x, want %#x", what, k, got, want)
		}
		if got := binary.NativeEndian.Uint32(b[8*k+4:]); got != 0x5a5a5a5a {
			return fmt.Errorf("%s: gap after element %d is %#x, want it untouched", what, k, got)
		}
	}
	return nil
}

func mbResult(n int) []byte {
	b := make([]byte, 8*n)
	for k := range n {
		binary.NativeEndian.PutUint32(b[8*k+4:], 0x5a5a5a5a)
	}
	return b
}

// workManyBlocks: on windows made with PackSmallBlocks, Put and Get whose
// target layouts have many small blocks (which go to the target's engine
// packed) and a few big ones (which go by RDMA), in passive, fence and PSCW
// epochs and into a dynamic window; on a window without it, the small
// blocks by RDMA.
// Each rank writes to and reads from the next rank; every target checks
// its memory after the epoch, every origin its results, and each rank
// counts the engine requests its target applied in each phase.
func workManyBlocks(ctx context.Context, g *group.Group) error {
	me, n := g.Rank(), g.Size()
	next, prev := (me+1)%n, (me+n-1)%n
	target, _ := grouphooks.Engine(g)
	i32 := datatype.Int32.Type()
	small, err := datatype.Vector(mbBlocks, mbLen, mbStride, i32)
	if err != nil {
		return err
	}
	big, err := datatype.Vector(4, mbBig, 2*mbBig, i32)
	if err != nil {
		return err
	}
	w, err := win.Allocate(ctx, g, mbWin+8*4*mbBig, 1, win.PackSmallBlocks())
	if err != nil {
		return err
	}
	if !w.Info().PackSmallBlocks {
		return fmt.Errorf("Info of a window made with PackSmallBlocks: %+v", w.Info())
	}
	mem := w.Bytes()
	for i := 0; i < len(mem); i += 4 {
		binary.NativeEndian.PutUint32(mem[i:], 0x11111111)
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	// applied runs phase between barriers and returns how many engine
	// requests this rank's target applied meanwhile.
	applied := func(phase func() error) (uint64, error) {
		before := target.Applied()
		// No rank starts the phase before every rank has read its count.
		if err := g.Barrier(ctx); err != nil {
			return 0, err
		}
		if err := phase(); err != nil {
			return 0, err
		}
		if err := g.Barrier(ctx); err != nil {
			return 0, err
		}
		return target.Applied() - before, nil
	}
	// putGet puts rank me's step st values (n of them, from every other
	// int32 of a buffer) into t's layout through w, flushes, reads them
	// back into every other int32 of a result buffer and checks them. w
	// is in a passive epoch.
	putGet := func(what string, w *win.Window, t win.Region, st, n int) error {
		o, err := mbOrigin(me, st, n)
		if err != nil {
			return err
		}
		if err := w.PutTo(ctx, o, t); err != nil {
			return fmt.Errorf("PutTo %s: %w", what, err)
		}
		if err := w.Flush(ctx, t.Rank); err != nil {
			return err
		}
		res := mbResult(n)
		if err := w.GetTo(ctx, win.Buffer{Data: res, Type: o.Type, Count: 1}, t); err != nil {
			return fmt.Errorf("GetTo %s: %w", what, err)
		}
		return mbCheckResult("GetTo "+what+" after PutTo and Flush", res, me, st, n)
	}

	// Passive target: PutTo, Flush, GetTo and RGetTo of the small-block
	// layout, from and into every other int32 of the origin's buffers.
	small1, err := applied(func() error {
		if err := w.LockAll(ctx); err != nil {
			return err
		}
		if err := putGet("of small blocks", w, win.Region{Rank: next, Type: small, Count: 1}, 1, mbElems); err != nil {
			return err
		}
		o, err := mbOrigin(me, 1, mbElems)
		if err != nil {
			return err
		}
		res2 := mbResult(mbElems)
		r, err := w.RGetTo(ctx, win.Buffer{Data: res2, Type: o.Type, Count: 1}, win.Region{Rank: next, Type: small, Count: 1})
		if err != nil {
			return fmt.Errorf("RGetTo: %w", err)
		}
		if err := r.Wait(ctx); err != nil {
			return fmt.Errorf("RGetTo's Wait: %w", err)
		}
		if err := mbCheckResult("RGetTo", res2, me, 1, mbElems); err != nil {
			return err
		}
		return w.UnlockAll(ctx)
	})
	if err != nil {
		return err
	}
	if err := mbCheckTarget("after the passive epoch", mem, 0, prev, 1, 0x11111111); err != nil {
		return err
	}

	// The big-block layout, after the small one in the window: RDMA, no
	// engine request.
	bigN, err := applied(func() error {
		if err := w.LockAll(ctx); err != nil {
			return err
		}
		if err := putGet("of 4 KiB blocks", w, win.Region{Rank: next, Disp: mbWin, Type: big, Count: 1}, 2, 4*mbBig); err != nil {
			return err
		}
		return w.UnlockAll(ctx)
	})
	if err != nil {
		return err
	}

	// Without PackSmallBlocks, the small-block layout goes by RDMA too.
	wp, err := win.Allocate(ctx, g, mbWin, 1)
	if err != nil {
		return err
	}
	plainN, err := applied(func() error {
		if err := wp.LockAll(ctx); err != nil {
			return err
		}
		if err := putGet("by RDMA", wp, win.Region{Rank: next, Type: small, Count: 1}, 6, mbElems); err != nil {
			return err
		}
		return wp.UnlockAll(ctx)
	})
	if err != nil {
		return err
	}
	if err := mbCheckTarget("after the RDMA Put", wp.Bytes(), 0, prev, 6, 0); err != nil {
		return err
	}
	if err := wp.Free(ctx); err != nil {
		return err
	}

	// Fence: the closing fence completes the Put at the target.
	if err := w.Fence(ctx, 0); err != nil {
		return err
	}
	o, err := mbOrigin(me, 3, mbElems)
	if err != nil {
		return err
	}
	if err := w.PutTo(ctx, o, win.Region{Rank: next, Type: small, Count: 1}); err != nil {
		return fmt.Errorf("PutTo in a fence epoch: %w", err)
	}
	if err := w.Fence(ctx, 0); err != nil {
		return err
	}
	if err := mbCheckTarget("after the closing fence", mem, 0, prev, 3, 0x11111111); err != nil {
		return err
	}
	if err := w.Fence(ctx, win.NoSucceed); err != nil {
		return err
	}

	// PSCW: Wait returns once the origin's Put is complete here.
	if err := w.Post(ctx, []int{prev}, 0); err != nil {
		return err
	}
	if err := w.Start(ctx, []int{next}, 0); err != nil {
		return err
	}
	if o, err = mbOrigin(me, 4, mbElems); err != nil {
		return err
	}
	if err := w.PutTo(ctx, o, win.Region{Rank: next, Type: small, Count: 1}); err != nil {
		return fmt.Errorf("PutTo in an access epoch: %w", err)
	}
	if err := w.Complete(ctx); err != nil {
		return err
	}
	if err := w.Wait(ctx); err != nil {
		return err
	}
	if err := mbCheckTarget("after Wait", mem, 0, prev, 4, 0x11111111); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if err := w.Free(ctx); err != nil {
		return err
	}

	// A dynamic window: the layout at an attached region's address.
	dw, err := win.CreateDynamic(ctx, g, win.PackSmallBlocks())
	if err != nil {
		return err
	}
	attached := make([]byte, mbWin)
	for i := 0; i < len(attached); i += 4 {
		binary.NativeEndian.PutUint32(attached[i:], 0x22222222)
	}
	if err := dw.Attach(attached); err != nil {
		return err
	}
	addrs, err := g.AllGather(ctx, binary.NativeEndian.AppendUint64(nil, uint64(win.Address(attached))))
	if err != nil {
		return err
	}
	if err := dw.LockAll(ctx); err != nil {
		return err
	}
	at := int(binary.NativeEndian.Uint64(addrs[next]))
	if err := putGet("of a dynamic window", dw, win.Region{Rank: next, Disp: at, Type: small, Count: 1}, 5, mbElems); err != nil {
		return err
	}
	if err := dw.UnlockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if err := mbCheckTarget("the dynamic window", attached, 0, prev, 5, 0x22222222); err != nil {
		return err
	}
	if err := dw.Detach(attached); err != nil {
		return err
	}
	if err := dw.Free(ctx); err != nil {
		return err
	}
	fmt.Printf("small_requests=%d\nbig_requests=%d\nplain_requests=%d\nmanyblocks=ok\n", small1, bigN, plainN)
	return nil
}
