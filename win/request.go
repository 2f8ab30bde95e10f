package win

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/fallback"
	"github.com/onesided/rma/internal/fabric"
	"github.com/onesided/rma/op"
)

// Request is an RMA operation started by RPut, RGet, RAccumulate,
// RGetAccumulate, RPutTo or RGetTo (MPI_Request). The operation is started
// (checked, and posted or sent) before the call returns; Wait, Test, the
// Waitall family, or the synchronisation that ends its epoch complete it.
// As MPI-4.1 12.3.5 says, the request-based calls are valid only in a
// passive-target epoch (Lock or LockAll) to their target; anywhere else,
// in a fence or a post-start-complete-wait epoch too, they return ErrEpoch,
// as MPICH's do.
//
// As MPI-4.1 (12.4, 12.5) requires, Unlock, UnlockAll, Flush, FlushAll,
// FlushLocal, FlushLocalAll and Free complete every
// request-based operation the process issued to the targets they
// synchronise, like the other RMA calls: when they return, an RGet's
// buffer holds the data. Wait and Test on a request completed that way
// return at once with its result, as often as they are called.
//
// Completion is local, as in MPI: for RPut, RPutTo and RAccumulate it means
// the origin buffer may be reused, which is true when the call returns (the
// data is copied then), so their requests are complete at once and a flush
// or the end of the epoch completes them at the target. For RGet, RGetTo and
// RGetAccumulate it means the result buffer holds the values (for
// RGetAccumulate, not that the target was updated).
//
// A Request's methods are safe for concurrent use. A nil *Request is an
// inactive request (MPI_REQUEST_NULL): Wait and Test return at once with
// no error, and the Waitall family skips it.
type Request struct {
	w    *Window
	rank int
	kind reqKind
	done atomic.Bool // err is set, and the result written, before it is

	mu     sync.Mutex
	err    error
	fop    *fallback.Op      // reqFetch: the engine's replies, until completion
	rd     fabric.ReadOp     // reqRead
	unpack Buffer            // reqRead into a non-contiguous result: where packed goes
	packed []byte            // that read's destination
	segs   []fabric.Segment  // reqRead: its segments, kept for rd
	one    [1]fabric.Segment // segs of a single-range read

	// The window's list of outstanding requests to rank (under its lock).
	seq    uint64
	linked bool
	prev   *Request
	next   *Request
}

type reqKind uint8

const (
	reqDone  reqKind = iota // complete when started
	reqRead                 // an RDMA read in flight (fabric.ReadOp)
	reqFetch                // engine replies to come (fallback.Op)
)

// completedOK is the request of an operation that completed (locally) when
// it was started without error: it is shared, and never changes.
var completedOK = func() *Request {
	r := &Request{}
	r.done.Store(true)
	return r
}()

// done is the result of an R* call that completed when it was started,
// with err (then no request) or without.
func done(err error) (*Request, error) {
	if err != nil {
		return nil, err
	}
	return completedOK, nil
}

// nullRequest is the result of an R* call to ProcNull: a complete request
// (MPI returns one whose completion does nothing).
func (w *Window) nullRequest() (*Request, error) { return done(w.nullPassive()) }

// Wait waits until the operation completes (MPI_Wait) and returns its
// error. If ctx ends first, or had ended when Wait was called and the
// request was not yet complete, Wait returns ctx's error and the operation
// is abandoned: its result buffer is not written afterwards, and the
// request is complete with that error. The target may or may not have
// applied an abandoned RGetAccumulate.
func (r *Request) Wait(ctx context.Context) error {
	if r == nil {
		return nil
	}
	if !r.done.Load() {
		err := ctx.Err()
		if err == nil {
			err = r.complete(ctx)
		}
		if err != nil {
			r.abandon(err)
		}
	}
	return r.err
}

// Test reports whether the operation has completed, without waiting
// (MPI_Test), and its error if it has. It makes progress on the way:
// calling it repeatedly completes the operation. If its target is lost or
// the group closed, the request completes with that error (ErrPeerLost,
// or one matching verbs.ErrClosed), as through Wait; so it does through
// Testany, Testall, Waitany and Waitsome.
func (r *Request) Test() (bool, error) {
	if r == nil {
		return true, nil
	}
	if r.done.Load() {
		return true, r.err
	}
	switch r.kind {
	case reqRead:
		r.rd.Test()
	case reqFetch:
		r.w.f.ProgressMessages(r.rank) // fails the request if its target is gone
	}
	r.finish()
	if r.done.Load() {
		return true, r.err
	}
	return false, nil
}

