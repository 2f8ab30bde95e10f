package win

import (
	"context"

	"github.com/onesided/rma/fallback"
	"github.com/onesided/rma/op"
)

// Request is an RMA operation started by RPut, RGet, RAccumulate or
// RGetAccumulate (MPI_Request). Wait or Test complete it. A Request is used
// by one goroutine.
type Request struct {
	w        *Window
	rank     int
	fop      *fallback.Op // engine replies still to come
	done     chan struct{}
	cancel   context.CancelFunc
	err      error
	finished bool
}

func completed(err error) *Request { return &Request{err: err, finished: true} }

// Wait waits until the operation completes at the origin: for RPut and
// RAccumulate the origin buffer may be reused (true at once: the data was
// copied when the call returned), for RGet and RGetAccumulate the result
// buffer holds the values. If ctx ends first, Wait returns its error and the
// operation is abandoned: its result buffer is not written afterwards.
func (r *Request) Wait(ctx context.Context) error {
	if r.finished {
		return r.err
	}
	switch {
	case r.fop != nil:
		r.err = r.w.finish(ctx, r.rank, r.fop, nil)
	case r.done != nil:
		select {
		case <-r.done:
		case <-ctx.Done():
			r.cancel()
			<-r.done
			r.err = ctx.Err()
		}
	}
	r.finished = true
	return r.err
}

// Test reports whether the operation has completed, without waiting (it
// makes progress on the way), and its error if it has.
func (r *Request) Test() (bool, error) {
	if r.finished {
		return true, r.err
	}
	switch {
	case r.fop != nil:
		r.w.f.Progress()
		if !r.fop.Done() {
			return false, nil
		}
	case r.done != nil:
		select {
		case <-r.done:
		default:
			return false, nil
		}
	}
	return true, r.Wait(context.Background())
}

// RPut is the request-based Put (MPI_Rput).
func (w *Window) RPut(ctx context.Context, origin []byte, target, disp int) (*Request, error) {
	if err := w.Put(ctx, origin, target, disp); err != nil {
		return nil, err
	}
	return completed(nil), nil
}

// RAccumulate is the request-based Accumulate (MPI_Raccumulate).
func (w *Window) RAccumulate(ctx context.Context, origin Buffer, target Region, o op.Op) (*Request, error) {
	if err := w.AccumulateTo(ctx, origin, target, o); err != nil {
		return nil, err
	}
	return completed(nil), nil
}

// RGet is the request-based Get (MPI_Rget): result holds the data once the
// request completes.
func (w *Window) RGet(ctx context.Context, result []byte, target, disp int) (*Request, error) {
	if _, _, err := w.address(ctx, target, disp, len(result)); err != nil {
		return nil, err
	}
	inner, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &Request{w: w, rank: target, done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(r.done)
		defer cancel()
		r.err = w.Get(inner, result, target, disp)
	}()
	return r, nil
}

// RGetAccumulate is the request-based GetAccumulate (MPI_Rget_accumulate).
// The operation is sent, in order with this rank's other accumulates, when
// the call returns; completion means the result buffer holds the old values,
// not that the target was updated.
func (w *Window) RGetAccumulate(ctx context.Context, origin, result Buffer, t Region, o op.Op) (*Request, error) {
	if o == op.NoOp {
		origin = Buffer{Type: t.Type, Count: t.Count}
	}
	basic, d, err := w.check(ctx, o, op.GetAccumulate, &origin, &result, &t)
	if err != nil {
		return nil, err
	}
	if route := w.policy.FetchAndOp(o, basic); route.NIC() {
		return completed(w.nicAccumulate(ctx, o, basic, route, origin, result, t, d)), nil
	}
	fop := opPool.Get().(*fallback.Op)
	fop.Result, fop.ResultType, fop.ResultCount = result.Data, result.Type, result.Count
	if err := w.send(ctx, fallback.KindGetAccumulate, o, basic, origin, t, d, fop); err != nil {
		return nil, w.finish(ctx, t.Rank, fop, err)
	}
	return &Request{w: w, rank: t.Rank, fop: fop}, nil
}
