package verbs

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Connection manager events: their kinds, their errors, and the channel
// that delivers them to the id each is for.

// CMEventType is the kind of a connection manager event (C: enum
// rdma_cm_event_type).
type CMEventType int

// Connection manager events, in the order of enum rdma_cm_event_type.
const (
	CMAddrResolved    CMEventType = iota // RDMA_CM_EVENT_ADDR_RESOLVED
	CMAddrError                          // RDMA_CM_EVENT_ADDR_ERROR
	CMRouteResolved                      // RDMA_CM_EVENT_ROUTE_RESOLVED
	CMRouteError                         // RDMA_CM_EVENT_ROUTE_ERROR
	CMConnectRequest                     // RDMA_CM_EVENT_CONNECT_REQUEST
	CMConnectResponse                    // RDMA_CM_EVENT_CONNECT_RESPONSE
	CMConnectError                       // RDMA_CM_EVENT_CONNECT_ERROR
	CMUnreachable                        // RDMA_CM_EVENT_UNREACHABLE
	CMRejected                           // RDMA_CM_EVENT_REJECTED
	CMEstablished                        // RDMA_CM_EVENT_ESTABLISHED
	CMDisconnected                       // RDMA_CM_EVENT_DISCONNECTED
	CMDeviceRemoval                      // RDMA_CM_EVENT_DEVICE_REMOVAL
	CMMulticastJoin                      // RDMA_CM_EVENT_MULTICAST_JOIN
	CMMulticastError                     // RDMA_CM_EVENT_MULTICAST_ERROR
	CMAddrChange                         // RDMA_CM_EVENT_ADDR_CHANGE
	CMTimewaitExit                       // RDMA_CM_EVENT_TIMEWAIT_EXIT
)

var cmEventNames = [...]string{
	"ADDR_RESOLVED", "ADDR_ERROR", "ROUTE_RESOLVED", "ROUTE_ERROR", "CONNECT_REQUEST",
	"CONNECT_RESPONSE", "CONNECT_ERROR", "UNREACHABLE", "REJECTED", "ESTABLISHED",
	"DISCONNECTED", "DEVICE_REMOVAL", "MULTICAST_JOIN", "MULTICAST_ERROR", "ADDR_CHANGE",
	"TIMEWAIT_EXIT",
}

// String returns the C name without its RDMA_CM_EVENT_ prefix (ESTABLISHED).
func (t CMEventType) String() string {
	if t >= 0 && int(t) < len(cmEventNames) {
		return cmEventNames[t]
	}
	return "CMEventType(" + strconv.Itoa(int(t)) + ")"
}

// IB CM reject reasons (IBTA, table "REJ reason") that rdma_cm reports as
// the status of a REJECTED event on InfiniBand and RoCE.
const (
	rejectInvalidServiceID = 8
	rejectConsumer         = 28
)

var rejectReasons = map[int]string{
	1: "no QP", 2: "no EEC", 3: "no resources", 4: "timeout", 5: "unsupported request",
	6: "invalid communication ID", 7: "invalid communication instance",
	rejectInvalidServiceID: "invalid service ID (nothing listens on the port)",
	9:                      "invalid transport type", 10: "stale connection", 12: "invalid GID",
	13: "invalid LID", 26: "port redirect", rejectConsumer: "rejected by the peer",
	29: "invalid RNR retry count",
}

// CMEvent is one connection manager event, already acknowledged: its data
// are copies.
type CMEvent struct {
	// Type is the event's kind and Status its outcome: 0, a negative errno,
	// or for CMRejected the IB CM reject reason.
	Type   CMEventType
	Status int
	// ID is the id the event is about. For CMConnectRequest it is a new id
	// for the requested connection, bound to the device the request came
	// in on, which the receiver owns: accept or reject it, and Close it.
	ID *CMID
	// Listener is, for CMConnectRequest, the listening id.
	Listener *CMID
	// PrivateData is the peer's private data: of its request
	// (CMConnectRequest), accept (CMEstablished on the connecting side),
	// reject (CMRejected) or disconnect. It may be longer than what the
	// peer sent, zero-padded.
	PrivateData []byte
	// ResponderResources and InitiatorDepth are, for CMConnectRequest, what
	// the peer asks of this side (its initiator depth and responder
	// resources); RemoteQPN is the peer's QP number and RemoteSRQ whether it
	// receives through a shared receive queue.
	ResponderResources int
	InitiatorDepth     int
	RemoteQPN          uint32
	RemoteSRQ          bool
}

// Err returns nil for an event that reports success, and a *CMError for
// one that reports a failure (an address, route or connection error, a
// reject, a disconnect, the device's removal).
func (e *CMEvent) Err() error { return e.err("") }

func (e *CMEvent) err(op string) error {
	switch e.Type {
	case CMAddrResolved, CMRouteResolved, CMConnectRequest, CMConnectResponse, CMEstablished,
		CMMulticastJoin, CMAddrChange, CMTimewaitExit:
		if e.Status == 0 {
			return nil
		}
	}
	return &CMError{Op: op, Event: e.Type, Status: e.Status, PrivateData: e.PrivateData}
}

