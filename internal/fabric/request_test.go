package fabric

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/onesided/rma/verbs"
)

// TestReadOpFinish: a read finished by another transport is done with its
// error; the calls that drive a read then have nothing to do.
func TestReadOpFinish(t *testing.T) {
	var op ReadOp
	if op.Done() || op.Err() != nil {
		t.Fatalf("a read not started: done %v, err %v", op.Done(), op.Err())
	}
	bad := errors.New("bad")
	op.Finish(bad)
	if !op.Done() || op.Err() != bad {
		t.Errorf("finished read: done %v, err %v", op.Done(), op.Err())
	}
	if !op.Test() || op.Complete(context.Background()) != nil || op.Abandon() {
		t.Error("Test, Complete or Abandon of a finished read did something")
	}
	var ok ReadOp
	ok.Finish(nil)
	if !ok.Done() || ok.Err() != nil {
		t.Errorf("read finished without error: done %v, err %v", ok.Done(), ok.Err())
	}
}

// TestStartDone: a read that cannot start, or has nothing to read, is done
// at Start, with its error, holding nothing.
func TestStartDone(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 3})
	f.setLost(2, errors.New("test"))
	closedFab := newTestFabric(t, fabOpts{size: 3})
	closedFab.Close()
	dst := make([]byte, 10)
	for _, c := range []struct {
		name string
		f    *Fabric
		rank int
		dst  []byte
		segs []Segment
		want error // nil: done without error
		msg  string
	}{
		{"too short", f, 1, dst, []Segment{{Addr: 1, Len: 4}}, errAny, "read of 4 bytes into a 10-byte buffer"},
		{"too long", f, 1, dst, []Segment{{Addr: 1, Len: 6}, {Addr: 9, Len: 6}}, errAny, "read of 12 bytes"},
		{"negative segment", f, 1, dst, []Segment{{Addr: 1, Len: 20}, {Addr: 9, Len: -10}}, errAny, ""},
		{"rank -1", f, -1, dst, []Segment{{Addr: 1, Len: 10}}, errAny, "rank -1 of 3"},
		{"rank 3", f, 3, dst, []Segment{{Addr: 1, Len: 10}}, errAny, "rank 3 of 3"},
		{"lost rank", f, 2, dst, []Segment{{Addr: 1, Len: 10}}, ErrPeerLost, ""},
		{"closed", closedFab, 1, dst, []Segment{{Addr: 1, Len: 10}}, verbs.ErrClosed, ""},
		{"nothing", f, 1, nil, nil, nil, ""},
		{"empty segments", f, 2, nil, []Segment{{Addr: 1}, {Addr: 2}}, nil, ""},
	} {
		var op ReadOp
		c.f.Reads().StartV(&op, c.rank, 7, c.dst, c.segs)
		if !op.Done() {
			t.Errorf("%s: not done at Start", c.name)
			continue
		}
		err := op.Err()
		switch {
		case c.want == nil && err != nil:
			t.Errorf("%s: %v, want nil", c.name, err)
		case c.want == errAny && (err == nil || !bytes.Contains([]byte(err.Error()), []byte(c.msg))):
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.msg)
		case c.want != nil && c.want != errAny && !errors.Is(err, c.want):
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if c.f.reads.slots != 0 || c.f.reads.head != nil || int(c.f.nfree.Load()) != len(c.f.slots) {
			t.Errorf("%s: the read holds %d slots of the budget (listed %v), %d slots free", c.name,
				c.f.reads.slots, c.f.reads.head != nil, c.f.nfree.Load())
		}
	}
	var op ReadOp
	f.Reads().Start(&op, 1, nil, 0, 0)
	if !op.Done() || op.Err() != nil {
		t.Errorf("Start of 0 bytes: done %v, %v", op.Done(), op.Err())
	}
}

var errAny = errors.New("any error")

