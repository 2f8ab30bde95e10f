package verbs

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

func TestCMEventTypeString(t *testing.T) {
	want := map[CMEventType]string{
		CMAddrResolved: "ADDR_RESOLVED", CMAddrError: "ADDR_ERROR", CMRouteResolved: "ROUTE_RESOLVED",
		CMRouteError: "ROUTE_ERROR", CMConnectRequest: "CONNECT_REQUEST", CMConnectResponse: "CONNECT_RESPONSE",
		CMConnectError: "CONNECT_ERROR", CMUnreachable: "UNREACHABLE", CMRejected: "REJECTED",
		CMEstablished: "ESTABLISHED", CMDisconnected: "DISCONNECTED", CMDeviceRemoval: "DEVICE_REMOVAL",
		CMMulticastJoin: "MULTICAST_JOIN", CMMulticastError: "MULTICAST_ERROR", CMAddrChange: "ADDR_CHANGE",
		CMTimewaitExit: "TIMEWAIT_EXIT", CMEventType(16): "CMEventType(16)", CMEventType(-1): "CMEventType(-1)",
	}
	for ev, s := range want {
		if got := ev.String(); got != s {
			t.Errorf("event %d: %q, want %q", int(ev), got, s)
		}
	}
	// The values are enum rdma_cm_event_type's.
	if CMEstablished != 9 || CMTimewaitExit != 15 || CMConnectRequest != 4 || CMRejected != 8 {
		t.Errorf("event numbering differs from enum rdma_cm_event_type")
	}
}

// Each failed event matches its class and no other; a negative status
// also matches its errno.
func TestCMErrorClasses(t *testing.T) {
	all := []error{ErrRejected, ErrNoListener, ErrUnreachable, ErrNoRoute, ErrPeerLost, ErrNoDevice, syscall.ECONNREFUSED, syscall.ETIMEDOUT}
	cases := []struct {
		ev     CMEventType
		status int
		match  []error
		text   string
	}{
		{CMRejected, rejectConsumer, []error{ErrRejected, syscall.ECONNREFUSED}, "rejected by the peer"},
		{CMRejected, rejectInvalidServiceID, []error{ErrRejected, ErrNoListener, syscall.ECONNREFUSED}, "invalid service ID"},
		{CMRejected, -int(syscall.ECONNREFUSED), []error{ErrRejected, ErrNoListener, syscall.ECONNREFUSED}, "connection refused"},
		{CMRejected, 99, []error{ErrRejected, syscall.ECONNREFUSED}, "reject reason 99"},
		{CMUnreachable, -int(syscall.ETIMEDOUT), []error{ErrUnreachable, syscall.ETIMEDOUT}, "UNREACHABLE"},
		{CMConnectError, 0, []error{ErrUnreachable}, "CONNECT_ERROR"},
		{CMAddrError, -int(syscall.ETIMEDOUT), []error{ErrNoRoute, syscall.ETIMEDOUT}, "timed out"},
		{CMRouteError, -int(syscall.EHOSTUNREACH), []error{ErrNoRoute}, "ROUTE_ERROR"},
		{CMDisconnected, 0, []error{ErrPeerLost}, "DISCONNECTED"},
		{CMDeviceRemoval, 0, []error{ErrNoDevice}, "DEVICE_REMOVAL"},
	}
	for _, c := range cases {
		ev := CMEvent{Type: c.ev, Status: c.status, PrivateData: []byte("why")}
		err := ev.err("connect")
		if err == nil {
			t.Errorf("%v status %d: no error", c.ev, c.status)
			continue
		}
		for _, target := range all {
			want := false
			for _, m := range c.match {
				want = want || m == target
			}
			if got := errors.Is(err, target); got != want {
				t.Errorf("%v status %d: errors.Is(%v) = %v, want %v", c.ev, c.status, target, got, want)
			}
		}
		if !strings.Contains(err.Error(), c.text) || !strings.HasPrefix(err.Error(), "verbs: connect: ") {
			t.Errorf("%v status %d: message %q lacks %q", c.ev, c.status, err, c.text)
		}
		var ce *CMError
		if !errors.As(err, &ce) || ce.Event != c.ev || ce.Status != c.status || string(ce.PrivateData) != "why" {
			t.Errorf("%v status %d: not a *CMError carrying the event: %#v", c.ev, c.status, err)
		}
	}
}

