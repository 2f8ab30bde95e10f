package op_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/fallback"
	"github.com/onesided/rma/op"
)

// The target engine (package fallback) applies a registered user op like a
// predefined one, and refuses user ops it does not know.
func TestTargetUserOp(t *testing.T) {
	// Saturating add on int64: a lost update would show.
	satAdd, err := op.Register("test-target-sat-add", func(in, inout []int64) {
		for i, x := range in {
			s := inout[i] + x
			if x > 0 && s < inout[i] {
				s = 1<<63 - 1
			}
			inout[i] = s
		}
	}, true)
	if err != nil {
		t.Fatal(err)
	}
	local, err := op.Create(func(in, inout []int64) {}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer op.Free(local)

	const winID = 7
	mem := make([]int64, 4)
	tg := fallback.NewTarget()
	tg.AddWindow(winID, datatype.AsBytes(mem))
	reply := make([]byte, 0, 4096)
	do := func(kind fallback.Kind, o op.Op, b datatype.Basic, data []byte) (fallback.Reply, error) {
		req := fallback.Request{Kind: kind, Op: o, Window: winID, Tag: 9, Disp: 8, Type: b.Type(), Count: len(data) / b.Size(), Data: data}
		msg, err := fallback.AppendRequest(nil, &req)
		if err != nil {
			t.Fatal(err)
		}
		var r fallback.Reply
		if err := fallback.DecodeReply(tg.Handle(msg, reply), &r); err != nil {
			t.Fatal(err)
		}
		return r, r.Err()
	}
	one := datatype.AsBytes([]int64{1})

	// Concurrent Handle calls (as from several transports) lose no update.
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep := make([]byte, 0, 4096)
			req := fallback.Request{Kind: fallback.KindAccumulate, Op: satAdd, Window: winID, Disp: 8, Type: datatype.Int64.Type(), Count: 1, Data: one}
			msg, _ := fallback.AppendRequest(nil, &req)
			for i := 0; i < 1000; i++ {
				var r fallback.Reply
				if err := fallback.DecodeReply(tg.Handle(msg, rep), &r); err != nil || r.Err() != nil {
					t.Error(err, r.Err())
					return
				}
			}
		}()
	}
	wg.Wait()
	if mem[1] != 4000 {
		t.Fatalf("after 4000 accumulates of 1: %d", mem[1])
	}
	r, err := do(fallback.KindGetAccumulate, satAdd, datatype.Int64, datatype.AsBytes([]int64{1<<63 - 1, 5}))
	if err != nil || len(r.Data) != 16 {
		t.Fatal(err)
	}
	if old, _ := datatype.View[int64](r.Data); old[0] != 4000 || old[1] != 0 || mem[1] != 1<<63-1 || mem[2] != 5 {
		t.Errorf("GetAccumulate: old %v, window %v", old, mem)
	}

	// Refusals: unknown value, process-local op, wrong element type.
	for _, c := range []struct {
		name string
		o    op.Op
		b    datatype.Basic
		want error
	}{
		{"unregistered", op.FirstUser + 100, datatype.Int64, fallback.ErrUnknownOp},
		{"process-local", local, datatype.Int64, fallback.ErrUnknownOp},
		{"wrong type", satAdd, datatype.Uint64, op.ErrOpDatatype},
	} {
		before := tg.Rejected()
		_, err := do(fallback.KindAccumulate, c.o, c.b, one)
		if !errors.Is(err, c.want) || !errors.Is(err, fallback.ErrRemoteRejected) || tg.Rejected() != before+1 {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		// The origin-side check says the same before anything is sent.
		if c.o != local {
			if err := fallback.Check(fallback.KindAccumulate, c.o, c.b.Type(), 1, 8, 32); !errors.Is(err, c.want) {
				t.Errorf("%s: origin check %v", c.name, err)
			}
		}
	}
	if mem[1] != 1<<63-1 {
		t.Error("a refused request changed the window")
	}
}

// Register an op on every process, in the same order, and use it in
// collectives and accumulates.
func ExampleRegister() {
	absMax, err := op.Register("example-abs-max", func(in, inout []float64) {
		for i, x := range in {
			if abs(x) > abs(inout[i]) {
				inout[i] = x
			}
		}
	}, true)
	if err != nil {
		fmt.Println(err)
		return
	}
	target := []float64{1, -5, 2}
	origin := []float64{-3, 4, 2}
	op.Apply(absMax, datatype.Float64, datatype.AsBytes(target), datatype.AsBytes(origin))
	fmt.Println(absMax, target, absMax.Commutative())
	fmt.Println(op.Check(absMax, datatype.Float32, op.Accumulate) != nil)
	// Output:
	// example-abs-max [-3 -5 2] true
	// true
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// A non-commutative op: inout = in o inout with in the left operand.
func ExampleCreate() {
	// 2x2 matrices mod 2^16 packed in a uint64 (a, b, c, d from the low
	// bits): the matrix product is associative but not commutative.
	matmul, _ := op.Create(func(in, inout []uint64) {
		for i := range inout {
			inout[i] = mat2Mul(in[i], inout[i])
		}
	}, false)
	defer op.Free(matmul)
	x := []uint64{mat2(1, 1, 0, 1)}
	y := []uint64{mat2(1, 0, 1, 1)}
	op.ReduceLocal(matmul, datatype.Uint64, datatype.AsBytes(x), datatype.AsBytes(y)) // y = x*y
	fmt.Println(mat2Str(y[0]))
	// Output: [2 1; 1 1]
}

func mat2(a, b, c, d uint16) uint64 {
	return uint64(a) | uint64(b)<<16 | uint64(c)<<32 | uint64(d)<<48
}

func mat2Mul(x, y uint64) uint64 {
	a, b, c, d := uint16(x), uint16(x>>16), uint16(x>>32), uint16(x>>48)
	e, f, g, h := uint16(y), uint16(y>>16), uint16(y>>32), uint16(y>>48)
	return mat2(a*e+b*g, a*f+b*h, c*e+d*g, c*f+d*h)
}

func mat2Str(x uint64) string {
	return fmt.Sprintf("[%d %d; %d %d]", uint16(x), uint16(x>>16), uint16(x>>32), uint16(x>>48))
}