// TestReadWaitsForConnection: a read to a rank whose connection is not up
// posts nothing and holds nothing (it asks the manager for the
// connection); Test and Complete try again, Complete until its context
// ends, and the read goes on; Close fails it; Abandon stops it.
func TestReadWaitsForConnection(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 2})
	var op ReadOp
	dst := make([]byte, 1000)
	f.Reads().Start(&op, 1, dst, 0x1000, 7)
	if op.Done() || !f.peers[1].want.Load() || !kicked(f) {
		t.Fatalf("read to a rank not connected: done %v (%v), connection asked for %v", op.Done(), op.Err(), f.peers[1].want.Load())
	}
	check := func(when string) {
		t.Helper()
		if f.reads.slots != 0 || f.reads.chunks != 0 || f.reads.head != nil || int(f.nfree.Load()) != len(f.slots) || len(f.freeChunks) != cap(f.freeChunks) {
			t.Errorf("%s: budget %d slots %d chunks (listed %v), %d slots and %d chunks free", when,
				f.reads.slots, f.reads.chunks, f.reads.head != nil, f.nfree.Load(), len(f.freeChunks))
		}
	}
	check("after Start")
	if op.Test() {
		t.Error("Test of a read that cannot post reports it done")
	}
	check("after Test")
	if err := op.Complete(short(t, 2*time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) || op.Done() {
		t.Errorf("Complete with a 2 ms context: %v, done %v; want the deadline, not done", err, op.Done())
	}
	check("after Complete")

	var op2 ReadOp
	f.Reads().Start(&op2, 1, make([]byte, 8), 0x1000, 7)
	if !op2.Abandon() || !op2.Done() {
		t.Error("Abandon of an active read did not stop it")
	}
	if op2.Abandon() {
		t.Error("a second Abandon reported it stopped the read")
	}

	errc := make(chan error)
	go func() { errc <- op.Complete(context.Background()) }()
	time.Sleep(time.Millisecond)
	f.Close()
	// The read fails with errClosed. (Complete returns it when the wait
	// sees the fabric closing, nil when the read fails on its rank's
	// error, which Close sets: Err tells.)
	if err := <-errc; (err != nil && !errors.Is(err, verbs.ErrClosed)) || !op.Done() || !errors.Is(op.Err(), verbs.ErrClosed) {
		t.Errorf("Complete when the fabric closed: %v, done %v, err %v", err, op.Done(), op.Err())
	}
	var op3 ReadOp
	f.Reads().Start(&op3, 0, make([]byte, 8), 0, 0)
	if !errors.Is(op3.Err(), verbs.ErrClosed) {
		t.Errorf("Start after Close: %v", op3.Err())
	}
}

// inflight records a piece of n bytes of op as posted, as postLocked does
// once the READ is posted: its budget, a slot, a chunk if larger than a
// slot's scratch. It returns the slot.
func inflight(t *testing.T, op *ReadOp, n int) uint32 {
	t.Helper()
	rs, f := op.rs, op.rs.f
	staged := n > slotScratch
	if !rs.take(op, staged) {
		t.Fatal("no budget")
	}
	id, ok := f.tryAcquireSlot(op.rank, false)
	if !ok {
		t.Fatal("no slot")
	}
	if staged {
		c, ok := f.tryAcquireChunk()
		if !ok {
			t.Fatal("no chunk")
		}
		f.slots[id].chunk = c
	}
	f.posting(id, &f.peers[op.rank], f.peers[op.rank].cur)
	op.ring[op.tail%readRing] = readPiece{id: id, n: int32(n), chunk: staged}
	if op.tail == op.head {
		op.headID.Store(int64(id))
	}
	op.tail++
	return id
}

// arrive writes what the READ of slot id brought (into its chunk or its
// scratch) and completes it.
func arrive(f *Fabric, id uint32, data []byte, st verbs.WCStatus) {
	if c := f.slots[id].chunk; c >= 0 {
		copy(f.chunk(c), data)
	} else {
		copy(f.scratch(id), data)
	}
	complete(f, wc(id, st))
}

// newRead is a read of dst from the own rank whose pieces the test posts
// (inflight).
func newRead(f *Fabric, dst []byte) *ReadOp {
	op := &ReadOp{rs: &f.reads, rank: f.rank, dst: dst}
	op.one[0] = Segment{Addr: 0x1000, Len: len(dst)}
	op.segs = op.one[:]
	op.seg = 1 // every piece posted
	op.headID.Store(-1)
	return op
}

