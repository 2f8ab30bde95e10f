package group

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/onesided/rma/internal/fabric"
)

// liveness watches every peer process through a TCP connection of its own:
// the kernel closes a process's sockets when it dies, so the other end
// reads EOF at once, sooner than the RDMA transport gives up on it (which
// takes its retries, the peer timeout or so). A peer found gone is marked
// lost in the fabric, which fails its queue pair so that everything in
// flight to it completes with ErrPeerLost.
//
// The same connections carry the fabric's reconnect protocol (a failed
// queue pair is re-created on both sides, and the new endpoints swapped
// here): frames of one length byte and up to fabric.MaxSignal bytes. They
// are authenticated by construction: each was admitted with the group's
// token, which only members learned through the bootstrap.
type liveness struct {
	conns   []net.Conn
	wmu     []sync.Mutex  // one writer at a time per connection
	timeout time.Duration // bounds a write
	mu      sync.Mutex
	closing bool
	wg      sync.WaitGroup
}

const livenessToken = 16

// maxPendingLiveness bounds the connections to the liveness listener that
// have not yet proved they belong to the group; when it is reached the
// oldest is dropped, so a flood of silent connections cannot keep a member
// (which sends its hello at once) out.
const maxPendingLiveness = 32

// livenessHandshake bounds how long a connection to the liveness listener
// may take to send its hello: a member sends it right after connecting.
func livenessHandshake(peerTimeout time.Duration) time.Duration {
	return max(2*peerTimeout, time.Second)
}

// startLiveness connects every pair of ranks: rank i dials every j > i.
// The token, from rank 0 through the authenticated bootstrap, proves a
// dialer belongs to the group.
func (g *Group) startLiveness(ctx context.Context) error {
	lv := &liveness{conns: make([]net.Conn, g.Size()), wmu: make([]sync.Mutex, g.Size()), timeout: g.fab.PeerTimeout()}
	g.live = lv
	if g.Size() == 1 {
		return nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(g.boot.LocalIP().String(), "0"))
	if err != nil {
		return fmt.Errorf("group: liveness listener: %w", err)
	}
	var tok [livenessToken]byte
	if g.Rank() == 0 {
		rand.Read(tok[:])
	}
	mine := append(tok[:], ln.Addr().String()...)
	all, err := g.boot.AllGather(ctx, mine)
	if err != nil {
		ln.Close()
		return fmt.Errorf("group: liveness exchange: %w", err)
	}
	copy(tok[:], all[0][:livenessToken])
	me := g.Rank()
	type result struct {
		conns []net.Conn
		err   error
	}
	accepted := make(chan result, 1)
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		conns, err := acceptMembers(actx, ln, me, tok, livenessHandshake(g.fab.PeerTimeout()))
		accepted <- result{conns, err}
	}()
	var d net.Dialer
	for r := me + 1; r < g.Size() && err == nil; r++ {
		addr := string(all[r][livenessToken:])
		var c net.Conn
		if c, err = d.DialContext(ctx, "tcp", addr); err != nil {
			err = fmt.Errorf("group: liveness connection to rank %d: %w", r, err)
			break
		}
		lv.conns[r] = c
		var hello [4 + livenessToken]byte
		binary.LittleEndian.PutUint32(hello[:], uint32(me))
		copy(hello[4:], tok[:])
		c.SetWriteDeadline(time.Now().Add(livenessHandshake(g.fab.PeerTimeout())))
		if _, err = c.Write(hello[:]); err != nil {
			err = fmt.Errorf("group: liveness hello to rank %d: %w", r, err)
		}
		c.SetWriteDeadline(time.Time{})
	}
	if err != nil {
		cancel()
	}
	res := <-accepted
	if err == nil && res.err != nil {
		err = fmt.Errorf("group: liveness connections: %w", res.err)
	}
	copy(lv.conns, res.conns)
	if err != nil {
		for _, c := range lv.conns {
			if c != nil {
				c.Close()
			}
		}
		return err
	}
	// Before the readers start: a signal may come at once.
	g.fab.SetSignaller(lv)
	for r, c := range lv.conns {
		if c == nil {
			continue
		}
		if tc, ok := c.(*net.TCPConn); ok {
			keepAlive(tc, g.fab.PeerTimeout())
		}
		lv.wg.Add(1)
		go func() {
			defer lv.wg.Done()
			err := lv.read(c, func(msg []byte) { g.fab.HandleSignal(r, msg) })
			lv.mu.Lock()
			closing := lv.closing
			lv.mu.Unlock()
			switch {
			case closing:
			case errors.Is(err, errBye):
				g.fab.MarkLost(r, fabric.ErrPeerLeft)
			default:
				g.fab.MarkLost(r, fmt.Errorf("its process is gone (%v)", err))
			}
		}()
	}
	return nil
}

// errBye: the peer closed the group (a frame of length 0, which close sends
// before it closes the connection).
var errBye = errors.New("closed by its peer")

