package service

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onesided/rma"
	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/fallback"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/verbs"
)

// resumable gives c, on the fake connection f, a session at fs's server,
// and the means to resume it on new fake connections, each with a key of
// its own to the window.
func resumable(t *testing.T, fs *fakeServer, c *Client, f *fakeConn) {
	t.Helper()
	fs.mu.Lock()
	fs.s.mu.Lock()
	fs.s.newSession(f.sc)
	fs.s.mu.Unlock()
	fs.mu.Unlock()
	c.session = f.sc.session
	c.cfg.Secret, c.cfg.ResumeWithin = fs.s.cfg.Secret, 5*time.Second
	c.breakQP = func() {}
	c.reconnect = func(ctx context.Context) (cNonce, sNonce [nonceLen]byte, err error) {
		rand.Read(cNonce[:])
		rand.Read(sNonce[:])
		fs.mu.Lock()
		defer fs.mu.Unlock()
		old := fs.conns[len(fs.conns)-1]
		r := &replies{}
		n := &fakeConn{fs: fs, c: c, sc: &sconn{out: r, grants: map[uint32]*grant{}, cNonce: cNonce, sNonce: sNonce},
			out: r, access: old.access, ev: old.ev, num: old.num + 1, rkey: old.rkey + 1}
		fs.conns = append(fs.conns, n)
		c.cq, c.qp = n, n // the channel and the memory region stay, as redial keeps them
		c.qpn = n.num
		return cNonce, sNonce, nil
	}
}

// TestClientResume: the connection fails with calls of every kind in
// flight, at every point of their work requests, with the failing one
// carried out or not; the client resumes its session on a new connection
// and the calls carry on. Every Put lands, every engine Accumulate is
// applied exactly once, a NIC FetchAndOp either returns its old value or
// says that its outcome is unknown (and is never applied twice), and the
// exclusive lock taken before the failure is still the client's.
func TestClientResume(t *testing.T) {
	ctx := context.Background()
	for cut := 0; cut < 4; cut++ { // 4 work requests are in flight
		for _, applied := range []bool{false, true} {
			name := fmt.Sprintf("cut %d applied %v", cut, applied)
			fs := newFakeServer(t, 4096)
			c, f := fs.client(t, AccessAll, 4096)
			w := open(t, c)
			resumable(t, fs, c, f)
			if err := w.Lock(ctx, rma.LockExclusive); err != nil {
				t.Fatalf("%s: Lock: %v", name, err)
			}
			small, big := pattern(64, byte(cut)), pattern(1000, byte(cut+1))
			l0, o0 := f.counts()
			f.setHold(true)
			var wg sync.WaitGroup
			errs := make([]error, 4)
			var old []byte
			wg.Add(4)
			// The serialized path's Put first: it holds mu, and posts
			// the lanes' work requests as they come.
			go func() { defer wg.Done(); errs[1] = w.Put(ctx, big, 1024) }()
			waitPosted := func(lanes, others int) {
				for deadline := time.Now().Add(5 * time.Second); ; {
					l, o := f.counts()
					if l-l0 == lanes && o-o0 == others {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s: %d lane and %d other work requests posted, want %d and %d", name, l-l0, o-o0, lanes, others)
					}
					time.Sleep(time.Millisecond)
				}
			}
			waitPosted(0, 1)
			go func() { defer wg.Done(); errs[0] = w.Put(ctx, small, 64) }()
			go func() {
				defer wg.Done()
				errs[2] = w.Accumulate(ctx, f64(5), datatype.Float64, 8, op.Sum)
			}()
			go func() {
				defer wg.Done()
				old = make([]byte, 8)
				errs[3] = w.FetchAndOp(ctx, u64(1), old, datatype.Int64, 0, op.Sum)
			}()
			waitPosted(3, 1)
			fs.mu.Lock()
			f.failing, f.runOK, f.applyBad = verbs.WCRetryExcErr, cut, applied
			fs.mu.Unlock()
			f.setHold(false)
			wg.Wait()
			for i, err := range errs[:3] {
				if err != nil {
					t.Errorf("%s: call %d: %v", name, i, err)
				}
			}
			word := fs.word(0)
			switch {
			case errs[3] == nil && (word != 1 || string(old) != string(u64(0))):
				t.Errorf("%s: FetchAndOp returned old %x, the word is %d; want 0 and 1", name, old, word)
			case errs[3] != nil && (!errors.Is(errs[3], verbs.ErrOutcomeUnknown) || word > 1):
				t.Errorf("%s: FetchAndOp: %v, the word is %d; want ErrOutcomeUnknown and 0 or 1", name, errs[3], word)
			}
			if got := fs.mem(8, 8); !bytes.Equal(got, f64(5)) {
				t.Errorf("%s: the accumulated word is %x, want %x (5.0, applied once)", name, got, f64(5))
			}
			if !bytes.Equal(fs.mem(64, 64), small) || !bytes.Equal(fs.mem(1024, 1000), big) {
				t.Errorf("%s: a Put did not land", name)
			}
			fs.mu.Lock()
			fs.s.mu.Lock()
			held, resumed := fs.s.win.locks.excl, fs.s.stats.Resumed
			cur := fs.conns[len(fs.conns)-1].sc
			fs.s.mu.Unlock()
			fs.mu.Unlock()
			if held != cur || resumed != 1 || c.Stats().Resumes != 1 {
				t.Errorf("%s: the lock is held by %p (the resumed connection is %p), %d sessions resumed (the client counted %d); want it, 1",
					name, held, cur, resumed, c.Stats().Resumes)
			}
			// Calls go on, on the new connection, with the window's new key.
			if err := w.Put(ctx, u64(7), 16); err != nil || fs.word(16) != 7 {
				t.Errorf("%s: a Put after the resumption: %v, word %d", name, err, fs.word(16))
			}
			if err := w.Unlock(ctx); err != nil {
				t.Errorf("%s: Unlock: %v", name, err)
			}
			if fs.s.win.locks.excl != nil {
				t.Errorf("%s: the lock is still held after Unlock", name)
			}
		}
	}
}