// TestReadHarvest: the pieces are copied into dst in order, as they
// complete, oldest first (one that completes early waits for those before
// it), and each frees its slot, chunk and budget; the read is done when the
// last is harvested. Complete drives it while the completions come.
func TestReadHarvest(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 1, slots: 8, chunks: 4, chunkSize: 1024})
	data := make([]byte, 100+1000+200)
	for i := range data {
		data[i] = byte(i * 7)
	}
	dst := make([]byte, len(data))
	op := newRead(f, dst)
	a := inflight(t, op, 100)  // scratch
	b := inflight(t, op, 1000) // chunk
	c := inflight(t, op, 200)  // scratch
	if f.reads.slots != 3 || f.reads.chunks != 1 || f.reads.head != op {
		t.Fatalf("budget %d slots %d chunks, listed %v", f.reads.slots, f.reads.chunks, f.reads.head == op)
	}
	arrive(f, b, data[100:1100], verbs.WCSuccess)
	if op.Test() {
		t.Fatal("done with two pieces outstanding")
	}
	if !bytes.Equal(dst, make([]byte, len(dst))) || op.headID.Load() != int64(a) || f.reads.slots != 3 {
		t.Fatalf("a piece was harvested before the one ahead of it (head %d, budget %d)", op.headID.Load(), f.reads.slots)
	}
	errc := make(chan error)
	go func() { errc <- op.Complete(context.Background()) }()
	arrive(f, a, data[:100], verbs.WCSuccess)
	time.Sleep(time.Millisecond)
	arrive(f, c, data[1100:], verbs.WCSuccess)
	if err := <-errc; err != nil || !op.Done() || op.Err() != nil {
		t.Fatalf("Complete: %v, done %v, err %v", err, op.Done(), op.Err())
	}
	if !bytes.Equal(dst, data) {
		t.Error("dst does not hold the pieces in order")
	}
	if f.reads.slots != 0 || f.reads.chunks != 0 || f.reads.head != nil || f.nfree.Load() != 8 || len(f.freeChunks) != 4 {
		t.Errorf("after the read: budget %d slots %d chunks (listed %v), %d slots %d chunks free",
			f.reads.slots, f.reads.chunks, f.reads.head != nil, f.nfree.Load(), len(f.freeChunks))
	}
}

// TestReadHarvestError: a failed piece fails the read; the pieces after
// it are not copied, and everything is freed.
func TestReadHarvestError(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 1})
	dst := make([]byte, 30)
	op := newRead(f, dst)
	a, b, c := inflight(t, op, 10), inflight(t, op, 10), inflight(t, op, 10)
	arrive(f, a, bytes.Repeat([]byte{1}, 10), verbs.WCSuccess)
	arrive(f, b, bytes.Repeat([]byte{2}, 10), verbs.WCRemAccessErr)
	arrive(f, c, bytes.Repeat([]byte{3}, 10), verbs.WCSuccess)
	if !op.Test() || !errors.Is(op.Err(), verbs.ErrRemoteAccess) {
		t.Fatalf("read with a failed piece: done %v, err %v", op.Done(), op.Err())
	}
	want := append(bytes.Repeat([]byte{1}, 10), make([]byte, 20)...)
	if !bytes.Equal(dst, want) {
		t.Errorf("dst %v, want the first piece alone", dst)
	}
	if f.reads.slots != 0 || f.reads.head != nil || int(f.nfree.Load()) != len(f.slots) {
		t.Errorf("after the failed read: budget %d (listed %v), %d slots free", f.reads.slots, f.reads.head != nil, f.nfree.Load())
	}
}

// TestReadClosed: a read with a piece in flight when the fabric closes
// fails with errClosed (the piece never completes), which Complete
// returns; Test of it reports it done.
func TestReadClosed(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 1})
	op := newRead(f, make([]byte, 10))
	inflight(t, op, 10)
	errc := make(chan error)
	go func() { errc <- op.Complete(context.Background()) }()
	time.Sleep(time.Millisecond)
	f.Close()
	if err := <-errc; !errors.Is(err, verbs.ErrClosed) || !errors.Is(op.Err(), verbs.ErrClosed) {
		t.Errorf("Complete when the fabric closed: %v, err %v; want verbs.ErrClosed", err, op.Err())
	}
	op2 := newRead(f, make([]byte, 10))
	op2.tail = 1 // a piece in flight
	if !op2.Test() || !errors.Is(op2.Err(), verbs.ErrClosed) {
		t.Errorf("Test after Close: done %v, err %v", op2.Done(), op2.Err())
	}
}

// TestReadAbandon: Abandon frees at once what has completed, leaves the
// pieces in flight to their completions (which free them without writing
// dst), and gives the budget back.
func TestReadAbandon(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 1, slots: 8, chunks: 2, chunkSize: 512})
	dst := make([]byte, 10+500)
	op := newRead(f, dst)
	a := inflight(t, op, 10)
	b := inflight(t, op, 500)
	arrive(f, a, bytes.Repeat([]byte{1}, 10), verbs.WCSuccess)
	if !op.Abandon() || !op.Done() {
		t.Fatal("Abandon did not stop the read")
	}
	if f.slots[a].state.Load() != slotFree || f.slots[b].state.Load() != slotAbandoned {
		t.Errorf("after Abandon: completed piece's slot state %d, in-flight one's %d", f.slots[a].state.Load(), f.slots[b].state.Load())
	}
	if f.reads.slots != 0 || f.reads.chunks != 0 || f.reads.head != nil {
		t.Errorf("after Abandon: budget %d slots %d chunks (listed %v)", f.reads.slots, f.reads.chunks, f.reads.head != nil)
	}
	arrive(f, b, bytes.Repeat([]byte{2}, 500), verbs.WCSuccess)
	if !bytes.Equal(dst, make([]byte, len(dst))) {
		t.Error("the abandoned read wrote dst")
	}
	if f.nfree.Load() != 8 || len(f.freeChunks) != 2 {
		t.Errorf("%d slots and %d chunks free after the last completion, want 8 and 2", f.nfree.Load(), len(f.freeChunks))
	}
}

