package group

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// dialMember connects to addr as rank r and sends the hello.
func dialMember(t *testing.T, addr string, r int, tok [livenessToken]byte) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Errorf("rank %d: dial: %v", r, err)
		return nil
	}
	var hello [4 + livenessToken]byte
	binary.LittleEndian.PutUint32(hello[:], uint32(r))
	copy(hello[4:], tok[:])
	if _, err := c.Write(hello[:]); err != nil {
		t.Errorf("rank %d: hello: %v", r, err)
	}
	return c
}

// TestLivenessStrangers: strangers connected to the liveness listener (one
// silent, one sending garbage, one with a wrong token, one claiming a rank
// out of range, and enough silent ones to fill the pending bound several
// times) do not delay the members, though the handshake timeout is long.
func TestLivenessStrangers(t *testing.T) {
	const me = 3
	const handshake = 30 * time.Second // far beyond the bound below
	const bound = 3 * time.Second
	var tok, wrong [livenessToken]byte
	copy(tok[:], "the group token.")
	copy(wrong[:], "not the token...")
	for _, flood := range []int{0, 1, 3 * maxPendingLiveness} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		var strangers []net.Conn
		dial := func() net.Conn {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatalf("flood %d: stranger: %v", flood, err)
			}
			strangers = append(strangers, c)
			return c
		}
		// Connected before the listener accepts anything: first in line.
		for i := 0; i < flood; i++ {
			dial()
		}
		dial().Write([]byte("GET / HTTP/1.0\r\n\r\n and more garbage than a hello holds"))
		w := dial()
		var bad [4 + livenessToken]byte
		copy(bad[4:], wrong[:])
		w.Write(bad[:])
		o := dial()
		binary.LittleEndian.PutUint32(bad[:], me) // a rank that does not dial this one
		copy(bad[4:], tok[:])
		o.Write(bad[:])

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		start := time.Now()
		type result struct {
			conns []net.Conn
			err   error
		}
		done := make(chan result, 1)
		go func() {
			conns, err := acceptMembers(ctx, ln, me, tok, handshake)
			done <- result{conns, err}
		}()
		var mu sync.Mutex
		members := make([]net.Conn, me)
		var wg sync.WaitGroup
		for r := 0; r < me; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(20 * time.Millisecond * time.Duration(r))
				c := dialMember(t, addr, r, tok)
				mu.Lock()
				members[r] = c
				mu.Unlock()
			}()
		}
		res := <-done
		took := time.Since(start)
		wg.Wait()
		cancel()
		if res.err != nil {
			t.Fatalf("flood %d: acceptMembers: %v (after %v)", flood, res.err, took)
		}
		if took > bound {
			t.Errorf("flood %d: the group's connections took %v with strangers connected, want under %v", flood, took, bound)
		}
		// Each accepted connection is the member's own: a byte sent on
		// the member's side arrives on the one returned for its rank.
		for r, c := range res.conns {
			if c == nil || members[r] == nil {
				t.Fatalf("flood %d: rank %d: no connection", flood, r)
			}
			members[r].Write([]byte{byte(0x40 + r)})
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			var b [1]byte
			if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != byte(0x40+r) {
				t.Errorf("flood %d: rank %d: read %v, %v; want the member's byte %#x", flood, r, b[0], err, 0x40+r)
			}
			c.Close()
			members[r].Close()
		}
		// The strangers were all turned away: each reads EOF (or a reset).
		for i, c := range strangers {
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			var b [1]byte
			if n, err := c.Read(b[:]); n != 0 || err == nil || isTimeout(err) {
				t.Errorf("flood %d: stranger %d still connected after the group formed: %d, %v", flood, i, n, err)
			}
			c.Close()
		}
		t.Logf("flood %d: members connected in %v", flood, took.Round(time.Millisecond))
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestLivenessSignals: frames written by Signal come out of read, in
// order, and a malformed frame ends the reading.
func TestLivenessSignals(t *testing.T) {
	a, b := net.Pipe()
	lv := &liveness{conns: []net.Conn{nil, a}, wmu: make([]sync.Mutex, 2), timeout: 5 * time.Second}
	msgs := [][]byte{{1, 2, 3, 4, 5}, bytes.Repeat([]byte{7}, 64), {9, 9, 9, 9, 9, 9}}
	go func() {
		for _, m := range msgs {
			if err := lv.Signal(1, m); err != nil {
				t.Errorf("Signal: %v", err)
			}
		}
		a.Write([]byte{200}) // longer than any signal
	}()
	var got [][]byte
	err := lv.read(b, func(m []byte) { got = append(got, bytes.Clone(m)) })
	if err == nil {
		t.Fatal("read returned nil after a malformed frame")
	}
	if len(got) != len(msgs) {
		t.Fatalf("got %d signals, want %d", len(got), len(msgs))
	}
	for i := range msgs {
		if !bytes.Equal(got[i], msgs[i]) {
			t.Errorf("signal %d: %x, want %x", i, got[i], msgs[i])
		}
	}
	if err := lv.Signal(1, make([]byte, 65)); err == nil {
		t.Error("Signal of 65 bytes succeeded")
	}
	if err := lv.Signal(0, []byte{1}); err == nil {
		t.Error("Signal to a rank without a connection succeeded")
	}
	a.Close()
	b.Close()
}
