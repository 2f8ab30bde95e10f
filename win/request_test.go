package win

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// doneRequest is a request that completed with err.
func doneRequest(err error) *Request {
	r := &Request{err: err}
	r.done.Store(true)
	return r
}

func TestRequestNil(t *testing.T) {
	var r *Request // MPI_REQUEST_NULL
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Wait(ctx); err != nil {
		t.Errorf("Wait on a nil request = %v, want nil", err)
	}
	if done, err := r.Test(); !done || err != nil {
		t.Errorf("Test on a nil request = %v, %v; want true, nil", done, err)
	}
}

func TestRequestDoneKeepsStatus(t *testing.T) {
	errX := errors.New("x")
	r := doneRequest(errX)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// Complete before Wait: an ended context does not matter.
	for i := 0; i < 2; i++ {
		if err := r.Wait(ctx); err != errX {
			t.Errorf("Wait %d = %v, want %v", i, err, errX)
		}
		if done, err := r.Test(); !done || err != errX {
			t.Errorf("Test %d = %v, %v; want true, %v", i, done, err, errX)
		}
	}
	if err := completedOK.Wait(ctx); err != nil {
		t.Errorf("Wait on the shared complete request = %v", err)
	}
}

func TestWaitall(t *testing.T) {
	errA, errB := errors.New("a"), errors.New("b")
	reqs := []*Request{doneRequest(nil), nil, doneRequest(errA), completedOK, doneRequest(errB)}
	err := Waitall(context.Background(), reqs)
	if !errors.Is(err, errA) || !errors.Is(err, errB) {
		t.Fatalf("Waitall = %v, want it to wrap a and b", err)
	}
	var idx []int
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var re *RequestError
		if !errors.As(e, &re) {
			t.Fatalf("joined error %v is not a *RequestError", e)
		}
		idx = append(idx, re.Index)
	}
	if !slices.Equal(idx, []int{2, 4}) {
		t.Errorf("failed indices %v, want [2 4]", idx)
	}
	if got := err.Error(); got != "request 2: a\nrequest 4: b" {
		t.Errorf("Waitall error text %q", got)
	}
	for i, r := range reqs {
		if r != nil {
			t.Errorf("entry %d not set to nil", i)
		}
	}
	if err := Waitall(context.Background(), nil); err != nil {
		t.Errorf("Waitall(nil) = %v", err)
	}
	if err := Waitall(context.Background(), []*Request{completedOK, nil}); err != nil {
		t.Errorf("Waitall of successes = %v", err)
	}
}