func TestCMEventErr(t *testing.T) {
	for _, ok := range []CMEventType{CMAddrResolved, CMRouteResolved, CMConnectRequest, CMEstablished, CMTimewaitExit, CMAddrChange} {
		ev := CMEvent{Type: ok}
		if err := ev.Err(); err != nil {
			t.Errorf("%v with status 0: %v", ok, err)
		}
		ev.Status = -int(syscall.EIO)
		if err := ev.Err(); !errors.Is(err, syscall.EIO) {
			t.Errorf("%v with status -EIO: %v", ok, err)
		}
	}
	for _, bad := range []CMEventType{CMRejected, CMUnreachable, CMDisconnected, CMAddrError} {
		ev := CMEvent{Type: bad}
		if ev.Err() == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

func TestConnParam(t *testing.T) {
	p, err := ConnParam{}.conn(MaxConnectPrivateData)
	if err != nil {
		t.Fatal(err)
	}
	want := ConnParam{ResponderResources: rdmaMax, InitiatorDepth: rdmaMax, RetryCount: defaultRetryCount, RNRRetryCount: 7}
	if p.ResponderResources != want.ResponderResources || p.InitiatorDepth != want.InitiatorDepth ||
		p.RetryCount != want.RetryCount || p.RNRRetryCount != want.RNRRetryCount {
		t.Errorf("defaults %+v, want %+v", p, want)
	}
	p, err = ConnParam{ResponderResources: 4, InitiatorDepth: 2, RetryCount: 7, RNRRetryCount: 3}.conn(MaxConnectPrivateData)
	if err != nil || p.ResponderResources != 4 || p.InitiatorDepth != 2 || p.RetryCount != 7 || p.RNRRetryCount != 3 {
		t.Errorf("explicit values changed: %+v, %v", p, err)
	}
	for _, c := range []struct {
		max, n int
		ok     bool
	}{
		{MaxConnectPrivateData, 56, true}, {MaxConnectPrivateData, 57, false},
		{MaxAcceptPrivateData, 196, true}, {MaxAcceptPrivateData, 197, false},
	} {
		_, err := ConnParam{PrivateData: make([]byte, c.n)}.conn(c.max)
		if (err == nil) != c.ok || !c.ok && !errors.Is(err, ErrInvalid) {
			t.Errorf("%d bytes of private data, limit %d: %v", c.n, c.max, err)
		}
	}
	for _, bad := range []ConnParam{{RetryCount: 8}, {RNRRetryCount: -1}, {ResponderResources: 255}, {InitiatorDepth: -2}} {
		if _, err := bad.conn(MaxConnectPrivateData); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", bad, err)
		}
	}
}

func TestSockAddr(t *testing.T) {
	for _, c := range []struct{ in, out string }{
		{"10.99.0.1:4791", "10.99.0.1:4791"},
		{"[::ffff:10.99.0.1]:7", "10.99.0.1:7"},
		{"[fe80::1%3]:18515", "[fe80::1%3]:18515"},
		{"[2001:db8::5]:0", "[2001:db8::5]:0"},
	} {
		s, err := toSockAddr(netip.MustParseAddrPort(c.in))
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if got := s.addrPort().String(); got != c.out {
			t.Errorf("%s: round trip gives %s, want %s", c.in, got, c.out)
		}
	}
	if s, _ := toSockAddr(netip.MustParseAddrPort("10.1.2.3:9")); s.family != 4 || [4]byte(s.ip[:4]) != [4]byte{10, 1, 2, 3} || s.port != 9 {
		t.Errorf("IPv4 socket address %+v", s)
	}
	if _, err := toSockAddr(netip.AddrPort{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("zero address: %v", err)
	}
	if _, err := toSockAddr(netip.MustParseAddrPort("[fe80::1%no-such-netdev]:1")); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown zone: %v", err)
	}
	if got := (sockAddr{}).addrPort(); got.IsValid() {
		t.Errorf("no address gives %v", got)
	}
}

func TestTimeoutMS(t *testing.T) {
	if got := timeoutMS(context.Background()); got != int(defaultCMTimeout/time.Millisecond) {
		t.Errorf("no deadline: %d ms", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if got := timeoutMS(ctx); got < 1500 || got > 2000 {
		t.Errorf("2 s deadline: %d ms", got)
	}
	past, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	if got := timeoutMS(past); got != 1 {
		t.Errorf("past deadline: %d ms, want 1", got)
	}
	far, cancel3 := context.WithTimeout(context.Background(), time.Hour)
	defer cancel3()
	if got := timeoutMS(far); got != 60000 {
		t.Errorf("an hour: %d ms, want 60000", got)
	}
}

// fakeChannel is a channel with no descriptor: its token is held, so a
// waiter never reads, and events are handed to dispatch by the test.
func fakeChannel() *EventChannel {
	ch := &EventChannel{token: make(chan struct{}, 1), ids: map[uint64]*CMID{}}
	ch.token <- struct{}{}
	return ch
}

func fakeID(ch *EventChannel) *CMID {
	var x byte
	id := &CMID{p: unsafe.Pointer(&x), ch: ch, handle: cmHandles.Add(1), sig: make(chan struct{}, 1)}
	ch.ids[id.handle] = id
	return id
}

// Events reach the id they are for, in order; events of unknown or closed
// ids are dropped; a waiter with nothing queued returns when ctx ends.
func TestCMDispatch(t *testing.T) {
	ch := fakeChannel()
	a, b := fakeID(ch), fakeID(ch)
	ch.dispatch(&rawCMEvent{handle: a.handle, typ: CMAddrResolved})
	ch.dispatch(&rawCMEvent{handle: b.handle, typ: CMRejected, status: rejectConsumer, private: []byte("full")})
	ch.dispatch(&rawCMEvent{handle: a.handle, typ: CMRouteResolved})
	ch.dispatch(&rawCMEvent{handle: 1 << 62, typ: CMDisconnected})
	ch.dispatch(&rawCMEvent{handle: a.handle, typ: CMConnectRequest}) // no new id: dropped
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, want := range []CMEventType{CMAddrResolved, CMRouteResolved} {
		ev, err := a.Event(ctx)
		if err != nil || ev.Type != want || ev.ID != a {
			t.Fatalf("a: %v %v, want %v", ev.Type, err, want)
		}
	}
	ev, err := b.Event(ctx)
	if err != nil || ev.Type != CMRejected || string(ev.PrivateData) != "full" {
		t.Fatalf("b: %+v, %v", ev, err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if _, err := a.Event(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("empty queue: %v, want DeadlineExceeded", err)
	}
	// A closed id gets no more events, and its waiter returns ErrClosed.
	ch.mu.Lock()
	a.closed = true
	delete(ch.ids, a.handle)
	ch.mu.Unlock()
	ch.dispatch(&rawCMEvent{handle: a.handle, typ: CMDisconnected})
	if _, err := a.Event(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed id: %v, want ErrClosed", err)
	}
}

// await turns a failure event into its error and skips hints.
func TestCMAwait(t *testing.T) {
	ch := fakeChannel()
	id := fakeID(ch)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ch.dispatch(&rawCMEvent{handle: id.handle, typ: CMRejected, status: rejectConsumer, private: []byte{1, 2, 3}})
	_, err := id.await(ctx, "connect", CMEstablished)
	var ce *CMError
	if !errors.Is(err, ErrRejected) || !errors.As(err, &ce) || string(ce.PrivateData) != "\x01\x02\x03" {
		t.Fatalf("reject: %v", err)
	}
	ch.dispatch(&rawCMEvent{handle: id.handle, typ: CMTimewaitExit})
	ch.dispatch(&rawCMEvent{handle: id.handle, typ: CMEstablished, private: []byte("ok")})
	ev, err := id.await(ctx, "connect", CMEstablished)
	if err != nil || string(ev.PrivateData) != "ok" {
		t.Fatalf("established after a hint: %+v, %v", ev, err)
	}
	ch.dispatch(&rawCMEvent{handle: id.handle, typ: CMRouteResolved})
	if _, err := id.await(ctx, "connect", CMEstablished); err == nil || !strings.Contains(err.Error(), "unexpected") {
		t.Fatalf("unexpected event: %v", err)
	}
}

func TestRecvWRLayout(t *testing.T) {
	var w RecvWR
	if unsafe.Sizeof(w) != 24 || unsafe.Offsetof(w.Local) != 8 || unsafe.Sizeof(w.Local) != 16 {
		t.Fatalf("RecvWR is %d bytes, Local at %d: the C helper expects 24 and 8", unsafe.Sizeof(w), unsafe.Offsetof(w.Local))
	}
}
