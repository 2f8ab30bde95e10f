//go:build integration

package test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/win"
)

// Two hosts: the test VM's two-host mode (rxevm -hosts 2) runs this test binary on two guests
// joined by a virtual Ethernet wire, host0 at 10.77.0.1 and host1 at 10.77.0.2, each with its
// own rxe0, and sets RMA_HOST (0 or 1) and RMA_HOSTS (2). Each host's test starts one rank:
// rank r on host r, rank 0 listening on host0's address. Run it with
//
//	go build -o .cache/rxevm ./test/rxevm && go test -c -tags integration -o .cache/it.test ./test &&
//	.cache/rxevm -hosts 2 -timeout 10m -- .cache/it.test -test.v -test.count=1 -test.run '^TestTwoHost'
const (
	twoHostAddr  = "10.77.0.1:17077" // rank 0, on host0
	twoHostIters = 100               // FetchAndOp calls per rank per counter
	twoHostData  = 64                // displacement of the Put/Get region
	twoHostLen   = 5003              // bytes each rank puts: several 1024-byte RoCE packets, odd
	twoHostBig   = 1 << 20           // the largest Put and Get
)

// twoHostSecret is the group secret when the runner gives no RMA_SECRET: the two guests' wire
// reaches no other machine.
const twoHostSecret = "rma-two-host-wire"

func init() { workers["twohost"] = workTwoHost }

