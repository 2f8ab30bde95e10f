package service

import (
	"crypto/rand"
	"encoding/binary"
	"testing"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/fallback"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/verbs"
)

// The tests in this file drive the server's message handling (the door,
// the lock manager, the engine's checks) with the messages a client would
// send, on connections whose replies are recorded: no device.

// replies records what the server sent a connection.
type replies struct{ msgs [][]byte }

func (r *replies) PostSendInline(wrID uint64, data []byte, flags verbs.SendFlags) error {
	r.msgs = append(r.msgs, append([]byte(nil), data...))
	return nil
}

// take returns the replies sent since the last take.
func (r *replies) take() [][]byte {
	m := r.msgs
	r.msgs = nil
	return m
}

type logicServer struct {
	*Server
	win *exposed
}

// newLogicServer is a server with one window "w" of 64 bytes, id 0.
func newLogicServer(t *testing.T) *logicServer {
	t.Helper()
	return newLogicServerSize(t, 64)
}

// newLogicServerSize is newLogicServer with a window of size bytes.
func newLogicServerSize(t *testing.T, size int) *logicServer {
	t.Helper()
	cfg := ServerConfig{Secret: []byte("the secret")}
	if err := cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	s := &Server{cfg: cfg, kick: make(chan struct{}, 1), windows: map[string]*exposed{},
		target: fallback.NewTarget(), conns: map[uint32]*sconn{}, sessions: map[session]*sconn{}}
	s.secrets = []secret{{key: cfg.Secret}}
	w := &exposed{name: "w", id: 0, mem: make([]byte, size)}
	s.windows["w"], s.byID = w, []*exposed{w}
	if err := s.target.AddWindow(w.id, w.mem); err != nil {
		t.Fatal(err)
	}
	return &logicServer{s, w}
}

// conn is a connection that proved the secret and opened w with access.
func (s *logicServer) conn(access Access) (*sconn, *replies) {
	r := &replies{}
	c := &sconn{out: r, authed: true, grants: map[uint32]*grant{}}
	if access != 0 {
		c.grants[s.win.id] = &grant{access: access}
	}
	return c, r
}

func (s *logicServer) send(c *sconn, msg []byte) {
	var reply [maxReply]byte
	s.mu.Lock()
	s.message(c, msg, reply[:])
	s.mu.Unlock()
}

func lockMsg(typ byte, seq uint32, lt byte) []byte {
	b := make([]byte, lockLen)
	putLock(b, typ, seq, 0, lt)
	return b
}

// reply checks that got is one reply of type typ to seq (and, for msgErr,
// reason).
func wantReply(t *testing.T, who string, got [][]byte, typ byte, seq uint32, reason byte) {
	t.Helper()
	if len(got) != 1 {
		t.Fatalf("%s: %d replies %x, want one of type %#x to %d", who, len(got), got, typ, seq)
	}
	gt, gs, ok := header(got[0])
	if !ok || gt != typ || gs != seq || (typ == msgErr && (len(got[0]) != errLen || got[0][headerLen] != reason)) {
		t.Fatalf("%s: reply %x, want type %#x to %d (reason %d)", who, got[0], typ, seq, reason)
	}
}

func wantNone(t *testing.T, who string, r *replies) {
	t.Helper()
	if got := r.take(); len(got) != 0 {
		t.Fatalf("%s: replies %x, want none yet", who, got)
	}
}