func TestWaitanyEachOnce(t *testing.T) {
	errA := errors.New("a")
	reqs := []*Request{nil, doneRequest(nil), doneRequest(errA), nil, completedOK}
	var got []int
	for {
		i, err := Waitany(context.Background(), reqs)
		if i == Undefined {
			if err != nil {
				t.Errorf("Waitany with no active request: %v, want nil", err)
			}
			break
		}
		if (i == 2) != (err == errA) {
			t.Errorf("Waitany index %d with error %v", i, err)
		}
		if reqs[i] != nil {
			t.Errorf("Waitany left entry %d set", i)
		}
		got = append(got, i)
		if len(got) > len(reqs) {
			t.Fatalf("Waitany returned %v", got)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, []int{1, 2, 4}) {
		t.Errorf("Waitany returned %v, want each of 1, 2, 4 once", got)
	}
	if i, err := Waitany(context.Background(), nil); i != Undefined || err != nil {
		t.Errorf("Waitany(nil) = %d, %v", i, err)
	}
}

func TestTestanyTestall(t *testing.T) {
	if i, done, err := Testany(nil); i != Undefined || !done || err != nil {
		t.Errorf("Testany(nil) = %d, %v, %v; want Undefined, true, nil", i, done, err)
	}
	reqs := []*Request{nil, doneRequest(nil)}
	if i, done, err := Testany(reqs); i != 1 || !done || err != nil || reqs[1] != nil {
		t.Errorf("Testany = %d, %v, %v (entry %v); want 1, true, nil and the entry nil", i, done, err, reqs[1])
	}
	errA := errors.New("a")
	reqs = []*Request{doneRequest(errA), nil, completedOK}
	done, err := Testall(reqs)
	var re *RequestError
	if !done || !errors.As(err, &re) || re.Index != 0 || !errors.Is(err, errA) {
		t.Errorf("Testall = %v, %v; want true and request 0's error", done, err)
	}
	for i, r := range reqs {
		if r != nil {
			t.Errorf("Testall left entry %d set", i)
		}
	}
	if done, err := Testall(nil); !done || err != nil {
		t.Errorf("Testall(nil) = %v, %v", done, err)
	}
}

func TestWaitsome(t *testing.T) {
	errA := errors.New("a")
	reqs := []*Request{doneRequest(nil), nil, doneRequest(errA)}
	idx, err := Waitsome(context.Background(), reqs, make([]int, 0, 4))
	if !slices.Equal(idx, []int{0, 2}) || !errors.Is(err, errA) {
		t.Errorf("Waitsome = %v, %v; want [0 2] and a", idx, err)
	}
	idx, err = Waitsome(context.Background(), reqs, idx[:0])
	if len(idx) != 0 || err != nil {
		t.Errorf("Waitsome with no active request = %v, %v; want none, nil", idx, err)
	}
}

func TestTestsome(t *testing.T) {
	errA := errors.New("a")
	reqs := []*Request{doneRequest(errA), nil, completedOK}
	idx, err := Testsome(reqs, []int{7})
	var re *RequestError
	if !slices.Equal(idx, []int{7, 0, 2}) || !errors.As(err, &re) || re.Index != 0 || !errors.Is(err, errA) {
		t.Errorf("Testsome = %v, %v; want [7 0 2] and request 0's error", idx, err)
	}
	if reqs[0] != nil || reqs[2] != nil {
		t.Errorf("Testsome left %v set", reqs)
	}
	if idx, err := Testsome(reqs, nil); len(idx) != 0 || err != nil {
		t.Errorf("Testsome with no active request = %v, %v", idx, err)
	}
}

// The window's list of outstanding requests: oldest first, bounded by the
// sequence number a flush started at, unlinked in any order.
func TestRequestList(t *testing.T) {
	w := &Window{remote: make([]target, 2)}
	var rs []*Request
	for i := 0; i < 4; i++ {
		r := &Request{w: w, rank: 1}
		w.reqs.add(w, r)
		rs = append(rs, r)
	}
	l := w.reqs.list(w, 1)
	if got := l.oldest(^uint64(0)); got != rs[0] {
		t.Fatalf("oldest = request %d, want 0", slices.Index(rs, got))
	}
	if got := l.oldest(0); got != nil {
		t.Errorf("oldest(0) = request %d, want none (added after)", slices.Index(rs, got))
	}
	w.reqs.unlink(rs[0])
	w.reqs.unlink(rs[2])
	w.reqs.unlink(rs[2]) // twice: no effect
	if got := l.oldest(rs[1].seq); got != rs[1] {
		t.Errorf("oldest after unlinking 0 and 2 = request %d, want 1", slices.Index(rs, got))
	}
	w.reqs.unlink(rs[1])
	if got := l.oldest(rs[1].seq); got != nil {
		t.Errorf("oldest(seq of 1) = request %d, want none (3 was added after)", slices.Index(rs, got))
	}
	if got := l.oldest(^uint64(0)); got != rs[3] {
		t.Errorf("oldest = request %d, want 3", slices.Index(rs, got))
	}
	w.reqs.unlink(rs[3])
	if l.head != nil || l.tail != nil {
		t.Errorf("list not empty after unlinking every request")
	}
	if other := w.reqs.list(w, 0); other.head != nil {
		t.Errorf("rank 0's list holds requests to rank 1")
	}
}