// TestClientResumeLetGo: a session the server let go (its client did not
// resume it in time) is not resumed: the client fails with the peer lost,
// and the lock it held went to nobody else unnoticed (it was given up at
// the server, which counted the recovery).
func TestClientResumeLetGo(t *testing.T) {
	ctx := context.Background()
	fs := newFakeServer(t, 4096)
	c, f := fs.client(t, AccessAll, 4096)
	w := open(t, c)
	resumable(t, fs, c, f)
	if err := w.Lock(ctx, rma.LockExclusive); err != nil {
		t.Fatal(err)
	}
	fs.mu.Lock()
	fs.s.mu.Lock()
	f.sc.broken = true
	if !fs.s.hold(f.sc, time.Now()) {
		t.Fatal("the server did not hold the session of a connection broken on the transport")
	}
	fs.s.letGo(time.Now().Add(fs.s.cfg.ResumeWithin))
	recovered := fs.s.stats.LockRecoveries
	fs.s.mu.Unlock()
	f.failing = verbs.WCRetryExcErr
	fs.mu.Unlock()
	if recovered != 1 {
		t.Errorf("the server recovered %d locks, want 1", recovered)
	}
	err := w.Put(ctx, u64(1), 0)
	if !errors.Is(err, verbs.ErrPeerLost) || !strings.Contains(err.Error(), "let the session go") {
		t.Errorf("Put after the session was let go: %v, want ErrPeerLost saying so", err)
	}
	if err := w.Put(ctx, u64(1), 0); !errors.Is(err, verbs.ErrPeerLost) {
		t.Errorf("a second Put: %v, want ErrPeerLost", err)
	}
}

