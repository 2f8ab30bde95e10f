package rma

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
)

// memWindow is an in-memory Window: it applies every call to mem at once,
// with op's kernels, and refuses what falls outside mem.
type memWindow struct {
	mem    []byte
	locked bool
}

var _ Window = (*memWindow)(nil)

func (w *memWindow) region(disp, n int) ([]byte, error) {
	if disp < 0 || n < 0 || disp+n > len(w.mem) {
		return nil, fmt.Errorf("%w: %d bytes at %d", ErrOutOfWindow, n, disp)
	}
	return w.mem[disp : disp+n], nil
}

func (w *memWindow) Put(_ context.Context, origin []byte, disp int) error {
	t, err := w.region(disp, len(origin))
	if err == nil {
		copy(t, origin)
	}
	return err
}

func (w *memWindow) Get(_ context.Context, result []byte, disp int) error {
	t, err := w.region(disp, len(result))
	if err == nil {
		copy(result, t)
	}
	return err
}

func (w *memWindow) Accumulate(_ context.Context, origin []byte, dt datatype.Basic, disp int, o op.Op) error {
	t, err := w.region(disp, len(origin))
	if err != nil {
		return err
	}
	return op.Apply(o, dt, t, origin)
}

func (w *memWindow) GetAccumulate(_ context.Context, origin, result []byte, dt datatype.Basic, disp int, o op.Op) error {
	t, err := w.region(disp, len(result))
	if err != nil {
		return err
	}
	if o == op.NoOp {
		copy(result, t)
		return nil
	}
	return op.ApplyFetch(o, dt, t, origin, result)
}

// pack returns b's elements packed (nil for no data).
func pack(b Buffer) []byte {
	if b.Data == nil {
		return nil
	}
	p, err := datatype.AppendPack(nil, b.Data, b.Count, b.Type)
	if err != nil {
		panic(err)
	}
	return p
}

func (w *memWindow) PutTo(ctx context.Context, origin Buffer, t Layout) error {
	return w.layoutCall(pack(origin), nil, t, op.Replace)
}

func (w *memWindow) GetTo(ctx context.Context, result Buffer, t Layout) error {
	res := make([]byte, int64(result.Count)*result.Type.Size())
	if err := w.layoutCall(nil, res, t, op.NoOp); err != nil {
		return err
	}
	return datatype.Unpack(result.Data, res, result.Count, result.Type)
}

func (w *memWindow) AccumulateTo(ctx context.Context, origin Buffer, t Layout, o op.Op) error {
	return w.layoutCall(pack(origin), nil, t, o)
}

func (w *memWindow) GetAccumulateTo(ctx context.Context, origin, result Buffer, t Layout, o op.Op) error {
	res := make([]byte, int64(result.Count)*result.Type.Size())
	if err := w.layoutCall(pack(origin), res, t, o); err != nil {
		return err
	}
	return datatype.Unpack(result.Data, res, result.Count, result.Type)
}

// layoutCall applies a call with a target layout element by element,
// origin and result packed (result nil: no old values).
func (w *memWindow) layoutCall(origin, result []byte, t Layout, o op.Op) error {
	if err := t.Type.Fits(t.Count, int64(len(w.mem)), int64(t.Disp)); err != nil {
		return fmt.Errorf("%w: %w", ErrOutOfWindow, err)
	}
	dt := t.Type.Basic()
	es, i := dt.Size(), 0
	var err error
	t.Type.ForEachBlock(t.Count, func(off int64, n int) bool {
		for ; n > 0 && err == nil; n, i, off = n-1, i+1, off+int64(es) {
			tgt := w.mem[t.Disp+int(off) : t.Disp+int(off)+es]
			var org []byte
			if origin != nil {
				org = origin[i*es : (i+1)*es]
			}
			switch {
			case result != nil && o == op.NoOp:
				copy(result[i*es:], tgt)
			case result != nil:
				err = op.ApplyFetch(o, dt, tgt, org, result[i*es:(i+1)*es])
			default:
				err = op.Apply(o, dt, tgt, org)
			}
		}
		return err == nil
	})
	return err
}

func (w *memWindow) FetchAndOp(ctx context.Context, origin, result []byte, dt datatype.Basic, disp int, o op.Op) error {
	return w.GetAccumulate(ctx, origin, result, dt, disp, o)
}

func (w *memWindow) CompareAndSwap(_ context.Context, origin, compare, result []byte, dt datatype.Basic, disp int) error {
	t, err := w.region(disp, len(result))
	if err != nil {
		return err
	}
	_, err = op.CompareAndSwap(dt, t, compare, origin, result)
	return err
}

type doneRequest struct{ err error }

func (r doneRequest) Wait(context.Context) error { return r.err }
func (r doneRequest) Test() (bool, error)        { return true, r.err }

func (w *memWindow) RPut(ctx context.Context, origin []byte, disp int) (Request, error) {
	return doneRequest{}, w.Put(ctx, origin, disp)
}

func (w *memWindow) RGet(ctx context.Context, result []byte, disp int) (Request, error) {
	return doneRequest{}, w.Get(ctx, result, disp)
}

func (w *memWindow) RAccumulate(ctx context.Context, origin []byte, dt datatype.Basic, disp int, o op.Op) (Request, error) {
	return doneRequest{}, w.Accumulate(ctx, origin, dt, disp, o)
}

