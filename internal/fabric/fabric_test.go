package fabric

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/onesided/rma/verbs"
)

// TestClose: Close waits for the calls in progress; then every call, and
// every rank's PeerErr, fails with an error matching verbs.ErrClosed;
// closing again does nothing.
func TestClose(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 3})
	if err := f.enter(); err != nil {
		t.Fatal(err)
	}
	closedc := make(chan error)
	go func() { closedc <- f.Close() }()
	time.Sleep(2 * time.Millisecond)
	select {
	case err := <-closedc:
		t.Fatalf("Close returned (%v) with a call in progress", err)
	default:
	}
	if !f.isClosing() {
		t.Error("a call in progress does not see Close begun")
	}
	if err := f.enter(); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("a call made during Close: %v, want verbs.ErrClosed", err)
	}
	f.exit()
	if err := <-closedc; err != nil {
		t.Errorf("Close: %v", err)
	}
	for r := 0; r < 3; r++ {
		if err := f.PeerErr(r); !errors.Is(err, verbs.ErrClosed) {
			t.Errorf("PeerErr(%d) after Close: %v", r, err)
		}
	}
	if !closed(f.closed) {
		t.Error("the closed channel is open after Close")
	}
	if err := f.Close(); err != nil {
		t.Errorf("Close again: %v", err)
	}
	if n := f.calls.Load(); n != 1 {
		t.Errorf("calls word %d after Close, want 1 (closed, none in progress)", n)
	}
}

// op is one of the fabric's calls to a rank.
type op struct {
	name string
	call func(f *Fabric, ctx context.Context, rank int) error
}

var ops = []op{
	{"Write small", func(f *Fabric, ctx context.Context, r int) error { return f.Write(ctx, r, make([]byte, 4), 0, 0) }},
	{"Write large", func(f *Fabric, ctx context.Context, r int) error { return f.Write(ctx, r, make([]byte, 5000), 0, 0) }},
	{"Read small", func(f *Fabric, ctx context.Context, r int) error { return f.Read(ctx, r, make([]byte, 8), 0, 0) }},
	{"Read large", func(f *Fabric, ctx context.Context, r int) error { return f.Read(ctx, r, make([]byte, 5000), 0, 0) }},
	{"ReadV", func(f *Fabric, ctx context.Context, r int) error {
		return f.ReadV(ctx, r, 0, make([]byte, 20), []Segment{{0, 10}, {100, 10}})
	}},
	{"Read8", func(f *Fabric, ctx context.Context, r int) error { _, err := f.Read8(ctx, r, 0, 0); return err }},
	{"FetchAdd", func(f *Fabric, ctx context.Context, r int) error { _, err := f.FetchAdd(ctx, r, 0, 0, 1); return err }},
	{"CompareSwap", func(f *Fabric, ctx context.Context, r int) error {
		_, err := f.CompareSwap(ctx, r, 0, 0, 1, 2)
		return err
	}},
	{"Words fetch-add", func(f *Fabric, ctx context.Context, r int) error {
		return f.Words(ctx, r, 0, true, []uint64{0, 8}, []uint64{1, 1}, make([]uint64, 2))
	}},
	{"Words read", func(f *Fabric, ctx context.Context, r int) error {
		return f.Words(ctx, r, 0, false, []uint64{0, 8}, nil, nil)
	}},
	{"Fenced", func(f *Fabric, ctx context.Context, r int) error { _, err := f.Fenced(ctx, r, 0); return err }},
	{"Acquire", func(f *Fabric, ctx context.Context, r int) error { _, _, err := f.Acquire(ctx, r); return err }},
}

// TestOpsLostRank: every operation on a lost rank fails with ErrPeerLost
// at once, whatever it would wait for (a slot, a staging chunk, a credit),
// and holds nothing afterwards.
func TestOpsLostRank(t *testing.T) {
	for _, o := range ops {
		f := newTestFabric(t, fabOpts{size: 2, slots: 2, chunks: 2, chunkSize: 1024, maxInline: 64})
		f.setLost(1, errors.New("test"))
		// Nothing free: a call that waited for a resource would wait
		// until its context ended.
		for range 2 {
			f.tryAcquireSlot(0, false)
			f.tryAcquireChunk()
		}
		if err := o.call(f, short(t, 2*time.Second), 1); !errors.Is(err, ErrPeerLost) {
			t.Errorf("%s on a lost rank: %v, want ErrPeerLost", o.name, err)
		}
		if f.nfree.Load() != 0 || len(f.freeChunks) != 0 || len(f.m.peers[1].free) != f.m.credits {
			t.Errorf("%s on a lost rank took or gave resources: %d slots, %d chunks, %d credits free", o.name,
				f.nfree.Load(), len(f.freeChunks), len(f.m.peers[1].free))
		}
		f.releaseSlot(0)
		f.releaseSlot(1)
		f.putChunk(0)
		f.putChunk(1)
	}
}

