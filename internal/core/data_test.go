package core

import (
	"bytes"
	"testing"

	"github.com/onesided/rma"
	"github.com/onesided/rma/datatype"
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
