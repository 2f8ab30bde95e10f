package coll

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
)

// fakeNet is n ranks' memory in one process. A put becomes visible at the
// peer only at the next flush (in a random order), as an RDMA WRITE is only
// known to be in place once completed, and a word put is one atomic store.
type fakeNet struct {
	mem [][]uint64
}

type fakeMem struct {
	net     *fakeNet
	rank    int
	pending [][]func()
	rng     *rand.Rand
}

func (m *fakeMem) local() []byte {
	b := m.net.mem[m.rank]
	return unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), len(b)*8)
}

func (m *fakeMem) bytesOf(peer int) []byte {
	b := m.net.mem[peer]
	return unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), len(b)*8)
}

func (m *fakeMem) put(ctx context.Context, src []byte, peer, off int) error {
	data := slices.Clone(src)
	dst := m.bytesOf(peer)[off : off+len(data)]
	m.pending[peer] = append(m.pending[peer], func() { copy(dst, data) })
	return nil
}

func (m *fakeMem) flush(ctx context.Context, peer int) error {
	p := m.pending[peer]
	m.rng.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
	for _, f := range p {
		f()
	}
	m.pending[peer] = p[:0]
	return nil
}

func (m *fakeMem) alive(int) error { return nil }

func (m *fakeMem) putWord(ctx context.Context, v uint64, peer, off int) error {
	atomic.StoreUint64(&m.net.mem[peer][off/8], v)
	return nil
}

func (m *fakeMem) close(ctx context.Context) error { return nil }

// fakeComms makes n communicators over one fakeNet.
func fakeComms(n int, cfg config) []*Comm {
	net := &fakeNet{mem: make([][]uint64, n)}
	cs := make([]*Comm, n)
	for r := range cs {
		net.mem[r] = make([]uint64, (windowSize(n, cfg)+7)/8)
		m := &fakeMem{net: net, rank: r, pending: make([][]func(), n), rng: rand.New(rand.NewPCG(uint64(r), 1))}
		cs[r] = newComm(r, n, cfg, m)
	}
	return cs
}

// onAll runs f on every rank at once and returns the errors by rank. The
// first error cancels the context of the others.
func onAll(cs []*Comm, f func(ctx context.Context, c *Comm) error) []error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[r] = f(ctx, c); errs[r] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	return errs
}

// testOp is an op with its plain-Go definition: f(left, right).
type testOp[T datatype.Element] struct {
	name string
	o    op.Op
	f    func(a, b T) T
	gen  func(rank, i int) T
}

func mat2(a, b, c, d uint16) uint64 {
	return uint64(a) | uint64(b)<<16 | uint64(c)<<32 | uint64(d)<<48
}

// mat2Mul is the product of 2x2 matrices mod 2^16 packed in uint64s.
func mat2Mul(x, y uint64) uint64 {
	a, b, c, d := uint16(x), uint16(x>>16), uint16(x>>32), uint16(x>>48)
	e, f, g, h := uint16(y), uint16(y>>16), uint16(y>>32), uint16(y>>48)
	return mat2(a*e+b*g, a*f+b*h, c*e+d*g, c*f+d*h)
}

var (
	matOnce sync.Once
	matOp   op.Op
	addOnce sync.Once
	addOp   op.Op
)

func matmulOp(t testing.TB) op.Op {
	matOnce.Do(func() {
		var err error
		matOp, err = op.Create(func(in, inout []uint64) {
			for i := range inout {
				inout[i] = mat2Mul(in[i], inout[i])
			}
		}, false)
		if err != nil {
			t.Fatal(err)
		}
	})
	return matOp
}

func userAddOp(t testing.TB) op.Op {
	addOnce.Do(func() {
		var err error
		addOp, err = op.Create(func(in, inout []int32) {
			for i := range inout {
				inout[i] += in[i]
			}
		}, true)
		if err != nil {
			t.Fatal(err)
		}
	})
	return addOp
}

func genMat(rank, i int) uint64 {
	h := uint64(rank+1)*0x9E3779B97F4A7C15 + uint64(i)*0xBF58476D1CE4E5B9
	h ^= h >> 29
	return h
}

