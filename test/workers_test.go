//go:build integration

package test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/verbs"
	"github.com/onesided/rma/win"
)

var workers = map[string]func(ctx context.Context, g *group.Group) error{
	"group":    workGroup,
	"fadd":     workFetchAdd,
	"spinlock": workSpinLock,
	"putget":   workPutGet,
	"badinput": workBadInput,
}

// runWorker plays one rank's part and returns the process's exit code.
func runWorker(role string) int {
	verbs.TrackObjects(true)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	opts, err := group.FromEnv()
	if err != nil {
		fmt.Println("FAIL:", err)
		return 1
	}
	if role == "intruder" {
		return workIntruder(ctx, opts)
	}
	work, ok := workers[role]
	if !ok {
		fmt.Println("FAIL: unknown role", role)
		return 1
	}
	g, err := group.Join(ctx, opts)
	if err != nil {
		fmt.Println("FAIL: join:", err)
		return 1
	}
	err = work(ctx, g)
	if cerr := g.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = hygiene()
	}
	if err != nil {
		fmt.Printf("FAIL: rank %d: %v\n", opts.Rank, err)
		return 1
	}
	return 0
}

// hygiene checks, once a rank has closed its group, that it left no verbs
// object open and no goroutine running.
func hygiene() error {
	if open := verbs.OpenObjects(); len(open) > 0 {
		return fmt.Errorf("%d verbs objects left open:\n%s", len(open), strings.Join(open, "\n"))
	}
	var stacks string
	for i := 0; i < 100; i++ {
		buf := make([]byte, 1<<20)
		stacks = string(buf[:runtime.Stack(buf, true)])
		if strings.Count(stacks, "goroutine ") <= 1 {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("goroutines left running after Close:\n%s", stacks)
}

func workGroup(ctx context.Context, g *group.Group) error {
	fmt.Printf("pid=%d\ndevice=%s\n", os.Getpid(), g.Device())
	all, err := g.AllGather(ctx, []byte(fmt.Sprintf("rank %d of %d", g.Rank(), g.Size())))
	if err != nil {
		return err
	}
	for r, b := range all {
		if want := fmt.Sprintf("rank %d of %d", r, g.Size()); string(b) != want {
			return fmt.Errorf("all-gather entry %d = %q, want %q", r, b, want)
		}
	}
	// Every pair of ranks talks over RDMA: each rank writes its rank into
	// slot [its rank] of every window, then reads all slots of every window.
	w, err := win.Allocate(ctx, g, 8*g.Size(), 8)
	if err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	var buf [8]byte
	binary.NativeEndian.PutUint64(buf[:], uint64(g.Rank()+100))
	for t := 0; t < g.Size(); t++ {
		if err := w.Put(ctx, buf[:], t, g.Rank()); err != nil {
			return err
		}
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	got := make([]byte, 8*g.Size())
	for t := 0; t < g.Size(); t++ {
		if err := w.Get(ctx, got, t, 0); err != nil {
			return err
		}
		for r := 0; r < g.Size(); r++ {
			if v := binary.NativeEndian.Uint64(got[8*r:]); v != uint64(r+100) {
				return fmt.Errorf("window of rank %d slot %d = %d, want %d", t, r, v, r+100)
			}
		}
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	fmt.Printf("pairs=ok\n")
	return w.Free(ctx)
}

const faddIters = 10000

// workFetchAdd: every rank adds 1 to rank 0's counter faddIters times and
// writes the old values it saw to a file.
func workFetchAdd(ctx context.Context, g *group.Group) error {
	w, err := win.Allocate(ctx, g, 64, 8)
	if err != nil {
		return err
	}
	if r := w.RouteFetchAndOp(op.Sum, datatype.Int64); r.String() != "nic-fetch-add" {
		return fmt.Errorf("SUM int64 routed to %v", r)
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	olds := make([]byte, 0, 8*faddIters)
	start := time.Now()
	for i := 0; i < faddIters; i++ {
		old, err := win.FetchAndOp(ctx, w, int64(1), 0, 0, op.Sum)
		if err != nil {
			return fmt.Errorf("FetchAndOp %d: %w", i, err)
		}
		olds = binary.LittleEndian.AppendUint64(olds, uint64(old))
	}
	fmt.Printf("fetch_and_op_us=%.2f\n", float64(time.Since(start).Microseconds())/faddIters)
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(os.Getenv("RMA_TEST_DIR"), "olds."+strconv.Itoa(g.Rank())), olds, 0o644); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if g.Rank() == 0 {
		fmt.Printf("total=%d\n", int64(binary.NativeEndian.Uint64(w.Bytes())))
	}
	return w.Free(ctx)
}

const lockIters = 150

// workSpinLock: a CompareAndSwap spin lock at rank 0 displacement 0 guards
// a plain Get/increment/Put of the counter at displacement 1.
func workSpinLock(ctx context.Context, g *group.Group) error {
	w, err := win.Allocate(ctx, g, 16, 8)
	if err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	me := int64(g.Rank() + 1)
	var buf [8]byte
	spins := 0
	for i := 0; i < lockIters; i++ {
		for {
			old, err := win.CompareAndSwap(ctx, w, int64(0), me, 0, 0)
			if err != nil {
				return err
			}
			if old == 0 {
				break
			}
			spins++
		}
		if err := w.Get(ctx, buf[:], 0, 1); err != nil {
			return err
		}
		binary.NativeEndian.PutUint64(buf[:], binary.NativeEndian.Uint64(buf[:])+1)
		if err := w.Put(ctx, buf[:], 0, 1); err != nil {
			return err
		}
		if err := w.Flush(ctx, 0); err != nil {
			return err
		}
		old, err := win.CompareAndSwap(ctx, w, me, int64(0), 0, 0)
		if err != nil {
			return err
		}
		if old != me {
			return fmt.Errorf("lock word was %d while rank %d held the lock", old, g.Rank())
		}
	}
	fmt.Printf("contended=%d\n", spins)
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if g.Rank() == 0 {
		fmt.Printf("counter=%d\n", binary.NativeEndian.Uint64(w.Bytes()[8:]))
	}
	return w.Free(ctx)
}

const putGetSize = 1 << 20

func pattern(i int) byte { return byte(i*7 + i>>8 + 3) }

// workPutGet: rank 0 fills its window with pattern; rank 1 reads pieces of
// it, then puts 1 MiB of random bytes and pieces at odd offsets and lengths
// and reads each back.
func workPutGet(ctx context.Context, g *group.Group) error {
	w, err := win.Allocate(ctx, g, putGetSize+4096, 1)
	if err != nil {
		return err
	}
	if g.Rank() == 0 {
		for i, b := 0, w.Bytes(); i < len(b); i++ {
			b[i] = pattern(i)
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if g.Rank() == 1 {
		if err := w.LockAll(ctx); err != nil {
			return err
		}
		if err := putGet(ctx, w); err != nil {
			return err
		}
		if err := w.UnlockAll(ctx); err != nil {
			return err
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	return w.Free(ctx)
}

func putGet(ctx context.Context, w *win.Window) error {
	rng := rand.New(rand.NewPCG(1, 2))
	got := make([]byte, putGetSize+4096)
	// Get of what rank 0 wrote locally, whole and in odd pieces.
	if err := w.Get(ctx, got, 0, 0); err != nil {
		return err
	}
	for i, b := range got {
		if b != pattern(i) {
			return fmt.Errorf("get: byte %d = %#x, want %#x", i, b, pattern(i))
		}
	}
	for k := 0; k < 50; k++ {
		off := rng.IntN(putGetSize)
		n := 1 + rng.IntN(putGetSize+4096-off)
		if k%2 == 0 {
			n = 1 + rng.IntN(min(300, putGetSize+4096-off))
		}
		piece := got[:n]
		clear(piece)
		if err := w.Get(ctx, piece, 0, off); err != nil {
			return err
		}
		for i, b := range piece {
			if b != pattern(off+i) {
				return fmt.Errorf("get %d bytes at %d: byte %d = %#x, want %#x", n, off, i, b, pattern(off+i))
			}
		}
	}
	// 1 MiB of random bytes, put then got back.
	data := make([]byte, putGetSize)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	if err := w.Put(ctx, data, 0, 0); err != nil {
		return err
	}
	if err := w.Flush(ctx, 0); err != nil {
		return err
	}
	back := got[:putGetSize]
	clear(back)
	if err := w.Get(ctx, back, 0, 0); err != nil {
		return err
	}
	if !bytes.Equal(back, data) {
		return fmt.Errorf("1 MiB put/get round trip differs")
	}
	// Odd offsets and lengths.
	for k := 0; k < 50; k++ {
		off := 1 + 2*rng.IntN(putGetSize/2)
		n := 1 + rng.IntN(min(putGetSize+4096-off, 70000))
		src := data[:n]
		for i := range src {
			src[i] = byte(rng.Uint32())
		}
		if err := w.Put(ctx, src, 0, off); err != nil {
			return err
		}
		if err := w.Flush(ctx, 0); err != nil {
			return err
		}
		dst := got[:n]
		clear(dst)
		if err := w.Get(ctx, dst, 0, off); err != nil {
			return err
		}
		if !bytes.Equal(dst, src) {
			return fmt.Errorf("put/get of %d bytes at offset %d differs", n, off)
		}
	}
	// A small put from memory inside a Go object that holds pointers (cgo
	// may not be handed such memory; the library must not pass it).
	type holder struct {
		next *holder
		buf  [16]byte
	}
	h := &holder{next: &holder{}}
	copy(h.buf[:], "pointer-holding!")
	if err := w.Put(ctx, h.buf[:], 0, 3); err != nil {
		return err
	}
	if err := w.Flush(ctx, 0); err != nil {
		return err
	}
	small := make([]byte, 16)
	if err := w.Get(ctx, small, 0, 3); err != nil {
		return err
	}
	if !bytes.Equal(small, h.buf[:]) {
		return fmt.Errorf("small put from a pointer-holding object: read back %q", small)
	}
	fmt.Println("putget=ok")
	return nil
}

// workBadInput: every bad call gives the right typed error, and the window
// still works after each.
func workBadInput(ctx context.Context, g *group.Group) error {
	w, err := win.Allocate(ctx, g, 64, 1)
	if err != nil {
		return err
	}
	declared, err := win.Allocate(ctx, g, 8, 8, win.AccumulateOps(atomics.Pair{Op: op.Sum, Basic: datatype.Int64}))
	if err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	if err := declared.LockAll(ctx); err != nil {
		return err
	}
	var b8, r8 [8]byte
	var b4 [4]byte
	var n int
	check := func(name string, err error, want error) error {
		n++
		if !errors.Is(err, want) {
			return fmt.Errorf("%s: got %v, want %v", name, err, want)
		}
		fmt.Printf("bad input %q: %v\n", name, err)
		// still usable
		if _, err := win.FetchAndOp(ctx, w, int64(1), 1-g.Rank(), 8, op.Sum); err != nil {
			return fmt.Errorf("after %s: %w", name, err)
		}
		return nil
	}
	size := g.Size()
	steps := []struct {
		name string
		err  error
		want error
	}{
		{"put to rank size", w.Put(ctx, b8[:], size, 0), win.ErrRank},
		{"get from rank -1", w.Get(ctx, b8[:], -1, 0), win.ErrRank},
		{"fetch-and-op to rank 99", w.FetchAndOp(ctx, b8[:], r8[:], datatype.Int64, 99, 0, op.Sum), win.ErrRank},
		{"put beyond window", w.Put(ctx, b8[:], 0, 60), win.ErrOutOfWindow},
		{"get at negative displacement", w.Get(ctx, b8[:], 0, -1), win.ErrOutOfWindow},
		{"get huge displacement", w.Get(ctx, b8[:], 0, 1<<62), win.ErrOutOfWindow},
		{"fetch-and-op beyond window", w.FetchAndOp(ctx, b8[:], r8[:], datatype.Int64, 0, 64, op.Sum), win.ErrOutOfWindow},
		{"misaligned fetch-and-op", w.FetchAndOp(ctx, b8[:], r8[:], datatype.Int64, 0, 3, op.Sum), win.ErrAlignment},
		{"misaligned compare-and-swap", w.CompareAndSwap(ctx, b8[:], b8[:], r8[:], datatype.Uint64, 0, 12), win.ErrAlignment},
		{"accumulate NO_OP", w.Accumulate(ctx, b8[:], datatype.Int64, 0, 0, op.NoOp), op.ErrOpUse},
		{"accumulate MAXLOC int64", w.Accumulate(ctx, b8[:], datatype.Int64, 0, 0, op.Maxloc), op.ErrOpDatatype},
		{"accumulate beyond window", w.Accumulate(ctx, b8[:], datatype.Float64, 0, 57, op.Sum), win.ErrOutOfWindow},
		{"accumulate with a partial element", w.Accumulate(ctx, b8[:7], datatype.Float64, 0, 0, op.Sum), win.ErrInvalid},
		{"undeclared op", declared.Accumulate(ctx, b8[:], datatype.Int64, 0, 0, op.Max), win.ErrUndeclared},
		{"fetch-and-op MAXLOC float64", w.FetchAndOp(ctx, b8[:], r8[:], datatype.Float64, 0, 0, op.Maxloc), op.ErrOpDatatype},
		{"compare-and-swap float64", w.CompareAndSwap(ctx, b8[:], b8[:], r8[:], datatype.Float64, 0, 0), op.ErrOpDatatype},
		{"fetch-and-op short buffer", w.FetchAndOp(ctx, b4[:], r8[:], datatype.Int64, 0, 0, op.Sum), win.ErrInvalid},
	}
	for _, s := range steps {
		if err := check(s.name, s.err, s.want); err != nil {
			return err
		}
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	if err := w.Put(ctx, b8[:], 0, 0); !errors.Is(err, win.ErrEpoch) {
		return fmt.Errorf("put outside an epoch: got %v, want %v", err, win.ErrEpoch)
	}
	if err := w.UnlockAll(ctx); !errors.Is(err, win.ErrEpoch) {
		return fmt.Errorf("UnlockAll without LockAll: got %v, want %v", err, win.ErrEpoch)
	}
	n += 2
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	// Each rank added 1 to the other's displacement 8 after every bad call.
	if got := binary.NativeEndian.Uint64(w.Bytes()[8:]); got != uint64(len(steps)) {
		return fmt.Errorf("counter at displacement 8 = %d, want %d", got, len(steps))
	}
	fmt.Printf("badinputs=%d\n", n)
	if err := declared.UnlockAll(ctx); err != nil {
		return err
	}
	if err := declared.Free(ctx); err != nil {
		return err
	}
	return w.Free(ctx)
}

// workIntruder joins with the secret it was given (a wrong one) and must be
// refused with group.ErrAuth.
func workIntruder(ctx context.Context, opts group.Options) int {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	g, err := group.Join(ctx, opts)
	if err == nil {
		g.Close()
		fmt.Println("FAIL: intruder with a wrong secret joined")
		return 1
	}
	fmt.Println("intruder refused:", err)
	if !errors.Is(err, group.ErrAuth) {
		fmt.Println("FAIL: error does not match group.ErrAuth")
		return 1
	}
	return 0
}
