package service

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/onesided/rma"
	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/fallback"
	"github.com/onesided/rma/op"
)

// Request is an operation started by RPut, RGet, RAccumulate or
// RGetAccumulate (MPI_Request). The call returns once the operation is
// on its way; Wait or Test complete it, and so does the client's next
// call: while a request's operation is in flight, a call that starts
// another operation (or Unlock, Flush, Lock) first completes it. As in
// MPI, completion is local: for RPut the origin buffer may be reused
// (here once the server's NIC has acknowledged the write), for RGet and
// RGetAccumulate the result buffer holds the data, and for RAccumulate
// the origin buffer may be reused and the server's engine has answered. An operation larger
// than one message (a Put or Get beyond the client's staging buffer, an
// accumulate beyond one engine message, several 64-bit elements through
// the NIC) sends all but its last piece before the call returns.
//
// A Request's methods are safe for concurrent use. Its error is the
// operation's, as the blocking call would have returned it.
type Request struct {
	c    *Client
	w    *Window
	kind reqKind
	wr   uint64 // the work request whose completion finishes it
	seq  uint32 // reqEngine: the sequence number of the reply
	dst  []byte // where the result goes (reqRead, reqNIC with a result, reqEngine)
	done bool
	err  error
	// abandoned: its Wait's context ended; it is done with that error,
	// and its operation, still the client's in flight, writes no result.
	abandoned bool
}

type reqKind uint8

const (
	reqWrite  reqKind = iota // an RDMA WRITE from the staging buffer
	reqRead                  // an RDMA READ into the staging buffer, then dst
	reqNIC                   // a NIC atomic, its old value (if dst) to dst
	reqEngine                // a message to the server's engine, its reply
)

// request turns a *Request into an rma.Request: a nil *Request (a failed
// call) into a nil interface.
func request(r *Request, err error) (rma.Request, error) {
	if r == nil {
		return nil, err
	}
	return r, err
}

// completed is a request finished before its call returned.
func completed(err error) (*Request, error) {
	if err != nil {
		return nil, err
	}
	return &Request{done: true}, nil
}

// start records r as the client's operation in flight; c.mu is held.
func (c *Client) start(r *Request) *Request {
	r.c = c
	c.pend = r
	c.setQuiet()
	return r
}

// finishPending waits for the operation in flight and finishes its
// request. It fails only if ctx ends first (the request then stays in
// flight); the operation's own error goes to its request. c.mu is held.
func (c *Client) finishPending(ctx context.Context) error {
	r := c.pend
	var err error
	switch r.kind {
	case reqWrite:
		err = c.wait(ctx, r.wr, 0)
	case reqRead:
		if err = c.wait(ctx, r.wr, 0); err == nil && !r.abandoned {
			copy(r.dst, c.buf[stagingOff:stagingOff+len(r.dst)])
		}
	case reqNIC:
		if err = c.wait(ctx, r.wr, 0); err == nil && r.dst != nil && !r.abandoned {
			binary.NativeEndian.PutUint64(r.dst, c.result())
		}
	case reqEngine:
		if err = c.wait(ctx, r.wr, r.seq); err == nil {
			dst := r.dst
			if r.abandoned {
				dst = c.discard[:len(dst)]
			}
			err = r.w.accReply(dst)
		}
	}
	if err != nil && ctx.Err() != nil && c.err == nil {
		if r.kind == reqEngine {
			c.awaiting = 0 // the request waits for its reply itself
			c.setQuiet()
		}
		return ctx.Err()
	}
	if !r.abandoned {
		r.done, r.err = true, err
	}
	c.pend = nil
	c.setQuiet()
	return nil
}

