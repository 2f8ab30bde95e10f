package fabric

import (
	"context"
	"testing"
	"time"

	"github.com/onesided/rma/verbs"
)

// fabOpts sizes a test fabric; zero fields take small defaults.
type fabOpts struct {
	rank, size        int
	slots, chunks     int
	chunkSize         int
	credits, msgSize  int
	peerTimeout       time.Duration
	reconnectTimeout  time.Duration
	maxInline         int
	readSlots, readCh int // the request reads' budget; 0: half, as New
}

// newTestFabric builds a fabric as New does, without a device: the slots,
// chunks, credits and message buffers in anonymous memory (verbs.Alloc,
// which Close frees), the loopback connection up and the others not made
// yet, and no CQ, QP or channel. Nothing can be posted; the completion
// lists are empty, so a poll finds nothing and a test hands completions
// in itself (complete). Waiters never go to sleep on a completion channel
// (their spins last an hour): they poll until the test makes what they
// wait for happen. The manager is not running: its kicks stay in its
// channel. A fabric still open at the end is closed, and a call left in
// progress (enter without exit) fails the test.
func newTestFabric(t *testing.T, o fabOpts) *Fabric {
	t.Helper()
	if o.size == 0 {
		o.size = 2
	}
	if o.slots == 0 {
		o.slots = 8
	}
	if o.chunks == 0 {
		o.chunks = 4
	}
	if o.chunkSize == 0 {
		o.chunkSize = 1024
	}
	if o.credits == 0 {
		o.credits = 4
	}
	if o.msgSize == 0 {
		o.msgSize = 64
	}
	if o.peerTimeout == 0 {
		o.peerTimeout = time.Second
	}
	if o.reconnectTimeout == 0 {
		o.reconnectTimeout = ReconnectTimeout(o.peerTimeout)
	}
	f := &Fabric{rank: o.rank, size: o.size, spin: time.Hour, engineSpin: time.Hour, replySpin: time.Hour,
		chunkSize: o.chunkSize, peerTimeout: o.peerTimeout, reconnectTimeout: o.reconnectTimeout,
		maxInline: o.maxInline}
	f.lostCtx, f.lostCancel = context.WithCancelCause(context.Background())
	f.closed = make(chan struct{})
	f.mgr.kick = make(chan struct{}, 1)

	var err error
	f.chunkOff = o.slots * slotScratch
	if f.mem, err = verbs.Alloc(f.chunkOff + o.chunks*o.chunkSize); err != nil {
		t.Fatal(err)
	}
	f.initSlots(o.slots, o.chunks)
	if o.readSlots > 0 {
		f.reads.maxSlots = o.readSlots
	}
	if o.readCh > 0 {
		f.reads.maxChunks = o.readCh
	}

	m := &f.m
	m.size, m.credits = o.msgSize, o.credits
	nrecv, nreq, nrep := msgBuffers(o.size, o.credits, 0)
	m.nrecv = nrecv
	m.reqOff = nrecv * m.size
	m.repOff = m.reqOff + nreq*m.size
	if m.mem, err = verbs.Alloc(m.repOff + nrep*m.size); err != nil {
		t.Fatal(err)
	}
	m.initTables(o.size, nreq, nrep)

	f.peers = make([]peer, o.size)
	me := &f.peers[o.rank]
	me.cur = &conn{rank: o.rank, gen: 1, connected: true}
	me.up = true
	for r := range f.peers {
		if r != o.rank {
			f.peers[r].ready = make(chan struct{})
			f.peers[r].unready.Store(true)
		}
	}
	if f.probeMem, err = verbs.Alloc(8 * (1 + o.size)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if n := f.calls.Load(); n&^1 != 0 {
			t.Errorf("%d calls still in progress at the end", n/2)
			return // Close would wait for them
		}
		if err := f.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return f
}

// connectPeer brings the connection to rank up as the manager does at the
// end of the exchange (up), and returns it.
func connectPeer(f *Fabric, rank int) *conn {
	p := &f.peers[rank]
	gen := uint32(1)
	if p.cur != nil {
		gen = p.cur.gen + 1
	}
	if p.ready == nil {
		p.ready = make(chan struct{})
	}
	p.next = &conn{rank: rank, gen: gen, connected: true}
	f.up(rank)
	return p.cur
}

// complete hands the fabric completions as its CQ would (pollMu held, as
// by a poller).
func complete(f *Fabric, wcs ...verbs.WC) {
	f.pollMu.Lock()
	f.wcs = wcs
	f.dispatchLocked(len(wcs))
	f.wcs = nil
	f.pollMu.Unlock()
}

// wc is a completion of slot id with status st.
func wc(id uint32, st verbs.WCStatus) verbs.WC { return verbs.WC{WRID: uint64(id), Status: st} }

// post takes a slot for rank and records it posted on the connection in
// use, as an operation does before it posts; it fails the test if no slot
// is free.
func post(t *testing.T, f *Fabric, rank int, async bool) uint32 {
	t.Helper()
	id, ok := f.tryAcquireSlot(rank, async)
	if !ok {
		t.Fatal("no free slot")
	}
	f.posting(id, &f.peers[rank], f.peers[rank].cur)
	return id
}

// kicked reports whether the manager was kicked since the last look, and
// forgets it.
func kicked(f *Fabric) bool {
	select {
	case <-f.mgr.kick:
		return true
	default:
		return false
	}
}

// short is a context that ends after d.
func short(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// ended is a context that has ended.
func ended() context.Context { return tryCtx }