// CMError is a failed connection manager step: the event that reported
// it, with its status. errors.Is matches it against ErrRejected (and
// ErrNoListener, and syscall.ECONNREFUSED), ErrUnreachable, ErrNoRoute,
// ErrPeerLost (the peer disconnected) or ErrNoDevice (the device was
// removed), and against the syscall.Errno of a negative status.
type CMError struct {
	// Op is the step that failed ("connect", "resolve address"), if known.
	Op string
	// Event is the event that reported the failure and Status its status.
	Event  CMEventType
	Status int
	// PrivateData is the peer's private data of a reject.
	PrivateData []byte
}

// Error describes the failure, with a reject's reason.
func (e *CMError) Error() string {
	s := "verbs: "
	if e.Op != "" {
		s += e.Op + ": "
	}
	s += "rdma_cm event " + e.Event.String()
	switch {
	case e.Event == CMRejected && e.Status > 0:
		reason := rejectReasons[e.Status]
		if reason == "" {
			reason = "reject reason " + strconv.Itoa(e.Status)
		}
		s += " (" + reason + ")"
	case e.Status < 0:
		s += " (" + syscall.Errno(-e.Status).Error() + ")"
	case e.Status > 0:
		s += " (status " + strconv.Itoa(e.Status) + ")"
	}
	return s
}

// Is matches the event's class.
func (e *CMError) Is(target error) bool {
	switch e.Event {
	case CMRejected:
		switch target {
		case ErrRejected, syscall.ECONNREFUSED:
			return true
		case ErrNoListener:
			// IB CM's "invalid service ID"; iWARP reports -ECONNREFUSED.
			return e.Status == rejectInvalidServiceID || e.Status == -int(syscall.ECONNREFUSED)
		}
	case CMUnreachable, CMConnectError:
		return target == ErrUnreachable
	case CMAddrError, CMRouteError:
		return target == ErrNoRoute
	case CMDisconnected:
		return target == ErrPeerLost
	case CMDeviceRemoval:
		return target == ErrNoDevice
	}
	return false
}

// Unwrap returns the errno of a negative status, or nil.
func (e *CMError) Unwrap() error {
	if e.Status < 0 {
		return syscall.Errno(-e.Status)
	}
	return nil
}

// rawCMEvent is an event as the C helper copies it out.
type rawCMEvent struct {
	id      unsafe.Pointer // event->id: the new id of a connection request
	handle  uint64         // the handle of the id (for a request: of the listener)
	typ     CMEventType
	status  int
	qpNum   uint32
	rr      int
	depth   int
	srq     bool
	private []byte
}

// cmHandles numbers the ids: an id's C context holds its number, never a
// Go pointer.
var cmHandles atomic.Uint64

// EventChannel delivers connection manager events (C: struct
// rdma_event_channel). Its descriptor is non-blocking and waited on through
// Go's poller, so a waiting goroutine holds no thread.
type EventChannel struct {
	p  unsafe.Pointer
	f  *os.File // a dup of the channel's descriptor, registered with the poller
	rc syscall.RawConn
	// token is held by the goroutine that reads the descriptor.
	token chan struct{}
	tr    tracked

	mu     sync.Mutex // guards what follows, and every id's queue
	ids    map[uint64]*CMID
	closed bool
	gen    uint64 // counts readers, so a late cancellation hits none

	queued chan struct{} // a token whenever an event is queued for a non-listening id
}

// NewEventChannel opens an event channel (/dev/infiniband/rdma_cm, which
// the rdma_ucm kernel module provides).
func NewEventChannel() (*EventChannel, error) {
	if !haveCM {
		return nil, ErrNotSupported
	}
	p, fd, err := cmCreateChannel()
	if err != nil {
		return nil, err
	}
	dup, err := syscall.Dup(fd)
	if err != nil {
		cmDestroyChannel(p)
		return nil, fmt.Errorf("verbs: dup rdma_cm event channel: %w", err)
	}
	syscall.CloseOnExec(dup)
	f := os.NewFile(uintptr(dup), "rdma-cm-event-channel")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		cmDestroyChannel(p)
		return nil, fmt.Errorf("verbs: rdma_cm event channel: %w", err)
	}
	ch := &EventChannel{p: p, f: f, rc: rc, token: make(chan struct{}, 1), ids: map[uint64]*CMID{}, queued: make(chan struct{}, 1)}
	ch.tr.track("rdma_cm event channel")
	return ch, nil
}

// Close destroys the channel. Every id on it must be closed first (the new
// ids of connection requests not yet taken from a listener are closed with
// their listener).
func (ch *EventChannel) Close() error {
	if ch == nil {
		return ErrClosed
	}
	ch.mu.Lock()
	if ch.closed {
		ch.mu.Unlock()
		return ErrClosed
	}
	if n := len(ch.ids); n > 0 {
		ch.mu.Unlock()
		return fmt.Errorf("%w: %d rdma_cm ids of the channel are still open", ErrInvalid, n)
	}
	ch.closed = true
	ch.f.SetReadDeadline(time.Unix(1, 0)) // a reader still waiting leaves
	ch.mu.Unlock()
	ch.token <- struct{}{} // kept: nobody reads any more
	ch.f.Close()
	cmDestroyChannel(ch.p)
	ch.p = nil
	ch.tr.untrack()
	return nil
}

