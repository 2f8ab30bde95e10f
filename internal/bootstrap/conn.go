package bootstrap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// abortTimeout bounds rank 0's best-effort notice to the others when a
// collective fails.
const abortTimeout = time.Second

// Conn is this process's bootstrap connection set: a star in which rank 0
// holds a connection to every other rank and the others hold one to rank 0.
type Conn struct {
	rank, size int
	peers      []net.Conn // rank 0: peers[r] for r >= 1; others: peers[0] only
	refused    int
	seq        uint64 // collectives started
	busy       atomic.Bool

	mu     sync.Mutex
	err    error // sticky: set when closed or broken
	closed bool
}

// Rank returns this process's rank.
func (c *Conn) Rank() int { return c.rank }

// Size returns the group size.
func (c *Conn) Size() int { return c.size }

// LocalIP is the address this process's bootstrap connections use: the
// interface its peers reach it by (loopback for a group of one).
func (c *Conn) LocalIP() net.IP {
	for _, nc := range c.peers {
		if nc != nil {
			if a, ok := nc.LocalAddr().(*net.TCPAddr); ok {
				return a.IP
			}
		}
	}
	return net.IPv4(127, 0, 0, 1)
}

// Refused returns how many connections rank 0 refused while forming the
// group (0 on other ranks).
func (c *Conn) Refused() int { return c.refused }

// Close closes every connection; a collective in progress returns an error
// wrapping ErrClosed. Close is idempotent and safe to call at any time.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	if c.err == nil {
		c.err = fmt.Errorf("%w by Close", ErrClosed)
	}
	c.mu.Unlock()
	c.closePeers()
	return nil
}

func (c *Conn) closePeers() {
	for _, nc := range c.peers {
		if nc != nil {
			nc.Close()
		}
	}
}

// Join forms the group described by cfg and returns when every rank has
// joined. Rank 0 listens on cfg.Addr (Listen, then Accept); the others dial
// it, retrying until ctx ends, so rank 0 may start later.
func Join(ctx context.Context, cfg Config) (*Conn, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Size == 1 {
		return &Conn{rank: 0, size: 1}, nil
	}
	if cfg.Rank == 0 {
		l, err := Listen(cfg)
		if err != nil {
			return nil, err
		}
		defer l.Close()
		return l.Accept(ctx)
	}
	nc, err := dial(ctx, cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: rank %d: %w", cfg.Rank, err)
	}
	release := bind(ctx, time.Now().Add(cfg.handshakeTimeout()), nc)
	err = joinHandshake(nc, cfg)
	release()
	if err == nil {
		release = bind(ctx, time.Time{}, nc)
		_, err = readFixed(nc, msgReady, 0)
		release()
		if err != nil {
			err = fmt.Errorf("admitted, then waiting for the group to complete: %w", ioErr(ctx, err))
		}
	} else {
		err = fmt.Errorf("handshake: %w", ioErr(ctx, err))
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("bootstrap: rank %d joining rank 0 at %s: %w", cfg.Rank, cfg.Addr, err)
	}
	return &Conn{rank: cfg.Rank, size: cfg.Size, peers: []net.Conn{nc}}, nil
}

