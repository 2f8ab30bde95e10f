package service

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"time"

	"github.com/onesided/rma"
	"github.com/onesided/rma/atomics"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/fallback"
	"github.com/onesided/rma/internal/core"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/verbs"
)

// Window is a window a server exposes, as a client opened it. Its calls
// are safe from many goroutines (the client carries them out one at a
// time, except that a Lock waiting for the server lets the others go on)
// and return when the operation is
// complete at the server. With a context whose Done is nil they do not
// allocate.
//
// The calls need no epoch: a client may use a window at any time, as if it
// held MPI_Win_lock_all with MPI_MODE_NOCHECK. Lock and Unlock are the
// mutual exclusion MPI_Win_lock gives between clients (and LockAll a
// shared lock): a client that holds the exclusive lock is the only one
// holding any lock of the window, but clients that do not lock are not
// kept out.
//
// Displacements are in bytes from the window's start. A region outside
// the window is refused with rma.ErrOutOfWindow, a misaligned atomic with
// rma.ErrAlignment, both before anything is sent. A dead, restarted or
// closed server makes the call, and every later call of the client, fail
// with an error matching verbs.ErrPeerLost; Dial again. A wire that fails
// for less than ClientConfig.ResumeWithin does not: the client resumes
// its session (see the package documentation, Sessions).
type Window struct {
	c       *Client
	name    string
	addr    uint64
	rkey    uint32
	id      uint32 // the server's
	size    int
	policy  atomics.Policy
	access  Access
	lock    byte // lockShared or lockExclusive while the client holds one; under c.mu
	all     bool // the lock is LockAll's
	waiting bool // a Lock of the window waits for the server
	lw      lockWait
}

// Size is the window's size in bytes.
func (w *Window) Size() int { return w.size }

// Access is what the server lets this client do to the window
// (ServerConfig.Authorize). A call it does not cover fails with
// ErrDenied before anything is sent.
func (w *Window) Access() Access { return w.access }

// need fails unless the window was opened with one of the rights in a.
func (w *Window) need(a Access) error {
	if w.access&a == 0 {
		return fmt.Errorf("%w: the call needs %v access, and the window was opened with %v", ErrDenied, a, w.access)
	}
	return nil
}

// fetchNeeds is what a fetching call with o needs: NO_OP only reads.
func fetchNeeds(o op.Op) Access {
	if o == op.NoOp {
		return AccessRead | AccessAtomic
	}
	return AccessAtomic
}

func (w *Window) check(disp, n int) error {
	if disp < 0 || n < 0 || disp > w.size-n {
		return fmt.Errorf("%w: %d bytes at %d in a window of %d", rma.ErrOutOfWindow, n, disp, w.size)
	}
	return nil
}

func (w *Window) checkAtomic(disp int) error {
	if err := w.check(disp, 8); err != nil {
		return err
	}
	if a := w.addr + uint64(disp); a%8 != 0 {
		return fmt.Errorf("%w: displacement %d is %d bytes past an 8-byte boundary", rma.ErrAlignment, disp, a%8)
	}
	return nil
}

var _ rma.Window = (*Window)(nil)