// TestTwoHost runs one rank on each of two hosts: a FetchAndOp(SUM) counter at each rank,
// which both ranks increment (NIC atomics across the wire and on the local rxe0), and a
// Put/Get exchange of odd-sized blocks across the wire, all with exact expected values.
// It is skipped unless rxevm -hosts 2 runs it.
func TestTwoHost(t *testing.T) {
	rank := twoHostRank(t)
	secret := os.Getenv("RMA_SECRET")
	if secret == "" {
		secret = twoHostSecret
	}
	l := &launch{t: t, role: "twohost", size: 2, addr: twoHostAddr, secret: secret, dir: t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out := l.wait([]*proc{l.start(ctx, rank, secret)})[0]
	total := strconv.Itoa(2 * twoHostIters) // both ranks add 1, twoHostIters times each
	for _, kv := range [][2]string{
		{"route", "nic-fetch-add"}, {"counter0", total}, {"counter1", total}, {"olds", "ok"}, {"putget", "ok"},
	} {
		if got := value(t, out, kv[0]); got != kv[1] {
			t.Errorf("rank %d on host%d: %s=%s, want %s", rank, rank, kv[0], got, kv[1])
		}
	}
}

// twoHostRank is the host this test runs on under rxevm -hosts 2 (0 or 1), which is also
// its rank in the two-rank tests; it skips the test on one host, and fails it without a
// device.
func twoHostRank(t *testing.T) int {
	t.Helper()
	host := os.Getenv("RMA_HOST")
	if host == "" || os.Getenv("RMA_HOSTS") != "2" {
		t.Skip("needs two hosts: run it under rxevm -hosts 2, which sets RMA_HOST and RMA_HOSTS")
	}
	h, err := strconv.Atoi(host)
	if err != nil || h < 0 || h > 1 {
		t.Fatalf("RMA_HOST=%q: want 0 or 1", host)
	}
	requireDevice(t)
	return h
}

// twoHostByte is byte i of the block that rank puts.
func twoHostByte(rank, i int) byte { return byte(i*13 + i>>9 + 41*rank + 5) }

// workTwoHost: each rank alternately adds 1 to the int64 counter at displacement 0 of rank 0's
// and rank 1's window, twoHostIters times each, and keeps the old values; then each rank puts
// its block into the other's window, flushes, and after a barrier reads both blocks back.
func workTwoHost(ctx context.Context, g *group.Group) error {
	if g.Size() != 2 {
		return fmt.Errorf("size %d, want 2", g.Size())
	}
	me, peer := g.Rank(), 1-g.Rank()
	w, err := win.Allocate(ctx, g, twoHostData+twoHostBig, 1)
	if err != nil {
		return err
	}
	route := w.RouteFetchAndOp(op.Sum, datatype.Int64)
	fmt.Printf("route=%v\n", route)
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}

	// The counters. olds[t] holds the old values this rank saw at rank t, in call order.
	var olds [2][]int64
	start := time.Now()
	for i := 0; i < twoHostIters; i++ {
		for _, t := range []int{peer, me} {
			old, err := win.FetchAndOp(ctx, w, int64(1), t, 0, op.Sum)
			if err != nil {
				return fmt.Errorf("FetchAndOp %d at rank %d: %w", i, t, err)
			}
			olds[t] = append(olds[t], old)
		}
	}
	fmt.Printf("fetch_and_op_us=%.1f\n", float64(time.Since(start).Microseconds())/(2*twoHostIters))
	if err := w.FlushAll(ctx); err != nil {
		return err
	}
	var mine []byte
	for t := range olds {
		for _, v := range olds[t] {
			mine = binary.LittleEndian.AppendUint64(mine, uint64(v))
		}
	}
	all, err := g.AllGather(ctx, mine)
	if err != nil {
		return err
	}
	// Every FetchAndOp is atomic: at each counter, the 2*twoHostIters old values of both
	// ranks are 0 .. 2*twoHostIters-1, each once, and each rank's rise in call order.
	for t := 0; t < 2; t++ {
		seen := make([]int, 2*twoHostIters)
		for r, b := range all {
			if len(b) != 2*8*twoHostIters {
				return fmt.Errorf("rank %d sent %d bytes of old values, want %d", r, len(b), 2*8*twoHostIters)
			}
			prev := int64(-1)
			for i := 0; i < twoHostIters; i++ {
				v := int64(binary.LittleEndian.Uint64(b[8*(t*twoHostIters+i):]))
				if v <= prev || v >= int64(len(seen)) {
					return fmt.Errorf("rank %d's call %d at rank %d saw old value %d after %d", r, i, t, v, prev)
				}
				seen[v]++
				prev = v
			}
		}
		for v, n := range seen {
			if n != 1 {
				return fmt.Errorf("counter at rank %d: old value %d seen %d times, want once", t, v, n)
			}
		}
	}
	fmt.Println("olds=ok")
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	for t := 0; t < 2; t++ {
		total, err := win.FetchAndOp(ctx, w, int64(0), t, 0, op.NoOp)
		if err != nil {
			return err
		}
		fmt.Printf("counter%d=%d\n", t, total)
	}

	// Put/Get across the wire.
	block := func(rank int) []byte {
		b := make([]byte, twoHostLen)
		for i := range b {
			b[i] = twoHostByte(rank, i)
		}
		return b
	}
	if err := w.Put(ctx, block(me), peer, twoHostData); err != nil {
		return err
	}
	if err := w.Flush(ctx, peer); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if err := w.Sync(); err != nil {
		return err
	}
	if got, want := w.Bytes()[twoHostData:twoHostData+twoHostLen], block(peer); !bytes.Equal(got, want) {
		return fmt.Errorf("own window after rank %d's Put: %s", peer, firstDiff(got, want))
	}
	got := make([]byte, twoHostLen)
	for _, c := range []struct{ target, owner int }{{peer, me}, {me, peer}} {
		if err := w.Get(ctx, got, c.target, twoHostData); err != nil {
			return err
		}
		if want := block(c.owner); !bytes.Equal(got, want) {
			return fmt.Errorf("Get of rank %d's window (rank %d's block): %s", c.target, c.owner, firstDiff(got, want))
		}
	}
	// A piece at an odd offset that spans a packet boundary.
	piece := got[:1500]
	if err := w.Get(ctx, piece, peer, twoHostData+777); err != nil {
		return err
	}
	if want := block(me)[777 : 777+1500]; !bytes.Equal(piece, want) {
		return fmt.Errorf("Get of 1500 bytes at offset 777 of rank %d's window: %s", peer, firstDiff(piece, want))
	}
	// 8 KiB and 1 MiB each way: more than one packet at either host's MTU.
	// The barrier: the peer may still be reading the region.
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	for _, n := range []int{8 << 10, twoHostBig} {
		src := make([]byte, n)
		for i := range src {
			src[i] = twoHostByte(me, i+n)
		}
		if err := w.Put(ctx, src, peer, twoHostData); err != nil {
			return fmt.Errorf("Put of %d bytes: %w", n, err)
		}
		if err := w.Flush(ctx, peer); err != nil {
			return fmt.Errorf("Flush after a Put of %d bytes: %w", n, err)
		}
		if err := g.Barrier(ctx); err != nil {
			return err
		}
		if err := w.Sync(); err != nil {
			return err
		}
		for i, b := range w.Bytes()[twoHostData : twoHostData+n] {
			if want := twoHostByte(peer, i+n); b != want {
				return fmt.Errorf("own window after rank %d's Put of %d bytes: byte %d = %#x, want %#x", peer, n, i, b, want)
			}
		}
		dst := make([]byte, n)
		if err := w.Get(ctx, dst, peer, twoHostData); err != nil {
			return fmt.Errorf("Get of %d bytes: %w", n, err)
		}
		if !bytes.Equal(dst, src) {
			return fmt.Errorf("Get of %d bytes of rank %d's window: %s", n, peer, firstDiff(dst, src))
		}
		if err := g.Barrier(ctx); err != nil {
			return err
		}
	}
	fmt.Println("putget=ok")
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	return w.Free(ctx)
}

// firstDiff describes where got and want first differ.
func firstDiff(got, want []byte) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("byte %d = %#x, want %#x", i, got[i], want[i])
		}
	}
	return fmt.Sprintf("length %d, want %d", len(got), len(want))
}
