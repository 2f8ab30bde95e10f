package fabric

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/onesided/rma/verbs"
)

// TestSlotTable: slots are taken until none is left, the last freed first;
// taking one resets what its last use left (chunk, reply buffer,
// connection, error) and records its rank; freeing one frees its chunk and
// reply buffer with it.
func TestSlotTable(t *testing.T) {
	f := newTestFabric(t, fabOpts{slots: 4, chunks: 2})
	seen := map[uint32]bool{}
	for i := 0; i < 4; i++ {
		id, ok := f.tryAcquireSlot(1, i%2 == 0)
		if !ok || seen[id] || int(id) >= 4 {
			t.Fatalf("take %d: slot %d, %v (taken: %v)", i, id, ok, seen)
		}
		seen[id] = true
		s := &f.slots[id]
		if s.state.Load() != slotBusy || s.peer != 1 || s.async != (i%2 == 0) || s.chunk != -1 || s.reply != -1 {
			t.Errorf("slot %d taken: state %d peer %d async %v chunk %d reply %d", id, s.state.Load(), s.peer, s.async, s.chunk, s.reply)
		}
		if n := f.nfree.Load(); int(n) != 3-i {
			t.Errorf("after %d takes nfree = %d, want %d", i+1, n, 3-i)
		}
	}
	if id, ok := f.tryAcquireSlot(0, false); ok {
		t.Fatalf("a fifth slot (%d) out of four", id)
	}

	// A slot freed with a chunk and a reply buffer gives both back.
	ch, ok := f.tryAcquireChunk()
	if !ok {
		t.Fatal("no chunk")
	}
	rb := <-f.m.repFree
	s := &f.slots[2]
	s.chunk, s.reply, s.conn, s.err = ch, int32(rb), &conn{}, errors.New("old")
	freeCh, freeRep := len(f.freeChunks), len(f.m.repFree)
	f.releaseSlot(2)
	if s.state.Load() != slotFree || s.chunk != -1 || s.reply != -1 || s.conn != nil {
		t.Errorf("freed slot: state %d chunk %d reply %d conn %v", s.state.Load(), s.chunk, s.reply, s.conn)
	}
	if len(f.freeChunks) != freeCh+1 || len(f.m.repFree) != freeRep+1 {
		t.Errorf("freeing the slot gave back %d chunks and %d reply buffers, want 1 and 1",
			len(f.freeChunks)-freeCh, len(f.m.repFree)-freeRep)
	}
	f.releaseSlot(0)
	if id, _ := f.tryAcquireSlot(1, true); id != 0 {
		t.Errorf("took slot %d after freeing 2 then 0: want the last freed, 0", id)
	}
	if id, _ := f.tryAcquireSlot(1, true); id != 2 {
		t.Errorf("took slot %d next, want 2", id)
	}
	if s.err != nil || s.conn != nil {
		t.Errorf("slot 2 taken again kept its last use's error %v or connection %v", s.err, s.conn)
	}
}

// TestChunks: chunks are taken until none is left and come back when put;
// each is chunkSize bytes of the registered memory after the slots'
// scratch, none overlapping another or a slot's scratch.
func TestChunks(t *testing.T) {
	f := newTestFabric(t, fabOpts{slots: 3, chunks: 3, chunkSize: 512})
	var got []int32
	for {
		c, ok := f.tryAcquireChunk()
		if !ok {
			break
		}
		got = append(got, c)
	}
	if len(got) != 3 {
		t.Fatalf("took %d chunks of 3: %v", len(got), got)
	}
	// Mark every byte with its owner: no two regions may share one.
	owner := make([]int, len(f.mem))
	mark := func(b []byte, who int) {
		base := &f.mem[0]
		for i := range b {
			off := int(uintptr(unsafe.Pointer(&b[i])) - uintptr(unsafe.Pointer(base)))
			if owner[off] != 0 {
				t.Fatalf("byte %d of the scratch area belongs to %d and %d", off, owner[off], who)
			}
			owner[off] = who
		}
	}
	for id := uint32(0); id < 3; id++ {
		b := f.scratch(id)
		if len(b) != slotScratch || cap(b) != slotScratch {
			t.Errorf("slot %d scratch: len %d cap %d, want %d", id, len(b), cap(b), slotScratch)
		}
		mark(b, 1+int(id))
	}
	for _, c := range got {
		b := f.chunk(c)
		if len(b) != 512 || cap(b) != 512 {
			t.Errorf("chunk %d: len %d cap %d, want 512", c, len(b), cap(b))
		}
		mark(b, 100+int(c))
	}
	for _, c := range got {
		f.putChunk(c)
	}
	if len(f.freeChunks) != 3 {
		t.Errorf("%d chunks free after putting them all back, want 3", len(f.freeChunks))
	}
	// The atomic result is the first 8 bytes of the slot's scratch.
	copy(f.scratch(1), []byte{1, 2, 3, 4, 5, 6, 7, 8})
	if v := f.atomicResult(1); v != 0x0807060504030201 {
		t.Errorf("atomicResult = %#x, want the scratch's first word, 0x0807060504030201", v)
	}
}

