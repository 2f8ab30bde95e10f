package group

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// liveness watches every peer process through a TCP connection of its own:
// the kernel closes a process's sockets when it dies, so the other end
// reads EOF at once, whatever the RDMA transport does. (Soft-RoCE, for
// one, never times out a request to a queue pair that no longer exists.)
// A peer found gone is marked lost in the fabric, which fails its queue
// pair so that everything in flight to it completes with ErrPeerLost.
type liveness struct {
	ln      net.Listener
	conns   []net.Conn
	mu      sync.Mutex
	closing bool
	wg      sync.WaitGroup
}

const livenessToken = 16

// startLiveness connects every pair of ranks: rank i dials every j > i.
// The token, from rank 0 through the authenticated bootstrap, proves a
// dialer belongs to the group.
func (g *Group) startLiveness(ctx context.Context) error {
	lv := &liveness{conns: make([]net.Conn, g.Size())}
	g.live = lv
	if g.Size() == 1 {
		return nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(g.boot.LocalIP().String(), "0"))
	if err != nil {
		return fmt.Errorf("group: liveness listener: %w", err)
	}
	lv.ln = ln
	var tok [livenessToken]byte
	if g.Rank() == 0 {
		rand.Read(tok[:])
	}
	mine := append(tok[:], ln.Addr().String()...)
	all, err := g.boot.AllGather(ctx, mine)
	if err != nil {
		return fmt.Errorf("group: liveness exchange: %w", err)
	}
	copy(tok[:], all[0][:livenessToken])
	me := g.Rank()
	accepted := make(chan error, 1)
	go func() {
		for n := 0; n < me; n++ {
			c, err := ln.Accept()
			if err != nil {
				accepted <- err
				return
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			var hello [4 + livenessToken]byte
			if _, err := io.ReadFull(c, hello[:]); err != nil {
				c.Close()
				n--
				continue
			}
			r := int(binary.LittleEndian.Uint32(hello[:]))
			if r >= me || subtle.ConstantTimeCompare(hello[4:], tok[:]) != 1 || lv.conns[r] != nil {
				c.Close() // not one of ours
				n--
				continue
			}
			c.SetDeadline(time.Time{})
			lv.conns[r] = c
		}
		accepted <- nil
	}()
	var d net.Dialer
	for r := me + 1; r < g.Size(); r++ {
		addr := string(all[r][livenessToken:])
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			ln.Close()
			<-accepted
			return fmt.Errorf("group: liveness connection to rank %d: %w", r, err)
		}
		var hello [4 + livenessToken]byte
		binary.LittleEndian.PutUint32(hello[:], uint32(me))
		copy(hello[4:], tok[:])
		c.Write(hello[:])
		lv.conns[r] = c
	}
	select {
	case err = <-accepted:
	case <-ctx.Done():
		ln.Close()
		err = <-accepted
		if err == nil {
			err = ctx.Err()
		}
	}
	ln.Close()
	if err != nil {
		return fmt.Errorf("group: liveness connections: %w", err)
	}
	for r, c := range lv.conns {
		if c == nil {
			continue
		}
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetKeepAlive(true)
			tc.SetKeepAlivePeriod(5 * time.Second)
		}
		lv.wg.Add(1)
		go func() {
			defer lv.wg.Done()
			var b [1]byte
			_, err := c.Read(b[:]) // nothing is ever sent: returns when the peer is gone
			lv.mu.Lock()
			closing := lv.closing
			lv.mu.Unlock()
			if !closing {
				g.fab.MarkLost(r, fmt.Errorf("its process is gone (%v)", err))
			}
		}()
	}
	return nil
}

func (lv *liveness) close() {
	if lv == nil {
		return
	}
	lv.mu.Lock()
	lv.closing = true
	lv.mu.Unlock()
	for _, c := range lv.conns {
		if c != nil {
			c.Close()
		}
	}
	lv.wg.Wait()
}