// complete drives the operation to completion. It returns only ctx's
// error, leaving the operation in flight; other failures (a lost target,
// the group closed) complete the request with that error.
func (r *Request) complete(ctx context.Context) error {
	switch r.kind {
	case reqRead:
		if err := r.rd.Complete(ctx); err != nil && (ctx.Err() != nil || !r.rd.Done()) {
			return err
		} // else the read is done, or failed (the group closed)
	case reqFetch:
		r.mu.Lock()
		fop := r.fop
		r.mu.Unlock()
		if fop == nil {
			break
		}
		err := r.w.f.WaitMessages(ctx, r.rank, func() bool { return r.done.Load() || fop.Done() })
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			r.abandon(err) // the target is gone: its replies will not come
			return nil
		}
	}
	r.finish()
	return nil
}

// finish records the result of an operation that has completed.
func (r *Request) finish() {
	r.mu.Lock()
	r.finishLocked()
	r.mu.Unlock()
}

func (r *Request) finishLocked() {
	if r.done.Load() {
		return
	}
	switch r.kind {
	case reqRead:
		if !r.rd.Done() {
			return
		}
		r.err = r.rd.Err()
		if r.err == nil && r.packed != nil {
			r.err = datatype.Unpack(r.unpack.Data, r.packed, r.unpack.Count, r.unpack.Type)
		}
	case reqFetch:
		if r.fop == nil || !r.fop.Done() {
			return
		}
		r.err = r.fop.Err()
		r.fop.Reset()
		opPool.Put(r.fop)
		r.fop = nil
	}
	r.settleLocked()
}

// settleLocked marks the request complete (its err set) and forgets it.
func (r *Request) settleLocked() {
	r.packed, r.unpack.Data, r.segs = nil, nil, nil
	r.done.Store(true)
	r.w.reqs.unlink(r)
}

// abandon completes the request with err, stopping its operation: the
// result buffer is not written afterwards.
func (r *Request) abandon(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done.Load() {
		return
	}
	switch r.kind {
	case reqRead:
		if !r.rd.Abandon() {
			r.finishLocked() // another goroutine completed it meanwhile: keep its result
			return
		}
	case reqFetch:
		if !r.fop.Abandon() { // replies still to come are counted, not written
			r.finishLocked() // every reply had come: keep the result
			return
		}
		r.fop = nil
	}
	r.err = err
	r.settleLocked()
}

// requests is a window's record of its outstanding request-based
// operations, per target, so that flushes and the ends of epochs complete
// them.
type requests struct {
	lists atomic.Pointer[[]reqList] // per target, made by the first request
	mu    sync.Mutex                // making lists
}

// reqList holds the outstanding requests to one target, oldest first.
type reqList struct {
	mu   sync.Mutex
	head *Request
	tail *Request
	seq  uint64 // of the last request added
}

func (q *requests) list(w *Window, rank int) *reqList {
	lists := q.lists.Load()
	if lists == nil {
		q.mu.Lock()
		if lists = q.lists.Load(); lists == nil {
			s := make([]reqList, len(w.remote))
			lists = &s
			q.lists.Store(lists)
		}
		q.mu.Unlock()
	}
	return &(*lists)[rank]
}

func (q *requests) add(w *Window, r *Request) {
	l := q.list(w, r.rank)
	l.mu.Lock()
	l.seq++
	r.seq, r.linked, r.prev, r.next = l.seq, true, l.tail, nil
	if l.tail != nil {
		l.tail.next = r
	} else {
		l.head = r
	}
	l.tail = r
	l.mu.Unlock()
}

func (q *requests) unlink(r *Request) {
	lists := q.lists.Load()
	if lists == nil {
		return
	}
	l := &(*lists)[r.rank]
	l.mu.Lock()
	if r.linked {
		if r.prev != nil {
			r.prev.next = r.next
		} else {
			l.head = r.next
		}
		if r.next != nil {
			r.next.prev = r.prev
		} else {
			l.tail = r.prev
		}
		r.linked, r.prev, r.next = false, nil, nil
	}
	l.mu.Unlock()
}

// oldest returns the oldest outstanding request to the list's target if
// it was added at or before seq upto.
func (l *reqList) oldest(upto uint64) *Request {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.head == nil || l.head.seq > upto {
		return nil
	}
	return l.head
}

