package win

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
)

func TestElements(t *testing.T) {
	if n, err := elements(make([]byte, 24), datatype.Float64); err != nil || n != 3 {
		t.Fatalf("24 bytes of float64: %d, %v", n, err)
	}
	if _, err := elements(make([]byte, 7), datatype.Float64); !errors.Is(err, ErrInvalid) {
		t.Fatalf("7 bytes of float64: %v, want ErrInvalid", err)
	}
	if _, err := elements(nil, 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("invalid datatype: %v", err)
	}
	if b := Contiguous(make([]byte, 16), datatype.Int32); b.Count != 4 || b.Type.Basic() != datatype.Int32 {
		t.Fatalf("Contiguous: %+v", b)
	}
}

func TestFlavorString(t *testing.T) {
	for f, want := range map[Flavor]string{FlavorAllocate: "allocate", FlavorCreate: "create", FlavorDynamic: "dynamic", Flavor(99): "Flavor(99)", Flavor(-1): "Flavor(-1)"} {
		if got := f.String(); got != want {
			t.Errorf("Flavor(%d).String() = %q, want %q", int(f), got, want)
		}
	}
}

func TestModelString(t *testing.T) {
	for m, want := range map[Model]string{ModelSeparate: "separate", ModelUnified: "unified", Model(0): "Model(0)", Model(9): "Model(9)"} {
		if got := m.String(); got != want {
			t.Errorf("Model(%d).String() = %q, want %q", int(m), got, want)
		}
	}
	if m := (&Window{}).Model(); m != ModelUnified {
		t.Errorf("Model() = %v, want unified", m)
	}
}

// The sync page's parts must not overlap, for any group size.
func TestSyncLayout(t *testing.T) {
	for _, n := range []int{1, 2, 7, 64, 1000} {
		if syncCompleted(n) < syncPosted+8*n || syncFences(n) < syncCompleted(n)+8*n ||
			syncReaders(n) < syncFences(n)+8*n || syncTable(n) < syncReaders(n)+8*n {
			t.Errorf("size %d: per-rank words overlap", n)
		}
		if syncSize(n) < syncTable(n)+regionHead || syncSize(n)%4096 != 0 {
			t.Errorf("size %d: page of %d bytes too small or not whole pages", n, syncSize(n))
		}
		if syncOwner+8 > syncPosted || syncTable(n)%8 != 0 {
			t.Errorf("size %d: misaligned words", n)
		}
	}
}

func TestAddress(t *testing.T) {
	b := make([]byte, 16)
	if Address(b[4:]) != Address(b)+4 || Address(nil) != 0 {
		t.Fatal("Address does not follow the slice")
	}
}

// A typed call through the window's view of a rank (Target) refuses a
// region outside the window, and returns T's zero value.
func TestTypedThroughTarget(t *testing.T) {
	w := &Window{flavor: FlavorAllocate, remote: []target{{addr: 4096, size: 64, dispUnit: 1}}, policy: atomics.DefaultPolicy(true)}
	w.ep.access = make([]atomic.Uint32, 1)
	w.ep.lockAll.Store(true)
	ctx := context.Background()
	if v, err := FetchAndOp(ctx, w, uint32(1), 0, 64, op.Sum); !errors.Is(err, ErrOutOfWindow) || v != 0 {
		t.Fatalf("FetchAndOp out of the window: %#x, %v; want 0, ErrOutOfWindow", v, err)
	}
	if v, err := CompareAndSwap(ctx, w, int64(1), 2, 0, 64); !errors.Is(err, ErrOutOfWindow) || v != 0 {
		t.Fatalf("CompareAndSwap out of the window: %#x, %v; want 0, ErrOutOfWindow", v, err)
	}
	if err := w.Target(0).Accumulate(ctx, make([]byte, 8), datatype.Float64, 60, op.Sum); !errors.Is(err, ErrOutOfWindow) {
		t.Fatalf("Target(0).Accumulate across the end: %v, want ErrOutOfWindow", err)
	}
}

func TestManyBlocks(t *testing.T) {
	i32 := datatype.Int32.Type()
	vec := func(count, blen, stride int) datatype.Type {
		t.Helper()
		v, err := datatype.Vector(count, blen, stride, i32)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		name     string
		r        Region
		put, get bool // through the engine
	}{
		{"3000 blocks of 12 bytes", Region{Type: vec(3000, 3, 4), Count: 1}, true, true},
		{"2 blocks of 4 bytes", Region{Type: vec(2, 1, 2), Count: 1}, true, true},
		{"1000 blocks of 1 KiB", Region{Type: vec(1000, 256, 512), Count: 1}, false, true},
		{"1000 blocks of 1020 bytes", Region{Type: vec(1000, 255, 512), Count: 1}, true, true},
		{"4 blocks of 4 KiB", Region{Type: vec(4, 1024, 2048), Count: 1}, false, false},
		{"contiguous, 1000 elements", Region{Type: i32, Count: 1000}, false, false},
		{"one block of a strided type", Region{Type: vec(1, 3, 4), Count: 1}, false, false},
		// Adjacent instances merge: 100 x vector(1, 3, 4) is 100 blocks
		// (the extent is 12 bytes, so one block).
		{"100 instances of a one-block type", Region{Type: vec(1, 3, 4), Count: 100}, false, false},
		{"100 instances of a two-block type", Region{Type: vec(2, 1, 2), Count: 100}, true, true},
	} {
		if got := manyBlocks(c.r, putEngineBlock); got != c.put {
			t.Errorf("%s: Put through the engine %v, want %v", c.name, got, c.put)
		}
		if got := manyBlocks(c.r, getEngineBlock); got != c.get {
			t.Errorf("%s: Get through the engine %v, want %v", c.name, got, c.get)
		}
	}
}