// TestSlotWaits: a caller that finds no slot (or chunk) free waits for one
// and takes the one freed; it gives up when its context ends or the fabric
// closes, with the context's error or one matching verbs.ErrClosed.
func TestSlotWaits(t *testing.T) {
	f := newTestFabric(t, fabOpts{slots: 1, chunks: 1})
	id, err := f.acquireSlot(context.Background(), 0, false)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := f.acquireChunk(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.acquireSlot(short(t, time.Millisecond), 0, false); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("acquireSlot with none free and a 1 ms context: %v, want the deadline", err)
	}
	if _, err := f.acquireChunk(ended()); !errors.Is(err, context.Canceled) {
		t.Errorf("acquireChunk with none free and an ended context: %v, want context.Canceled", err)
	}

	slotc, chunkc := make(chan uint32), make(chan int32)
	go func() {
		id, err := f.takeSlot(context.Background(), 0, true)
		if err != nil {
			t.Error(err)
		}
		slotc <- id
	}()
	go func() {
		c, err := f.acquireChunk(context.Background())
		if err != nil {
			t.Error(err)
		}
		chunkc <- c
	}()
	time.Sleep(time.Millisecond)
	f.releaseSlot(id)
	f.putChunk(ch)
	if got := <-slotc; got != id {
		t.Errorf("the waiter took slot %d, want the one freed, %d", got, id)
	}
	if got := <-chunkc; got != ch {
		t.Errorf("the waiter took chunk %d, want the one freed, %d", got, ch)
	}

	// Close ends the waits.
	errc := make(chan error, 2)
	f.enter()
	go func() {
		_, err := f.takeSlot(context.Background(), 0, false)
		errc <- err
	}()
	go func() {
		_, err := f.acquireChunk(context.Background())
		errc <- err
	}()
	time.Sleep(time.Millisecond)
	go func() {
		time.Sleep(time.Millisecond)
		f.exit() // the call the waiters stand for
	}()
	if err := f.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	for range 2 {
		if err := <-errc; !errors.Is(err, verbs.ErrClosed) {
			t.Errorf("a wait for a slot or chunk ended by Close: %v, want verbs.ErrClosed", err)
		}
	}
}

// TestAcquireSlotPeer: no slot is taken for a lost rank; for a rank whose
// connection is being re-established, the caller waits without a slot.
func TestAcquireSlotPeer(t *testing.T) {
	f := newTestFabric(t, fabOpts{size: 3, slots: 2})
	f.setLost(2, errors.New("test"))
	if _, err := f.acquireSlot(context.Background(), 2, false); !errors.Is(err, ErrPeerLost) {
		t.Errorf("acquireSlot for a lost rank: %v, want ErrPeerLost", err)
	}
	// Rank 1 was never connected (unready): the wait is for the
	// connection, and it holds no slot.
	if _, err := f.acquireSlot(short(t, time.Millisecond), 1, false); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("acquireSlot for a rank not connected, 1 ms context: %v, want the deadline", err)
	}
	if n := f.nfree.Load(); n != 2 {
		t.Errorf("%d slots free after the failed takes, want 2", n)
	}
	connectPeer(f, 1)
	id, err := f.acquireSlot(context.Background(), 1, false)
	if err != nil || f.slots[id].peer != 1 {
		t.Errorf("acquireSlot once connected: slot %d of rank %d, %v", id, f.slots[id].peer, err)
	}
}

// TestSlotStack: goroutines that take and free slots at once never hold
// the same slot together, and every slot is free at the end.
func TestSlotStack(t *testing.T) {
	f := newTestFabric(t, fabOpts{slots: 4})
	var held [4]atomic.Int32
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5000; i++ {
				id, ok := f.popSlot()
				if !ok {
					runtime.Gosched()
					continue
				}
				if n := held[id].Add(1); n != 1 {
					t.Errorf("slot %d held %d times at once", id, n)
					return
				}
				held[id].Add(-1)
				f.pushSlot(id)
			}
		}()
	}
	wg.Wait()
	seen := map[uint32]bool{}
	for {
		id, ok := f.popSlot()
		if !ok {
			break
		}
		if seen[id] {
			t.Fatalf("slot %d twice in the stack", id)
		}
		seen[id] = true
	}
	if len(seen) != 4 || f.nfree.Load() != 0 {
		t.Fatalf("%d slots in the stack at the end (nfree then %d), want 4", len(seen), f.nfree.Load())
	}
	for id := range seen {
		f.pushSlot(id)
	}
}