// completeRequests completes every request-based operation this rank
// issued to target before the call (for flush and the ends of epochs). It
// returns ctx's error if ctx ends first; the failure of an operation is
// its request's, reported by its Wait or Test.
func (w *Window) completeRequests(ctx context.Context, target int) error {
	lists := w.reqs.lists.Load()
	if lists == nil {
		return nil
	}
	l := &(*lists)[target]
	l.mu.Lock()
	upto := l.seq
	l.mu.Unlock()
	for r := l.oldest(upto); r != nil; r = l.oldest(upto) {
		if err := r.complete(ctx); err != nil {
			return err
		}
	}
	return nil
}

// endRequests is called when flushAll returns: if the window is being
// freed, the requests that flushAll could not complete (err says why) are
// abandoned, and the window lets go of the fabric's read record.
func (w *Window) endRequests(err error) {
	if !w.freed.Load() {
		return
	}
	if lists := w.reqs.lists.Load(); lists != nil {
		why := ErrFreed
		if err != nil {
			why = fmt.Errorf("%w before the request completed: %w", ErrFreed, err)
		}
		for i := range *lists {
			l := &(*lists)[i]
			for r := l.oldest(^uint64(0)); r != nil; r = l.oldest(^uint64(0)) {
				r.abandon(why)
			}
		}
	}
}

// RPut is the request-based Put (MPI_Rput). The data is copied when the
// call returns, so the request is complete at once (the origin buffer may
// be reused); a flush or the end of the epoch completes the put at the
// target and reports its failure there.
func (w *Window) RPut(ctx context.Context, origin []byte, target, disp int) (*Request, error) {
	if err := w.passive(target, "request-based RMA call"); err != nil {
		return nil, err
	}
	return done(w.Put(ctx, origin, target, disp))
}

// passive is ErrEpoch unless target is in a passive-target access epoch
// (Lock or LockAll): MPI allows the request-based calls and Flush only
// there (MPI-4.1 12.3.5, 12.5.4), and MPICH refuses them elsewhere
// (MPI_ERR_RMA_SYNC). ProcNull needs one too (Lock of ProcNull opens one
// for it). what names the call in the error.
func (w *Window) passive(target int, what string) error {
	if target == ProcNull {
		return w.nullPassive()
	}
	if w.freed.Load() {
		return ErrFreed
	}
	if err := w.checkRank(target); err != nil {
		return err
	}
	if w.ep.lockAll.Load() || w.ep.access[target].Load()&(accShared|accExclusive) != 0 {
		return nil
	}
	return fmt.Errorf("%w: %s to rank %d outside a passive-target epoch to it (Lock or LockAll first; MPI allows it nowhere else)", ErrEpoch, what, target)
}

// RPutTo is the request-based PutTo (MPI_Rput with datatypes); like RPut,
// its request is complete at once.
func (w *Window) RPutTo(ctx context.Context, origin Buffer, t Region) (*Request, error) {
	if err := w.passive(t.Rank, "request-based RMA call"); err != nil {
		return nil, err
	}
	return done(w.PutTo(ctx, origin, t))
}

// RAccumulate is the request-based Accumulate (MPI_Raccumulate). Like
// RPut's, its request is complete at once (the origin data is copied, or
// applied by NIC atomics, before the call returns); a flush or the end of
// the epoch completes it at the target.
func (w *Window) RAccumulate(ctx context.Context, origin Buffer, target Region, o op.Op) (*Request, error) {
	if target.Rank == ProcNull {
		if err := nullOp(o, op.Accumulate, target); err != nil {
			return nil, err
		}
	}
	if err := w.passive(target.Rank, "request-based RMA call"); err != nil {
		return nil, err
	}
	return done(w.AccumulateTo(ctx, origin, target, o))
}

// RGet is the request-based Get (MPI_Rget): result holds the data once the
// request completes, and must not be accessed before. The READs are posted
// before the call returns, except when many reads are in flight already:
// then the rest are posted as Wait, Test or a flush make progress. When the
// window keeps accumulate ordering, RGet first waits until this rank's
// earlier accumulates to target are applied, as Get does.
func (w *Window) RGet(ctx context.Context, result []byte, target, disp int) (*Request, error) {
	if target == ProcNull {
		return w.nullRequest()
	}
	if err := w.passive(target, "request-based RMA call"); err != nil {
		return nil, err
	}
	addr, rkey, err := w.address(ctx, target, disp, len(result))
	if err != nil {
		return nil, err
	}
	if len(result) == 0 {
		return completedOK, nil
	}
	if err := w.ordered(ctx, target); err != nil {
		return nil, err
	}
	r := &Request{w: w, rank: target, kind: reqRead}
	r.segs = r.one[:]
	r.one[0] = fabric.Segment{Addr: addr, Len: len(result)}
	w.f.StartRead(&r.rd, target, rkey, result, r.segs)
	w.reqs.add(w, r)
	return r, nil
}