// TestServerResume: the server's side of a resumption. A session whose
// connection failed on the transport is held; a new connection that
// resumes it takes its place in the lock queue (its lock request sent
// again waits there and is granted once), and a request it sends again
// after the server handled it gets the recorded reply and is not applied
// again. A connection of a session that still looks alive is failed when
// another resumes it.
func TestServerResume(t *testing.T) {
	s := newLogicServer(t)
	now := time.Now()
	a, ra := s.conn(AccessAll) // the client whose connection fails
	b, rb := s.conn(AccessAll) // holds the lock meanwhile
	s.newSession(a)
	s.newSession(b)
	s.send(b, lockMsg(msgLock, 1, lockExclusive))
	wantReply(t, "b's lock", rb.take(), msgOK, 1, 0)
	s.send(a, accMsg(t, 7, fallback.KindGetAccumulate, op.Sum, 5))
	applied := ra.take()
	s.send(a, lockMsg(msgLock, 8, lockExclusive))
	wantNone(t, "a's lock, waiting", ra)

	// a's connection fails: its session is held, its request still waits.
	s.mu.Lock()
	a.broken = true
	if !s.hold(a, now) {
		t.Fatal("the session of a connection broken on the transport was not held")
	}
	s.mu.Unlock()
	n, rn := s.conn(0)
	s.mu.Lock()
	ok := s.resume(n, &a.session)
	s.mu.Unlock()
	if !ok || !a.moved || n.session != a.session || n.grants[s.win.id] == nil {
		t.Fatalf("resume: %v, moved %v, the grant carried %v", ok, a.moved, n.grants[s.win.id] != nil)
	}
	// Sent again: the accumulate gets its recorded reply, once applied;
	// the lock request stays in its place.
	s.send(n, accMsg(t, 7, fallback.KindGetAccumulate, op.Sum, 5))
	if again := rn.take(); len(again) != 1 || !bytes.Equal(again[0], applied[0]) {
		t.Errorf("the accumulate sent again got %x, want the recorded reply %x", again, applied)
	}
	if got := int64(binary.NativeEndian.Uint64(s.win.mem)); got != 5 {
		t.Errorf("the word is %d after the accumulate and its resend, want 5 (applied once)", got)
	}
	s.send(n, lockMsg(msgLock, 8, lockExclusive))
	wantNone(t, "the lock request sent again", rn)
	if q := s.win.locks.queue; len(q) != 1 || q[0].c != n {
		t.Fatalf("the lock queue has %d requests (the first %p), want one, the new connection's %p", len(q), q[0].c, n)
	}
	s.send(b, lockMsg(msgUnlock, 2, 0))
	wantReply(t, "b's unlock", rb.take(), msgOK, 2, 0)
	wantReply(t, "the grant to the resumed session", rn.take(), msgOK, 8, 0)
	if s.win.locks.excl != n {
		t.Errorf("the lock is held by %p, want the resumed connection %p", s.win.locks.excl, n)
	}

	// A held session is let go in time, the locks given up.
	s.mu.Lock()
	n.broken = true
	s.hold(n, now)
	next := s.letGo(now.Add(time.Second))
	if next.IsZero() || s.win.locks.excl != n {
		t.Errorf("after 1 s: the next let-go at %v, the lock held by %p; want a time, %p", next, s.win.locks.excl, n)
	}
	s.letGo(now.Add(s.cfg.ResumeWithin))
	if s.win.locks.excl != nil || s.sessions[n.session] != nil {
		t.Errorf("after ResumeWithin: the lock held by %p, the session %v; want neither", s.win.locks.excl, s.sessions[n.session])
	}
	s.mu.Unlock()

	// A session whose connection looks alive moves, and that connection is failed.
	c, _ := s.conn(AccessAll)
	s.newSession(c)
	m, _ := s.conn(0)
	s.mu.Lock()
	ok = s.resume(m, &c.session)
	s.mu.Unlock()
	if !ok || !c.kill || !c.moved || s.sessions[c.session] != m {
		t.Errorf("resuming a live session: %v, the old connection killed %v, moved %v", ok, c.kill, c.moved)
	}
	// An unknown session is not resumed.
	var unknown session
	unknown[0] = 1
	if s.resume(m, &unknown) {
		t.Error("an unknown session was resumed")
	}
}

// TestRefused: a try of a resumption that the server's host or the
// server refuses ends the resumption; one that finds the server full, or
// an error a cut wire gives, does not.
func TestRefused(t *testing.T) {
	rejected := func(reason byte, status int) error {
		return fmt.Errorf("connect: %w", &verbs.CMError{Op: "connect", Event: verbs.CMRejected, Status: status, PrivateData: rejectData(reason)})
	}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"nothing listens", &verbs.CMError{Event: verbs.CMRejected, Status: 8}, true},
		{"the server closes", rejected(rejectClosing, 28), true},
		{"another protocol", rejected(rejectProtocol, 28), true},
		{"the server is full", rejected(rejectFull, 28), false},
		{"a reject of the connection manager", &verbs.CMError{Event: verbs.CMRejected, Status: 10}, false},
		{"no answer", &verbs.CMError{Event: verbs.CMUnreachable}, false},
		{"a context's end", context.DeadlineExceeded, false},
	} {
		if got := refused(c.err); got != c.want {
			t.Errorf("%s (%v): refused %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
