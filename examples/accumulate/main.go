// Command accumulate runs the accumulate example of the MPI standard's
// one-sided chapter (MPI_Accumulate with MPI_SUM inside a fence epoch):
//
//	B(j) = sum of A(i) over all i with map(i) = j
//
// A, B and map have global length N and the same block distribution: rank
// r owns elements [r*m, (r+1)*m) with m = N/size, and its block of B is its
// window. Between two fences every rank calls Accumulate(SUM) once for each
// of its elements A(i), into B(map(i)) at rank map(i)/m, displacement
// map(i)%m, as the standard's Fortran does; the closing fence completes all
// of them. map sends several i to the same j, so the sums are real sums of
// concurrent updates, which the window applies atomically per element.
//
// A and map come from a seed, so every rank can compute them whole: each
// rank checks its block of B against a sequential computation, and the
// program fails if any element of any block differs. The values are small
// integers, whose float64 sums are exact in any order.
//
// Run it with the launcher (N must be a multiple of the number of ranks):
//
//	rmarun -n 4 accumulate [-n N] [-seed S]
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/win"
)

func main() {
	n := flag.Int("n", 1<<14, "global length N of A, B and map (a multiple of the number of ranks)")
	seed := flag.Uint64("seed", 1, "seed of A and map")
	timeout := flag.Duration("timeout", 5*time.Minute, "give up after this long")
	flag.Parse()
	if err := run(*n, *seed, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "accumulate:", err)
		os.Exit(1)
	}
}

// valueA is A(i): a small integer, so that sums of them are exact.
func valueA(seed uint64, i int) float64 { return float64(mix(seed^0xa0a0a0a0, i)%100 + 1) }

// mapTo is map(i), in [0, n): a hash of i, so several i share a j and some j
// get nothing.
func mapTo(seed uint64, i, n int) int { return int(mix(seed, i) % uint64(n)) }

// mix is the splitmix64 finaliser of seed+i: a cheap, deterministic hash.
func mix(seed uint64, i int) uint64 {
	z := seed + uint64(i)*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

func run(n int, seed uint64, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	g, err := group.JoinEnv(ctx) // RMA_RANK, RMA_SIZE, RMA_ADDR, RMA_SECRET (rmarun sets them)
	if err != nil {
		return err
	}
	defer g.Close()
	rank, size := g.Rank(), g.Size()
	if n <= 0 || n%size != 0 {
		return fmt.Errorf("-n %d is not a positive multiple of the %d ranks", n, size)
	}
	m := n / size
	lo := rank * m

	// This rank's blocks of A and map, and of B in a window over Go memory
	// (MPI_Win_create(B, m*8, 8, ...)).
	a := make([]float64, m)
	to := make([]int, m)
	for i := range a {
		a[i] = valueA(seed, lo+i)
		to[i] = mapTo(seed, lo+i, n)
	}
	b := make([]float64, m)
	w, err := win.CreateSlice(ctx, g, b)
	if err != nil {
		return err
	}

	// The epoch: one Accumulate per element of A, between two fences. No RMA
	// call precedes the first fence and none follows the last one.
	start := time.Now()
	if err := w.Fence(ctx, win.NoPrecede); err != nil {
		return err
	}
	for i := range a {
		j := to[i]
		if err := w.Accumulate(ctx, datatype.AsBytes(a[i:i+1]), datatype.Float64, j/m, j%m, op.Sum); err != nil {
			return fmt.Errorf("accumulate A(%d) into B(%d): %w", lo+i, j, err)
		}
	}
	if err := w.Fence(ctx, win.NoSucceed); err != nil {
		return err
	}
	elapsed := time.Since(start)

	// The reference: B(j) for this rank's j, computed sequentially from the
	// whole of A and map.
	want := make([]float64, m)
	for i := 0; i < n; i++ {
		if j := mapTo(seed, i, n); j/m == rank {
			want[j-lo] += valueA(seed, i)
		}
	}
	bad, first := 0, -1
	for k := range b {
		if b[k] != want[k] {
			if bad == 0 {
				first = k
			}
			bad++
		}
	}
	if bad > 0 {
		fmt.Printf("rank %d: %d of %d elements of B wrong; first B(%d) = %v, want %v\n",
			rank, bad, m, lo+first, b[first], want[first])
	}
	total, err := sumOver(ctx, g, bad)
	if err != nil {
		return err
	}
	if rank == 0 {
		verdict := "correct"
		if total > 0 {
			verdict = fmt.Sprintf("WRONG (%d elements differ)", total)
		}
		fmt.Printf("accumulate: B(j) = sum of A(i) over map(i)=j, N=%d on %d ranks, %d Accumulate(SUM, float64) calls per rank: %s (epoch %v)\n",
			n, size, m, verdict, elapsed.Round(time.Millisecond))
	}
	ferr := w.Free(ctx)
	if total > 0 {
		return fmt.Errorf("%d elements of B differ from the sequential reference", total)
	}
	return ferr
}

// sumOver adds v over every rank of g.
func sumOver(ctx context.Context, g *group.Group, v int) (int, error) {
	all, err := g.AllGather(ctx, binary.LittleEndian.AppendUint64(nil, uint64(v)))
	if err != nil {
		return 0, err
	}
	total := 0
	for _, b := range all {
		total += int(binary.LittleEndian.Uint64(b))
	}
	return total, nil
}
