package fallback

import (
	"sync"
	"sync/atomic"

	"github.com/onesided/rma/datatype"
)

// Client is the origin side's record of requests in flight: one Call per
// (target rank, credit). The transport hands every reply to OnReply, which
// unpacks the old values into the caller's result buffer and counts the
// piece done. OnReply is called from one goroutine at a time.
type Client struct {
	credits int
	calls   []Call // [rank*credits + credit]
}

// Call is one request in flight.
type Call struct {
	Op *Op // the operation the request is a piece of
	// Elem is the index, in the whole operation's type map, of the piece's
	// first element; its old values go to the result from there.
	Elem int64
}

// Op tracks an operation sent as one or more requests: how many replies
// are outstanding, the first error, and where fetched values go.
type Op struct {
	pending atomic.Int32
	mu      sync.Mutex
	err     error

	// Result receives the old values of a fetching operation, laid out as
	// ResultCount instances of ResultType; nil for Accumulate.
	Result      []byte
	ResultType  datatype.Type
	ResultCount int
	// Sink, if not nil, also receives the first error (a window's record
	// of failed fire-and-forget accumulates, reported by Flush).
	Sink *ErrorSink
}

// NewClient makes the record for size ranks with credits requests each.
func NewClient(size, credits int) *Client {
	return &Client{credits: credits, calls: make([]Call, size*credits)}
}

// Slot returns the record of the request using credit for rank.
func (c *Client) Slot(rank, credit int) *Call { return &c.calls[rank*c.credits+credit] }

// OnReply handles the reply to the request that used credit for rank.
func (c *Client) OnReply(rank, credit int, reply []byte) {
	call := c.Slot(rank, credit)
	op := call.Op
	if op == nil {
		return
	}
	call.Op = nil
	var r Reply
	err := DecodeReply(reply, &r)
	if err == nil {
		err = r.Err()
	}
	op.mu.Lock()
	if err == nil && op.Result != nil {
		err = UnpackRange(op.Result, op.ResultType, op.ResultCount, call.Elem, r.Data)
	}
	if err != nil && op.err == nil {
		op.err = err
	}
	sink := op.Sink
	op.pending.Add(-1) // under mu: Abandon sees the reply written and counted, or neither
	op.mu.Unlock()
	if err != nil && sink != nil {
		sink.Set(err)
	}
}

// Abandon detaches op from its caller, who stopped waiting: replies still
// to come are counted but no longer written to the result buffer. It
// returns false, and changes nothing, if every reply had come: the
// operation is complete, its result written.
func (op *Op) Abandon() bool {
	op.mu.Lock()
	defer op.mu.Unlock()
	if op.Done() {
		return false
	}
	op.Result = nil
	return true
}

// Start records that n more requests of op are about to be sent.
func (op *Op) Start(n int) { op.pending.Add(int32(n)) }

// Abort undoes Start for a request that could not be sent.
func (op *Op) Abort(err error) {
	op.fail(err)
	op.pending.Add(-1)
}

// Withdraw undoes Start for a request that was not sent because its caller
// stopped waiting (its context ended): the caller has the error, and op
// (its sink) does not record it.
func (op *Op) Withdraw() { op.pending.Add(-1) }

// Done reports whether every reply has arrived.
func (op *Op) Done() bool { return op.pending.Load() == 0 }

// Err is the first error of the operation (valid once Done).
func (op *Op) Err() error {
	op.mu.Lock()
	defer op.mu.Unlock()
	return op.err
}

// Reset makes op ready for reuse.
func (op *Op) Reset() {
	op.pending.Store(0)
	op.err = nil
	op.Result, op.ResultType, op.ResultCount, op.Sink = nil, datatype.Type{}, 0, nil
}

func (op *Op) fail(err error) {
	op.mu.Lock()
	if op.err == nil {
		op.err = err
	}
	op.mu.Unlock()
	if op.Sink != nil {
		op.Sink.Set(err)
	}
}

// ErrorSink keeps the first error reported to it until taken.
type ErrorSink struct {
	mu  sync.Mutex
	err error
}

// Set records err unless an error is already recorded.
func (s *ErrorSink) Set(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
}

// Take returns the recorded error and clears it.
func (s *ErrorSink) Take() error {
	s.mu.Lock()
	err := s.err
	s.err = nil
	s.mu.Unlock()
	return err
}