func ops(t testing.TB) (mats testOp[uint64], adds testOp[int32], sums testOp[int64], maxs testOp[float64], locs testOp[datatype.PairFloat64Int]) {
	mats = testOp[uint64]{"matmul", matmulOp(t), mat2Mul, genMat}
	adds = testOp[int32]{"user-add", userAddOp(t), func(a, b int32) int32 { return a + b }, func(r, i int) int32 { return int32(r*1000 + i) }}
	sums = testOp[int64]{"SUM", op.Sum, func(a, b int64) int64 { return a + b }, func(r, i int) int64 { return int64(r)<<32 - int64(i) }}
	maxs = testOp[float64]{"MAX", op.Max, func(a, b float64) float64 { return max(a, b) }, func(r, i int) float64 { return float64((r*7919 + i*104729) % 1000) }}
	locs = testOp[datatype.PairFloat64Int]{"MAXLOC", op.Maxloc, func(a, b datatype.PairFloat64Int) datatype.PairFloat64Int {
		if b.V > a.V || b.V == a.V && b.I < a.I {
			return b
		}
		return a
	}, func(r, i int) datatype.PairFloat64Int {
		return datatype.PairFloat64Int{V: float64((r*31 + i*17) % 5), I: int32(r)}
	}}
	return
}

// fold is the reference: the operands of ranks lo to hi-1, in rank order.
func fold[T datatype.Element](o testOp[T], lo, hi, i int) T {
	acc := o.gen(lo, i)
	for r := lo + 1; r < hi; r++ {
		acc = o.f(acc, o.gen(r, i))
	}
	return acc
}

