//go:build integration

package test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/win"
)

// Dynamic windows (MPI_Win_create_dynamic, MPI_Win_attach and
// MPI_Win_detach, MPI-4.1 section 12.2.4): any number of regions, side by
// side; a target buffer lies in one attached region; an origin may use
// memory as soon as the target has told it that it attached it, whatever
// the target attached and detached before.

func init() {
	workers["dynadjacent"] = workDynAdjacent
	workers["dynmany"] = workDynMany
	workers["dynreattach"] = workDynReattach
	workers["dynchurn"] = workDynChurn
	workers["dynmisuse"] = workDynMisuse
	workers["dynlocal"] = workDynLocal
}

// dynPattern is byte j of region k before any RMA call.
func dynPattern(k, j int) byte { return byte(k*31 + j*7 + 3) }

func dynFill(mem []byte, k int) {
	for j := range mem {
		mem[j] = dynPattern(k, j)
	}
}

func dynAddI64(b []byte, v int64) {
	binary.NativeEndian.PutUint64(b, binary.NativeEndian.Uint64(b)+uint64(v))
}

func dynMulI32(b []byte, v int32) {
	binary.NativeEndian.PutUint32(b, uint32(int32(binary.NativeEndian.Uint32(b))*v))
}

func i32b(v int32) []byte { return binary.NativeEndian.AppendUint32(nil, uint32(v)) }

// dynShare gives every rank rank 0's addresses: the message by which the
// target tells the origins what it attached.
func dynShare(ctx context.Context, g *group.Group, addrs []int) ([]int, error) {
	var mine []byte
	if g.Rank() == 0 {
		for _, a := range addrs {
			mine = binary.NativeEndian.AppendUint64(mine, uint64(a))
		}
	}
	all, err := g.AllGather(ctx, mine)
	if err != nil {
		return nil, err
	}
	out := make([]int, len(all[0])/8)
	for i := range out {
		out[i] = int(binary.NativeEndian.Uint64(all[0][8*i:]))
	}
	return out, nil
}

// dynCall is the outcome of one call, named for the failure message.
type dynCall struct {
	what string
	err  error
}

func dynWant(what string, err, want error) error {
	if !errors.Is(err, want) {
		return fmt.Errorf("%s: %v, want %v", what, err, want)
	}
	return nil
}

func dynCompare(what string, got, want []byte) error {
	for j := range want {
		if got[j] != want[j] {
			return fmt.Errorf("%s: byte %d is %#x, want %#x (got % x, want % x)", what, j, got[j], want[j], got, want)
		}
	}
	return nil
}

// dynGet reads len(want) bytes of rank's window at addr and compares them.
func dynGet(ctx context.Context, w *win.Window, rank, addr int, want []byte, what string) error {
	got := make([]byte, len(want))
	if err := w.Get(ctx, got, rank, addr); err != nil {
		return fmt.Errorf("%s: get of %d bytes at %#x: %w", what, len(want), addr, err)
	}
	return dynCompare(what, got, want)
}

// dynRoutes makes sure the tests reach both paths: int64 sums on the NIC,
// int32 products through the target's engine.
func dynRoutes(w *win.Window) error {
	if r := w.RouteFetchAndOp(op.Sum, datatype.Int64); r != atomics.NICFetchAdd {
		return fmt.Errorf("sum on int64 takes route %v, want the NIC's fetch-and-add", r)
	}
	if r := w.RouteFetchAndOp(op.Prod, datatype.Int32); r != atomics.Engine {
		return fmt.Errorf("product on int32 takes route %v, want the target engine", r)
	}
	return nil
}

const adjPieces = 8

