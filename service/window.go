package service

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/verbs"
	"github.com/onesided/rma/win"
)

// Window is a window a server exposes, as a client opened it. Its calls
// are safe from many goroutines (the client carries them out one at a
// time) and return when the operation is complete at the server. With a
// context whose Done is nil they do not allocate.
//
// Displacements are in bytes from the window's start. A region outside
// the window is refused with win.ErrOutOfWindow, a misaligned atomic with
// win.ErrAlignment, both before anything is sent. A dead, restarted or
// closed server makes the call, and every later call of the client, fail
// with an error matching verbs.ErrPeerLost; Dial again.
type Window struct {
	c    *Client
	addr uint64
	rkey uint32
	size int
}

// Size is the window's size in bytes.
func (w *Window) Size() int { return w.size }

func (w *Window) check(disp, n int) error {
	if disp < 0 || n < 0 || disp > w.size-n {
		return fmt.Errorf("%w: %d bytes at %d in a window of %d", win.ErrOutOfWindow, n, disp, w.size)
	}
	return nil
}

func (w *Window) checkAtomic(disp int) error {
	if err := w.check(disp, 8); err != nil {
		return err
	}
	if a := w.addr + uint64(disp); a%8 != 0 {
		return fmt.Errorf("%w: displacement %d is %d bytes past an 8-byte boundary", win.ErrAlignment, disp, a%8)
	}
	return nil
}

// Put writes src into the window at disp (RDMA WRITE, through the
// client's staging buffer).
func (w *Window) Put(ctx context.Context, src []byte, disp int) error {
	if err := w.check(disp, len(src)); err != nil {
		return err
	}
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.begin(ctx); err != nil {
		return err
	}
	return c.write(ctx, src, w.addr+uint64(disp), w.rkey)
}

// Get reads len(dst) bytes of the window at disp into dst (RDMA READ).
func (w *Window) Get(ctx context.Context, dst []byte, disp int) error {
	if err := w.check(disp, len(dst)); err != nil {
		return err
	}
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.begin(ctx); err != nil {
		return err
	}
	return c.read(ctx, dst, w.addr+uint64(disp), w.rkey)
}

// FetchAndOp applies o with operand v to the int64 at disp (8-byte
// aligned) and returns its old value (MPI_Fetch_and_op on MPI_INT64_T).
// The route is atomics' default policy, as for a group window: SUM is a
// NIC fetch-and-add, NO_OP an 8-byte READ, REPLACE, MIN, MAX, PROD and
// the logical and bitwise ops compare-and-swap loops, so all of them,
// CompareAndSwap included, are atomic with each other. Ops MPI does not
// allow on integers in FetchAndOp are refused (op's errors); user-defined
// ops, and every op on a device without atomics, return
// verbs.ErrNotSupported in this version (they need the server's engine).
func (w *Window) FetchAndOp(ctx context.Context, v int64, disp int, o op.Op) (int64, error) {
	if err := op.Check(o, datatype.Int64, op.FetchAndOp); err != nil {
		return 0, err
	}
	if err := w.checkAtomic(disp); err != nil {
		return 0, err
	}
	c := w.c
	route := c.policy.FetchAndOp(o, datatype.Int64)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.begin(ctx); err != nil {
		return 0, err
	}
	addr := w.addr + uint64(disp)
	var old uint64
	var err error
	switch route {
	case atomics.NICFetchAdd:
		old, err = c.fetchAdd(ctx, addr, w.rkey, uint64(v))
	case atomics.NICRead:
		old, err = c.read8(ctx, addr, w.rkey)
	case atomics.NICCompareSwapLoop:
		old, err = c.casLoop(ctx, addr, w.rkey, o, uint64(v))
	default:
		return 0, fmt.Errorf("%w: %v on int64 needs the server's engine (route %v)", verbs.ErrNotSupported, o, route)
	}
	return int64(old), err
}

// casLoop applies o with operand v to the word at addr by reading it and
// swapping in the result until no other update came in between (atomics'
// NICCompareSwapLoop, with op's kernel); c.mu is held.
func (c *Client) casLoop(ctx context.Context, addr uint64, rkey uint32, o op.Op, v uint64) (uint64, error) {
	cur, err := c.read8(ctx, addr, rkey)
	if err != nil {
		return 0, err
	}
	for {
		binary.NativeEndian.PutUint64(c.a[:], cur)
		binary.NativeEndian.PutUint64(c.b[:], v)
		if err := op.Apply(o, datatype.Int64, c.a[:], c.b[:]); err != nil {
			return 0, err
		}
		next := binary.NativeEndian.Uint64(c.a[:])
		if next == cur {
			return cur, nil // nothing to change: the read was atomic
		}
		old, err := c.compareSwap(ctx, addr, rkey, cur, next)
		if err != nil || old == cur {
			return old, err
		}
		cur = old
	}
}

// CompareAndSwap replaces the int64 at disp (8-byte aligned) by swap if
// it equals compare, and returns its old value (MPI_Compare_and_swap; a
// NIC compare-and-swap).
func (w *Window) CompareAndSwap(ctx context.Context, compare, swap int64, disp int) (int64, error) {
	if err := w.checkAtomic(disp); err != nil {
		return 0, err
	}
	c := w.c
	if c.policy.CompareAndSwap(datatype.Int64) == atomics.Engine {
		return 0, fmt.Errorf("%w: compare-and-swap needs NIC atomics in this version", verbs.ErrNotSupported)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.begin(ctx); err != nil {
		return 0, err
	}
	old, err := c.compareSwap(ctx, w.addr+uint64(disp), w.rkey, uint64(compare), uint64(swap))
	return int64(old), err
}

// Flush waits until every operation of the client is complete at the
// server, those abandoned when their context ended included. (Each call
// returns complete, so this only matters after a cancellation.)
func (w *Window) Flush(ctx context.Context) error {
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.begin(ctx)
}
