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
	"slices"
	"sync"
	"time"

	"github.com/onesided/rma/internal/fabric"
)

// liveness watches every peer process through a TCP connection of its own:
// the kernel closes a process's sockets when it dies, so the other end
// reads EOF at once, sooner than the RDMA transport gives up on it (which
// takes its retries, the peer timeout or so). A peer whose connection ends
// so (or that says bye) is marked lost in the fabric, which fails its
// queue pair so that everything in flight to it completes with
// ErrPeerLost.
//
// Any other failure of the connection (a keep-alive or retransmission
// timeout on a lossy or cut wire, a reset) is not taken as the peer's
// death: the peer must then also fail to answer over RDMA (the fabric's
// probe of its probe word, which gives up after the transport's retries
// and a failed re-establishment of its queue pair). While it answers, the
// lower rank of the pair dials the other again, and the new connection
// replaces the old on both sides.
//
// The same connections carry the fabric's reconnect protocol (a failed
// queue pair is re-created on both sides, and the new endpoints swapped
// here): frames of one length byte and up to fabric.MaxSignal bytes. They
// are authenticated by construction: each was admitted with the group's
// token, which only members learned through the bootstrap.
type liveness struct {
	fab     livenessFabric
	me      int
	tok     [livenessToken]byte
	addrs   []string      // each rank's listener
	ln      net.Listener  // this rank's, open until close
	timeout time.Duration // the peer timeout: bounds a write, paces the checks

	mu      sync.Mutex // guards what follows
	conns   []net.Conn // nil while one is being (re-)established
	gen     []uint32   // per rank: the connection installed last
	pending []net.Conn // accepted, not authenticated yet, oldest first
	closing bool
	changed chan struct{} // a connection was installed

	wmu []sync.Mutex // one writer at a time per connection
	wg  sync.WaitGroup
	ctx context.Context
	end context.CancelFunc
}

// livenessFabric is what liveness needs of the fabric (a fake in the unit
// tests).
type livenessFabric interface {
	HandleSignal(rank int, msg []byte)
	MarkLost(rank int, cause error)
	PeerErr(rank int) error
	// Probe reads rank's probe word over RDMA (fabric.Fabric.Probe): ctx's
	// error if the read went unanswered until ctx ended.
	Probe(ctx context.Context, rank int) error
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
	if g.Size() == 1 {
		g.live = newLiveness(g.fab, 0, [livenessToken]byte{}, nil, nil, g.fab.PeerTimeout())
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
	addrs := make([]string, len(all))
	for r := range all {
		addrs[r] = string(all[r][livenessToken:])
	}
	// Before the readers start: a signal may come at once.
	lv := newLiveness(g.fab, g.Rank(), tok, addrs, ln, g.fab.PeerTimeout())
	g.live = lv
	g.fab.SetSignaller(lv)
	if err := lv.connect(ctx); err != nil {
		lv.close()
		return err
	}
	return nil
}

func newLiveness(fab livenessFabric, me int, tok [livenessToken]byte, addrs []string, ln net.Listener, timeout time.Duration) *liveness {
	n := max(len(addrs), 1)
	lv := &liveness{fab: fab, me: me, tok: tok, addrs: addrs, ln: ln, timeout: timeout,
		conns: make([]net.Conn, n), gen: make([]uint32, n), wmu: make([]sync.Mutex, n), changed: make(chan struct{}, 1)}
	lv.ctx, lv.end = context.WithCancel(context.Background())
	if ln != nil {
		lv.wg.Add(1)
		go lv.accept()
	}
	return lv
}

// connect dials every higher rank and waits for every lower one.
func (lv *liveness) connect(ctx context.Context) error {
	for r := lv.me + 1; r < len(lv.addrs); r++ {
		c, err := lv.dial(ctx, r)
		if err != nil {
			return fmt.Errorf("group: liveness connection to rank %d: %w", r, err)
		}
		lv.install(r, c)
	}
	for {
		lv.mu.Lock()
		n := 0
		for r := 0; r < lv.me; r++ {
			if lv.conns[r] != nil {
				n++
			}
		}
		lv.mu.Unlock()
		if n == lv.me {
			return nil
		}
		select {
		case <-lv.changed:
		case <-ctx.Done():
			return fmt.Errorf("group: liveness connections: %d of %d ranks connected: %w", n, lv.me, ctx.Err())
		}
	}
}

// dial connects to rank's listener and sends the hello.
func (lv *liveness) dial(ctx context.Context, r int) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", lv.addrs[r])
	if err != nil {
		return nil, err
	}
	var hello [4 + livenessToken]byte
	binary.LittleEndian.PutUint32(hello[:], uint32(lv.me))
	copy(hello[4:], lv.tok[:])
	c.SetWriteDeadline(time.Now().Add(livenessHandshake(lv.timeout)))
	if _, err := c.Write(hello[:]); err != nil {
		c.Close()
		return nil, fmt.Errorf("hello: %w", err)
	}
	c.SetWriteDeadline(time.Time{})
	return c, nil
}