// A connection that has not proved the secret gets nothing but its
// proof's refusal: its opens, accumulates and locks are not served, and
// after a wrong proof it is not answered at all.
func TestServerDoorLogic(t *testing.T) {
	s := newLogicServer(t)
	c, r := s.conn(0)
	c.authed = false
	rand.Read(c.sNonce[:])
	rand.Read(c.cNonce[:])
	// An accumulate before the proof is taken as a (wrong) proof.
	acc := accMsg(t, 1, fallback.KindAccumulate, op.Sum, 1)
	s.send(c, acc)
	wantReply(t, "accumulate before the proof", r.take(), msgAuthFail, 1, 0)
	if !c.failing || c.authed {
		t.Fatalf("after a wrong proof: failing %v, authed %v", c.failing, c.authed)
	}
	for _, m := range [][]byte{acc, lockMsg(msgLock, 2, lockExclusive)} {
		s.send(c, m)
		wantNone(t, "a message after a refused proof", r)
	}
	if got := binary.NativeEndian.Uint64(s.win.mem); got != 0 {
		t.Fatalf("the window changed to %d", got)
	}
	if s.stats.AuthFailures != 1 {
		t.Errorf("AuthFailures = %d, want 1", s.stats.AuthFailures)
	}

	// A proof made with another secret fails; the right one passes and
	// the server proves the secret back.
	for _, key := range [][]byte{[]byte("another secret"), s.cfg.Secret} {
		c, r := s.conn(0)
		c.authed = false
		rand.Read(c.sNonce[:])
		rand.Read(c.cNonce[:])
		b := make([]byte, recvSize)
		n := putAuth(b, 7, key, &c.sNonce, &c.cNonce, 0x1000, 5, &session{}, "client")
		s.send(c, b[:n])
		got := r.take()
		if string(key) != string(s.cfg.Secret) {
			wantReply(t, "a proof with another secret", got, msgAuthFail, 7, 0)
			continue
		}
		wantReply(t, "the right proof", got, msgAuthOK, 7, 0)
		// A server without atomics gives no byte-order word: zeros,
		// which the MAC covers, as it covers the new session.
		var want [macLen]byte
		body := append(make([]byte, 16), c.session[:]...)
		proof(want[:], key, serverLabel, &c.cNonce, &c.sNonce, body)
		if len(got[0]) != authOKLen || string(got[0][headerLen:headerLen+32]) != string(body) ||
			string(got[0][headerLen+32:]) != string(want[:]) || c.session == (session{}) {
			t.Errorf("msgAuthOK %x, want 16 zero bytes, the session %x and the proof %x", got[0][headerLen:], c.session, want)
		}
		if r, ok := parseAuthOK(got[0], key, &c.cNonce, &c.sNonce); !ok || r.addr != 0 || r.rkey != 0 || r.resumed || r.session != c.session {
			t.Errorf("parseAuthOK: %+v, %v; want no word, not resumed, session %x", r, ok, c.session)
		}
		if !c.authed || c.probeAddr != 0x1000 || c.probeRKey != 5 || c.info.Name != "client" {
			t.Errorf("after the proof: authed %v, probe %#x/%d, name %q", c.authed, c.probeAddr, c.probeRKey, c.info.Name)
		}
	}
}

