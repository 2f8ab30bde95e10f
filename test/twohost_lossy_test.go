//go:build integration

package test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onesided/rma"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/service"
	"github.com/onesided/rma/verbs"
	"github.com/onesided/rma/win"
)

// The lossy wire: TestTwoHostLossy runs under rxevm's relay (-wire), which it sets, phase
// by phase, to each of lossyWires; every workload must end with exact counts and no error.
// make twohost runs it with
//
//	.cache/bin/rxevm -hosts 2 -wire none -- .cache/bin/integration.test -test.v -test.run '^TestTwoHostLossy$'

// lossyWires are the phases' wire faults: loss with duplication and reordering, and a path
// whose delay varies by 20 ms either way (in order). RMA_LOSSY_WIRES, a list separated by
// semicolons, replaces them (make lossy-heavy: 5% loss).
var lossyWires = []string{"loss=2%,dup=1%,reorder=2%,seed=1", "jitter=20ms,seed=2"}

// rxevmWire starts the line that sets the relay's faults (rxevm's WireMarker).
const rxevmWire = "rxevm: wire "

const (
	lossyIters  = 50
	lossySecret = "rma-two-host-lossy"
)

// Displacements in the lossy window.
const (
	lossyCounter = 0   // int64: FetchAndOp SUM from both ranks
	lossyLocked  = 8   // int64: read-modify-write under the exclusive lock
	lossyEngine  = 16  // float64: Accumulate and GetAccumulate SUM, through the engine
	lossyData    = 128 // each rank's blocks for the other's Put and Get
)

var lossySizes = []int{8, 4096, 65536, 1 << 20}

func init() { workers["lossy"] = workLossy }

// TestTwoHostLossy: one rank per host, and a service server on host0 with a client on host1,
// run a NIC counter, engine accumulates, Put/Get of 8 B to 1 MiB checked by SHA-256, a
// counter updated under the exclusive lock, and service calls; the counts must be exact and
// no call may fail. Host0 sets the wire's faults before each phase. It needs rxevm -hosts 2
// with -wire (which sets RMA_WIRE).
func TestTwoHostLossy(t *testing.T) {
	rank := twoHostRank(t)
	if os.Getenv("RMA_WIRE") == "" {
		t.Fatal("no relay on the wire: run it under rxevm -hosts 2 -wire none")
	}
	if rank == 0 {
		t.Cleanup(func() { fmt.Println(rxevmWire + "none") })
	}
	wires := lossyWires
	if v := os.Getenv("RMA_LOSSY_WIRES"); v != "" {
		wires = strings.Split(v, ";")
	}
	for i, spec := range wires {
		t.Run(fmt.Sprintf("wire=%s", spec), func(t *testing.T) {
			if rank == 0 {
				fmt.Println(rxevmWire + spec)
			}
			l := &launch{t: t, role: "lossy", size: 2, addr: fmt.Sprintf("10.77.0.1:%d", 17180+i), secret: lossySecret, dir: t.TempDir()}
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			out := l.wait([]*proc{l.start(ctx, rank, lossySecret, fmt.Sprintf("RMA_LOSSY_SVC=10.77.0.1:%d", 17190+i))})[0]
			want := map[string]string{"counter": "200", "olds": "ok", "locked": "100", "engine": "200", "putget": "ok", "service": "ok"}
			for _, k := range []string{"counter", "olds", "locked", "engine", "putget", "service"} {
				if got := value(t, out, k); got != want[k] {
					t.Errorf("rank %d: %s=%s, want %s", rank, k, got, want[k])
				}
			}
		})
	}
}