// RGetTo is the request-based GetTo (MPI_Rget with datatypes): the target
// layout's elements are in the result layout once the request completes.
func (w *Window) RGetTo(ctx context.Context, result Buffer, t Region) (*Request, error) {
	if t.Rank == ProcNull {
		return w.nullRequest()
	}
	if err := w.passive(t.Rank, "request-based RMA call"); err != nil {
		return nil, err
	}
	if empty, err := checkData("result", &result, &t); err != nil || empty {
		if err == nil {
			err = w.emptyCall(ctx, t)
		}
		return done(err)
	}
	d, err := w.resolve(ctx, &t, false)
	if err != nil {
		return nil, err
	}
	if w.packs(t, getEngineBlock) {
		// Through the engine, as GetTo: the request completes with the reply.
		return w.fetchRequest(ctx, op.NoOp, Buffer{Type: t.Type, Count: t.Count}, result, t, d)
	}
	total := int64(result.Count) * result.Type.Size()
	if err := w.ordered(ctx, t.Rank); err != nil {
		return nil, err
	}
	r := &Request{w: w, rank: t.Rank, kind: reqRead}
	esz := int64(t.Type.Basic().Size())
	t.Type.ForEachBlock(t.Count, func(off int64, n int) bool {
		r.segs = append(r.segs, fabric.Segment{Addr: d.reg.addr + uint64(d.off+off), Len: n * int(esz)})
		return true
	})
	dst := result.Data
	if result.Type.IsContiguous() && result.Type.TrueLB() == 0 {
		dst = dst[:total]
	} else {
		r.packed = make([]byte, total)
		r.unpack = result
		dst = r.packed
	}
	w.f.StartRead(&r.rd, t.Rank, d.reg.rkey, dst, r.segs)
	w.reqs.add(w, r)
	return r, nil
}

// RGetAccumulate is the request-based GetAccumulate (MPI_Rget_accumulate).
// The operation is sent, in order with this rank's other accumulates, when
// the call returns; completion means the result buffer holds the old values,
// not that the target was updated. On the NIC route (see RouteFetchAndOp)
// the atomics complete before the call returns, and so does the request.
func (w *Window) RGetAccumulate(ctx context.Context, origin, result Buffer, t Region, o op.Op) (*Request, error) {
	if t.Rank == ProcNull {
		if err := nullOp(o, op.GetAccumulate, t); err != nil {
			return nil, err
		}
		return w.nullRequest()
	}
	if err := w.passive(t.Rank, "request-based RMA call"); err != nil {
		return nil, err
	}
	if o == op.NoOp {
		origin = Buffer{Type: t.Type, Count: t.Count}
	}
	basic, d, err := w.check(ctx, o, op.GetAccumulate, &origin, &result, &t)
	if err != nil || d.empty {
		return done(err)
	}
	if route := w.policy.FetchAndOp(o, basic); route.NIC() {
		return done(w.nicAccumulate(ctx, o, basic, route, origin, result, t, d))
	}
	return w.fetchRequest(ctx, o, origin, result, t, d)
}

// fetchRequest sends a GetAccumulate of o to the target's engine and
// returns the request its replies complete.
func (w *Window) fetchRequest(ctx context.Context, o op.Op, origin, result Buffer, t Region, d dest) (*Request, error) {
	fop, err := w.startFetch(ctx, o, origin, result, t, d)
	if err != nil {
		return nil, err
	}
	r := &Request{w: w, rank: t.Rank, kind: reqFetch, fop: fop}
	w.reqs.add(w, r)
	return r, nil
}

// Undefined is the index Waitany and Testany return when no request of the
// list is active (MPI_UNDEFINED).
const Undefined = -1

// RequestError is the failure of one request of a list given to Waitall,
// Waitsome or Testall (MPI_ERR_IN_STATUS): the error they return joins one
// per failed request (errors.As finds them, errors.Is sees through them).
type RequestError struct {
	Index int   // the request's index in the list
	Err   error // the request's error
}

// Error names the request by its index and gives its error.
func (e *RequestError) Error() string { return fmt.Sprintf("request %d: %v", e.Index, e.Err) }

// Unwrap returns the request's error.
func (e *RequestError) Unwrap() error { return e.Err }