// TestReadBudget: request reads hold at most their budget of slots and
// chunks; the reads holding pieces are listed, and leave the list when
// they hold none.
func TestReadBudget(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 1, readSlots: 3, readCh: 1})
	rs := &f.reads
	a, b, c := newRead(f, nil), newRead(f, nil), newRead(f, nil)
	list := func() []*ReadOp {
		var l []*ReadOp
		for o := rs.head; o != nil; o = o.next {
			if o.next != nil && o.next.prev != o {
				t.Fatal("list links broken")
			}
			l = append(l, o)
		}
		return l
	}
	if !rs.take(a, true) || !rs.take(b, false) {
		t.Fatal("take within the budget refused")
	}
	if rs.take(c, true) {
		t.Error("a second chunk granted with a budget of one")
	}
	if l := list(); len(l) != 2 || l[0] != b || l[1] != a || c.listed {
		t.Errorf("list %v, want b, a", l)
	}
	if !rs.take(a, false) || rs.take(c, false) {
		t.Error("the third slot refused, or a fourth granted")
	}
	// a holds pieces (head < tail): it stays listed when it gives some back.
	a.tail = 1
	rs.give(a, 1, 0)
	if !a.listed {
		t.Error("a read still holding a piece left the list")
	}
	a.tail = 0
	rs.give(a, 1, 1)
	if l := list(); len(l) != 1 || l[0] != b || a.listed || a.prev != nil || a.next != nil {
		t.Errorf("list after a gave back everything: %v", l)
	}
	if !rs.take(c, true) {
		t.Error("the chunk given back is not granted again")
	}
	rs.give(b, 1, 0)
	rs.give(c, 1, 1)
	if rs.head != nil || rs.slots != 0 || rs.chunks != 0 {
		t.Errorf("after every give: listed %v, %d slots %d chunks", rs.head != nil, rs.slots, rs.chunks)
	}
}

// TestReadHarvestsOthers: a read that finds the budget spent harvests the
// other reads' finished pieces, which completes them.
func TestReadHarvestsOthers(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 2, readSlots: 1})
	dst := make([]byte, 16)
	other := newRead(f, dst)
	id := inflight(t, other, 16)
	arrive(f, id, []byte("0123456789abcdef"), verbs.WCSuccess)
	var op ReadOp // to rank 1, not connected: it will post nothing
	f.Reads().Start(&op, 1, make([]byte, 8), 0, 0)
	if !other.Done() || other.Err() != nil || string(dst) != "0123456789abcdef" {
		t.Errorf("the other read: done %v, err %v, dst %q", other.Done(), other.Err(), dst)
	}
	if f.reads.slots != 0 || int(f.nfree.Load()) != len(f.slots) {
		t.Errorf("budget %d, %d slots free after the harvest", f.reads.slots, f.nfree.Load())
	}
	op.Abandon()
}

// TestBackoff: it returns at once once the context has ended; it yields
// for the first 64 rounds, then sleeps, at most 128us.
func TestBackoff(t *testing.T) {
	if err := Backoff(ended(), 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Backoff with an ended context: %v", err)
	}
	if err := Backoff(ended(), 1000); !errors.Is(err, context.Canceled) {
		t.Errorf("Backoff(1000) with an ended context: %v", err)
	}
	for _, c := range []struct {
		i     int
		least time.Duration
	}{
		{0, 0}, {63, 0}, {64, time.Microsecond}, {72, 2 * time.Microsecond},
		{120, 128 * time.Microsecond}, {1 << 20, 128 * time.Microsecond},
	} {
		start := time.Now()
		if err := Backoff(context.Background(), c.i); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < c.least || d > 100*time.Millisecond {
			t.Errorf("Backoff(%d) took %v, want at least %v (and not much more)", c.i, d, c.least)
		}
	}
}