// accept takes the lower ranks' connections, at start and whenever one
// dials again, until close. Each is handshaken apart, within the handshake
// bound, at most maxPendingLiveness at a time: a connection that does not
// prove itself is closed and neither blocks the others nor counts.
func (lv *liveness) accept() {
	defer lv.wg.Done()
	for {
		c, err := lv.ln.Accept()
		if err != nil {
			if lv.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors, say: back off a little.
			select {
			case <-lv.ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		lv.mu.Lock()
		if lv.closing {
			lv.mu.Unlock()
			c.Close()
			return
		}
		if len(lv.pending) == maxPendingLiveness {
			lv.pending[0].Close() // its handshake fails and drops it
			lv.pending = lv.pending[1:]
		}
		lv.pending = append(lv.pending, c)
		lv.mu.Unlock()
		lv.wg.Add(1)
		go func() {
			defer lv.wg.Done()
			r, err := readHello(lv.ctx, c, lv.me, lv.tok, livenessHandshake(lv.timeout))
			lv.mu.Lock()
			was := false
			for i, p := range lv.pending {
				if p == c {
					lv.pending = append(lv.pending[:i], lv.pending[i+1:]...)
					was = true
					break
				}
			}
			lv.mu.Unlock()
			if !was || err != nil {
				c.Close()
				return
			}
			lv.install(r, c)
		}()
	}
}

// install makes c the connection to rank r (the one it replaces, if any,
// is closed, and its reader leaves quietly) and starts reading it.
func (lv *liveness) install(r int, c net.Conn) {
	lv.mu.Lock()
	if lv.closing || lv.fab.PeerErr(r) != nil {
		lv.mu.Unlock()
		c.Close()
		return
	}
	old := lv.conns[r]
	lv.conns[r] = c
	lv.gen[r]++
	gen := lv.gen[r]
	lv.wg.Add(1)
	lv.mu.Unlock()
	if old != nil {
		old.Close()
	}
	if tc, ok := c.(*net.TCPConn); ok {
		keepAlive(tc, lv.timeout)
	}
	select {
	case lv.changed <- struct{}{}:
	default:
	}
	go func() {
		defer lv.wg.Done()
		lv.serve(r, c, gen)
	}()
}

// serve reads rank r's connection c (generation gen) until it fails, then
// tells a death from a broken connection.
func (lv *liveness) serve(r int, c net.Conn, gen uint32) {
	err := lv.read(c, func(msg []byte) { lv.fab.HandleSignal(r, msg) })
	lv.mu.Lock()
	stale := lv.closing || lv.gen[r] != gen
	if !stale {
		lv.conns[r] = nil
	}
	lv.mu.Unlock()
	if stale {
		return // closed, or replaced by a newer connection
	}
	c.Close()
	switch {
	case errors.Is(err, errBye):
		lv.fab.MarkLost(r, fabric.ErrPeerLeft)
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		// Its kernel closed its end: its process is gone.
		lv.fab.MarkLost(r, fmt.Errorf("its process is gone (%v)", err))
	default:
		lv.recover(r, err)
	}
}

// recover follows a connection to rank r that failed otherwise than by
// its peer's closing it (cause): r is lost only if it does not answer an
// RDMA read within the peer timeout either; while it does, the lower rank
// of the two dials again, until a new connection is installed (by either
// side) or close.
func (lv *liveness) recover(r int, cause error) {
	for {
		lv.mu.Lock()
		done := lv.closing || lv.conns[r] != nil
		lv.mu.Unlock()
		if done || lv.fab.PeerErr(r) != nil {
			return
		}
		pctx, cancel := context.WithTimeout(lv.ctx, lv.timeout)
		err := lv.fab.Probe(pctx, r)
		silent := err != nil && pctx.Err() != nil
		cancel()
		if lv.fab.PeerErr(r) != nil || lv.ctx.Err() != nil {
			return // it did not answer (the probe marked it lost), or close
		}
		if silent {
			// Silent on both paths: the transport retries a READ to a
			// dead host without end (fabric's transportRetries).
			lv.fab.MarkLost(r, fmt.Errorf("its liveness connection failed (%v) and it answered no RDMA read for %v", cause, lv.timeout))
			return
		}
		if err == nil && lv.me < r {
			dctx, cancel := context.WithTimeout(lv.ctx, lv.timeout)
			c, err := lv.dial(dctx, r)
			cancel()
			if err == nil {
				lv.install(r, c)
				return
			}
		}
		select {
		case <-lv.ctx.Done():
			return
		case <-time.After(lv.timeout / 4):
		}
	}
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

// RoundTrip is the kernel's round-trip measurement of the liveness
// connection to rank (fabric.RoundTripper).
func (lv *liveness) RoundTrip(rank int) (least, dev time.Duration, ok bool) {
	if rank < 0 || rank >= len(lv.conns) {
		return 0, 0, false
	}
	lv.mu.Lock()
	c := lv.conns[rank]
	lv.mu.Unlock()
	if c == nil {
		return 0, 0, false
	}
	return roundTrip(c)
}

// Signal sends msg to rank on its liveness connection (fabric.Signaller).
// It fails while the connection is being re-established.
func (lv *liveness) Signal(rank int, msg []byte) error {
	if rank < 0 || rank >= len(lv.conns) {
		return fmt.Errorf("group: no liveness connection to rank %d", rank)
	}
	if len(msg) == 0 || len(msg) > fabric.MaxSignal {
		return fmt.Errorf("group: signal of %d bytes", len(msg))
	}
	lv.mu.Lock()
	c := lv.conns[rank]
	lv.mu.Unlock()
	if c == nil {
		return fmt.Errorf("group: no liveness connection to rank %d", rank)
	}
	var frame [1 + fabric.MaxSignal]byte
	frame[0] = byte(len(msg))
	copy(frame[1:], msg)
	lv.wmu[rank].Lock()
	defer lv.wmu[rank].Unlock()
	c.SetWriteDeadline(time.Now().Add(lv.timeout))
	_, err := c.Write(frame[:1+len(msg)])
	return err
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
	conns := slices.Clone(lv.conns)
	for _, c := range lv.pending {
		c.Close()
	}
	lv.pending = nil
	lv.mu.Unlock()
	lv.end()
	if lv.ln != nil {
		lv.ln.Close()
	}
	for r, c := range conns {
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
