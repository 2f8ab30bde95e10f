package fabric

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestReplyTo: the target applies a request at most once. A request that
// comes again (the same credit and sequence number: sent again after its
// connection failed) gets the reply recorded the first time, unchanged by
// what the handler would answer now; the next use of the credit (the next
// sequence number) is applied; sequence number 0 is no request's, and
// credits and ranks keep their own records.
func TestReplyTo(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 2, credits: 2})
	m := &f.m
	applied := 0
	m.h.Request = func(rank int, req, reply []byte) []byte {
		applied++
		return fmt.Appendf(reply, "%d:%s#%d", rank, req, applied)
	}
	for i, c := range []struct {
		rank, credit int
		seq          uint32
		req          string
		want         string
		applied      int
	}{
		{1, 0, 1, "a", "1:a#1", 1},
		{1, 0, 1, "a", "1:a#1", 1}, // sent again: the recorded reply
		{1, 0, 1, "a", "1:a#1", 1},
		{1, 1, 1, "b", "1:b#2", 2}, // another credit
		{0, 0, 1, "c", "0:c#3", 3}, // another rank
		{1, 0, 2, "d", "1:d#4", 4}, // the credit's next request
		{1, 0, 2, "d", "1:d#4", 4},
		{1, 0, 0, "e", "1:e#5", 5}, // no sequence number: always applied
		{1, 0, 0, "e", "1:e#6", 6},
		{1, 1, 1, "b", "1:b#2", 6}, // credit 1's record stands
		{1, 1, seqMask, "f", "1:f#7", 7},
		{1, 1, 1, "g", "1:g#8", 8}, // after the wrap: a new request
	} {
		buf := make([]byte, 0, 64)
		got := m.replyTo(c.rank, c.credit, c.seq, []byte(c.req), buf)
		if string(got) != c.want || applied != c.applied {
			t.Errorf("%d: rank %d credit %d seq %d: reply %q, applied %d times; want %q, %d",
				i, c.rank, c.credit, c.seq, got, applied, c.want, c.applied)
		}
		if len(got) > 0 && &got[:1][0] != &buf[:1][0] {
			t.Errorf("%d: the reply is not in the buffer given", i)
		}
		// The record is a copy: reusing the buffer leaves it intact.
		for j := range got {
			got[j] = 'x'
		}
	}
}

// TestOnRequestDefers: a request that finds no slot or no reply buffer,
// and every request after it while one waits, is copied aside in the
// order they came; requests no conforming origin sends (credit out of
// range, no handler) are dropped; more than every peer's credits fault
// the connection.
func TestOnRequestDefers(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 2, slots: 2, credits: 2})
	m := &f.m
	m.h.Request = func(rank int, req, reply []byte) []byte {
		t.Fatalf("request %q served ahead of the deferred ones, or without a reply buffer", req)
		return nil
	}
	cn := connectPeer(f, 1)
	var bufs []uint16
	for len(m.repFree) > 0 {
		bufs = append(bufs, <-m.repFree) // no reply buffer free
	}
	recv := []byte("first")
	m.recvMu.Lock()
	f.onRequest(cn, 0, 0, 1, recv)
	copy(recv, "XXXXX") // the receive buffer goes back to the SRQ
	f.onRequest(cn, 0, 2, 1, []byte("out of range"))
	f.m.recvMu.Unlock()
	if f.nfree.Load() != 2 {
		t.Errorf("%d slots free after a request found no reply buffer, want 2 (none kept)", f.nfree.Load())
	}
	for _, b := range bufs {
		m.repFree <- b
	}
	// Room now, but a request waits: the next ones wait behind it.
	m.recvMu.Lock()
	f.onRequest(cn, 0, 1, 1, []byte("second"))
	f.onRequest(cn, 1, 0, 2, []byte("third"))
	m.recvMu.Unlock()
	want := []string{"first/0/1/0", "second/1/1/0", "third/0/2/1"}
	if got := deferredList(m); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("deferred: %v, want %v", got, want)
	}

	// Without a handler, nothing is taken.
	h := m.h
	m.h.Request = nil
	m.recvMu.Lock()
	f.onRequest(cn, 0, 0, 3, []byte("no handler"))
	m.recvMu.Unlock()
	m.h = h
	if len(m.deferred) != 3 {
		t.Errorf("%d deferred after a request with no handler, want 3", len(m.deferred))
	}

	// The list holds every peer's credits (4); a fifth faults the
	// connection, whose origin is not conforming.
	m.recvMu.Lock()
	f.onRequest(cn, 0, 1, 3, []byte("fourth"))
	kicked(f)
	f.onRequest(cn, 0, 1, 4, []byte("fifth"))
	m.recvMu.Unlock()
	if len(m.deferred) != 4 || !cn.faulted.Load() || !kicked(f) {
		t.Errorf("%d deferred, connection faulted %v: want 4, true", len(m.deferred), cn.faulted.Load())
	}
}