// checkAll runs every collective with o on count elements on every rank
// of cs and compares with the reference.
func checkAll[T datatype.Element](t *testing.T, cs []*Comm, o testOp[T], count int) {
	t.Helper()
	n := len(cs)
	input := func(rank, k int) []T {
		s := make([]T, k)
		for i := range s {
			s[i] = o.gen(rank, i)
		}
		return s
	}
	counts := make([]int, n) // uneven: rank i gets about 2i/n of the average
	rest := count * n
	for i := range counts {
		counts[i] = min(rest, count*2*i/max(n-1, 1))
		rest -= counts[i]
	}
	counts[n-1] += rest
	root := n / 2
	errs := onAll(cs, func(ctx context.Context, c *Comm) error {
		me := c.Rank()
		send := input(me, count)
		check := func(what string, got []T, lo, hi, off int) error {
			for i, g := range got {
				if want := fold(o, lo, hi, off+i); g != want {
					return fmt.Errorf("%s %s n=%d count=%d rank %d: element %d = %v, want %v", what, o.name, n, count, me, off+i, g, want)
				}
			}
			return nil
		}
		recv := make([]T, count)
		if err := ReduceOf(ctx, c, send, recv, o.o, root); err != nil {
			return fmt.Errorf("Reduce: %w", err)
		}
		if me == root {
			if err := check("Reduce", recv, 0, n, 0); err != nil {
				return err
			}
		}
		clear(recv)
		if err := AllreduceOf(ctx, c, send, recv, o.o); err != nil {
			return fmt.Errorf("Allreduce: %w", err)
		}
		if err := check("Allreduce", recv, 0, n, 0); err != nil {
			return err
		}
		// In place.
		inplace := slices.Clone(send)
		if err := AllreduceOf(ctx, c, inplace, inplace, o.o); err != nil {
			return fmt.Errorf("Allreduce in place: %w", err)
		}
		if err := check("Allreduce in place", inplace, 0, n, 0); err != nil {
			return err
		}
		big := input(me, count*n)
		off := 0
		for i := 0; i < me; i++ {
			off += counts[i]
		}
		part := make([]T, counts[me])
		if err := ReduceScatterOf(ctx, c, big, part, counts, o.o); err != nil {
			return fmt.Errorf("ReduceScatter: %w", err)
		}
		if err := check("ReduceScatter", part, 0, n, off); err != nil {
			return err
		}
		part = make([]T, count)
		if err := ReduceScatterBlockOf(ctx, c, big, part, o.o); err != nil {
			return fmt.Errorf("ReduceScatterBlock: %w", err)
		}
		if err := check("ReduceScatterBlock", part, 0, n, me*count); err != nil {
			return err
		}
		clear(recv)
		if err := ScanOf(ctx, c, send, recv, o.o); err != nil {
			return fmt.Errorf("Scan: %w", err)
		}
		if err := check("Scan", recv, 0, me+1, 0); err != nil {
			return err
		}
		var zero T
		for i := range recv {
			recv[i] = zero
		}
		sentinel := slices.Clone(recv)
		if err := ExscanOf(ctx, c, send, recv, o.o); err != nil {
			return fmt.Errorf("Exscan: %w", err)
		}
		if me == 0 {
			if !slices.Equal(recv, sentinel) {
				return fmt.Errorf("Exscan changed rank 0's buffer")
			}
		} else if err := check("Exscan", recv, 0, me, 0); err != nil {
			return err
		}
		return nil
	})
	// The first error, not the cancellations it caused.
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func TestCollectives(t *testing.T) {
	mats, adds, sums, maxs, locs := ops(t)
	cfgs := []config{
		{threshold: LongThreshold, slotSize: 64, slots: 1},
		{threshold: 0, slotSize: 128, slots: 2}, // ring whenever commutative
		{threshold: 256, slotSize: 4096, slots: 3},
	}
	for n := 1; n <= 9; n++ {
		for ci, cfg := range cfgs {
			cs := fakeComms(n, cfg)
			for _, count := range []int{0, 1, 7, 100, 1000} {
				t.Run(fmt.Sprintf("n%d/cfg%d/count%d", n, ci, count), func(t *testing.T) {
					checkAll(t, cs, mats, count)
					checkAll(t, cs, adds, count)
					checkAll(t, cs, sums, count)
					checkAll(t, cs, maxs, count)
					checkAll(t, cs, locs, count)
				})
			}
		}
	}
}

// The matrix product is not commutative: the results in rank order differ
// from the reverse order, and the collectives give the rank order.
func TestNonCommutativeOrder(t *testing.T) {
	mats, _, _, _, _ := ops(t)
	n := 5
	differ := false
	for i := 0; i < 10; i++ {
		rev := mats.gen(n-1, i)
		for r := n - 2; r >= 0; r-- {
			rev = mat2Mul(rev, mats.gen(r, i))
		}
		if rev != fold(mats, 0, n, i) {
			differ = true
		}
	}
	if !differ {
		t.Fatal("the test matrices commute")
	}
	checkAll(t, fakeComms(n, config{threshold: 0, slotSize: 64, slots: 2}), mats, 10)
}

func TestErrors(t *testing.T) {
	ctx := context.Background()
	cs := fakeComms(2, config{threshold: LongThreshold, slotSize: 64, slots: 2})
	c := cs[0]
	b8, b16 := make([]byte, 8), make([]byte, 16)
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"REPLACE", c.Allreduce(ctx, b8, b8, datatype.Int64, op.Replace), op.ErrOpUse},
		{"NO_OP", c.Reduce(ctx, b8, b8, datatype.Int64, op.NoOp, 0), op.ErrOpUse},
		{"MAXLOC on int64", c.Scan(ctx, b8, b8, datatype.Int64, op.Maxloc), op.ErrOpDatatype},
		{"user op on another type", c.Allreduce(ctx, b8, b8, datatype.Int64, userAddOp(t)), op.ErrOpDatatype},
		{"undefined op", c.Allreduce(ctx, b8, b8, datatype.Int64, op.FirstUser+77), op.ErrInvalid},
		{"lengths", c.Allreduce(ctx, b8, b16, datatype.Int64, op.Sum), ErrInvalid},
		{"partial element", c.Scan(ctx, b8[:5], b8[:5], datatype.Int64, op.Sum), ErrInvalid},
		{"root", c.Reduce(ctx, b8, b8, datatype.Int64, op.Sum, 2), ErrInvalid},
		{"counts length", c.ReduceScatter(ctx, b16, b8, []int{1}, datatype.Int64, op.Sum), ErrInvalid},
		{"counts sum", c.ReduceScatter(ctx, b16, b8, []int{1, 2}, datatype.Int64, op.Sum), ErrInvalid},
		{"negative count", c.ReduceScatter(ctx, b16, b8, []int{3, -1}, datatype.Int64, op.Sum), ErrInvalid},
		{"recv count", c.ReduceScatter(ctx, b16, b16, []int{1, 1}, datatype.Int64, op.Sum), ErrInvalid},
		{"block sizes", c.ReduceScatterBlock(ctx, b16, b16, datatype.Int64, op.Sum), ErrInvalid},
	}
	for _, k := range cases {
		if !errors.Is(k.err, k.want) {
			t.Errorf("%s: %v, want %v", k.name, k.err, k.want)
		}
	}
	// None of those broke the communicator.
	errs := onAll(cs, func(ctx context.Context, c *Comm) error {
		v := []int64{int64(c.Rank() + 1)}
		if err := AllreduceOf(ctx, c, v, v, op.Sum); err != nil || v[0] != 3 {
			return fmt.Errorf("after bad calls: %v, %v", v, err)
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}

	// Ranks that disagree on the length get ErrMismatch, and the
	// communicator is broken afterwards.
	errs = onAll(cs, func(_ context.Context, c *Comm) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		v := make([]int64, 1+c.Rank())
		return AllreduceOf(ctx, c, v, v, op.Sum)
	})
	for r, err := range errs {
		if !errors.Is(err, ErrMismatch) {
			t.Errorf("rank %d: %v, want ErrMismatch", r, err)
		}
	}
	if err := c.Allreduce(ctx, b8, b8, datatype.Int64, op.Sum); !errors.Is(err, ErrBroken) || !errors.Is(err, ErrMismatch) {
		t.Errorf("after a mismatch: %v", err)
	}
	if err := c.Close(ctx); err != nil {
		t.Error(err)
	}
	if err := c.Close(ctx); !errors.Is(err, ErrClosed) {
		t.Error(err)
	}
	if err := c.Allreduce(ctx, b8, b8, datatype.Int64, op.Sum); !errors.Is(err, ErrClosed) {
		t.Error(err)
	}

	// A rank alone waits until its context ends.
	cs = fakeComms(2, config{threshold: LongThreshold, slotSize: 64, slots: 2})
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := cs[0].Allreduce(tctx, b8, b8, datatype.Int64, op.Sum); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("alone: %v", err)
	}
}