// TestOpsClosed: every call after Close fails with an error matching
// verbs.ErrClosed; those that only make progress do nothing.
func TestOpsClosed(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 2, maxInline: 64})
	f.Close()
	all := append(ops[:len(ops):len(ops)],
		op{"Flush", func(f *Fabric, ctx context.Context, r int) error { return f.Flush(ctx, r) }},
		op{"FlushAll", func(f *Fabric, ctx context.Context, r int) error { return f.FlushAll(ctx) }},
		op{"FlushMessages", func(f *Fabric, ctx context.Context, r int) error { return f.FlushMessages(ctx, r) }},
		op{"WaitMessages", func(f *Fabric, ctx context.Context, r int) error {
			return f.WaitMessages(ctx, r, func() bool { return true })
		}},
		op{"Probe", func(f *Fabric, ctx context.Context, r int) error { return f.Probe(ctx, r) }},
		op{"Settled", func(f *Fabric, ctx context.Context, r int) error { return f.Settled(ctx, r, nil) }},
		op{"Register", func(f *Fabric, ctx context.Context, r int) error {
			_, err := f.Register(make([]byte, 8), verbs.AccessRemoteRead)
			return err
		}},
	)
	for _, o := range all {
		for _, r := range []int{0, 1} {
			if err := o.call(f, context.Background(), r); !errors.Is(err, verbs.ErrClosed) {
				t.Errorf("%s to rank %d after Close: %v, want verbs.ErrClosed", o.name, r, err)
			}
		}
	}
	f.Progress()
	f.ProgressMessages(1)
	f.MarkLost(1, errors.New("after close"))
}

// TestAccessors: what the fabric reports of itself and of its hooks.
func TestAccessors(t *testing.T) {
	f := newTestFabric(t, fabOpts{rank: 2, size: 5, maxInline: 128, peerTimeout: 3 * time.Second})
	if f.Rank() != 2 || f.Size() != 5 || f.MaxInline() != 128 || f.PeerTimeout() != 3*time.Second || f.Reads() != &f.reads {
		t.Errorf("Rank %d Size %d MaxInline %d PeerTimeout %v", f.Rank(), f.Size(), f.MaxInline(), f.PeerTimeout())
	}
	if f.Path() != (verbs.Path{}) {
		t.Errorf("Path %+v of a fabric never opened", f.Path())
	}
	if slept, woken := f.ReplyWaits(); slept != 0 || woken != 0 {
		t.Errorf("ReplyWaits %d, %d at start", slept, woken)
	}
	if f.RepliesToFail() != 0 {
		t.Error("replies to fail at start")
	}
	f.FailReplies(3)
	f.FailReplies(2)
	if n := f.RepliesToFail(); n != 5 {
		t.Errorf("RepliesToFail = %d after FailReplies(3) and (2), want 5", n)
	}
	f.FailReplies(-10)
	if n := f.RepliesToFail(); n != 0 {
		t.Errorf("RepliesToFail = %d with the count below zero, want 0", n)
	}
}

// TestSyncEngine: SyncEngine waits for a handler running (under recvMu).
func TestSyncEngine(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 1})
	f.m.recvMu.Lock()
	done := make(chan struct{})
	go func() {
		f.SyncEngine()
		close(done)
	}()
	time.Sleep(time.Millisecond)
	if closed(done) {
		t.Fatal("SyncEngine returned while a handler ran")
	}
	f.m.recvMu.Unlock()
	<-done
}

// TestWordsNothingPosted: Words with nothing to do returns nil; with its
// context ended before the first post, that context's error, holding
// nothing.
func TestWordsNothingPosted(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 1})
	if err := f.Words(context.Background(), 0, 0, true, nil, nil, nil); err != nil {
		t.Errorf("Words of no address: %v", err)
	}
	olds := []uint64{7, 7}
	if err := f.Words(ended(), 0, 0, true, []uint64{0, 8}, []uint64{1, 1}, olds); !errors.Is(err, context.Canceled) {
		t.Errorf("Words with an ended context: %v", err)
	}
	if olds[0] != 7 || olds[1] != 7 || int(f.nfree.Load()) != len(f.slots) {
		t.Errorf("Words that posted nothing wrote olds %v or holds slots (%d free)", olds, f.nfree.Load())
	}
}