func workLossy(ctx context.Context, g *group.Group) error {
	me, peer := g.Rank(), 1-g.Rank()
	start := time.Now()
	step := func(what string) {
		fmt.Printf("rank %d: %s done at %v (rxe0: %s)\n", me, what, time.Since(start).Round(time.Millisecond), rxeCounters())
	}
	w, err := win.Allocate(ctx, g, lossyData+2*(1<<20), 1)
	if err != nil {
		return err
	}
	// The service server, on rank 0's host, before the barrier.
	var srv *service.Server
	var svcMem []byte
	if me == 0 {
		if svcMem, err = verbs.Alloc(4096); err != nil {
			return err
		}
		defer verbs.Free(svcMem)
		if srv, err = service.Listen(ctx, os.Getenv("RMA_LOSSY_SVC"), service.ServerConfig{Secret: []byte(lossySecret)}); err != nil {
			return err
		}
		defer srv.Close()
		if err := srv.Expose("c", svcMem); err != nil {
			return err
		}
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}

	// The NIC counter at rank 0: the old values are 0..199, each once.
	var olds []byte
	for i := 0; i < 2*lossyIters; i++ {
		old, err := win.FetchAndOp(ctx, w, int64(1), 0, lossyCounter, op.Sum)
		if err != nil {
			return fmt.Errorf("FetchAndOp %d: %w", i, err)
		}
		olds = binary.LittleEndian.AppendUint64(olds, uint64(old))
	}
	step("counter")
	// The engine: Accumulate and GetAccumulate of 1.0 on a float64 at rank 0.
	for i := 0; i < lossyIters; i++ {
		if err := win.AccumulateSlice(ctx, w, []float64{1}, 0, lossyEngine, op.Sum); err != nil {
			return fmt.Errorf("Accumulate %d: %w", i, err)
		}
		res := make([]float64, 1)
		if err := win.GetAccumulateSlice(ctx, w, []float64{1}, res, 0, lossyEngine, op.Sum); err != nil {
			return fmt.Errorf("GetAccumulate %d: %w", i, err)
		}
	}
	if err := w.FlushAll(ctx); err != nil {
		return err
	}
	step("engine")
	// Put and Get, each size into the peer's window, read back and compared by SHA-256.
	for _, n := range lossySizes {
		block := make([]byte, n)
		for i := range block {
			block[i] = byte(i*7 + n + 31*me)
		}
		disp := lossyData + me*(1<<20)
		t0 := time.Now()
		if err := w.Put(ctx, block, peer, disp); err != nil {
			return fmt.Errorf("Put of %d bytes: %w", n, err)
		}
		if err := w.Flush(ctx, peer); err != nil {
			return fmt.Errorf("Flush after a Put of %d bytes: %w", n, err)
		}
		fmt.Printf("rank %d: Put+Flush of %d bytes: %v\n", me, n, time.Since(t0).Round(time.Millisecond))
		back := make([]byte, n)
		if err := w.Get(ctx, back, peer, disp); err != nil {
			return fmt.Errorf("Get of %d bytes: %w", n, err)
		}
		if err := w.Flush(ctx, peer); err != nil {
			return fmt.Errorf("Flush after a Get of %d bytes: %w", n, err)
		}
		if sha256.Sum256(back) != sha256.Sum256(block) {
			return fmt.Errorf("Put then Get of %d bytes: the data differs at byte %d", n, slices.Index(bytesEqualMask(back, block), false))
		}
	}
	step("putget")
	fmt.Println("putget=ok")
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	// A counter under rank 0's exclusive lock: Get, Put of one more, Unlock.
	var buf [8]byte
	for i := 0; i < lossyIters; i++ {
		if err := w.Lock(ctx, win.LockExclusive, 0, 0); err != nil {
			return fmt.Errorf("Lock %d: %w", i, err)
		}
		if err := w.Get(ctx, buf[:], 0, lossyLocked); err != nil {
			return fmt.Errorf("Get under lock %d: %w", i, err)
		}
		if err := w.Flush(ctx, 0); err != nil {
			return err
		}
		binary.NativeEndian.PutUint64(buf[:], binary.NativeEndian.Uint64(buf[:])+1)
		if err := w.Put(ctx, buf[:], 0, lossyLocked); err != nil {
			return fmt.Errorf("Put under lock %d: %w", i, err)
		}
		if err := w.Unlock(ctx, 0); err != nil {
			return fmt.Errorf("Unlock %d: %w", i, err)
		}
	}
	step("locked")
	// The service: rank 1 is its client across the wire.
	if me == 1 {
		if err := lossyClient(ctx, os.Getenv("RMA_LOSSY_SVC")); err != nil {
			return fmt.Errorf("service: %w", err)
		}
		step("service")
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	all, err := g.AllGather(ctx, olds)
	if err != nil {
		return err
	}
	var seen []uint64
	for _, b := range all {
		for i := 0; i+8 <= len(b); i += 8 {
			seen = append(seen, binary.LittleEndian.Uint64(b[i:]))
		}
	}
	slices.Sort(seen)
	oldsOK := len(seen) == 4*lossyIters
	for i, v := range seen {
		oldsOK = oldsOK && v == uint64(i)
	}
	if !oldsOK {
		fmt.Printf("olds: %v\n", seen)
	} else {
		fmt.Println("olds=ok")
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	var words [24]byte
	if err := w.Get(ctx, words[:], 0, 0); err != nil {
		return err
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	fmt.Printf("counter=%d\nlocked=%d\nengine=%g\n", binary.NativeEndian.Uint64(words[0:]),
		binary.NativeEndian.Uint64(words[8:]), math.Float64frombits(binary.NativeEndian.Uint64(words[16:])))
	if me == 0 {
		v := binary.NativeEndian.Uint64(svcMem)
		st := srv.Stats()
		fmt.Printf("service counter %d, engine ops %d\n", v, st.Windows["c"].EngineOps)
		if v == lossyIters && st.Windows["c"].EngineOps == lossyIters {
			fmt.Println("service=ok")
		}
	} else {
		fmt.Println("service=ok") // checked by rank 0; lossyClient returned nil
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	return w.Free(ctx)
}

// lossyClient dials the service server on host0 and makes lossyIters FetchAndOps and as many
// engine Accumulates (float64, at 64) through the lossy wire.
func lossyClient(ctx context.Context, addr string) error {
	cl, err := service.Dial(ctx, addr, service.ClientConfig{Secret: []byte(lossySecret)})
	if err != nil {
		return err
	}
	defer cl.Close()
	c, err := cl.Open(ctx, "c")
	if err != nil {
		return err
	}
	for i := 0; i < lossyIters; i++ {
		if old, err := rma.FetchAndOp(ctx, c, int64(1), 0, op.Sum); err != nil || old != int64(i) {
			return fmt.Errorf("FetchAndOp %d: %d, %v", i, old, err)
		}
		if err := c.Accumulate(ctx, datatype.AsBytes([]float64{1}), datatype.Float64, 64, op.Sum); err != nil {
			return fmt.Errorf("Accumulate %d: %w", i, err)
		}
	}
	return nil
}

// rxeCounters lists rxe0's nonzero transport counters (retransmissions, sequence errors,
// duplicates and the like), to tell what the wire cost.
func rxeCounters() string {
	dir := "/sys/class/infiniband/rxe0/ports/1/hw_counters"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if v := strings.TrimSpace(string(b)); err == nil && v != "0" && !strings.HasSuffix(e.Name(), "_pkts") {
			out = append(out, e.Name()+"="+v)
		}
	}
	return strings.Join(out, " ")
}

// bytesEqualMask reports, per byte, whether a and b agree.
func bytesEqualMask(a, b []byte) []bool {
	m := make([]bool, len(a))
	for i := range a {
		m[i] = i < len(b) && a[i] == b[i]
	}
	return m
}
