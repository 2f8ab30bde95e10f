package core

import (
	"fmt"

	"github.com/onesided/rma"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/internal/errs"
)

// CheckData validates the origin or result side (name) of a call with
// datatypes against its target layout, tt x tcount. It reports whether the
// call moves no data (empty signatures match whatever they are built
// from).
func CheckData(name string, b rma.Buffer, tt datatype.Type, tcount int) (empty bool, err error) {
	if !tt.Valid() || !b.Type.Valid() {
		return false, fmt.Errorf("%w: %s or target datatype is invalid", errs.ErrInvalid, name)
	}
	if b.Count < 0 || tcount < 0 {
		return false, fmt.Errorf("%w: negative count (%s %d, target %d)", errs.ErrInvalid, name, b.Count, tcount)
	}
	bempty, tempty := b.Count == 0 || b.Type.Size() == 0, tcount == 0 || tt.Size() == 0
	if bempty && tempty {
		return true, nil
	}
	if bempty != tempty || b.Type.Basic() != tt.Basic() || !datatype.SameSignature(b.Count, b.Type, tcount, tt) {
		return false, fmt.Errorf("%w: %s has %d x %v, the target %d x %v: type signatures differ",
			errs.ErrInvalid, name, b.Count, b.Type, tcount, tt)
	}
	if err := b.Type.Fits(b.Count, int64(len(b.Data)), 0); err != nil {
		return false, fmt.Errorf("%w: %s buffer of %d bytes: %w", errs.ErrInvalid, name, len(b.Data), err)
	}
	// A result buffer receives: its entries must not overlap (MPI-4.1 5.1).
	if name == "result" && b.Type.OverlapsN(b.Count) {
		return false, fmt.Errorf("%w: the result datatype %d x %v overlaps itself: a receive buffer's entries may not",
			errs.ErrInvalid, b.Count, b.Type)
	}
	return false, nil
}

// Packed returns b's elements packed in type-map order: b.Data itself when
// they are already (a contiguous layout from Data[0]), else a packed copy;
// nil for no data (a NO_OP's origin). b has passed CheckData.
func Packed(b rma.Buffer) []byte {
	n := int64(b.Count) * b.Type.Size()
	if b.Data == nil || !b.Type.Valid() {
		return nil
	}
	if b.Type.IsContiguous() && b.Type.TrueLB() == 0 {
		return b.Data[:n]
	}
	if b.Count == 0 {
		return nil
	}
	out, err := datatype.AppendPack(make([]byte, 0, n), b.Data, b.Count, b.Type)
	if err != nil {
		return nil
	}
	return out
}

// Unpacked is a buffer to receive b's elements packed, and the function
// that then places them in b: b.Data itself and nothing to do when b is
// contiguous from Data[0].
func Unpacked(b rma.Buffer) (packed []byte, place func() error) {
	n := int64(b.Count) * b.Type.Size()
	if b.Type.IsContiguous() && b.Type.TrueLB() == 0 {
		return b.Data[:n], func() error { return nil }
	}
	packed = make([]byte, n)
	return packed, func() error { return datatype.Unpack(b.Data, packed, b.Count, b.Type) }
}
