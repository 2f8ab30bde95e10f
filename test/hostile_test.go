//go:build integration

package test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/fallback"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/internal/fabric"
	"github.com/onesided/rma/internal/grouphooks"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/win"
)

func init() { workers["hostile"] = workHostile }

const hostileGood = 400

// hostileMessages builds malformed requests for window id.
func hostileMessages(id uint32) map[string][]byte {
	f64 := datatype.Float64.Type()
	enc := func(r fallback.Request) []byte {
		b, err := fallback.AppendRequest(nil, &r)
		if err != nil {
			panic(err)
		}
		return b
	}
	data := make([]byte, 8)
	good := fallback.Request{Kind: fallback.KindAccumulate, Op: op.Sum, Window: id, Disp: 8, Type: f64, Count: 1, Data: data}
	valid := enc(good)
	mut := func(f func(b []byte)) []byte {
		b := append([]byte(nil), valid...)
		f(b)
		return b
	}
	over, _ := datatype.IndexedBlock(1, []int{0, 0}, f64)
	m := map[string][]byte{
		"empty":              {},
		"truncated header":   valid[:10],
		"header only":        valid[:fallback.RequestHeaderSize],
		"truncated data":     valid[:len(valid)-1],
		"trailing bytes":     append(append([]byte(nil), valid...), 1, 2, 3),
		"bad version":        mut(func(b []byte) { b[0] = 9 }),
		"unknown kind":       mut(func(b []byte) { b[1] = 77 }),
		"unknown op":         mut(func(b []byte) { b[2] = 99 }),
		"unknown datatype":   mut(func(b []byte) { b[3] = 200 }),
		"data length lies":   mut(func(b []byte) { binary.LittleEndian.PutUint32(b[28:], 1<<30) }),
		"count lies":         mut(func(b []byte) { binary.LittleEndian.PutUint32(b[12:], 1<<31-1) }),
		"op not for type":    mut(func(b []byte) { b[2] = byte(op.Band) }),
		"unknown window":     enc(fallback.Request{Kind: good.Kind, Op: op.Sum, Window: id + 1000, Disp: 8, Type: f64, Count: 1, Data: data}),
		"beyond the window":  enc(fallback.Request{Kind: good.Kind, Op: op.Sum, Window: id, Disp: 1 << 40, Type: f64, Count: 1, Data: data}),
		"negative disp":      enc(fallback.Request{Kind: good.Kind, Op: op.Sum, Window: id, Disp: -8, Type: f64, Count: 1, Data: data}),
		"straddles the end":  enc(fallback.Request{Kind: good.Kind, Op: op.Sum, Window: id, Disp: 60, Type: f64, Count: 1, Data: data}),
		"overlapping layout": enc(fallback.Request{Kind: good.Kind, Op: op.Sum, Window: id, Disp: 8, Type: over, Count: 1, Data: make([]byte, 16)}),
		"NO_OP accumulate":   enc(fallback.Request{Kind: good.Kind, Op: op.NoOp, Window: id, Disp: 8, Type: f64, Count: 1, Data: data}),
	}
	return m
}

// workHostile: rank 2 sends rank 0 malformed active messages while rank 1
// accumulates into rank 0 correctly.
func workHostile(ctx context.Context, g *group.Group) error {
	w, err := win.Allocate(ctx, g, 64, 1)
	if err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	switch g.Rank() {
	case 1:
		one := binary.NativeEndian.AppendUint64(nil, math.Float64bits(1))
		for i := 0; i < hostileGood; i++ {
			if err := w.Accumulate(ctx, one, datatype.Float64, 0, 0, op.Sum); err != nil {
				return err
			}
		}
	case 2:
		f := fabric.OfGroup(g)
		_, client := grouphooks.Engine(g)
		msgs := hostileMessages(1) // the first window of the group has id 1
		for name, msg := range msgs {
			credit, buf, err := f.Acquire(ctx, 0)
			if err != nil {
				return err
			}
			n := copy(buf, msg)
			var fop fallback.Op
			call := client.Slot(0, credit)
			call.Op, call.Elem = &fop, 0
			fop.Start(1)
			if err := f.Send(ctx, 0, credit, n); err != nil {
				return err
			}
			if err := f.WaitMessages(ctx, 0, fop.Done); err != nil {
				return err
			}
			if rerr := fop.Err(); !errors.Is(rerr, fallback.ErrRemoteRejected) {
				return fmt.Errorf("%s: reply %v, want a rejection", name, rerr)
			} else {
				fmt.Printf("hostile %q: %v\n", name, rerr)
			}
		}
		fmt.Printf("sent=%d\n", len(msgs))
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if g.Rank() == 0 {
		target, _ := grouphooks.Engine(g)
		fmt.Printf("rejected=%d\n", target.Rejected())
		fmt.Printf("sum=%g\n", math.Float64frombits(binary.NativeEndian.Uint64(w.Bytes())))
		for i := 8; i < 64; i++ {
			if w.Bytes()[i] != 0 {
				return fmt.Errorf("byte %d of the window changed to %d", i, w.Bytes()[i])
			}
		}
	}
	return w.Free(ctx)
}

func TestHostileMessages(t *testing.T) {
	l := newLaunch(t, "hostile", 3)
	outs := l.run(5 * time.Minute)
	sent := value(t, outs[2], "sent")
	if got := value(t, outs[0], "rejected"); got != sent {
		t.Errorf("target counted %s rejects, %s malformed messages were sent", got, sent)
	}
	if got := value(t, outs[0], "sum"); got != strconv.Itoa(hostileGood) {
		t.Errorf("well-behaved rank's %d accumulates gave %s", hostileGood, got)
	}
}