// dial connects to addr, retrying with backoff until ctx ends.
func dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	wait := 20 * time.Millisecond
	for {
		nc, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return nc, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("dialing rank 0 at %s: %w (last error: %v)", addr, ctx.Err(), err)
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

// Listener is rank 0 before the group has formed.
type Listener struct {
	cfg     Config
	ln      net.Listener
	refused atomic.Int64

	mu    sync.Mutex
	taken []bool // by rank
}

// Listen starts rank 0: it listens on cfg.Addr ("127.0.0.1:0" picks a free
// port; see Addr). cfg.Rank must be 0.
func Listen(cfg Config) (*Listener, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Rank != 0 {
		return nil, fmt.Errorf("bootstrap: %w: only rank 0 listens (rank is %d)", ErrConfig, cfg.Rank)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: rank 0: %w", err)
	}
	return &Listener{cfg: cfg, ln: ln, taken: make([]bool, cfg.Size)}, nil
}

// Addr returns the address the listener is bound to.
func (l *Listener) Addr() string { return l.ln.Addr().String() }

// Refused returns how many connections have been refused so far: failed
// authentication, a bad or taken claim, malformed messages, handshake timeouts.
func (l *Listener) Refused() int { return int(l.refused.Load()) }

// Close stops listening. Accept closes the listener itself when it returns.
func (l *Listener) Close() error { return l.ln.Close() }

func (l *Listener) claim(rank int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.taken[rank] {
		return false
	}
	l.taken[rank] = true
	return true
}

func (l *Listener) release(rank int) {
	l.mu.Lock()
	l.taken[rank] = false
	l.mu.Unlock()
}

type member struct {
	rank int
	nc   net.Conn
}

// Accept admits joiners, handshaking with each concurrently under
// cfg.HandshakeTimeout, until ranks 1 to size-1 have all joined or ctx
// ends. Refused connections do not fail the group. When all have joined it
// tells them so and returns the Conn. Accept may be called once; it closes
// the listener when it returns. Joiners that connect before Accept is
// called wait in the listen backlog, within their handshake timeout, so
// call Accept soon after Listen.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	defer l.ln.Close()
	c := &Conn{rank: 0, size: l.cfg.Size, peers: make([]net.Conn, l.cfg.Size)}
	if c.size == 1 {
		return c, nil
	}
	hctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(hctx, func() { l.ln.Close() })
	defer stop()
	joined := make(chan member)
	served := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(served)
		l.serve(hctx, &wg, joined)
	}()
	var err error
	for n := 1; n < c.size && err == nil; n++ {
		select {
		case m := <-joined:
			c.peers[m.rank] = m.nc
		case <-ctx.Done():
			err = fmt.Errorf("bootstrap: rank 0: %d of %d ranks joined: %w", n, c.size, ctx.Err())
		case <-served:
			err = fmt.Errorf("bootstrap: rank 0: %w: listener closed with %d of %d ranks joined", ErrClosed, n, c.size)
		}
	}
	cancel()
	wg.Wait()
	if err == nil {
		release := bind(ctx, time.Time{}, c.peers[1:]...)
		for r := 1; r < c.size && err == nil; r++ {
			if werr := writeFrame(c.peers[r], msgReady); werr != nil {
				err = fmt.Errorf("bootstrap: rank 0: telling rank %d the group is complete: %w", r, ioErr(ctx, werr))
			}
		}
		release()
	}
	if err != nil {
		c.closePeers()
		return nil, err
	}
	c.refused = l.Refused()
	return c, nil
}

// serve accepts connections until ctx ends, handshaking with each in its
// own goroutine.
func (l *Listener) serve(ctx context.Context, wg *sync.WaitGroup, joined chan<- member) {
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			l.logf("bootstrap: rank 0: accept: %v", err) // e.g. out of file descriptors
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			release := bind(ctx, time.Now().Add(l.cfg.handshakeTimeout()), nc)
			rank, err := l.handshake(nc)
			release()
			if err != nil {
				nc.Close()
				// Not counted: handshakes cut short because Accept is done.
				if _, ok := err.(refusal); ok || ctx.Err() == nil {
					if !ok {
						l.refused.Add(1)
					}
					l.logf("bootstrap: rank 0: refused connection from %s: %v", nc.RemoteAddr(), err)
				}
				return
			}
			select {
			case joined <- member{rank, nc}:
			case <-ctx.Done():
				nc.Close()
			}
		}()
	}
}

func (l *Listener) logf(format string, args ...any) {
	if l.cfg.Logf != nil {
		l.cfg.Logf(format, args...)
	}
}

// AllGather sends mine to every rank and returns every rank's bytes,
// indexed by rank. The returned slices are fresh (never mine).
func (c *Conn) AllGather(ctx context.Context, mine []byte) ([][]byte, error) {
	body, err := c.run(ctx, collHeader{op: opAllGather}, mine)
	if err != nil {
		return nil, err
	}
	out, err := decodeList(body, c.size)
	if err != nil {
		return nil, c.fail(opAllGather, fmt.Errorf("result from rank 0: %w", err))
	}
	return out, nil
}

// Barrier returns once every rank has called it.
func (c *Conn) Barrier(ctx context.Context) error {
	_, err := c.run(ctx, collHeader{op: opBarrier}, nil)
	return err
}