// Wait waits until the operation completes (MPI_Wait) and returns its
// error. If ctx ends first, or had ended when Wait was called and the
// request was not yet complete, Wait returns ctx's error and the operation
// is abandoned, as a group window's request is (rma.Request): its result
// buffer is not written afterwards, and the request is complete with that
// error; the client's next call (Flush, say) completes the operation
// itself. The server may or may not have applied an abandoned
// RAccumulate or RGetAccumulate. Wait on a nil Request returns nil.
func (r *Request) Wait(ctx context.Context) error {
	if r == nil {
		return nil
	}
	c := r.c
	if c == nil {
		return r.err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !r.done {
		err := ctx.Err()
		if err == nil {
			err = c.finishPending(ctx)
		}
		if err != nil {
			r.done, r.err, r.abandoned = true, err, true
		}
	}
	return r.err
}

// Test reports whether the operation has completed, without waiting
// (MPI_Test), and if it has, its error.
func (r *Request) Test() (bool, error) {
	if r == nil {
		return true, nil
	}
	c := r.c
	if c == nil {
		return true, r.err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.done {
		return true, r.err
	}
	n, err := c.cq.Poll(c.wcs[:])
	if err != nil {
		c.fail(err)
	}
	for i := 0; i < n; i++ {
		c.complete(&c.wcs[i])
	}
	c.mend(context.Background())
	if c.err == nil && (c.done < r.wr || r.kind == reqEngine && c.replySeq != r.seq) {
		return false, nil
	}
	// Complete, or the connection failed: finishing does not wait.
	if err := c.finishPending(context.Background()); err != nil {
		return false, nil
	}
	return true, r.err
}

// RPut is the request-based Put (MPI_Rput): the data is copied to the
// client's registered staging buffer and the WRITE posted; the request
// completes when the server's NIC has acknowledged it.
func (w *Window) RPut(ctx context.Context, src []byte, disp int) (rma.Request, error) {
	return request(w.rput(ctx, src, disp))
}

// rput is RPut.
func (w *Window) rput(ctx context.Context, src []byte, disp int) (*Request, error) {
	if err := w.check(disp, len(src)); err != nil {
		return nil, err
	}
	if err := w.need(AccessWrite); err != nil {
		return nil, err
	}
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.begin(ctx); err != nil {
		return nil, err
	}
	if len(src) == 0 {
		return completed(nil)
	}
	last := (len(src) - 1) / c.cfg.StagingSize * c.cfg.StagingSize
	if err := c.write(ctx, src[:last], w.addr+uint64(disp), w.rkey); err != nil {
		return nil, err
	}
	if _, err := c.postWrite(src[last:], w.addr+uint64(disp+last), w.rkey); err != nil {
		return nil, err
	}
	return c.start(&Request{w: w, kind: reqWrite, wr: c.posted}), nil
}

// RGet is the request-based Get (MPI_Rget): dst holds the data once the
// request completes.
func (w *Window) RGet(ctx context.Context, dst []byte, disp int) (rma.Request, error) {
	return request(w.rget(ctx, dst, disp))
}

// rget is RGet.
func (w *Window) rget(ctx context.Context, dst []byte, disp int) (*Request, error) {
	if err := w.check(disp, len(dst)); err != nil {
		return nil, err
	}
	if err := w.need(AccessRead); err != nil {
		return nil, err
	}
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.begin(ctx); err != nil {
		return nil, err
	}
	if len(dst) == 0 {
		return completed(nil)
	}
	last := (len(dst) - 1) / c.cfg.StagingSize * c.cfg.StagingSize
	if err := c.read(ctx, dst[:last], w.addr+uint64(disp), w.rkey); err != nil {
		return nil, err
	}
	if _, err := c.postRead(len(dst)-last, w.addr+uint64(disp+last), w.rkey); err != nil {
		return nil, err
	}
	return c.start(&Request{w: w, kind: reqRead, wr: c.posted, dst: dst[last:]}), nil
}

// RAccumulate is the request-based Accumulate (MPI_Raccumulate), with
// Accumulate's checks, routes and atomicity. On 64-bit integers, the ops
// that the NIC applies by compare-and-swap loops complete before the call
// returns.
func (w *Window) RAccumulate(ctx context.Context, origin []byte, dt datatype.Basic, disp int, o op.Op) (rma.Request, error) {
	return request(w.raccumulate(ctx, origin, dt, disp, o))
}

// raccumulate is RAccumulate.
func (w *Window) raccumulate(ctx context.Context, origin []byte, dt datatype.Basic, disp int, o op.Op) (*Request, error) {
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := op.Check(o, dt, op.Accumulate); err != nil {
		return nil, err
	}
	es := dt.Size()
	if len(origin)%es != 0 {
		return nil, fmt.Errorf("%w: origin of %d bytes is not whole %v elements", rma.ErrInvalid, len(origin), dt)
	}
	if len(origin) == 0 {
		return completed(nil)
	}
	if err := w.check(disp, len(origin)); err != nil {
		return nil, err
	}
	if err := w.need(AccessAtomic); err != nil {
		return nil, err
	}
	if err := c.begin(ctx); err != nil {
		return nil, err
	}
	route := w.policy.Accumulate(o, dt)
	if route == atomics.NICCompareSwapLoop {
		return completed(w.nic(ctx, route, o, dt, origin, nil, disp))
	}
	return w.startAcc(ctx, route, fallback.KindAccumulate, o, dt, disp, origin, nil)
}

// RGetAccumulate is the request-based GetAccumulate
// (MPI_Rget_accumulate), with GetAccumulate's checks, routes and
// atomicity: result holds the old elements once the request completes.
// On 64-bit integers, the ops that the NIC applies by compare-and-swap
// loops (REPLACE, MIN, MAX, ...) complete before the call returns.
func (w *Window) RGetAccumulate(ctx context.Context, origin, result []byte, dt datatype.Basic, disp int, o op.Op) (rma.Request, error) {
	return request(w.rgetAccumulate(ctx, origin, result, dt, disp, o))
}

// rgetAccumulate is RGetAccumulate.
func (w *Window) rgetAccumulate(ctx context.Context, origin, result []byte, dt datatype.Basic, disp int, o op.Op) (*Request, error) {
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := op.Check(o, dt, op.GetAccumulate); err != nil {
		return nil, err
	}
	es := dt.Size()
	if o == op.NoOp && len(origin) == 0 {
		origin = nil
	} else if len(origin) != len(result) {
		return nil, fmt.Errorf("%w: origin of %d bytes and result of %d", rma.ErrInvalid, len(origin), len(result))
	}
	if len(result)%es != 0 {
		return nil, fmt.Errorf("%w: result of %d bytes is not whole %v elements", rma.ErrInvalid, len(result), dt)
	}
	if len(result) == 0 {
		return completed(nil)
	}
	if err := w.check(disp, len(result)); err != nil {
		return nil, err
	}
	if err := w.need(fetchNeeds(o)); err != nil {
		return nil, err
	}
	if err := c.begin(ctx); err != nil {
		return nil, err
	}
	route := w.policy.FetchAndOp(o, dt)
	if route == atomics.NICCompareSwapLoop {
		return completed(w.nic(ctx, route, o, dt, origin, result, disp))
	}
	if o == op.NoOp && route == atomics.Engine {
		origin = nil // MPI ignores the origin of NO_OP; the message carries none
	}
	return w.startAcc(ctx, route, fallback.KindGetAccumulate, o, dt, disp, origin, result)
}

// startAcc carries out all but the last piece of an accumulate (result
// nil) or get-accumulate on route, and starts the last: a NIC atomic for
// the last element, or the last engine message. c.mu is held and begin
// has succeeded; the operation is not empty.
func (w *Window) startAcc(ctx context.Context, route atomics.Route, kind fallback.Kind, o op.Op, dt datatype.Basic, disp int, origin, result []byte) (*Request, error) {
	c := w.c
	n := len(origin)
	if result != nil {
		n = len(result)
	}
	piece := 8 // NIC: one element at a time
	if route == atomics.Engine {
		piece = maxAccData
		if result != nil {
			piece = maxFetchData
		}
		piece = piece / dt.Size() * dt.Size()
	}
	last := (n - 1) / piece * piece
	slice := func(b []byte, from, to int) []byte {
		if b == nil {
			return nil
		}
		return b[from:to]
	}
	if last > 0 {
		var err error
		if route == atomics.Engine {
			for off := 0; off < last && err == nil; off += piece {
				err = w.engine(ctx, kind, o, dt, disp+off, slice(origin, off, off+piece), slice(result, off, off+piece))
			}
		} else {
			err = w.nic(ctx, route, o, dt, slice(origin, 0, last), slice(result, 0, last), disp)
		}
		if err != nil {
			return nil, err
		}
	}
	data, res := slice(origin, last, n), slice(result, last, n)
	if route == atomics.Engine {
		if err := w.sendAcc(kind, o, dt, disp+last, data, res); err != nil {
			return nil, err
		}
		return c.start(&Request{w: w, kind: reqEngine, wr: c.posted, seq: c.seq, dst: res}), nil
	}
	if err := w.checkAtomic(disp + last); err != nil {
		return nil, err
	}
	addr := w.addr + uint64(disp+last)
	var err error
	switch route {
	case atomics.NICFetchAdd:
		err = c.postFetchAdd(addr, w.rkey, binary.NativeEndian.Uint64(data))
	case atomics.NICRead:
		err = c.postRead8(addr, w.rkey)
	default:
		err = fmt.Errorf("%w: route %v", rma.ErrInvalid, route)
	}
	if err != nil {
		return nil, err
	}
	return c.start(&Request{w: w, kind: reqNIC, wr: c.posted, dst: res}), nil
}