func deferredList(m *messaging) []string {
	var s []string
	for _, d := range m.deferred {
		s = append(s, fmt.Sprintf("%s/%d/%d/%d", d.req, d.credit, d.seq, d.side))
	}
	return s
}

// TestServeDeferred: the deferred requests are served in order as far as
// resources allow; those of a connection retired meanwhile are dropped
// (their origin sends them again), and their copies' buffers are kept for
// the next deferral.
func TestServeDeferred(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 2, slots: 1, credits: 2})
	m := &f.m
	m.h.Request = func(rank int, req, reply []byte) []byte {
		t.Fatalf("request %q served with no slot free", req)
		return nil
	}
	old := connectPeer(f, 1)
	cn := connectPeer(f, 1)
	f.tryAcquireSlot(0, false) // no slot free
	m.recvMu.Lock()
	f.onRequest(old, 0, 0, 1, []byte("old-a"))
	f.onRequest(cn, 0, 1, 1, []byte("live"))
	f.onRequest(old, 0, 0, 2, []byte("old-b"))
	old.retired.Store(true)
	m.recvMu.Unlock()
	f.Progress() // serves the deferred requests first
	if got, want := fmt.Sprint(deferredList(m)), "[live/1/1/0 old-b/0/2/0]"; got != want {
		t.Errorf("deferred after serving with no slot: %v, want %v", got, want)
	}
	if len(m.spare) != 1 || string(m.spare[0]) != "old-a" {
		t.Fatalf("spare buffers: %q, want the dropped request's", m.spare)
	}
	spare := &m.spare[0][:1][0]
	m.recvMu.Lock()
	f.onRequest(cn, 0, 0, 3, []byte("next"))
	m.recvMu.Unlock()
	if d := m.deferred[len(m.deferred)-1]; string(d.req) != "next" || &d.req[0] != spare || len(m.spare) != 0 {
		t.Errorf("the next deferral did not reuse the spare buffer (%q)", d.req)
	}
}

// TestServeNoRoom: serve takes nothing when a slot or a reply buffer is
// missing, and applies nothing.
func TestServeNoRoom(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 2, slots: 1, credits: 2})
	m := &f.m
	m.h.Request = func(int, []byte, []byte) []byte { t.Fatal("applied without room"); return nil }
	cn := connectPeer(f, 1)
	rb := <-m.repFree
	b2 := <-m.repFree
	m.recvMu.Lock()
	ok := f.serve(cn, 0, 0, 1, []byte("x"))
	m.recvMu.Unlock()
	if ok || f.nfree.Load() != 1 {
		t.Errorf("serve with no reply buffer: %v, %d slots free; want false, 1", ok, f.nfree.Load())
	}
	m.repFree <- rb
	m.repFree <- b2
	id, _ := f.tryAcquireSlot(0, false)
	m.recvMu.Lock()
	ok = f.serve(cn, 0, 0, 1, []byte("x"))
	m.recvMu.Unlock()
	if ok || len(m.repFree) != 2 {
		t.Errorf("serve with no slot: %v, %d reply buffers free; want false, 2", ok, len(m.repFree))
	}
	f.releaseSlot(id)
}

// TestAwaitReplyRoom: the engine's wait for room for a deferred request
// returns once a slot and a reply buffer are free, and otherwise within
// about a millisecond (or its context).
func TestAwaitReplyRoom(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 1, slots: 1, credits: 1})
	start := time.Now()
	f.awaitReplyRoom(context.Background())
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("awaitReplyRoom with room took %v", d)
	}
	id, _ := f.tryAcquireSlot(0, false)
	start = time.Now()
	f.awaitReplyRoom(context.Background())
	if d := time.Since(start); d < time.Millisecond || d > 500*time.Millisecond {
		t.Errorf("awaitReplyRoom without a slot took %v, want about 1 ms", d)
	}
	f.releaseSlot(id)
	rb := <-f.m.repFree
	start = time.Now()
	f.awaitReplyRoom(ended())
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("awaitReplyRoom without a reply buffer, its context ended, took %v", d)
	}
	f.m.repFree <- rb
}