// Broadcast returns root's data on every rank; data is ignored on the
// other ranks. The returned slice is fresh.
func (c *Conn) Broadcast(ctx context.Context, root int, data []byte) ([]byte, error) {
	if root < 0 || root >= c.size {
		return nil, fmt.Errorf("bootstrap: Broadcast: %w: root %d not in [0, %d)", ErrConfig, root, c.size)
	}
	if c.rank != root {
		data = nil
	}
	return c.run(ctx, collHeader{op: opBroadcast, arg: uint32(root)}, data)
}

// run performs one collective: every rank sends its contribution to rank
// 0, which checks that all called the same collective, combines the
// contributions and sends the result to all. It returns the result body.
func (c *Conn) run(ctx context.Context, h collHeader, mine []byte) ([]byte, error) {
	name := opName(h.op)
	c.mu.Lock()
	err := c.err
	c.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("bootstrap: %s: %w", name, err)
	}
	if !c.busy.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("bootstrap: %s: %w: another collective is in progress on this Conn", name, ErrProtocol)
	}
	defer c.busy.Store(false)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("bootstrap: %s: %w", name, err)
	}
	if collHeaderLen+4+len(mine) > MaxMessage {
		return nil, fmt.Errorf("bootstrap: %s: %w: %d bytes", name, ErrTooLarge, len(mine))
	}
	c.seq++
	h.seq = c.seq
	switch {
	case c.size == 1:
		return combine(h, [][]byte{mine}), nil
	case c.rank == 0:
		return c.root(ctx, h, mine)
	}
	return c.leaf(ctx, h, mine)
}

// combine makes the result body of a collective from the contributions.
func combine(h collHeader, parts [][]byte) []byte {
	switch h.op {
	case opAllGather:
		return encodeList(parts)
	case opBroadcast:
		return bytes.Clone(parts[h.arg])
	}
	return nil
}

// root is run for rank 0.
func (c *Conn) root(ctx context.Context, h collHeader, mine []byte) ([]byte, error) {
	release := bind(ctx, time.Time{}, c.peers[1:]...)
	parts := make([][]byte, c.size)
	parts[0] = mine
	total := collHeaderLen + 4 + len(mine)
	for r := 1; r < c.size; r++ {
		data, code, err := c.recv(ctx, r, h)
		if err == nil && h.op == opAllGather {
			if total += 4 + len(data); total > MaxMessage {
				code, err = codeTooLarge, fmt.Errorf("%w: AllGather result exceeds %d bytes", ErrTooLarge, MaxMessage)
			}
		}
		if err != nil {
			release()
			c.abort(code, fmt.Sprintf("rank 0, %v: %v", h, err))
			return nil, c.fail(h.op, err)
		}
		parts[r] = data
	}
	body := combine(h, parts)
	hdr := h.encode()
	for r := 1; r < c.size; r++ {
		if err := writeFrame(c.peers[r], msgResult, hdr, body); err != nil {
			// A frame may be half written: close rather than abort.
			release()
			c.closePeers()
			return nil, c.fail(h.op, fmt.Errorf("sending the result to rank %d: %w", r, ioErr(ctx, err)))
		}
	}
	release()
	return body, nil
}

// recv reads rank r's contribution to the collective h; on failure it
// also returns the code to abort the others with.
func (c *Conn) recv(ctx context.Context, r int, h collHeader) ([]byte, byte, error) {
	typ, p, err := readFrame(c.peers[r], MaxMessage)
	if err != nil {
		code := byte(codeClosed)
		if errors.Is(err, ErrProtocol) {
			code = codeProtocol
		}
		return nil, code, fmt.Errorf("waiting for rank %d: %w", r, ioErr(ctx, err))
	}
	got, data, err := decodeColl(p)
	switch {
	case err != nil:
	case typ != msgGather:
		err = fmt.Errorf("%w: unexpected message type %d", ErrProtocol, typ)
	case got != h:
		err = fmt.Errorf("%w: rank %d called %v while rank 0 called %v", ErrProtocol, r, got, h)
	case len(data) > 0 && (h.op == opBarrier || h.op == opBroadcast && uint32(r) != h.arg):
		err = fmt.Errorf("%w: %d bytes of data in %v", ErrProtocol, len(data), h)
	}
	if err != nil {
		return nil, codeProtocol, fmt.Errorf("from rank %d: %w", r, err)
	}
	return data, 0, nil
}

