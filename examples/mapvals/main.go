// Command mapvals runs the MAPVALS example of the MPI standard's one-sided
// chapter, the indirect assignment
//
//	B(i) = A(map(i))
//
// with MPI_Get inside a fence epoch. A, B and map have global length N and
// the same block distribution: rank r owns elements [r*m, (r+1)*m) with
// m = N/size, and its block of A is its window. map is a permutation of
// 0..N-1, so A(map(i)) lives at rank map(i)/m, displacement map(i)%m.
//
// It runs the assignment in the standard's two ways:
//
//   - variant 1: one Get of one float64 per element of B;
//   - variant 2: one Get per target rank, with derived datatypes built as
//     the standard's Fortran builds them: for each target, an indexed block
//     (datatype.IndexedBlock, MPI_Type_create_indexed_block) over the
//     displacements wanted from its window, and one over the places in B
//     where those values go. The types depend only on map, so they are built
//     before the epoch and could be reused while map does not change.
//
// A and map come from a seed, so every rank can compute them whole: each
// rank checks its block of B against A(map(i)) computed locally, for each
// variant, and the program fails if any element differs.
//
// Run it with the launcher (N must be a multiple of the number of ranks):
//
//	rmarun -n 4 mapvals [-n N] [-variant 1|2|both] [-seed S]
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/win"
)

func main() {
	n := flag.Int("n", 1<<14, "global length N of A, B and map (a multiple of the number of ranks)")
	variant := flag.String("variant", "both", "1 (one Get per element), 2 (one Get per target, indexed-block datatypes) or both")
	seed := flag.Uint64("seed", 1, "seed of map")
	timeout := flag.Duration("timeout", 5*time.Minute, "give up after this long")
	flag.Parse()
	var variants []int
	switch *variant {
	case "1":
		variants = []int{1}
	case "2":
		variants = []int{2}
	case "both":
		variants = []int{1, 2}
	default:
		fmt.Fprintf(os.Stderr, "mapvals: -variant %q: want 1, 2 or both\n", *variant)
		os.Exit(2)
	}
	if err := run(*n, variants, *seed, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "mapvals:", err)
		os.Exit(1)
	}
}

// valueA is A(i), distinct for every i.
func valueA(i int) float64 { return 0.5 + float64(i) }

var names = map[int]string{
	1: "variant 1 (one Get per element)",
	2: "variant 2 (one Get per target, indexed-block datatypes)",
}

func run(n int, variants []int, seed uint64, timeout time.Duration) error {
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

	// map: the same permutation on every rank, from the seed; this rank
	// uses its block mp = map[lo:lo+m].
	mp := rand.New(rand.NewPCG(seed, 0)).Perm(n)[lo : lo+m]

	// This rank's block of A, exposed in a window over Go memory
	// (MPI_Win_create(A, m*8, 8, ...)).
	a := make([]float64, m)
	for i := range a {
		a[i] = valueA(lo + i)
	}
	w, err := win.CreateSlice(ctx, g, a)
	if err != nil {
		return err
	}

	var origin, target []datatype.Type
	if slices.Contains(variants, 2) {
		if origin, target, err = indexedTypes(mp, m, size); err != nil {
			return err
		}
	}

	// One fence opens the first epoch, one between variants closes it and
	// opens the next, and the last closes the last one. Only Gets happen, so
	// no window is updated by Put or Accumulate (NoPut).
	if err := w.Fence(ctx, win.NoPrecede|win.NoPut); err != nil {
		return err
	}
	failed := 0
	for v, variant := range variants {
		b := make([]float64, m)
		start := time.Now()
		switch variant {
		case 1:
			for i, j := range mp {
				if err := w.Get(ctx, datatype.AsBytes(b[i:i+1]), j/m, j%m); err != nil {
					return fmt.Errorf("get A(%d) into B(%d): %w", j, lo+i, err)
				}
			}
		case 2:
			for r := range target {
				if !target[r].Valid() {
					continue // nothing wanted from rank r
				}
				result := win.Buffer{Data: datatype.AsBytes(b), Type: origin[r], Count: 1}
				if err := w.GetTo(ctx, result, win.Region{Rank: r, Disp: 0, Type: target[r], Count: 1}); err != nil {
					return fmt.Errorf("get from rank %d: %w", r, err)
				}
			}
		}
		next := win.NoPut
		if v == len(variants)-1 {
			next = win.NoSucceed
		}
		if err := w.Fence(ctx, next); err != nil {
			return err
		}
		elapsed := time.Since(start)

		bad, first := 0, -1
		for i, j := range mp {
			if b[i] != valueA(j) {
				if bad == 0 {
					first = i
				}
				bad++
			}
		}
		if bad > 0 {
			fmt.Printf("rank %d, %s: %d of %d elements of B wrong; first B(%d) = %v, want A(%d) = %v\n",
				rank, names[variant], bad, m, lo+first, b[first], mp[first], valueA(mp[first]))
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
			fmt.Printf("mapvals %s: B(i) = A(map(i)), N=%d on %d ranks: %s (epoch %v)\n",
				names[variant], n, size, verdict, elapsed.Round(time.Millisecond))
		}
		if total > 0 {
			failed++
		}
	}
	ferr := w.Free(ctx)
	if failed > 0 {
		return fmt.Errorf("%d of %d variants gave a wrong B", failed, len(variants))
	}
	return ferr
}

// indexedTypes builds, as the standard's MAPVALS does, one pair of
// datatypes per target rank r: target[r] picks, in r's block of A, the
// displacements this rank wants from it, and origin[r] the places in this
// rank's block of B where they go, in the same order. A rank from which
// nothing is wanted gets zero Types.
func indexedTypes(mp []int, m, size int) (origin, target []datatype.Type, err error) {
	// count[r]: how many entries come from rank r; total[r]: where rank r's
	// entries start in oindex and tindex.
	count := make([]int, size)
	for _, j := range mp {
		count[j/m]++
	}
	total := make([]int, size)
	for r := 1; r < size; r++ {
		total[r] = total[r-1] + count[r-1]
	}
	// Entry i of B comes from displacement map(i)%m of rank map(i)/m.
	oindex := make([]int, len(mp))
	tindex := make([]int, len(mp))
	clear(count)
	for i, j := range mp {
		r := j / m
		oindex[total[r]+count[r]] = i
		tindex[total[r]+count[r]] = j % m
		count[r]++
	}
	origin = make([]datatype.Type, size)
	target = make([]datatype.Type, size)
	for r := range size {
		if count[r] == 0 {
			continue
		}
		o, t := oindex[total[r]:total[r]+count[r]], tindex[total[r]:total[r]+count[r]]
		if origin[r], err = datatype.IndexedBlock(1, o, datatype.Float64.Type()); err != nil {
			return nil, nil, err
		}
		if target[r], err = datatype.IndexedBlock(1, t, datatype.Float64.Type()); err != nil {
			return nil, nil, err
		}
	}
	return origin, target, nil
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