func (w *memWindow) RGetAccumulate(ctx context.Context, origin, result []byte, dt datatype.Basic, disp int, o op.Op) (Request, error) {
	return doneRequest{}, w.GetAccumulate(ctx, origin, result, dt, disp, o)
}

func (w *memWindow) Lock(_ context.Context, lt LockType) error {
	if w.locked || (lt != LockShared && lt != LockExclusive) {
		return ErrEpoch
	}
	w.locked = true
	return nil
}

func (w *memWindow) Unlock(context.Context) error {
	if !w.locked {
		return ErrEpoch
	}
	w.locked = false
	return nil
}

func (w *memWindow) Flush(context.Context) error { return nil }

// TestTyped checks the typed helpers against the bytes they move.
func TestTyped(t *testing.T) {
	ctx := context.Background()
	w := &memWindow{mem: make([]byte, 64)}
	if err := PutSlice(ctx, w, []int32{1, -2, 3}, 4); err != nil {
		t.Fatal(err)
	}
	got := make([]int32, 3)
	if err := GetSlice(ctx, w, got, 4); err != nil || got[0] != 1 || got[1] != -2 || got[2] != 3 {
		t.Fatalf("GetSlice after PutSlice: %v, %v", got, err)
	}
	if old, err := FetchAndOp(ctx, w, int32(10), 8, op.Sum); old != -2 || err != nil {
		t.Fatalf("FetchAndOp: %d, %v; want -2", old, err)
	}
	if old, err := CompareAndSwap(ctx, w, int32(8), 5, 8); old != 8 || err != nil {
		t.Fatalf("CompareAndSwap: %d, %v; want 8", old, err)
	}
	if err := AccumulateSlice(ctx, w, []float64{1.5, 2}, 16, op.Sum); err != nil {
		t.Fatal(err)
	}
	old := make([]float64, 2)
	if err := GetAccumulateSlice(ctx, w, []float64{1, 1}, old, 16, op.Max); err != nil || old[0] != 1.5 || old[1] != 2 {
		t.Fatalf("GetAccumulateSlice(MAX): %v, %v", old, err)
	}
	if err := GetAccumulateSlice(ctx, w, []float64{1}, old, 16, op.Sum); !errors.Is(err, ErrInvalid) {
		t.Fatalf("GetAccumulateSlice with 1 origin and 2 result elements: %v, want ErrInvalid", err)
	}
	// A bool byte other than 0 and 1 reads as true, and as 1.
	w.mem[40], w.mem[41] = 7, 0
	bs := make([]bool, 2)
	if err := GetSlice(ctx, w, bs, 40); err != nil || !bs[0] || bs[1] || datatype.AsBytes(bs)[0] != 1 {
		t.Fatalf("GetSlice of bools 7, 0: %v, %v", bs, err)
	}
	if v, err := FetchAndOp(ctx, w, false, 40, op.NoOp); !v || err != nil {
		t.Fatalf("FetchAndOp(NO_OP, bool) of 7: %v, %v; want true", v, err)
	}
}

// A typed call that fails returns T's zero value, not what an earlier call
// left in the scratch buffer it takes from a pool.
func TestTypedResultOnError(t *testing.T) {
	ctx := context.Background()
	w := &memWindow{mem: make([]byte, 64)}
	for i := 0; i < 20; i++ {
		s := scratchPool.Get().(*scratch)
		for k := range s {
			for j := range s[k] {
				s[k][j] = 0xa5
			}
		}
		scratchPool.Put(s)
		if v, err := FetchAndOp(ctx, w, uint32(1), 64, op.Sum); !errors.Is(err, ErrOutOfWindow) || v != 0 {
			t.Fatalf("FetchAndOp out of the window: %#x, %v; want 0, ErrOutOfWindow", v, err)
		}
		if v, err := CompareAndSwap(ctx, w, int64(1), 2, 64); !errors.Is(err, ErrOutOfWindow) || v != 0 {
			t.Fatalf("CompareAndSwap out of the window: %#x, %v; want 0, ErrOutOfWindow", v, err)
		}
	}
}

// TestLayoutFake checks the in-memory window's layout calls, which the
// contract's callers rely on: an indexed layout of int32 gets SUM, and
// GetAccumulateTo returns the old values in type-map order.
func TestLayoutFake(t *testing.T) {
	ctx := context.Background()
	w := &memWindow{mem: make([]byte, 64)}
	idx, err := datatype.Indexed([]int{1, 2}, []int{3, 0}, datatype.Int32.Type())
	if err != nil {
		t.Fatal(err)
	}
	l := Layout{Disp: 8, Type: idx, Count: 1} // elements at 8+12, 8+0, 8+4
	if err := w.AccumulateTo(ctx, Contiguous(datatype.AsBytes([]int32{5, 6, 7}), datatype.Int32), l, op.Sum); err != nil {
		t.Fatal(err)
	}
	old := make([]int32, 3)
	if err := w.GetAccumulateTo(ctx, Contiguous(datatype.AsBytes([]int32{1, 1, 1}), datatype.Int32), Contiguous(datatype.AsBytes(old), datatype.Int32), l, op.Sum); err != nil || old[0] != 5 || old[1] != 6 || old[2] != 7 {
		t.Fatalf("GetAccumulateTo old values %v, %v; want [5 6 7]", old, err)
	}
	got := make([]int32, 4)
	if err := GetSlice(ctx, w, got, 8); err != nil || got[0] != 7 || got[1] != 8 || got[3] != 6 {
		t.Fatalf("window %v, %v; want [7 8 0 6]", got, err)
	}
}