// Event waits for the id's next event and returns it (acknowledged). A
// listener receives CMConnectRequest events, each with a new id (ev.ID)
// that must be accepted or rejected, and closed; a connection receives
// CMDisconnected when its peer disconnects or dies, then CMTimewaitExit.
// It returns ctx's error when ctx ends first, ErrClosed when the id or its
// channel is closed.
func (id *CMID) Event(ctx context.Context) (CMEvent, error) {
	if _, err := id.usable(); err != nil {
		return CMEvent{}, err
	}
	ch := id.ch
	for {
		if ev, ok, done := id.pop(); ok {
			return ev, nil
		} else if done {
			return CMEvent{}, ErrClosed
		}
		select {
		case <-id.sig:
		case ch.token <- struct{}{}:
			err := ch.pump(ctx, id)
			<-ch.token
			if err != nil {
				if ev, ok, _ := id.pop(); ok {
					return ev, nil
				}
				return CMEvent{}, err
			}
		case <-ctx.Done():
			return CMEvent{}, ctx.Err()
		}
	}
}

// pump reads events and hands each to its id until want has one, ctx ends
// or the channel closes. The caller holds the token.
func (ch *EventChannel) pump(ctx context.Context, want *CMID) error {
	ch.mu.Lock()
	if ch.closed {
		ch.mu.Unlock()
		return ErrClosed
	}
	ch.gen++
	gen := ch.gen
	ch.mu.Unlock()
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() {
			ch.mu.Lock()
			if ch.gen == gen && !ch.closed {
				ch.f.SetReadDeadline(time.Unix(1, 0))
			}
			ch.mu.Unlock()
		})
		defer func() {
			stop()
			ch.mu.Lock()
			ch.gen++
			if !ch.closed {
				ch.f.SetReadDeadline(time.Time{})
			}
			ch.mu.Unlock()
		}()
	}
	for !want.ready() {
		var raw rawCMEvent
		var gerr error
		err := ch.rc.Read(func(uintptr) bool {
			var got bool
			got, gerr = cmGetEvent(ch.p, &raw)
			return got || gerr != nil
		})
		if gerr != nil {
			return gerr
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			ch.mu.Lock()
			closed := ch.closed
			ch.mu.Unlock()
			if closed {
				return ErrClosed
			}
			return fmt.Errorf("verbs: wait for rdma_cm event: %w", err)
		}
		ch.dispatch(&raw)
	}
	return nil
}

// dispatch hands one event to its id. A connection request gets a new id,
// queued at its listener; one that no listener takes (closed, or as many
// requests queued as its backlog) is rejected and its id destroyed. Events
// of ids already closed are dropped.
func (ch *EventChannel) dispatch(raw *rawCMEvent) {
	ev := CMEvent{Type: raw.typ, Status: raw.status, PrivateData: raw.private,
		ResponderResources: raw.rr, InitiatorDepth: raw.depth, RemoteQPN: raw.qpNum, RemoteSRQ: raw.srq}
	ch.mu.Lock()
	target := ch.ids[raw.handle]
	if target != nil && target.closed {
		target = nil
	}
	if raw.typ != CMConnectRequest {
		if target != nil {
			ev.ID = target
			target.q = append(target.q, ev)
		}
		ch.mu.Unlock()
		if target != nil {
			target.notify()
			select {
			case ch.queued <- struct{}{}:
			default:
			}
		}
		return
	}
	if raw.id == nil {
		ch.mu.Unlock()
		return
	}
	if target == nil || !target.listening || len(target.q) >= target.backlog {
		ch.mu.Unlock()
		cmReject(raw.id, nil)
		cmDestroyID(raw.id)
		return
	}
	nid := &CMID{p: raw.id, ch: ch, handle: cmHandles.Add(1), sig: make(chan struct{}, 1)}
	cmSetHandle(raw.id, nid.handle)
	nid.tr.track("rdma_cm id of a connection request")
	ch.ids[nid.handle] = nid
	ev.ID, ev.Listener = nid, target
	target.q = append(target.q, ev)
	ch.mu.Unlock()
	target.notify()
}

// Queued returns a channel that receives a token whenever an event is
// queued for an id of the channel (every event but a connection request,
// which its listener's Event returns). While one goroutine reads the
// channel (waiting in Event on a listener), another can watch many
// connections with it and TryEvent, without a goroutine per connection.
func (ch *EventChannel) Queued() <-chan struct{} {
	if ch == nil {
		return nil
	}
	return ch.queued
}

// TryEvent returns the id's next queued event, if there is one, without
// waiting and without reading the channel.
func (id *CMID) TryEvent() (CMEvent, bool) {
	if id == nil || id.ch == nil {
		return CMEvent{}, false
	}
	ev, ok, _ := id.pop()
	return ev, ok
}