// accMsg is an accumulate of one int64 v into word 0 of window 0.
func accMsg(t *testing.T, seq uint32, kind fallback.Kind, o op.Op, v int64) []byte {
	t.Helper()
	b := make([]byte, headerLen, recvSize)
	putHeader(b, msgAcc, seq)
	req := fallback.Request{Kind: kind, Op: o, Window: 0, Tag: seq, Disp: 0, Type: datatype.Int64.Type(), Count: 1,
		Data: binary.NativeEndian.AppendUint64(nil, uint64(v))}
	b, err := fallback.AppendRequest(b, &req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The lock manager: requests are granted in order of arrival, consecutive
// shared ones together; a withdrawn request is never granted; a
// connection that goes frees what it held and the next waiters get it.
func TestServerLockLogic(t *testing.T) {
	s := newLogicServer(t)
	a, ra := s.conn(AccessAll)
	b, rb := s.conn(AccessAll)
	c, rc := s.conn(AccessAll)
	d, rd := s.conn(AccessAll)

	s.send(a, lockMsg(msgLock, 1, lockExclusive))
	wantReply(t, "A's exclusive lock of a free window", ra.take(), msgOK, 1, 0)
	s.send(b, lockMsg(msgLock, 2, lockShared))
	s.send(c, lockMsg(msgLock, 3, lockShared))
	s.send(d, lockMsg(msgLock, 4, lockExclusive))
	wantNone(t, "B waiting", rb)
	wantNone(t, "C waiting", rc)
	wantNone(t, "D waiting", rd)
	s.send(a, lockMsg(msgLock, 5, lockShared))
	wantReply(t, "A's second Lock", ra.take(), msgErr, 5, errLockState)

	s.send(a, lockMsg(msgUnlock, 6, 0))
	wantReply(t, "A's Unlock", ra.take(), msgOK, 6, 0)
	wantReply(t, "B, granted with C", rb.take(), msgOK, 2, 0)
	wantReply(t, "C, granted with B", rc.take(), msgOK, 3, 0)
	wantNone(t, "D, behind the shared holders", rd)

	// C goes (its process died): it holds a shared lock; D still waits for B.
	s.mu.Lock()
	s.gone(c)
	s.mu.Unlock()
	wantNone(t, "D, with B still holding", rd)
	// D withdraws its request, then asks again; E waits behind it.
	s.send(d, lockMsg(msgUnlock, 7, 0))
	wantReply(t, "D's withdrawal", rd.take(), msgOK, 7, 0)
	s.send(d, lockMsg(msgLock, 8, lockExclusive))
	e, re := s.conn(AccessAll)
	s.send(e, lockMsg(msgLock, 9, lockShared))
	// B goes holding its shared lock: D gets the window, E not yet.
	s.mu.Lock()
	s.gone(b)
	s.mu.Unlock()
	wantReply(t, "D, after B went", rd.take(), msgOK, 8, 0)
	wantNone(t, "E, behind D", re)
	s.mu.Lock()
	s.gone(d)
	s.mu.Unlock()
	wantReply(t, "E, after D went holding the exclusive lock", re.take(), msgOK, 9, 0)
	if got := s.stats.LockRecoveries; got != 3 {
		t.Errorf("LockRecoveries = %d, want 3 (C, B and D went holding)", got)
	}
	s.send(e, lockMsg(msgUnlock, 10, 0))
	wantReply(t, "E's Unlock", re.take(), msgOK, 10, 0)
	if l := s.win.locks; l.excl != nil || l.shared != 0 || len(l.queue) != 0 {
		t.Errorf("the lock after everyone left: %+v", l)
	}

	s.send(e, lockMsg(msgUnlock, 11, 0))
	wantReply(t, "Unlock without the lock", re.take(), msgErr, 11, errLockState)
	f, rf := s.conn(0) // did not open the window
	s.send(f, lockMsg(msgLock, 12, lockShared))
	wantReply(t, "Lock of a window not opened", rf.take(), msgErr, 12, errUnknownWin)
	bad := lockMsg(msgLock, 13, lockShared)
	bad[14] = 1
	s.send(e, bad)
	wantReply(t, "a malformed Lock", re.take(), msgErr, 13, errBadRequest)
}

// The engine serves a connection only the windows it opened, with the
// rights its grant gives, and applies what it serves with the target
// code of package fallback.
func TestServerAccumulateLogic(t *testing.T) {
	s := newLogicServer(t)
	none, rn := s.conn(0)
	read, rr := s.conn(AccessRead)
	full, rf := s.conn(AccessAll)

	s.send(none, accMsg(t, 1, fallback.KindAccumulate, op.Sum, 5))
	wantReply(t, "an accumulate to a window not opened", rn.take(), msgErr, 1, errUnknownWin)
	s.send(read, accMsg(t, 2, fallback.KindAccumulate, op.Sum, 5))
	wantReply(t, "an accumulate with read access only", rr.take(), msgErr, 2, errDenied)
	if got := binary.NativeEndian.Uint64(s.win.mem); got != 0 {
		t.Fatalf("refused accumulates changed the word to %d", got)
	}
	s.send(full, accMsg(t, 3, fallback.KindAccumulate, op.Sum, 5))
	s.send(full, accMsg(t, 4, fallback.KindGetAccumulate, op.Sum, 2))
	got := rf.take()
	if len(got) != 2 {
		t.Fatalf("%d replies to two accumulates", len(got))
	}
	var rep fallback.Reply
	if err := fallback.DecodeReply(got[1][headerLen:], &rep); err != nil || rep.Err() != nil || len(rep.Data) != 8 ||
		binary.NativeEndian.Uint64(rep.Data) != 5 {
		t.Errorf("GetAccumulate's reply %x (%v): want the old value 5", got[1], err)
	}
	if w := binary.NativeEndian.Uint64(s.win.mem); w != 7 {
		t.Errorf("word = %d after SUM 5 and SUM 2, want 7", w)
	}
	// A NO_OP fetch needs read access only.
	s.send(read, accMsg(t, 5, fallback.KindGetAccumulate, op.NoOp, 0))
	got = rr.take()
	if len(got) != 1 || got[0][0] != msgOK {
		t.Fatalf("a NO_OP fetch with read access: %x", got)
	}
	// A request the engine cannot decode is refused by it, in its reply.
	bad := accMsg(t, 6, fallback.KindAccumulate, op.Sum, 1)
	bad[headerLen] = 0xff
	s.send(full, bad)
	got = rf.take()
	if len(got) != 1 || got[0][0] != msgOK || fallback.DecodeReply(got[0][headerLen:], &rep) != nil || rep.Err() == nil {
		t.Errorf("a malformed accumulate: reply %x, want the engine's refusal", got)
	}
	if s.stats.AuthFailures != 0 || none.kill || read.kill || full.kill {
		t.Errorf("refusals dropped a connection: %v %v %v", none.kill, read.kill, full.kill)
	}
	// A message of an unknown type drops the connection.
	junk := make([]byte, headerLen)
	putHeader(junk, 0x7e, 9)
	s.send(full, junk)
	if !full.kill {
		t.Error("a message of an unknown type did not drop the connection")
	}
}
