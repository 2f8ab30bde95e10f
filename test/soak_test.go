//go:build integration

package test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/win"
)

func init() { workers["soak"] = workSoak }

// Layout of every rank's soak window.
const (
	soakSum    = 0  // int64: FetchAndOp/Accumulate SUM (NIC)
	soakFSum   = 8  // float64: Accumulate SUM (engine)
	soakMax    = 16 // int32: Accumulate MAX (engine)
	soakBor    = 24 // uint64: Accumulate BOR (engine)
	soakOwned  = 64 // + 256*r: rank r's region: Put/Get, REPLACE and CAS cells
	soakRegion = 256
)

// soakTotals is what one rank contributed to one target, to check against.
type soakTotals struct {
	sum  int64
	fsum float64
	max  int32
	bor  uint64
}

// workSoak: every rank runs a random mix of every operation at every rank
// for RMA_SOAK_TIME, keeping a model of what it changed; then every window
// is checked against the models.
func workSoak(ctx context.Context, g *group.Group) error {
	d, err := time.ParseDuration(os.Getenv("RMA_SOAK_TIME"))
	if err != nil {
		d = 5 * time.Second
	}
	n, me := g.Size(), g.Rank()
	w, err := win.Allocate(ctx, g, soakOwned+soakRegion*n, 1)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(uint64(me), 7))
	totals := make([]soakTotals, n)
	for i := range totals {
		totals[i].max = math.MinInt32
	}
	// model[t] is this rank's region in t's window: bytes [0,192) by Put,
	// [192,200) REPLACE cell, [200,208) CAS cell.
	model := make([][]byte, n)
	for t := range model {
		model[t] = make([]byte, soakRegion)
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	counts := map[string]int{}
	wrong := 0
	mine := func(t int) int { return soakOwned + soakRegion*me }
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		t := rng.IntN(n)
		switch k := rng.IntN(9); k {
		case 0:
			v := int64(1 + rng.IntN(5))
			if _, err := win.FetchAndOp(ctx, w, v, t, soakSum, op.Sum); err != nil {
				return err
			}
			totals[t].sum += v
			counts["fetch_and_op_sum_int64"]++
		case 1:
			v := float64(1 + rng.IntN(9))
			if err := w.Accumulate(ctx, u64(math.Float64bits(v)), datatype.Float64, t, soakFSum, op.Sum); err != nil {
				return err
			}
			totals[t].fsum += v
			counts["accumulate_sum_float64"]++
		case 2:
			v := int32(rng.IntN(1 << 20))
			if err := w.Accumulate(ctx, binary.NativeEndian.AppendUint32(nil, uint32(v)), datatype.Int32, t, soakMax, op.Max); err != nil {
				return err
			}
			totals[t].max = max(totals[t].max, v)
			counts["accumulate_max_int32"]++
		case 3:
			v := uint64(1) << rng.IntN(64)
			if err := w.Accumulate(ctx, u64(v), datatype.Uint64, t, soakBor, op.Bor); err != nil {
				return err
			}
			totals[t].bor |= v
			counts["accumulate_bor_uint64"]++
		case 4:
			off, l := rng.IntN(192), 1+rng.IntN(64)
			l = min(l, 192-off)
			data := make([]byte, l)
			for i := range data {
				data[i] = byte(rng.Uint32())
			}
			if err := w.Put(ctx, data, t, mine(t)+off); err != nil {
				return err
			}
			copy(model[t][off:], data)
			counts["put"]++
		case 5:
			if err := w.Flush(ctx, t); err != nil {
				return err
			}
			got := make([]byte, 192)
			if err := w.Get(ctx, got, t, mine(t)); err != nil {
				return err
			}
			if !bytes.Equal(got, model[t][:192]) {
				wrong++
			}
			counts["get"]++
		case 6:
			v := rng.Uint64()
			var old [8]byte
			if err := w.GetAccumulate(ctx, u64(v), old[:], datatype.Uint64, t, mine(t)+192, op.Replace); err != nil {
				return err
			}
			if !bytes.Equal(old[:], model[t][192:200]) {
				wrong++
			}
			binary.NativeEndian.PutUint64(model[t][192:], v)
			counts["get_accumulate_replace_uint64"]++
		case 7:
			cur := int64(binary.NativeEndian.Uint64(model[t][200:]))
			next := int64(rng.Uint64())
			old, err := win.CompareAndSwap(ctx, w, cur, next, t, mine(t)+200)
			if err != nil {
				return err
			}
			if old != cur {
				wrong++
			}
			binary.NativeEndian.PutUint64(model[t][200:], uint64(next))
			counts["compare_and_swap_int64"]++
		case 8:
			var res [8]byte
			r, err := w.RGetAccumulate(ctx, win.Buffer{}, win.Contiguous(res[:], datatype.Uint64),
				win.Region{Rank: t, Disp: mine(t) + 192, Type: datatype.Uint64.Type(), Count: 1}, op.NoOp)
			if err != nil {
				return err
			}
			if err := r.Wait(ctx); err != nil {
				return err
			}
			if !bytes.Equal(res[:], model[t][192:200]) {
				wrong++
			}
			counts["rget_accumulate_no_op"]++
		}
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	// Check: every rank's contributions to every target, gathered.
	var mineTotals []byte
	for _, tt := range totals {
		mineTotals = binary.LittleEndian.AppendUint64(mineTotals, uint64(tt.sum))
		mineTotals = binary.LittleEndian.AppendUint64(mineTotals, math.Float64bits(tt.fsum))
		mineTotals = binary.LittleEndian.AppendUint32(mineTotals, uint32(tt.max))
		mineTotals = binary.LittleEndian.AppendUint64(mineTotals, tt.bor)
	}
	all, err := g.AllGather(ctx, mineTotals)
	if err != nil {
		return err
	}
	var want soakTotals
	want.max = 0 // the window starts at zero
	for r := 0; r < n; r++ {
		b := all[r][me*28:]
		want.sum += int64(binary.LittleEndian.Uint64(b))
		want.fsum += math.Float64frombits(binary.LittleEndian.Uint64(b[8:]))
		want.max = max(want.max, int32(binary.LittleEndian.Uint32(b[16:])))
		want.bor |= binary.LittleEndian.Uint64(b[20:])
	}
	mem := w.Bytes()
	got := soakTotals{
		sum:  int64(binary.NativeEndian.Uint64(mem[soakSum:])),
		fsum: math.Float64frombits(binary.NativeEndian.Uint64(mem[soakFSum:])),
		max:  int32(binary.NativeEndian.Uint32(mem[soakMax:])),
		bor:  binary.NativeEndian.Uint64(mem[soakBor:]),
	}
	if got != want {
		return fmt.Errorf("window totals %+v, want %+v", got, want)
	}
	// Each rank's region here must be what that rank's model says: check
	// mine at every target by reading it back.
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	for t := 0; t < n; t++ {
		back := make([]byte, 208)
		if err := w.Get(ctx, back, t, mine(t)); err != nil {
			return err
		}
		if !bytes.Equal(back, model[t][:208]) {
			wrong++
		}
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	total := 0
	for k, c := range counts {
		fmt.Printf("op %s=%d\n", k, c)
		total += c
	}
	fmt.Printf("ops=%d\nwrong=%d\n", total, wrong)
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	return w.Free(ctx)
}

func TestSoak(t *testing.T) {
	d := "8s"
	if v := os.Getenv("RMA_SOAK_TIME"); v != "" {
		d = v
	}
	outs := newLaunch(t, "soak", 4, "RMA_SOAK_TIME="+d).run(5 * time.Minute)
	ops := 0
	for r, out := range outs {
		if w := value(t, out, "wrong"); w != "0" {
			t.Errorf("rank %d: %s operations saw a value its model did not predict", r, w)
		}
		o, _ := strconv.Atoi(value(t, out, "ops"))
		ops += o
	}
	t.Logf("%d operations in %s across 4 ranks; window totals and every rank's regions matched the models", ops, d)
}