// Waitall waits until every request of reqs has completed (MPI_Waitall),
// as Wait on each, and sets every entry to nil, as MPI sets completed
// requests to MPI_REQUEST_NULL; nil entries are skipped. It returns nil if
// every one succeeded, else the errors.Join of a *RequestError per failed
// request. If ctx ends, the requests not complete by then are abandoned as
// by Wait, and fail with ctx's error.
func Waitall(ctx context.Context, reqs []*Request) error {
	var errs []error
	for i, r := range reqs {
		if r == nil {
			continue
		}
		if err := r.Wait(ctx); err != nil {
			errs = append(errs, &RequestError{Index: i, Err: err})
		}
		reqs[i] = nil
	}
	return errors.Join(errs...)
}

// Testall reports whether every request of reqs has completed, without
// waiting (MPI_Testall), making progress on each. If all have, it sets
// every entry to nil and returns true with the errors.Join of a
// *RequestError per failed request; otherwise it returns false and leaves
// reqs unchanged. An empty or all-nil list is complete.
func Testall(reqs []*Request) (bool, error) {
	all := true
	for _, r := range reqs {
		if done, _ := r.Test(); !done {
			all = false
		}
	}
	if !all {
		return false, nil
	}
	var errs []error
	for i, r := range reqs {
		if r != nil && r.err != nil { // complete: err is final
			errs = append(errs, &RequestError{Index: i, Err: r.err})
		}
		reqs[i] = nil
	}
	return true, errors.Join(errs...)
}

// Waitany waits until one of the requests of reqs has completed
// (MPI_Waitany), sets its entry to nil and returns its index and error.
// If no entry is active (reqs is empty or all nil) it returns Undefined
// and nil at once, as MPI returns MPI_UNDEFINED. If ctx ends first it
// returns Undefined and ctx's error, and the requests stay active
// (Waitall with an ended context abandons them).
func Waitany(ctx context.Context, reqs []*Request) (int, error) {
	for i := 0; ; i++ {
		idx, done, err := Testany(reqs)
		if done {
			return idx, err
		}
		if one := onlyActive(reqs); one >= 0 {
			// One request left: wait on it alone, sleeping on the CQ.
			if err := reqs[one].complete(ctx); err != nil {
				return Undefined, err
			}
			continue
		}
		if err := fabric.Backoff(ctx, i); err != nil {
			return Undefined, err
		}
	}
}

// Testany reports whether one of the requests of reqs has completed,
// without waiting (MPI_Testany), making progress on the way. If one has,
// it sets its entry to nil and returns its index, true and its error. If
// none is active it returns Undefined and true; otherwise Undefined and
// false.
func Testany(reqs []*Request) (int, bool, error) {
	active := false
	for i, r := range reqs {
		if r == nil {
			continue
		}
		active = true
		if done, err := r.Test(); done {
			reqs[i] = nil
			return i, true, err
		}
	}
	return Undefined, !active, nil
}

// Waitsome waits until at least one of the requests of reqs has completed
// (MPI_Waitsome), sets the entries of every completed one to nil, and
// returns their indices appended to indices, with the errors.Join of a
// *RequestError per failed one. If no entry is active it returns indices
// unchanged at once (MPI's outcount MPI_UNDEFINED). If ctx ends first it
// returns ctx's error and the requests stay active.
func Waitsome(ctx context.Context, reqs []*Request, indices []int) ([]int, error) {
	for i := 0; ; i++ {
		out, active, err := testsome(reqs, indices)
		if !active || len(out) > len(indices) {
			return out, err
		}
		if err := fabric.Backoff(ctx, i); err != nil {
			return indices, err
		}
	}
}

// Testsome is Waitsome without the wait (MPI_Testsome): it sets the
// entries of the requests of reqs that have completed to nil, making
// progress on the others, and returns their indices appended to indices,
// none if none has, with the errors.Join of a *RequestError per failed
// one. Whether any entry is still active (MPI's outcount MPI_UNDEFINED
// when none is) shows in reqs: all nil.
func Testsome(reqs []*Request, indices []int) ([]int, error) {
	indices, _, err := testsome(reqs, indices)
	return indices, err
}

// testsome is Testsome that also reports whether an entry was active.
func testsome(reqs []*Request, indices []int) ([]int, bool, error) {
	var errs []error
	active := false
	for k, r := range reqs {
		if r == nil {
			continue
		}
		active = true
		if done, err := r.Test(); done {
			indices = append(indices, k)
			if err != nil {
				errs = append(errs, &RequestError{Index: k, Err: err})
			}
			reqs[k] = nil
		}
	}
	return indices, active, errors.Join(errs...)
}

// onlyActive is the index of the one non-nil request of reqs, or -1.
func onlyActive(reqs []*Request) int {
	one := -1
	for i, r := range reqs {
		if r != nil {
			if one >= 0 {
				return -1
			}
			one = i
		}
	}
	return one
}
