package win_test

import (
	"errors"
	"fmt"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/verbs"
	"github.com/onesided/rma/win"
)

// Waitall, Waitsome and Testall join one *RequestError per failed request:
// errors.Is sees the causes through them, errors.As finds which requests
// failed.
func ExampleRequestError() {
	err := errors.Join(
		&win.RequestError{Index: 2, Err: win.ErrPeerLost},
		&win.RequestError{Index: 5, Err: win.ErrOutOfWindow},
	)
	fmt.Println(errors.Is(err, win.ErrOutOfWindow), errors.Is(err, verbs.ErrPeerLost), errors.Is(err, win.ErrEpoch))
	var re *win.RequestError
	if errors.As(err, &re) { // the first one
		fmt.Println(re.Index, re)
	}
	// Output:
	// true true false
	// 2 request 2: verbs: peer lost
}

// A Buffer for the datatype forms (PutTo, GetTo, AccumulateTo,
// GetAccumulateTo) from plain bytes.
func ExampleContiguous() {
	b := win.Contiguous(datatype.AsBytes([]float32{1, 2, 3}), datatype.Float32)
	fmt.Println(b.Count, b.Type.Size(), len(b.Data))
	// Output: 3 4 12
}