// read hands every frame that comes in on c to deliver, until c fails, its
// peer says bye (errBye) or closes it.
func (lv *liveness) read(c net.Conn, deliver func([]byte)) error {
	var buf [1 + fabric.MaxSignal]byte
	for {
		if _, err := io.ReadFull(c, buf[:1]); err != nil {
			return err
		}
		n := int(buf[0])
		if n == 0 {
			return errBye
		}
		if n > fabric.MaxSignal {
			return fmt.Errorf("malformed frame of %d bytes on its liveness connection", n)
		}
		if _, err := io.ReadFull(c, buf[1:1+n]); err != nil {
			return err
		}
		deliver(buf[1 : 1+n])
	}
}

// Signal sends msg to rank on its liveness connection (fabric.Signaller).
func (lv *liveness) Signal(rank int, msg []byte) error {
	if rank < 0 || rank >= len(lv.conns) || lv.conns[rank] == nil {
		return fmt.Errorf("group: no liveness connection to rank %d", rank)
	}
	if len(msg) == 0 || len(msg) > fabric.MaxSignal {
		return fmt.Errorf("group: signal of %d bytes", len(msg))
	}
	var frame [1 + fabric.MaxSignal]byte
	frame[0] = byte(len(msg))
	copy(frame[1:], msg)
	c := lv.conns[rank]
	lv.wmu[rank].Lock()
	defer lv.wmu[rank].Unlock()
	c.SetWriteDeadline(time.Now().Add(lv.timeout))
	_, err := c.Write(frame[:1+len(msg)])
	return err
}

// acceptMembers accepts, on ln, one connection from each rank below me that
// opens with its rank and the group's token, and returns them indexed by
// rank. Connections are handshaken concurrently, each within handshake (or
// ctx), and at most maxPendingLiveness at a time: a connection that does
// not prove itself is closed and neither blocks the others nor counts. It
// closes ln when it returns.
func acceptMembers(ctx context.Context, ln net.Listener, me int, tok [livenessToken]byte, handshake time.Duration) ([]net.Conn, error) {
	defer ln.Close()
	conns := make([]net.Conn, me)
	if me == 0 {
		return conns, nil
	}
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(hctx, func() { ln.Close() })
	defer stop()

	type member struct {
		rank int
		c    net.Conn
	}
	joined := make(chan member)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		pending []net.Conn // unauthenticated, oldest first
	)
	drop := func(c net.Conn) bool { // takes c off pending; false if it was not there
		mu.Lock()
		defer mu.Unlock()
		for i, p := range pending {
			if p == c {
				pending = append(pending[:i], pending[i+1:]...)
				return true
			}
		}
		return false
	}
	served := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(served)
		for {
			c, err := ln.Accept()
			if err != nil {
				if hctx.Err() != nil || errors.Is(err, net.ErrClosed) {
					return
				}
				// Out of descriptors, say: back off a little.
				select {
				case <-hctx.Done():
					return
				case <-time.After(20 * time.Millisecond):
				}
				continue
			}
			mu.Lock()
			if len(pending) == maxPendingLiveness {
				pending[0].Close() // its handshake fails and drops it
				pending = pending[1:]
			}
			pending = append(pending, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := readHello(hctx, c, me, tok, handshake)
				if !drop(c) || err != nil {
					c.Close()
					return
				}
				select {
				case joined <- member{r, c}:
				case <-hctx.Done():
					c.Close()
				}
			}()
		}
	}()
	var err error
	for n := 0; n < me && err == nil; {
		select {
		case m := <-joined:
			if conns[m.rank] != nil {
				m.c.Close() // a second connection for a rank: not one of ours
				continue
			}
			conns[m.rank] = m.c
			n++
		case <-ctx.Done():
			err = fmt.Errorf("%d of %d ranks connected: %w", n, me, ctx.Err())
		case <-served:
			err = fmt.Errorf("listener closed with %d of %d ranks connected", n, me)
		}
	}
	cancel()
	ln.Close()
	mu.Lock()
	for _, c := range pending {
		c.Close()
	}
	pending = nil
	mu.Unlock()
	wg.Wait()
	if err != nil {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
		return nil, err
	}
	return conns, nil
}

// readHello reads a member's hello (its rank, then the token) within
// handshake and ctx, and returns the rank.
func readHello(ctx context.Context, c net.Conn, me int, tok [livenessToken]byte, handshake time.Duration) (int, error) {
	deadline := time.Now().Add(handshake)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.SetReadDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	var hello [4 + livenessToken]byte
	if _, err := io.ReadFull(c, hello[:]); err != nil {
		return 0, err
	}
	r := binary.LittleEndian.Uint32(hello[:])
	if subtle.ConstantTimeCompare(hello[4:], tok[:]) != 1 || r >= uint32(me) {
		return 0, errors.New("not a member of the group")
	}
	if !stop() {
		return 0, ctx.Err()
	}
	c.SetReadDeadline(time.Time{})
	return int(r), nil
}

func (lv *liveness) close() {
	if lv == nil {
		return
	}
	lv.mu.Lock()
	lv.closing = true
	lv.mu.Unlock()
	for r, c := range lv.conns {
		if c != nil {
			// Bye, so that the peer tells a member that left from one
			// that died; best effort, within a peer timeout.
			lv.wmu[r].Lock()
			c.SetWriteDeadline(time.Now().Add(lv.timeout))
			c.Write([]byte{0})
			lv.wmu[r].Unlock()
			c.Close()
		}
	}
	lv.wg.Wait()
}