// abort tells every other rank, best effort, that the collective failed.
func (c *Conn) abort(code byte, reason string) {
	msg := encodeAbort(code, reason)
	for _, nc := range c.peers[1:] {
		nc.SetWriteDeadline(time.Now().Add(abortTimeout))
		writeFrame(nc, msgAbort, msg)
		nc.SetWriteDeadline(time.Time{})
	}
}

// leaf is run for ranks other than 0. It reads rank 0's answer while
// sending, so that an abort is seen even if rank 0 stopped reading a
// large contribution.
func (c *Conn) leaf(ctx context.Context, h collHeader, mine []byte) ([]byte, error) {
	nc := c.peers[0]
	release := bind(ctx, time.Time{}, nc)
	defer release()
	sent := make(chan error, 1)
	go func() { sent <- writeFrame(nc, msgGather, h.encode(), mine) }()
	body, err := answer(nc, h)
	if err != nil {
		nc.SetWriteDeadline(longAgo) // unblock the send
	}
	if werr := <-sent; werr != nil && err == nil {
		err = fmt.Errorf("sending to rank 0: %w", werr)
	}
	if err != nil {
		return nil, c.fail(h.op, ioErr(ctx, err))
	}
	return body, nil
}

// answer reads rank 0's answer to the collective h.
func answer(nc net.Conn, h collHeader) ([]byte, error) {
	typ, p, err := readFrame(nc, MaxMessage)
	if err != nil {
		return nil, fmt.Errorf("waiting for rank 0: %w", err)
	}
	switch typ {
	case msgResult:
		got, body, err := decodeColl(p)
		if err == nil && got != h {
			err = fmt.Errorf("%w: rank 0 answered %v to %v", ErrProtocol, got, h)
		}
		return body, err
	case msgAbort:
		code, reason, err := decodeAbort(p)
		if err == nil {
			what, sentinel := codeErr(code)
			err = fmt.Errorf("%w: rank 0 aborted the call (%s): %q", sentinel, what, reason)
		}
		return nil, err
	}
	return nil, fmt.Errorf("%w: unexpected message type %d from rank 0", ErrProtocol, typ)
}

// fail declares c broken by err (a joiner also closes its connection, so
// that rank 0 learns it at once) and returns err with context.
func (c *Conn) fail(op byte, err error) error {
	c.mu.Lock()
	if c.err == nil {
		c.err = fmt.Errorf("%w: broken by an earlier failure: %v", ErrClosed, err)
	}
	c.mu.Unlock()
	if c.rank != 0 {
		c.closePeers()
	}
	return fmt.Errorf("bootstrap: rank %d: %s: %w", c.rank, opName(op), err)
}

var longAgo = time.Unix(1, 0)

// bind applies ctx and the optional extra deadline limit to the
// connections until release is called: I/O fails at the earlier deadline,
// or at once when ctx is cancelled. release clears the deadlines.
func bind(ctx context.Context, limit time.Time, conns ...net.Conn) (release func()) {
	d, ok := ctx.Deadline()
	if !limit.IsZero() && (!ok || limit.Before(d)) {
		d = limit
	}
	for _, nc := range conns {
		nc.SetDeadline(d)
	}
	var mu sync.Mutex
	done := false
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			for _, nc := range conns {
				nc.SetDeadline(longAgo)
			}
		}
	})
	return func() {
		stop()
		mu.Lock()
		done = true
		mu.Unlock()
		for _, nc := range conns {
			nc.SetDeadline(time.Time{})
		}
	}
}

// ioErr classifies an error from I/O: one of ours as it is, else the
// context's error if ctx has ended, else a timeout as it is, else a lost
// connection (ErrClosed).
func ioErr(ctx context.Context, err error) error {
	for _, e := range []error{ErrAuth, ErrRankTaken, ErrConfig, ErrProtocol, ErrClosed, ErrTooLarge} {
		if errors.Is(err, e) {
			return err
		}
	}
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return fmt.Errorf("timed out: %w", err)
	}
	return fmt.Errorf("%w: %w", ErrClosed, err)
}