func TestConfig(t *testing.T) {
	c, err := makeConfig(8, nil)
	if err != nil || c.slotSize != DefaultSlotSize || c.slots != DefaultSlots || c.threshold != LongThreshold {
		t.Errorf("defaults %+v %v", c, err)
	}
	c, err = makeConfig(1024, nil)
	if err != nil || c.slotSize*1024*c.slots > DefaultMemory || c.slotSize < MinSlotSize {
		t.Errorf("large group %+v %v", c, err)
	}
	for _, opts := range [][]Option{{Slots(0)}, {SlotSize(100)}, {Slots(100)}} {
		if _, err := makeConfig(4, opts); !errors.Is(err, ErrInvalid) {
			t.Errorf("%v", err)
		}
	}
	c, _ = makeConfig(4, []Option{SlotSize(5000), Threshold(-1)})
	if c.slotSize != 4992 || c.threshold != -1 {
		t.Errorf("%+v", c)
	}
}

// Long vectors with small slots: many chunks, both algorithms.
func TestLongVectors(t *testing.T) {
	if testing.Short() {
		t.Skip()
	}
	mats, adds, sums, _, _ := ops(t)
	for _, n := range []int{2, 3, 8} {
		cs := fakeComms(n, config{threshold: LongThreshold, slotSize: 4096, slots: 2})
		checkAll(t, cs, mats, 1<<14)
		checkAll(t, cs, adds, 1<<16)
		checkAll(t, cs, sums, 1<<15)
	}
}