// Put writes src into the window at disp (RDMA WRITE, through the
// client's registered buffer).
func (w *Window) Put(ctx context.Context, src []byte, disp int) error {
	if err := w.check(disp, len(src)); err != nil {
		return err
	}
	if err := w.need(AccessWrite); err != nil {
		return err
	}
	c := w.c
	if n := len(src); n > 0 && n <= laneData {
		if ok, err := c.lanePut(ctx, src, w.addr+uint64(disp), w.rkey); ok {
			return err
		}
	}
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
	if err := w.need(AccessRead); err != nil {
		return err
	}
	c := w.c
	if n := len(dst); n > 0 && n <= laneData {
		if ok, err := c.laneGet(ctx, dst, w.addr+uint64(disp), w.rkey); ok {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.begin(ctx); err != nil {
		return err
	}
	return c.read(ctx, dst, w.addr+uint64(disp), w.rkey)
}

// FetchAndOp is GetAccumulate of one element of type dt (MPI_Fetch_and_op):
// it applies o with origin to the element at disp and returns its old
// value in result; origin and result are dt.Size() bytes (origin is
// ignored by NO_OP). The route is atomics' default policy, as for a group
// window: on 64-bit integers SUM is a NIC fetch-and-add, NO_OP an 8-byte
// READ, REPLACE, MIN, MAX, PROD and the logical and bitwise ops and
// user-defined ops compare-and-swap loops (a user-defined op then runs in
// the client, see op.Register), so all of them, CompareAndSwap included,
// are atomic with each other; these need disp 8-byte aligned. Other
// datatypes, and every op when either side's device has no atomics, are
// applied by the server's engine. rma.FetchAndOp takes and returns Go
// values.
func (w *Window) FetchAndOp(ctx context.Context, origin, result []byte, dt datatype.Basic, disp int, o op.Op) error {
	if !dt.Valid() || len(result) != dt.Size() || (o != op.NoOp && len(origin) != dt.Size()) {
		return fmt.Errorf("%w: FetchAndOp on %v with origin of %d bytes and result of %d", rma.ErrInvalid, dt, len(origin), len(result))
	}
	if o == op.NoOp {
		origin = nil
	}
	if route := w.policy.FetchAndOp(o, dt); route == atomics.NICFetchAdd || route == atomics.NICRead {
		if err := w.laneChecks(disp, fetchNeeds(o)); err != nil {
			return err
		}
		kind, v := laneRead8, uint64(0)
		if route == atomics.NICFetchAdd {
			kind, v = laneFetchAdd, binary.NativeEndian.Uint64(origin)
		}
		if old, ok, err := w.c.laneAtomic(ctx, kind, w.addr+uint64(disp), w.rkey, v, 0); ok {
			if err == nil {
				binary.NativeEndian.PutUint64(result, old)
			}
			return err
		}
	}
	return w.GetAccumulate(ctx, origin, result, dt, disp, o)
}

// laneChecks are the checks of a call that takes a lane (lane.go): an
// aligned word in the window, and the access it needs.
func (w *Window) laneChecks(disp int, a Access) error {
	if err := w.checkAtomic(disp); err != nil {
		return err
	}
	return w.need(a)
}

// CompareAndSwap is MPI_Compare_and_swap on one element of type dt (an
// integer, byte or bool: op.CheckCompareAndSwap): if the element at disp
// equals compare, it becomes origin; result receives the old value. Each
// buffer is dt.Size() bytes. 64-bit integers go to the NIC's
// compare-and-swap (disp 8-byte aligned), the others, and every datatype
// when either side's device has no atomics, to the server's engine.
// rma.CompareAndSwap takes and returns Go values.
func (w *Window) CompareAndSwap(ctx context.Context, origin, compare, result []byte, dt datatype.Basic, disp int) error {
	if w.policy.CompareAndSwap(dt) == atomics.NICCompareSwap && op.CheckCompareAndSwap(dt) == nil &&
		len(origin) == 8 && len(compare) == 8 && len(result) == 8 {
		if err := w.laneChecks(disp, AccessAtomic); err != nil {
			return err
		}
		old, ok, err := w.c.laneAtomic(ctx, laneCompareSwap, w.addr+uint64(disp), w.rkey,
			binary.NativeEndian.Uint64(compare), binary.NativeEndian.Uint64(origin))
		if ok {
			if err == nil {
				binary.NativeEndian.PutUint64(result, old)
			}
			return err
		}
	}
	if es := dt.Size(); w.policy.CompareAndSwap(dt) == atomics.Engine && op.CheckCompareAndSwap(dt) == nil &&
		len(origin) == es && len(compare) == es && len(result) == es && es <= 8 {
		if err := w.check(disp, es); err != nil {
			return err
		}
		if err := w.need(AccessAtomic); err != nil {
			return err
		}
		var data [16]byte
		req := fallback.Request{Kind: fallback.KindCompareAndSwap, Window: w.id, Disp: int64(disp), Type: dt.Type(), Count: 1,
			Data: append(append(data[:0], compare...), origin...)}
		if ok, err := w.c.laneEngine(ctx, &req, result); ok {
			return err
		}
	}
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return w.compareAndSwap(ctx, origin, compare, result, dt, disp)
}

// Accumulate combines the elements of origin, of type dt, into the window
// from disp with o (MPI_Accumulate with a contiguous target of
// len(origin)/dt.Size() elements): every predefined op but NO_OP, or a
// user-defined op made with op.Register. Each element is updated
// atomically with respect to the other accumulate calls on it with the
// same datatype, from any client. 64-bit integers go to the NIC, one
// element at a time (disp 8-byte aligned), a user-defined op then running
// in the client (see op.Register); the rest is applied by the server's
// engine, up to 472 bytes per message, and a user-defined op the engine
// applies must be registered in the server too (in the same order, so
// that it has the same value; otherwise the call fails with
// fallback.ErrUnknownOp). A zero-length origin does nothing.
func (w *Window) Accumulate(ctx context.Context, origin []byte, dt datatype.Basic, disp int, o op.Op) error {
	if err := op.Check(o, dt, op.Accumulate); err != nil {
		return err
	}
	es := dt.Size()
	if len(origin)%es != 0 {
		return fmt.Errorf("%w: origin of %d bytes is not whole %v elements", rma.ErrInvalid, len(origin), dt)
	}
	if len(origin) == 0 {
		return nil
	}
	if err := w.check(disp, len(origin)); err != nil {
		return err
	}
	if err := w.need(AccessAtomic); err != nil {
		return err
	}
	c := w.c
	route := w.policy.Accumulate(o, dt)
	if route == atomics.Engine {
		req := fallback.Request{Kind: fallback.KindAccumulate, Op: o, Window: w.id, Disp: int64(disp), Type: dt.Type(), Count: len(origin) / es, Data: origin}
		if ok, err := c.laneEngine(ctx, &req, nil); ok {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.begin(ctx); err != nil {
		return err
	}
	if route != atomics.Engine {
		return w.nic(ctx, route, o, dt, origin, nil, disp)
	}
	for p := maxAccData / es * es; len(origin) > 0; {
		n := min(p, len(origin))
		if err := w.engine(ctx, fallback.KindAccumulate, o, dt, disp, origin[:n], nil); err != nil {
			return err
		}
		origin, disp = origin[n:], disp+n
	}
	return nil
}

// GetAccumulate is Accumulate that first returns the old contents of the
// target elements in result (MPI_Get_accumulate; with one element,
// MPI_Fetch_and_op): result has the length of origin, or with NO_OP,
// which only reads, origin may be empty and result says how much to read.
// The old values are those each element had just before this call
// updated it; pieces of more than 192 bytes are separate messages, each
// element still updated atomically.
func (w *Window) GetAccumulate(ctx context.Context, origin, result []byte, dt datatype.Basic, disp int, o op.Op) error {
	origin, err := w.getAccArgs(origin, result, dt, disp, o)
	if err != nil || len(result) == 0 {
		return err
	}
	c := w.c
	route := w.policy.FetchAndOp(o, dt)
	if route == atomics.Engine && len(result) <= maxFetchData {
		req := fallback.Request{Kind: fallback.KindGetAccumulate, Op: o, Window: w.id, Disp: int64(disp), Type: dt.Type(), Count: len(result) / dt.Size(), Data: origin}
		if ok, err := c.laneEngine(ctx, &req, result); ok {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return w.getAccumulate(ctx, origin, result, dt, disp, o, route)
}

// getAccArgs checks the arguments of GetAccumulate, returning origin as
// the message carries it: nil for NO_OP, whose origin MPI ignores.
func (w *Window) getAccArgs(origin, result []byte, dt datatype.Basic, disp int, o op.Op) ([]byte, error) {
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
		return nil, nil
	}
	if err := w.check(disp, len(result)); err != nil {
		return nil, err
	}
	if err := w.need(fetchNeeds(o)); err != nil {
		return nil, err
	}
	if o == op.NoOp {
		origin = nil
	}
	return origin, nil
}

// getAccumulate is GetAccumulate on the serialized path, with arguments
// getAccArgs passed and the route of o on dt; c.mu is held.
func (w *Window) getAccumulate(ctx context.Context, origin, result []byte, dt datatype.Basic, disp int, o op.Op, route atomics.Route) error {
	c := w.c
	es := dt.Size()
	if err := c.begin(ctx); err != nil {
		return err
	}
	if route != atomics.Engine {
		return w.nic(ctx, route, o, dt, origin, result, disp)
	}
	for p := maxFetchData / es * es; len(result) > 0; {
		n := min(p, len(result))
		var data []byte
		if origin != nil {
			data, origin = origin[:n], origin[n:]
		}
		if err := w.engine(ctx, fallback.KindGetAccumulate, o, dt, disp, data, result[:n]); err != nil {
			return err
		}
		result, disp = result[n:], disp+n
	}
	return nil
}

// compareAndSwap is CompareAndSwapBytes; c.mu is held.
func (w *Window) compareAndSwap(ctx context.Context, origin, compare, result []byte, dt datatype.Basic, disp int) error {
	c := w.c
	if err := op.CheckCompareAndSwap(dt); err != nil {
		return err
	}
	es := dt.Size()
	if len(origin) != es || len(compare) != es || len(result) != es {
		return fmt.Errorf("%w: compare-and-swap on %v with buffers of %d, %d and %d bytes (want %d)",
			rma.ErrInvalid, dt, len(origin), len(compare), len(result), es)
	}
	route := w.policy.CompareAndSwap(dt)
	if route != atomics.Engine {
		if err := w.checkAtomic(disp); err != nil {
			return err
		}
	} else if err := w.check(disp, es); err != nil {
		return err
	}
	if err := w.need(AccessAtomic); err != nil {
		return err
	}
	if err := c.begin(ctx); err != nil {
		return err
	}
	if route == atomics.Engine {
		data := append(append(c.cas[:0], compare...), origin...)
		return w.engine(ctx, fallback.KindCompareAndSwap, 0, dt, disp, data, result)
	}
	old, err := c.compareSwap(ctx, w.addr+uint64(disp), w.rkey,
		binary.NativeEndian.Uint64(compare), binary.NativeEndian.Uint64(origin))
	if err == nil {
		binary.NativeEndian.PutUint64(result, old)
	}
	return err
}

// nic carries out an accumulate on 64-bit integers with NIC atomics, one
// element at a time; result is nil for Accumulate. c.mu is held and begin
// has succeeded.
func (w *Window) nic(ctx context.Context, route atomics.Route, o op.Op, dt datatype.Basic, origin, result []byte, disp int) error {
	c := w.c
	if err := w.checkAtomic(disp); err != nil {
		return err
	}
	n := len(origin)
	if result != nil {
		n = len(result)
	}
	for i := 0; i < n; i += 8 {
		addr := w.addr + uint64(disp+i)
		var v uint64
		if origin != nil {
			v = binary.NativeEndian.Uint64(origin[i:])
		}
		old, err := core.Element(ctx, (*clientNIC)(c), route, o, dt, addr, w.rkey, v, &c.scratch)
		if err != nil {
			return err
		}
		if result != nil {
			binary.NativeEndian.PutUint64(result[i:], old)
		}
	}
	return nil
}

// clientNIC is a Client's NIC atomics (core.NIC); c.mu is held and begin
// has succeeded.
type clientNIC Client

func (n *clientNIC) Read8(ctx context.Context, addr uint64, rkey uint32) (uint64, error) {
	return (*Client)(n).read8(ctx, addr, rkey)
}

func (n *clientNIC) FetchAdd(ctx context.Context, addr uint64, rkey uint32, add uint64) (uint64, error) {
	return (*Client)(n).fetchAdd(ctx, addr, rkey, add)
}

func (n *clientNIC) CompareSwap(ctx context.Context, addr uint64, rkey uint32, compare, swap uint64) (uint64, error) {
	return (*Client)(n).compareSwap(ctx, addr, rkey, compare, swap)
}

// engine sends one accumulate message to the server's engine and waits
// for its reply: data is the origin (for KindCompareAndSwap, the compare
// element then the origin), result receives the old elements of the
// fetching kinds. c.mu is held and begin has succeeded.
func (w *Window) engine(ctx context.Context, kind fallback.Kind, o op.Op, dt datatype.Basic, disp int, data, result []byte) error {
	c := w.c
	if err := w.sendAcc(kind, o, dt, disp, data, result); err != nil {
		return err
	}
	if err := c.wait(ctx, c.posted, c.seq); err != nil {
		return err
	}
	return w.accReply(result)
}

// sendAcc posts one accumulate message (see engine), in package
// fallback's wire format; its reply carries c.seq. c.mu is held and begin
// has succeeded.
func (w *Window) sendAcc(kind fallback.Kind, o op.Op, dt datatype.Basic, disp int, data, result []byte) error {
	c := w.c
	count := len(data) / dt.Size()
	if kind == fallback.KindCompareAndSwap {
		count = 1
	} else if result != nil {
		count = len(result) / dt.Size()
	}
	c.nextSeq()
	b := c.buf[sendOff : sendOff+recvSize]
	putHeader(b, msgAcc, c.seq)
	req := fallback.Request{Kind: kind, Op: o, Window: w.id, Tag: c.seq, Disp: int64(disp), Type: dt.Type(), Count: count, Data: data}
	msg, err := fallback.AppendRequest(b[:headerLen], &req)
	if err != nil {
		return err
	}
	return c.send(len(msg))
}

// accReply takes the reply to an accumulate message, in c.reply: the old
// elements go to result (nil: none expected). c.mu is held.
func (w *Window) accReply(result []byte) error {
	c := w.c
	err, bad := c.accResult(c.reply[:c.replyLen], result)
	if bad {
		c.fail(err)
		return c.err
	}
	return err
}

// accResult decodes reply, the reply to an accumulate message: the old
// elements go to result (nil: none expected). bad says the reply breaks
// the protocol, and the connection is to fail with err.
func (c *Client) accResult(reply, result []byte) (err error, bad bool) {
	switch reply[0] {
	case msgOK:
		var r fallback.Reply
		if err := fallback.DecodeReply(reply[headerLen:], &r); err != nil {
			return fmt.Errorf("%w: the reply to an accumulate: %w", ErrProtocol, err), true
		}
		if err := r.Err(); err != nil {
			c.stats.engineRejects.Add(1)
			return err, false
		}
		if len(r.Data) != len(result) {
			return fmt.Errorf("%w: a reply of %d bytes of old values to an accumulate of %d", ErrProtocol, len(r.Data), len(result)), true
		}
		copy(result, r.Data)
		c.stats.engineOps.Add(1)
		return nil, false
	case msgErr:
		c.stats.engineRejects.Add(1)
		return refusal(reply), false
	}
	return fmt.Errorf("%w: reply %#x to an accumulate", ErrProtocol, reply[0]), true
}

// refused turns the msgErr in c.reply into an error; c.mu is held.
func (c *Client) refused() error { return refusal(c.reply[:c.replyLen]) }

// refusal turns msg, a msgErr, into an error.
func refusal(msg []byte) error {
	reason := byte(0)
	if len(msg) == errLen {
		reason = msg[headerLen]
	}
	switch reason {
	case errUnknownWin:
		return fmt.Errorf("%w: the server no longer has the window", ErrUnknownWindow)
	case errLockState:
		return fmt.Errorf("%w: the server's lock state disagrees", rma.ErrEpoch)
	case errDenied:
		return fmt.Errorf("%w: refused by the server", ErrDenied)
	}
	return fmt.Errorf("%w: the server refused the request (reason %d)", ErrProtocol, reason)
}

// Lock takes the window's lock, shared (rma.LockShared) or exclusive
// (rma.LockExclusive), waiting for it as long as ctx allows
// (MPI_Win_lock; the server queues requests in their order of arrival, and
// grants consecutive shared ones together). A client holds at most one
// lock of a window: Lock while holding or waiting for it fails with
// rma.ErrEpoch. While Lock waits, the client's other calls go on (up to
// 4 Locks of different windows may wait at once; more wait for a place);
// with no other call going on, the waiting Lock polls at most every
// millisecond. If ctx ends first, the request is withdrawn (or the lock,
// granted meanwhile, given back) before Lock returns ctx's error; if the
// server has not answered the withdrawal within a second, the client
// disconnects, which frees whatever the server granted it, and its calls
// then fail with verbs.ErrPeerLost. A client that dies or disconnects
// gives its locks up: the server frees them when the connection goes (at
// once for a process that dies, which its kernel disconnects; after
// ServerConfig.ProbeInterval plus the transport's retries for a host that
// dies).
func (w *Window) Lock(ctx context.Context, lt rma.LockType) error {
	var code byte
	switch lt {
	case rma.LockShared:
		code = lockShared
	case rma.LockExclusive:
		code = lockExclusive
	default:
		return fmt.Errorf("%w: lock type %d", rma.ErrInvalid, lt)
	}
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return w.lockLocked(ctx, code, false)
}

// LockAll takes the window's lock shared (MPI_Win_lock_all: a window of a
// server has one target). Undo it with UnlockAll.
func (w *Window) LockAll(ctx context.Context) error {
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return w.lockLocked(ctx, lockShared, true)
}

func (w *Window) lockLocked(ctx context.Context, code byte, all bool) error {
	c := w.c
	if err := c.begin(ctx); err != nil {
		return err
	}
	if w.lock != 0 || w.waiting {
		return fmt.Errorf("%w: the client holds or waits for the window's lock already", rma.ErrEpoch)
	}
	// A lock request waits without holding the client: take one of the
	// client's maxLockWaits places first.
	select {
	case c.lockSlots <- struct{}{}:
	default:
		c.mu.Unlock()
		select {
		case c.lockSlots <- struct{}{}:
			c.mu.Lock()
		case <-ctx.Done():
			c.mu.Lock()
			return ctx.Err()
		}
		if err := c.begin(ctx); err != nil {
			<-c.lockSlots
			return err
		}
		if w.lock != 0 || w.waiting {
			<-c.lockSlots
			return fmt.Errorf("%w: the client holds or waits for the window's lock already", rma.ErrEpoch)
		}
	}
	defer func() { <-c.lockSlots }()
	c.nextSeq()
	lw := &w.lw
	select {
	case <-lw.ch: // a wake-up left from an earlier request
	default:
	}
	lw.seq, lw.done, lw.reply, lw.reason, lw.win, lw.lt = c.seq, false, 0, 0, w.id, code
	c.posted++
	if err := c.post(verbs.SendWR{WRID: c.posted, Local: c.mr.Local(sendOff, putLock(c.buf[sendOff:], msgLock, c.seq, w.id, code)),
		Op: verbs.OpSend, Flags: verbs.SendSignaled}); err != nil {
		c.posted--
		return err
	}
	c.waits = append(c.waits, lw)
	w.waiting = true
	err := c.waitLock(ctx, lw)
	w.waiting = false
	if err != nil {
		c.forget(lw)
		if ctx.Err() == nil || c.err != nil {
			return err
		}
		// Withdraw the request (or give back the lock granted meanwhile):
		// the server answers the withdrawal after any grant. The calls
		// still in flight complete first; all of it within withdrawTimeout.
		wctx, cancel := context.WithTimeout(context.Background(), withdrawTimeout)
		defer cancel()
		werr := c.begin(wctx)
		if werr != nil && wctx.Err() == nil {
			return werr // the client closed or its connection failed
		}
		if werr == nil {
			c.nextSeq()
			werr = c.request(wctx, putLock(c.buf[sendOff:], msgUnlock, c.seq, w.id, 0))
		}
		if werr != nil {
			c.awaiting = 0
			c.setQuiet()
			c.fail(fmt.Errorf("withdrawing a lock request: %w", werr))
			if !c.closed {
				c.id.Disconnect() // the server then frees whatever it granted
			}
		}
		return err
	}
	switch lw.reply {
	case msgOK:
		w.lock, w.all = code, all
		c.stats.locks.Add(1)
		return nil
	case msgErr:
		c.replyLen, c.reply[headerLen] = errLen, lw.reason
		return c.refused()
	}
	c.fail(fmt.Errorf("%w: reply %#x to a lock", ErrProtocol, lw.reply))
	return c.err
}

// lockWait is a lock request waiting for its reply.
type lockWait struct {
	seq    uint32
	win    uint32 // the window's id and the lock type asked for: sent again on a resumption
	lt     byte
	done   bool
	reply  byte // msgOK or msgErr
	reason byte
	ch     chan struct{}
	timer  *time.Timer // made stopped with the window
}

// maxLockWaits bounds a client's lock requests waiting at once; more
// Lock calls wait for a place.
const maxLockWaits = 4

// answered takes a reply to a lock request waiting (a grant or a
// refusal), reporting whether it was one; c.mu is held.
func (c *Client) answered(seq uint32, msg []byte) bool {
	for _, lw := range c.waits {
		if lw.seq == seq && !lw.done {
			lw.done, lw.reply = true, msg[0]
			if len(msg) == errLen {
				lw.reason = msg[headerLen]
			}
			c.forget(lw)
			lw.ch <- struct{}{}
			return true
		}
	}
	return false
}

// forget takes lw out of c.waits; c.mu is held.
func (c *Client) forget(lw *lockWait) {
	for i, o := range c.waits {
		if o == lw {
			c.waits = append(c.waits[:i], c.waits[i+1:]...)
			return
		}
	}
}

// waitLock waits for lw's reply. It polls the CQ for up to lockSpin
// holding c.mu (an uncontended lock comes in one round trip); then it
// lets the client's other calls go on (their polling delivers the reply)
// and, between them, polls at growing intervals (up to lockPollMax) until
// the reply, a failure or the end of ctx. c.mu is held on entry and on
// return.
func (c *Client) waitLock(ctx context.Context, lw *lockWait) error {
	start := time.Now()
	pause := time.Duration(0)
	for {
		if lw.done {
			return nil
		}
		if c.err != nil {
			return c.err
		}
		if c.closed || c.closing.Load() {
			return ErrClosed
		}
		if err := c.mend(ctx); err != nil {
			return err
		}
		if lw.done {
			return nil
		}
		n, err := c.cq.Poll(c.wcs[:])
		if err != nil {
			c.fail(err)
		}
		for i := 0; i < n; i++ {
			c.complete(&c.wcs[i])
		}
		if n > 0 {
			continue
		}
		if pause == 0 {
			if time.Since(start) < lockSpin {
				runtime.Gosched()
				continue
			}
			pause = 50 * time.Microsecond
		}
		lw.timer.Reset(pause)
		c.mu.Unlock()
		select {
		case <-lw.ch:
		case <-lw.timer.C:
		case <-ctx.Done():
		}
		if !lw.timer.Stop() {
			select {
			case <-lw.timer.C:
			default:
			}
		}
		c.mu.Lock()
		if ctx.Err() != nil && !lw.done {
			return ctx.Err()
		}
		pause = min(2*pause, lockPollMax)
	}
}

// lockSpin is how long a Lock polls for its grant before it lets the
// client's other calls go on.
const lockSpin = 500 * time.Microsecond

// lockPollMax is the longest pause between two polls of a Lock waiting
// with no other call of its client going on: the delay a grant may take
// to be seen.
const lockPollMax = time.Millisecond

// withdrawTimeout bounds the withdrawal of a lock request whose Lock was
// cancelled; beyond it the client disconnects.
const withdrawTimeout = time.Second

// Unlock gives the window's lock back (MPI_Win_unlock). Every call of the
// client is complete at the server when it returns, so this only waits
// for those abandoned when their context ended and frees the lock.
// Without the lock (or with LockAll's) it fails with
// rma.ErrEpoch.
func (w *Window) Unlock(ctx context.Context) error {
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return w.unlockLocked(ctx, false)
}

// UnlockAll gives back the lock LockAll took (MPI_Win_unlock_all).
func (w *Window) UnlockAll(ctx context.Context) error {
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return w.unlockLocked(ctx, true)
}

func (w *Window) unlockLocked(ctx context.Context, all bool) error {
	c := w.c
	if w.lock == 0 || w.all != all {
		return fmt.Errorf("%w: the client does not hold the window's lock (from %s)", rma.ErrEpoch,
			map[bool]string{false: "Lock", true: "LockAll"}[all])
	}
	if err := c.begin(ctx); err != nil {
		return err
	}
	if err := c.waitLanes(ctx); err != nil {
		return err
	}
	c.nextSeq()
	err := c.request(ctx, putLock(c.buf[sendOff:], msgUnlock, c.seq, w.id, 0))
	if c.posted == c.done || err == nil || c.awaiting != 0 {
		w.lock, w.all = 0, false // sent: the server frees the lock
	}
	if err != nil {
		return err
	}
	if c.reply[0] != msgOK {
		return c.refused()
	}
	return nil
}

// Flush waits until every operation of the client is complete at the
// server, those abandoned when their context ended included
// (MPI_Win_flush). Each call returns complete, so this only matters after
// a cancellation.
func (w *Window) Flush(ctx context.Context) error {
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.begin(ctx); err != nil {
		return err
	}
	return c.waitLanes(ctx)
}
