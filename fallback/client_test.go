package fallback

import (
	"bytes"
	"testing"

	"github.com/onesided/rma/datatype"
)

// TestOpAbandon: an operation abandoned with a reply outstanding writes
// nothing more into its result (the reply is still counted); one whose
// every reply had come is not abandoned (Abandon false) and keeps its
// result.
func TestOpAbandon(t *testing.T) {
	i64 := datatype.Int64.Type()
	old := bytes.Repeat([]byte{7}, 8)
	cl := NewClient(2, 4)
	send := func(fop *Op, credit int, elem int64) {
		call := cl.Slot(1, credit)
		call.Op, call.Elem = fop, elem
	}
	reply := AppendReply(nil, &Reply{Tag: 1, Data: old})

	result := make([]byte, 16)
	fop := &Op{Result: result, ResultType: i64, ResultCount: 2}
	fop.Start(2)
	send(fop, 0, 0)
	send(fop, 1, 1)
	cl.OnReply(1, 0, reply)
	if !fop.Abandon() {
		t.Fatal("Abandon with a reply outstanding returned false")
	}
	cl.OnReply(1, 1, reply)
	if !fop.Done() || !bytes.Equal(result, append(bytes.Clone(old), make([]byte, 8)...)) {
		t.Fatalf("after the abandon: done %v, result %x; want done, the second element unwritten", fop.Done(), result)
	}

	result = make([]byte, 8)
	fop = &Op{Result: result, ResultType: i64, ResultCount: 1}
	fop.Start(1)
	send(fop, 2, 0)
	cl.OnReply(1, 2, reply)
	if fop.Abandon() {
		t.Fatal("Abandon of a complete operation returned true")
	}
	if fop.Result == nil || !bytes.Equal(result, old) || fop.Err() != nil {
		t.Fatalf("a complete operation after Abandon: result %x, %v; want %x kept", result, fop.Err(), old)
	}
}
