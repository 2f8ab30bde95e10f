package fabric

import (
	"testing"
	"time"
)

// TestDefaults: the options left zero (or negative) take the defaults the
// Options fields document; those set are kept, and GIDIndex and
// RecvBuffers, whose zero means something, are left alone.
func TestDefaults(t *testing.T) {
	want := Options{Port: 1, Slots: 256, ChunkSize: 64 << 10, Chunks: 32, Spin: 50 * time.Microsecond,
		EngineSpin: 2 * time.Millisecond, ReplySpin: 5 * time.Millisecond, Credits: 8, MsgSize: 64 << 10,
		PeerTimeout: DefaultPeerTimeout}
	set := Options{Device: "mlx5_0", Port: 2, GIDIndex: 3, MTU: 3, Slots: 7, ChunkSize: 4096, Chunks: 3,
		Spin: time.Millisecond, EngineSpin: time.Second, ReplySpin: time.Minute, Credits: 2, MsgSize: 512,
		RecvBuffers: 5, PeerTimeout: time.Hour}
	for _, c := range []struct {
		name string
		in   Options
		want Options
	}{
		{"zero", Options{}, want},
		{"negative", Options{Slots: -1, ChunkSize: -1, Chunks: -1, Spin: -1, EngineSpin: -1, ReplySpin: -1,
			Credits: -1, MsgSize: -1, PeerTimeout: -1}, want},
		{"GID -1 and recv 0 stay", Options{GIDIndex: -1}, func() Options { o := want; o.GIDIndex = -1; return o }()},
		{"all set", set, set},
	} {
		o := c.in
		o.defaults()
		if o != c.want {
			t.Errorf("%s: defaults gave %+v, want %+v", c.name, o, c.want)
		}
	}
}

// TestReconnectTimeout: twice the peer timeout plus a second.
func TestReconnectTimeout(t *testing.T) {
	for _, c := range []struct{ peer, want time.Duration }{
		{time.Second, 3 * time.Second},
		{0, time.Second},
		{250 * time.Millisecond, 1500 * time.Millisecond},
	} {
		if got := ReconnectTimeout(c.peer); got != c.want {
			t.Errorf("ReconnectTimeout(%v) = %v, want %v", c.peer, got, c.want)
		}
	}
}

// TestMsgBuffers: receives default to 8 x credits, no more than the ranks
// could fill ((size+1) x 2 x credits); an explicit count is kept under
// that bound. The request and reply pools do not grow with the group (the
// memory is fixed whatever its size), never exceed what the ranks could
// fill (size x credits), and hold at least one peer's credits, so that a
// full window of requests to one rank never waits for a buffer.
func TestMsgBuffers(t *testing.T) {
	for _, c := range []struct {
		size, credits, recv int
		nrecv               int
	}{
		{1, 8, 0, 32},   // (1+1) x 2 x 8 = 32 < 64
		{2, 8, 0, 48},   // 48 < 64
		{3, 8, 0, 64},   // 64 = 64
		{64, 8, 0, 64},  // the default
		{64, 8, 10, 10}, // explicit
		{2, 8, 1000, 48},
		{1000, 1, 0, 8},
		{4, 16, -1, 128},
	} {
		nrecv, nreq, nrep := msgBuffers(c.size, c.credits, c.recv)
		if nrecv != c.nrecv {
			t.Errorf("msgBuffers(%d, %d, %d): %d receives, want %d", c.size, c.credits, c.recv, nrecv, c.nrecv)
		}
		if nreq < c.credits || nreq > c.size*c.credits {
			t.Errorf("msgBuffers(%d, %d, %d): %d request buffers, want [%d, %d]",
				c.size, c.credits, c.recv, nreq, c.credits, c.size*c.credits)
		}
		if nrep < 1 || nrep > c.size*c.credits {
			t.Errorf("msgBuffers(%d, %d, %d): %d reply buffers, want [1, %d]", c.size, c.credits, c.recv, nrep, c.size*c.credits)
		}
		if c.size >= 2 {
			_, bigReq, bigRep := msgBuffers(c.size*100, c.credits, c.recv)
			if bigReq != nreq || bigRep != nrep {
				t.Errorf("msgBuffers(%d, %d, %d): %d/%d request/reply buffers, %d/%d at 100 times the size",
					c.size, c.credits, c.recv, nreq, nrep, bigReq, bigRep)
			}
		}
	}
}

// TestMsgMemory: the buffers of msgBuffers, with the options' defaults,
// times the message size.
func TestMsgMemory(t *testing.T) {
	for _, c := range []struct {
		size int
		o    Options
	}{
		{4, Options{}},
		{1, Options{}},
		{100, Options{Credits: 2, MsgSize: 4096, RecvBuffers: 7}},
		{100, Options{MsgSize: 100}},
	} {
		o := c.o
		o.defaults()
		nrecv, nreq, nrep := msgBuffers(c.size, o.Credits, o.RecvBuffers)
		want := (nrecv + nreq + nrep) * o.MsgSize
		if got := MsgMemory(c.size, c.o); got != want {
			t.Errorf("MsgMemory(%d, %+v) = %d, want %d", c.size, c.o, got, want)
		}
	}
	// 4 ranks, the defaults: 64 receives of 64 KiB at least.
	if got := MsgMemory(4, Options{}); got < 64*(64<<10) {
		t.Errorf("MsgMemory(4, defaults) = %d: fewer than 64 receives of 64 KiB", got)
	}
}