// workDynAdjacent (2 ranks): rank 0 cuts one slice into 24-byte pieces and
// attaches each; rank 1 reads, writes and accumulates into the first and
// last bytes of every piece (an address at the end of one piece is the
// start of the next), and each access that straddles two pieces fails.
func workDynAdjacent(ctx context.Context, g *group.Group) error {
	w, err := win.CreateDynamic(ctx, g)
	if err != nil {
		return err
	}
	if err := dynRoutes(w); err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	var big []byte
	var addrs []int
	if g.Rank() == 0 {
		big = make([]byte, 24*adjPieces)
		for i := 0; i < adjPieces; i++ {
			p := big[24*i : 24*(i+1) : 24*(i+1)]
			dynFill(p, i)
			if err := w.Attach(p); err != nil {
				return fmt.Errorf("attach of piece %d: %w", i, err)
			}
			addrs = append(addrs, win.Address(p))
		}
	}
	if addrs, err = dynShare(ctx, g, addrs); err != nil {
		return err
	}
	// What rank 1's calls leave in each piece.
	want := make([][]byte, adjPieces)
	for i := range want {
		want[i] = make([]byte, 24)
		dynFill(want[i], i)
		want[i][0] = 0xc0 + byte(i)
		dynMulI32(want[i][4:], 3)
		dynAddI64(want[i][8:], int64(i+1)<<8)
		want[i][23] = 0xd0 + byte(i)
	}
	dynMulI32(want[1][20:], 7)
	if g.Rank() == 1 {
		if err := adjacentOrigin(ctx, w, addrs, want); err != nil {
			return err
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if g.Rank() == 0 {
		if err := w.Sync(); err != nil {
			return err
		}
		for i := range want {
			if err := dynCompare(fmt.Sprintf("piece %d in rank 0's memory", i), big[24*i:24*(i+1)], want[i]); err != nil {
				return err
			}
		}
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	fmt.Println("dynadjacent=ok")
	return w.Free(ctx) // with every piece still attached
}

func adjacentOrigin(ctx context.Context, w *win.Window, a []int, want [][]byte) error {
	for i := 1; i < len(a); i++ {
		if a[i] != a[i-1]+24 {
			return fmt.Errorf("pieces %d and %d at %#x and %#x are not adjacent", i-1, i, a[i-1], a[i])
		}
	}
	for i := range a {
		init := make([]byte, 24)
		dynFill(init, i)
		what := fmt.Sprintf("piece %d", i)
		if err := dynGet(ctx, w, 0, a[i], init, what); err != nil {
			return err
		}
		if err := dynGet(ctx, w, 0, a[i], init[:1], what+", first byte"); err != nil {
			return err
		}
		if err := dynGet(ctx, w, 0, a[i]+23, init[23:], what+", last byte"); err != nil {
			return err
		}
		for _, off := range []int{0, 5, 24} {
			if err := w.Get(ctx, nil, 0, a[i]+off); err != nil {
				return fmt.Errorf("get of no bytes at byte %d of %s: %w", off, what, err)
			}
		}
	}
	for i := range a {
		if err := w.Put(ctx, []byte{0xc0 + byte(i)}, 0, a[i]); err != nil {
			return fmt.Errorf("put to the first byte of piece %d: %w", i, err)
		}
		if err := w.Put(ctx, []byte{0xd0 + byte(i)}, 0, a[i]+23); err != nil {
			return fmt.Errorf("put to the last byte of piece %d: %w", i, err)
		}
		if err := w.Accumulate(ctx, i32b(3), datatype.Int32, 0, a[i]+4, op.Prod); err != nil {
			return fmt.Errorf("product at byte 4 of piece %d: %w", i, err)
		}
		if err := w.Accumulate(ctx, u64(uint64(i+1)<<8), datatype.Int64, 0, a[i]+8, op.Sum); err != nil {
			return fmt.Errorf("sum at byte 8 of piece %d: %w", i, err)
		}
	}
	// A layout whose first byte is in piece 1 although its displacement
	// is the address of piece 0: the target buffer is in one region.
	t, err := datatype.HindexedBlock(1, []int{24 + 20}, datatype.Int32.Type())
	if err != nil {
		return err
	}
	if err := w.AccumulateTo(ctx, win.Buffer{Data: i32b(7), Type: datatype.Int32.Type(), Count: 1},
		win.Region{Rank: 0, Disp: a[0], Type: t, Count: 1}, op.Prod); err != nil {
		return fmt.Errorf("product through a datatype with lower bound 44 at piece 0: %w", err)
	}
	// Straddles of pieces 2 and 3, and the end of the last piece.
	s := a[2] + 20
	checks := []dynCall{
		{"get of 8 bytes across pieces 2 and 3", w.Get(ctx, make([]byte, 8), 0, s)},
		{"get of 25 bytes at piece 2", w.Get(ctx, make([]byte, 25), 0, a[2])},
		{"put of 2 bytes across pieces 2 and 3", w.Put(ctx, []byte{1, 2}, 0, a[2]+23)},
		{"product on 2 int32 across pieces 2 and 3", w.Accumulate(ctx, append(i32b(2), i32b(2)...), datatype.Int32, 0, s, op.Prod)},
		{"put of 1 byte after the last piece", w.Put(ctx, []byte{1}, 0, a[len(a)-1]+24)},
	}
	_, ferr := win.FetchAndOp(ctx, w, int64(1), 0, s, op.Sum)
	checks = append(checks, dynCall{"fetch-and-add of an int64 across pieces 2 and 3", ferr})
	for _, c := range checks {
		if err := dynWant(c.what, c.err, win.ErrOutOfWindow); err != nil {
			return err
		}
	}
	if err := w.Flush(ctx, 0); err != nil {
		return err
	}
	for i := range a {
		if err := dynGet(ctx, w, 0, a[i], want[i], fmt.Sprintf("piece %d after the calls", i)); err != nil {
			return err
		}
	}
	return nil
}

const (
	manyPieces  = 800 // 24-byte pieces of one slice
	manyObjects = 200 // separately allocated 24-byte objects
	manyRegions = manyPieces + manyObjects
)

// manyInit is region k before any RMA call.
func manyInit(k int) []byte {
	b := make([]byte, 24)
	dynFill(b, k)
	if k%3 == 1 {
		binary.NativeEndian.PutUint32(b[0:], uint32(int32(k+1)))
		binary.NativeEndian.PutUint32(b[20:], uint32(int32(-(k + 2))))
	}
	return b
}

// manyCalls makes origin r's calls on region k at addr, or applies them to
// the model m when w is nil.
func manyCalls(ctx context.Context, w *win.Window, r, k, addr int, m []byte) error {
	do := func(what string, err error) error {
		if err != nil {
			return fmt.Errorf("rank %d, region %d at %#x: %s: %w", r, k, addr, what, err)
		}
		return nil
	}
	v0, v1 := int64(r)<<32+int64(k), int64(r)<<40+int64(2*k+1)
	p0, p1 := int32(r+2), int32(2*r+1)
	b0, b1 := 0xa0+byte(r), 0xb0+byte(r)
	if w == nil {
		switch k % 3 {
		case 0:
			dynAddI64(m[0:], v0)
			dynAddI64(m[16:], v1)
		case 1:
			dynMulI32(m[0:], p0)
			dynMulI32(m[20:], p1)
		case 2:
			m[r-1], m[24-r] = b0, b1
		}
		return nil
	}
	switch k % 3 {
	case 0: // NIC fetch-and-add, first and last 8 bytes
		if err := do("sum at byte 0", w.Accumulate(ctx, u64(uint64(v0)), datatype.Int64, 0, addr, op.Sum)); err != nil {
			return err
		}
		return do("sum at byte 16", w.Accumulate(ctx, u64(uint64(v1)), datatype.Int64, 0, addr+16, op.Sum))
	case 1: // target engine, first and last 4 bytes
		if err := do("product at byte 0", w.Accumulate(ctx, i32b(p0), datatype.Int32, 0, addr, op.Prod)); err != nil {
			return err
		}
		return do("product at byte 20", w.Accumulate(ctx, i32b(p1), datatype.Int32, 0, addr+20, op.Prod))
	default: // RDMA WRITE, first and last bytes
		if err := do("put at the start", w.Put(ctx, []byte{b0}, 0, addr+r-1)); err != nil {
			return err
		}
		return do("put at the end", w.Put(ctx, []byte{b1}, 0, addr+24-r))
	}
}

// workDynMany (3 ranks): rank 0 attaches 1000 regions, 800 of them side by
// side, in an order that is not the order of their addresses, once the
// others are in a lock-all epoch; ranks 1 and 2 sum int64s on the NIC,
// multiply int32s through the engine and put bytes at the first and last
// bytes of every region; every rank then reads every region back.
func workDynMany(ctx context.Context, g *group.Group) error {
	w, err := win.CreateDynamic(ctx, g)
	if err != nil {
		return err
	}
	if err := dynRoutes(w); err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	var regions [][]byte
	var addrs []int
	if g.Rank() == 0 {
		big := make([]byte, 24*manyPieces)
		for k := 0; k < manyPieces; k++ {
			regions = append(regions, big[24*k:24*(k+1):24*(k+1)])
		}
		for k := 0; k < manyObjects; k++ {
			regions = append(regions, make([]byte, 24))
		}
		addrs = make([]int, manyRegions)
		for k, r := range regions {
			copy(r, manyInit(k))
			addrs[k] = win.Address(r)
		}
		start := time.Now()
		for i := 0; i < manyRegions; i++ {
			k := i * 7 % manyRegions // 7 is prime to 1000: each once, out of address order
			if err := w.Attach(regions[k]); err != nil {
				return fmt.Errorf("attach of region %d (%d attached): %w", k, i, err)
			}
		}
		fmt.Printf("attached %d regions in %v\n", manyRegions, time.Since(start).Round(time.Millisecond))
	}
	if addrs, err = dynShare(ctx, g, addrs); err != nil {
		return err
	}
	if len(addrs) != manyRegions {
		return fmt.Errorf("got %d addresses, want %d", len(addrs), manyRegions)
	}
	// The model: both origins' calls applied to the initial contents.
	want := make([][]byte, manyRegions)
	for k := range want {
		want[k] = manyInit(k)
		for r := 1; r < g.Size(); r++ {
			manyCalls(ctx, nil, r, k, 0, want[k])
		}
	}
	if r := g.Rank(); r > 0 {
		start := time.Now()
		for k, a := range addrs {
			if err := manyCalls(ctx, w, r, k, a, nil); err != nil {
				return err
			}
		}
		// Straddles of two adjacent pieces.
		for _, k := range []int{0, 399, manyPieces - 2} {
			if addrs[k+1] != addrs[k]+24 {
				return fmt.Errorf("pieces %d and %d are not adjacent", k, k+1)
			}
			if err := dynWant(fmt.Sprintf("get across pieces %d and %d", k, k+1),
				w.Get(ctx, make([]byte, 8), 0, addrs[k]+20), win.ErrOutOfWindow); err != nil {
				return err
			}
			if err := dynWant(fmt.Sprintf("put across pieces %d and %d", k, k+1),
				w.Put(ctx, make([]byte, 2), 0, addrs[k]+23), win.ErrOutOfWindow); err != nil {
				return err
			}
		}
		if err := w.Flush(ctx, 0); err != nil {
			return err
		}
		fmt.Printf("rank %d: %d regions updated in %v\n", r, manyRegions, time.Since(start).Round(time.Millisecond))
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	for k, a := range addrs {
		if err := dynGet(ctx, w, 0, a, want[k], fmt.Sprintf("rank %d reading region %d", g.Rank(), k)); err != nil {
			return err
		}
	}
	if g.Rank() == 0 {
		if err := w.Sync(); err != nil {
			return err
		}
		for k, r := range regions {
			if err := dynCompare(fmt.Sprintf("region %d in rank 0's memory", k), r, want[k]); err != nil {
				return err
			}
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	if g.Rank() == 0 {
		for k := 0; k < manyPieces; k++ { // the objects stay attached until Free
			if err := w.Detach(regions[k]); err != nil {
				return fmt.Errorf("detach of region %d: %w", k, err)
			}
		}
	}
	fmt.Println("dynmany=ok")
	return w.Free(ctx)
}

// workDynReattach (2 ranks): after rank 1 has used region A of rank 0,
// rank 0 detaches A, attaches C, attaches A again and tells rank 1: an
// accumulate to A lands in A and C is untouched. Then rank 0 detaches and
// reattaches A (a new registration): a put to A still lands.
func workDynReattach(ctx context.Context, g *group.Group) error {
	w, err := win.CreateDynamic(ctx, g)
	if err != nil {
		return err
	}
	if err := dynRoutes(w); err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	me := g.Rank()
	initA, initC := make([]byte, 64), make([]byte, 64)
	dynFill(initA, 1)
	dynFill(initC, 2)
	binary.NativeEndian.PutUint32(initA, 1)
	binary.NativeEndian.PutUint32(initC, 1)
	var A, C []byte
	var addrs []int
	if me == 0 {
		A, C = make([]byte, 64), make([]byte, 64)
		copy(A, initA)
		copy(C, initC)
		if err := w.Attach(A); err != nil {
			return err
		}
		addrs = []int{win.Address(A), win.Address(C)}
	}
	if addrs, err = dynShare(ctx, g, addrs); err != nil {
		return err
	}
	a, c := addrs[0], addrs[1]
	wantA, wantC := append([]byte{}, initA...), append([]byte{}, initC...)
	step := func(name string, target func() error, origin func() error) error {
		var err error
		if me == 0 && target != nil {
			err = target()
		}
		if me == 1 && origin != nil {
			err = origin()
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return g.Barrier(ctx)
	}
	check := func() error {
		if me == 0 {
			if err := w.Sync(); err != nil {
				return err
			}
			if err := dynCompare("A in rank 0's memory", A, wantA); err != nil {
				return err
			}
			return dynCompare("C in rank 0's memory", C, wantC)
		}
		if err := dynGet(ctx, w, 0, a, wantA, "A read by rank 1"); err != nil {
			return err
		}
		return dynGet(ctx, w, 0, c, wantC, "C read by rank 1")
	}
	// 1: rank 1 uses A (and so learns rank 0's table).
	dynMulI32(wantA[0:], 3)
	binary.NativeEndian.PutUint64(wantA[8:], 0x1111)
	if err := step("first use of A", nil, func() error {
		if err := w.Accumulate(ctx, i32b(3), datatype.Int32, 0, a, op.Prod); err != nil {
			return err
		}
		if err := w.Put(ctx, u64(0x1111), 0, a+8); err != nil {
			return err
		}
		if err := w.Flush(ctx, 0); err != nil {
			return err
		}
		return dynGet(ctx, w, 0, a, wantA, "A after the first use")
	}); err != nil {
		return err
	}
	// 2: Detach(A), Attach(C), Attach(A), then the barrier tells rank 1.
	if err := step("detach A, attach C, attach A", func() error {
		for _, f := range []func() error{func() error { return w.Detach(A) }, func() error { return w.Attach(C) }, func() error { return w.Attach(A) }} {
			if err := f(); err != nil {
				return err
			}
		}
		return nil
	}, nil); err != nil {
		return err
	}
	dynMulI32(wantA[0:], 5)
	if err := step("engine accumulate to A", nil, func() error {
		if err := w.Accumulate(ctx, i32b(5), datatype.Int32, 0, a, op.Prod); err != nil {
			return err
		}
		return w.Flush(ctx, 0)
	}); err != nil {
		return err
	}
	if err := step("check after the reattach", check, check); err != nil {
		return err
	}
	// 3: A detached and attached again: a new registration at the same address.
	if err := step("detach and attach A", func() error {
		if err := w.Detach(A); err != nil {
			return err
		}
		return w.Attach(A)
	}, nil); err != nil {
		return err
	}
	binary.NativeEndian.PutUint64(wantA[8:], 0x2222)
	dynAddI64(wantA[16:], 5)
	dynMulI32(wantA[0:], 7)
	dynMulI32(wantC[0:], 11)
	if err := step("put, sum and products after the reattach", nil, func() error {
		if err := w.Put(ctx, u64(0x2222), 0, a+8); err != nil {
			return err
		}
		if err := w.Accumulate(ctx, u64(5), datatype.Int64, 0, a+16, op.Sum); err != nil {
			return err
		}
		if err := w.Accumulate(ctx, i32b(7), datatype.Int32, 0, a, op.Prod); err != nil {
			return err
		}
		if err := w.Accumulate(ctx, i32b(11), datatype.Int32, 0, c, op.Prod); err != nil {
			return err
		}
		return w.Flush(ctx, 0)
	}); err != nil {
		return err
	}
	if err := step("final check", check, check); err != nil {
		return err
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	fmt.Println("dynreattach=ok")
	return w.Free(ctx)
}

const (
	churnRounds = 30
	churnSums   = 8   // sums on the lasting region per origin and round
	churnNoise  = 150 // regions rank 0 attaches and detaches at once while the others read its table
)

// churnInit is the region of round i before any RMA call.
func churnInit(i int) []byte {
	b := make([]byte, 32)
	dynFill(b, i)
	binary.NativeEndian.PutUint32(b[16:], uint32(i+1))
	return b
}

// workDynChurn (3 ranks): in each round rank 0 attaches a region, tells
// the others, they access it, and rank 0 detaches it. The regions come
// from three buffers at shifting offsets, so that the address of one
// round's region is in the region of the round before, or is its address,
// with a new registration; a region attached for the whole test takes
// sums from each origin in every round. While the origins work, rank 0
// attaches and detaches other regions (once more than the first table
// buffer holds), so that they read its table while it changes.
func workDynChurn(ctx context.Context, g *group.Group) error {
	w, err := win.CreateDynamic(ctx, g)
	if err != nil {
		return err
	}
	if err := dynRoutes(w); err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	me, origins := g.Rank(), g.Size()-1
	var bufs [3][]byte
	var P, noise []byte
	var addrs []int
	if me == 0 {
		for i := range bufs {
			bufs[i] = make([]byte, 64)
		}
		P = make([]byte, 16)
		noise = make([]byte, 8*churnNoise)
		binary.NativeEndian.PutUint64(P, 1000)
		if err := w.Attach(P); err != nil {
			return err
		}
		addrs = []int{win.Address(P)}
	}
	if addrs, err = dynShare(ctx, g, addrs); err != nil {
		return err
	}
	p := addrs[0]
	for i := 0; i < churnRounds; i++ {
		var mem []byte
		if me == 0 {
			// Per buffer: the same address twice, then shifted by 8
			// and 16 bytes, overlapping the region of the round before.
			off := [4]int{0, 0, 8, 16}[i%4]
			mem = bufs[i/4%3][off : off+32 : off+32]
			copy(mem, churnInit(i))
			if err := w.Attach(mem); err != nil {
				return fmt.Errorf("round %d: attach: %w", i, err)
			}
			addrs = []int{win.Address(mem)}
		}
		if addrs, err = dynShare(ctx, g, addrs); err != nil {
			return err
		}
		a := addrs[0]
		want := churnInit(i)
		for r := 1; r <= origins; r++ {
			want[r-1] = 0xa0 + byte(r)
			dynAddI64(want[8:], int64(r)<<16+int64(i))
			dynMulI32(want[16:], int32(r+2))
		}
		if me == 0 {
			n := 20
			if i == churnRounds/2 {
				n = churnNoise
			}
			for j := 0; j < n; j++ {
				if err := w.Attach(noise[8*j : 8*j+8]); err != nil {
					return fmt.Errorf("round %d: attach of noise region %d: %w", i, j, err)
				}
			}
			for j := 0; j < n; j++ {
				if err := w.Detach(noise[8*j : 8*j+8]); err != nil {
					return fmt.Errorf("round %d: detach of noise region %d: %w", i, j, err)
				}
			}
		}
		if me > 0 {
			calls := []dynCall{
				{"put", w.Put(ctx, []byte{0xa0 + byte(me)}, 0, a+me-1)},
				{"sum", w.Accumulate(ctx, u64(uint64(me)<<16+uint64(i)), datatype.Int64, 0, a+8, op.Sum)},
				{"product", w.Accumulate(ctx, i32b(int32(me+2)), datatype.Int32, 0, a+16, op.Prod)},
			}
			for j := 0; j < churnSums; j++ {
				calls = append(calls, dynCall{"sum on the lasting region", w.Accumulate(ctx, u64(1), datatype.Int64, 0, p, op.Sum)})
			}
			for _, c := range append(calls, dynCall{"flush", w.Flush(ctx, 0)}) {
				if c.err != nil {
					return fmt.Errorf("round %d, region at %#x: %s: %w", i, a, c.what, c.err)
				}
			}
		}
		if err := g.Barrier(ctx); err != nil {
			return err
		}
		if err := dynGet(ctx, w, 0, a, want, fmt.Sprintf("round %d, rank %d reading", i, me)); err != nil {
			return err
		}
		if me == 0 {
			if err := w.Sync(); err != nil {
				return err
			}
			if err := dynCompare(fmt.Sprintf("round %d, rank 0's memory", i), mem, want); err != nil {
				return err
			}
		}
		if err := g.Barrier(ctx); err != nil {
			return err
		}
		if me == 0 {
			if err := w.Detach(mem); err != nil {
				return fmt.Errorf("round %d: detach: %w", i, err)
			}
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if err := dynGet(ctx, w, 0, p, u64(uint64(1000+origins*churnRounds*churnSums)), "the lasting region"); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	if me == 0 {
		if err := w.Detach(P); err != nil {
			return err
		}
	}
	fmt.Println("dynchurn=ok")
	return w.Free(ctx)
}

const misusePieces = 300

// workDynMisuse (2 ranks): overlapping attaches and detaches of memory that
// is not attached are refused with ErrInvalid; Attach and Detach after Free
// with ErrFreed; the region table grows past its first buffer while rank 1
// reads it; Free releases every region still attached (the harness checks
// that no verbs object is left open).
func workDynMisuse(ctx context.Context, g *group.Group) error {
	wd, err := win.CreateDynamic(ctx, g)
	if err != nil {
		return err
	}
	wa, err := win.Allocate(ctx, g, 64, 1)
	if err != nil {
		return err
	}
	me := g.Rank()
	a := make([]byte, 64)
	big := make([]byte, 256)
	pieces := make([]byte, 8*misusePieces)
	var addrs []int
	if me == 0 {
		type call struct {
			what string
			err  error
			want error
		}
		calls := []call{
			{"attach of a", wd.Attach(a), nil},
			{"attach of a again", wd.Attach(a), win.ErrInvalid},
			{"attach of a[8:16]", wd.Attach(a[8:16]), win.ErrInvalid},
			{"attach of nothing (as MPICH: nothing to do)", wd.Attach(nil), nil},
			{"attach of big[64:128]", wd.Attach(big[64:128]), nil},
			{"attach of big[0:65]", wd.Attach(big[0:65]), win.ErrInvalid},
			{"attach of big[127:200]", wd.Attach(big[127:200]), win.ErrInvalid},
			{"attach of big[0:256]", wd.Attach(big), win.ErrInvalid},
			{"attach of big[0:64] (adjacent below)", wd.Attach(big[0:64]), nil},
			{"attach of big[128:192] (adjacent above)", wd.Attach(big[128:192]), nil},
			{"detach of big[64:100] (shorter)", wd.Detach(big[64:100]), win.ErrInvalid},
			{"detach of big[65:128] (inside)", wd.Detach(big[65:128]), win.ErrInvalid},
			{"detach of big[192:256] (never attached)", wd.Detach(big[192:256]), win.ErrInvalid},
			{"detach of other memory", wd.Detach(make([]byte, 8)), win.ErrInvalid},
			{"detach of big[64:128]", wd.Detach(big[64:128]), nil},
			{"detach of big[64:128] again", wd.Detach(big[64:128]), win.ErrInvalid},
			{"attach on an allocated window", wa.Attach(a), win.ErrInvalid},
			{"detach on an allocated window", wa.Detach(a), win.ErrInvalid},
		}
		for _, c := range calls {
			if (c.want == nil && c.err != nil) || (c.want != nil && !errors.Is(c.err, c.want)) {
				return fmt.Errorf("%s: %v, want %v", c.what, c.err, c.want)
			}
		}
		for i := 0; i < misusePieces; i++ {
			p := pieces[8*i : 8*i+8 : 8*i+8]
			dynFill(p, i)
			if err := wd.Attach(p); err != nil {
				return fmt.Errorf("attach of piece %d: %w", i, err)
			}
		}
		addrs = []int{win.Address(pieces[0:8]), win.Address(pieces[8*(misusePieces-1):])}
	}
	if addrs, err = dynShare(ctx, g, addrs); err != nil {
		return err
	}
	first, last := make([]byte, 8), make([]byte, 8)
	dynFill(first, 0)
	dynFill(last, misusePieces-1)
	if me == 1 {
		if err := wd.Lock(ctx, win.LockShared, 0, 0); err != nil {
			return err
		}
		if err := dynGet(ctx, wd, 0, addrs[0], first, "piece 0"); err != nil {
			return err
		}
		if err := dynGet(ctx, wd, 0, addrs[1], last, "the last piece"); err != nil {
			return err
		}
		if err := wd.Unlock(ctx, 0); err != nil {
			return err
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if me == 0 {
		for i := 0; i < misusePieces; i += 2 {
			if err := wd.Detach(pieces[8*i : 8*i+8]); err != nil {
				return fmt.Errorf("detach of piece %d: %w", i, err)
			}
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if me == 1 {
		if err := wd.Lock(ctx, win.LockShared, 0, 0); err != nil {
			return err
		}
		if err := dynWant("get of detached piece 0", wd.Get(ctx, make([]byte, 8), 0, addrs[0]), win.ErrOutOfWindow); err != nil {
			return err
		}
		if err := dynGet(ctx, wd, 0, addrs[1], last, "the last piece, still attached"); err != nil {
			return err
		}
		if err := wd.Unlock(ctx, 0); err != nil {
			return err
		}
	}
	if err := wa.Free(ctx); err != nil {
		return err
	}
	if err := wd.Free(ctx); err != nil { // a, big's pieces and half the pieces still attached on rank 0
		return err
	}
	if err := dynWant("attach after Free", wd.Attach(make([]byte, 8)), win.ErrFreed); err != nil {
		return err
	}
	if err := dynWant("detach after Free", wd.Detach(a), win.ErrFreed); err != nil {
		return err
	}
	fmt.Println("dynmisuse=ok")
	return nil
}

// workDynLocal: Attach and Detach are local calls (MPI-4.1 12.2.4). On
// rank 0 they return while another goroutine waits in Lock for rank 1,
// which rank 1 holds until rank 0 has told it, with a collective, what it
// attached.
func workDynLocal(ctx context.Context, g *group.Group) error {
	wd, err := win.CreateDynamic(ctx, g)
	if err != nil {
		return err
	}
	me := g.Rank()
	if me == 1 {
		if err := wd.Lock(ctx, win.LockExclusive, 1, 0); err != nil {
			return err
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	mem, other := make([]byte, 8), make([]byte, 64)
	var addrs []int
	locked := make(chan error, 1)
	if me == 0 {
		go func() { locked <- wd.Lock(ctx, win.LockExclusive, 1, 0) }()
		time.Sleep(200 * time.Millisecond) // the Lock is waiting for rank 1
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			err := wd.Attach(other)
			if err == nil {
				err = wd.Attach(mem)
			}
			if err == nil {
				err = wd.Detach(other)
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("attach and detach while another goroutine waits in Lock: %w", err)
			}
		case <-time.After(10 * time.Second):
			return fmt.Errorf("attach and detach still waiting after 10s, for the Lock another goroutine waits in")
		}
		select {
		case err := <-locked:
			return fmt.Errorf("Lock of rank 1 returned (%v) while rank 1 holds it", err)
		default:
		}
		fmt.Printf("dynlocal: attach, attach and detach took %v while a Lock waited\n", time.Since(start).Round(time.Microsecond))
		addrs = []int{win.Address(mem)}
	}
	if addrs, err = dynShare(ctx, g, addrs); err != nil {
		return err
	}
	if me == 1 {
		if err := wd.Unlock(ctx, 1); err != nil {
			return err
		}
		if err := wd.Lock(ctx, win.LockShared, 0, 0); err != nil {
			return err
		}
		if err := wd.Put(ctx, u64(77), 0, addrs[0]); err != nil {
			return err
		}
		if err := wd.Unlock(ctx, 0); err != nil {
			return err
		}
	} else {
		if err := <-locked; err != nil {
			return fmt.Errorf("Lock of rank 1 after rank 1 unlocked: %w", err)
		}
		if err := wd.Unlock(ctx, 1); err != nil {
			return err
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if me == 0 {
		if err := wd.Sync(); err != nil {
			return err
		}
		if got := int64(binary.NativeEndian.Uint64(mem)); got != 77 {
			return fmt.Errorf("the attached word holds %d after rank 1's Put of 77", got)
		}
	}
	if err := wd.Free(ctx); err != nil {
		return err
	}
	fmt.Println("dynlocal=ok")
	return nil
}

func TestDynamicAttachIsLocal(t *testing.T) {
	outs := newLaunch(t, "dynlocal", 2).run(2 * time.Minute)
	for _, o := range outs {
		value(t, o, "dynlocal")
	}
}

func TestDynamicAdjacentRegions(t *testing.T) {
	outs := newLaunch(t, "dynadjacent", 2).run(2 * time.Minute)
	for _, o := range outs {
		value(t, o, "dynadjacent")
	}
}

func TestDynamicManyRegions(t *testing.T) {
	outs := newLaunch(t, "dynmany", 3).run(3 * time.Minute)
	for _, o := range outs {
		value(t, o, "dynmany")
	}
}

func TestDynamicReattach(t *testing.T) {
	outs := newLaunch(t, "dynreattach", 2).run(2 * time.Minute)
	for _, o := range outs {
		value(t, o, "dynreattach")
	}
}

func TestDynamicChurn(t *testing.T) {
	outs := newLaunch(t, "dynchurn", 3).run(3 * time.Minute)
	for _, o := range outs {
		value(t, o, "dynchurn")
	}
}

func TestDynamicMisuse(t *testing.T) {
	outs := newLaunch(t, "dynmisuse", 2).run(2 * time.Minute)
	for _, o := range outs {
		value(t, o, "dynmisuse")
	}
}
