package core

import (
	"bytes"
	"errors"
	"testing"

	"github.com/onesided/rma"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/internal/errs"
)

func TestPacked(t *testing.T) {
	src := []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	// contiguous: the data itself, no copy
	b := rma.Buffer{Data: src, Type: datatype.Uint8.Type(), Count: 4}
	if p := Packed(b); &p[0] != &src[0] || len(p) != 4 {
		t.Fatalf("contiguous buffer copied or cut wrong: %v", p)
	}
	// every third byte
	vec, err := datatype.Vector(3, 1, 3, datatype.Uint8.Type())
	if err != nil {
		t.Fatal(err)
	}
	if p := Packed(rma.Buffer{Data: src, Type: vec, Count: 1}); !bytes.Equal(p, []byte{0, 3, 6}) {
		t.Fatalf("vector packed to %v, want [0 3 6]", p)
	}
	if p := Packed(rma.Buffer{Type: datatype.Uint8.Type(), Count: 1}); p != nil {
		t.Fatalf("no data (NO_OP) packed to %v", p)
	}
}

// TestUnpacked: a contiguous result receives in place; another gets a
// packed buffer that place spreads into it.
func TestUnpacked(t *testing.T) {
	dst := make([]byte, 10)
	p, place := Unpacked(rma.Buffer{Data: dst, Type: datatype.Uint8.Type(), Count: 4})
	if &p[0] != &dst[0] || len(p) != 4 || place() != nil {
		t.Fatalf("contiguous result: %d bytes, not in place", len(p))
	}
	vec, err := datatype.Vector(3, 1, 3, datatype.Uint8.Type())
	if err != nil {
		t.Fatal(err)
	}
	p, place = Unpacked(rma.Buffer{Data: dst, Type: vec, Count: 1})
	if len(p) != 3 {
		t.Fatalf("vector of 3: a packed buffer of %d bytes", len(p))
	}
	copy(p, []byte{7, 8, 9})
	if err := place(); err != nil || !bytes.Equal(dst, []byte{7, 0, 0, 8, 0, 0, 9, 0, 0, 0}) {
		t.Fatalf("placed: %v, %v; want [7 0 0 8 0 0 9 0 0 0]", dst, err)
	}
}

func TestCheckData(t *testing.T) {
	f64, i64 := datatype.Float64.Type(), datatype.Int64.Type()
	if empty, err := CheckData("origin", rma.Buffer{Data: make([]byte, 16), Type: f64, Count: 2}, f64, 2); err != nil || empty {
		t.Fatal(empty, err)
	}
	for name, b := range map[string]rma.Buffer{
		"other basic type": {Data: make([]byte, 16), Type: i64, Count: 2},
		"other signature":  {Data: make([]byte, 24), Type: f64, Count: 3},
		"short buffer":     {Data: make([]byte, 8), Type: f64, Count: 2},
		"empty origin":     {Type: f64, Count: 0},
		"negative count":   {Type: f64, Count: -1},
	} {
		if _, err := CheckData("origin", b, f64, 2); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	// A result buffer receives: its entries may not overlap.
	overlap, err := datatype.Indexed([]int{1, 1}, []int{0, 0}, f64)
	if err != nil {
		t.Fatal(err)
	}
	zeroExtent, err := datatype.Resized(f64, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string]rma.Buffer{
		"indexed, both blocks at 0": {Data: make([]byte, 16), Type: overlap, Count: 1},
		"2 x extent 0":              {Data: make([]byte, 16), Type: zeroExtent, Count: 2},
	} {
		if _, err := CheckData("result", b, f64, 2); !errors.Is(err, errs.ErrInvalid) {
			t.Errorf("result %s: %v, want ErrInvalid", name, err)
		}
		if _, err := CheckData("origin", b, f64, 2); err != nil {
			t.Errorf("origin %s: %v; a send buffer may overlap", name, err)
		}
	}
	// Empty signatures match whatever they are built from (MPI 3.3.1).
	zero, err := datatype.Contiguous(0, datatype.Int32.Type())
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		b      rma.Buffer
		tt     datatype.Type
		tcount int
	}{
		"zero counts, other types": {rma.Buffer{Type: i64, Count: 0}, f64, 0},
		"1 x contiguous(0), nil":   {rma.Buffer{Type: zero, Count: 1}, f64, 0},
		"zero count vs empty type": {rma.Buffer{Type: f64, Count: 0}, zero, 5},
	} {
		if empty, err := CheckData("origin", c.b, c.tt, c.tcount); err != nil || !empty {
			t.Errorf("%s: empty %v, err %v; want an empty call", name, empty, err)
		}
	}
}
