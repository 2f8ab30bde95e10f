package fallback

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/op"
)

// Target is the pure part of a target engine: it decodes requests,
// validates them against its windows, applies them to window memory and
// builds the replies. It does no I/O. The zero value is not usable; use
// [NewTarget].
//
// Handle, AddWindow and RemoveWindow may be called from any goroutines: an
// internal mutex serialises them, so Handle calls never run concurrently
// with each other, which is what makes every element update of an
// accumulate atomic with respect to the other accumulates handled by the
// same Target (MPI's per-element atomicity). The transport normally calls
// Handle from its one engine goroutine, so the mutex is uncontended.
type Target struct {
	mu       sync.Mutex
	windows  map[uint32][]byte
	rejected atomic.Uint64
	applied  atomic.Uint64

	// types caches the derived datatypes decoded from requests, by
	// encoding, so that an origin repeating a layout (every piece of a
	// split accumulate, an indexed block reused every epoch) costs neither
	// a decode nor a new overlap analysis. Bounded by typeCacheBytes and
	// typeCacheEntries; emptied when full.
	types      map[string]datatype.Type
	typesBytes int
}

const (
	typeCacheBytes   = 1 << 20
	typeCacheEntries = 1024
)

// NewTarget returns a Target with no windows.
func NewTarget() *Target {
	return &Target{windows: make(map[uint32][]byte), types: make(map[string]datatype.Type)}
}

// decodeType is decodeType with the cache.
func (t *Target) decodeType(b []byte, h *header) (datatype.Type, *Error) {
	if h.typeLen == 0 || h.kind == KindCompareAndSwap {
		return decodeType(b, h)
	}
	e := b[RequestHeaderSize : RequestHeaderSize+h.typeLen]
	if typ, ok := t.types[string(e)]; ok {
		if typ.Basic() != h.basic {
			return datatype.Type{}, newError(StatusBadLayout, fmt.Sprintf("datatype built from %v, header says %v", typ.Basic(), h.basic))
		}
		return typ, nil
	}
	typ, err := decodeType(b, h)
	if err != nil {
		return typ, err
	}
	if len(t.types) >= typeCacheEntries || t.typesBytes+len(e) > typeCacheBytes {
		clear(t.types)
		t.typesBytes = 0
	}
	if len(e) <= typeCacheBytes/4 {
		t.types[string(e)] = typ
		t.typesBytes += len(e)
	}
	return typ, nil
}

// AddWindow exposes mem as window id. It refuses an id already exposed
// (ErrWindowExists): requests meant for one window must never reach
// another's memory. mem must stay valid (and, for memory off the Go heap,
// mapped) until RemoveWindow(id) has returned. It waits for a Handle call
// in progress.
func (t *Target) AddWindow(id uint32, mem []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.windows[id]; ok {
		return fmt.Errorf("%w: window %#x", ErrWindowExists, id)
	}
	t.windows[id] = mem
	return nil
}

// RemoveWindow withdraws window id. It waits for a Handle call in progress,
// so once it returns no Handle call touches the window's memory any more,
// and the memory may be freed. Requests for the window are then refused
// with StatusUnknownWindow.
func (t *Target) RemoveWindow(id uint32) {
	t.mu.Lock()
	delete(t.windows, id)
	t.mu.Unlock()
}

// Rejected returns the number of requests refused since NewTarget.
func (t *Target) Rejected() uint64 { return t.rejected.Load() }

// Applied returns the number of requests applied in full since NewTarget.
func (t *Target) Applied() uint64 { return t.applied.Load() }

// Handle decodes the request msg, validates it, applies it to the window
// and appends the reply to reply[:0], returning it. cap(reply) bounds the
// reply: a GetAccumulate or CompareAndSwap whose old values do not fit
// after the ReplyHeaderSize header is refused with StatusTooLarge. When
// cap(reply) >= ReplyHeaderSize the reply never grows beyond it, so it
// stays in the caller's (registered) buffer; below that only the header is
// appended, which reallocates. msg and reply must not overlap each other
// or a window. Handle never panics and keeps no reference to msg or reply.
//
// A refused request (see the package documentation for the checks and
// their order) leaves the window untouched, is counted in [Target.Rejected]
// and gets an error reply: its tag if the message was long enough to carry
// one, the status, and an explanation of at most MaxReason bytes (truncated
// to fit cap(reply)).
//
// A 1-element request on a predefined datatype does not allocate.
func (t *Target) Handle(msg, reply []byte) []byte {
	t.mu.Lock()
	out, e := t.handle(msg, reply[:0])
	t.mu.Unlock()
	if e == nil {
		t.applied.Add(1)
		return out
	}
	t.rejected.Add(1)
	reason := e.Msg
	room := cap(reply) - ReplyHeaderSize
	if room < 0 {
		room = 0
	}
	if len(reason) > MaxReason {
		reason = reason[:MaxReason]
	}
	if len(reason) > room {
		reason = reason[:room]
	}
	out = appendReplyHeader(reply[:0], readTag(msg), e.Status, len(reason))
	return append(out, reason...)
}

// handle does the work of Handle, under t.mu. out is reply[:0].
func (t *Target) handle(msg, out []byte) ([]byte, *Error) {
	var h header
	if e := parseHeader(msg, &h); e != nil {
		return nil, e
	}
	mem, ok := t.windows[h.window]
	if !ok {
		return nil, newError(StatusUnknownWindow, fmt.Sprintf("%v on window %d", h.kind, h.window))
	}
	if !h.basic.Valid() {
		return nil, newError(StatusBadLayout, fmt.Sprintf("%v on window %d: unknown datatype %d", h.kind, h.window, uint8(h.basic)))
	}
	if e := checkOp(h.kind, h.op, h.basic); e != nil {
		e.Msg = fmt.Sprintf("%v on window %d: %s", h.kind, h.window, e.Msg)
		return nil, e
	}
	typ, e := t.decodeType(msg, &h)
	if e != nil {
		e.Msg = fmt.Sprintf("%v %v on window %d: %s", h.kind, h.op, h.window, e.Msg)
		return nil, e
	}
	dataStart := RequestHeaderSize + pad8(h.typeLen)
	data := msg[dataStart : dataStart+h.dataLen]
	room := cap(out) - ReplyHeaderSize

	if h.kind == KindCompareAndSwap {
		es := h.basic.Size()
		if h.count != 1 {
			return nil, newError(StatusBadLayout, fmt.Sprintf("compare-and-swap on %d elements of %v, want 1", h.count, h.basic))
		}
		if h.dataLen != 2*es {
			return nil, newError(StatusLength, fmt.Sprintf("compare-and-swap on %v: %d bytes of data, want %d", h.basic, h.dataLen, 2*es))
		}
		if room < es {
			return nil, newError(StatusTooLarge, fmt.Sprintf("compare-and-swap on %v: reply buffer of %d bytes", h.basic, cap(out)))
		}
		if h.disp < 0 || h.disp > int64(len(mem))-int64(es) {
			return nil, newError(StatusOutOfWindow, fmt.Sprintf("compare-and-swap on %v at offset %d of window %d (%d bytes)", h.basic, h.disp, h.window, len(mem)))
		}
		out = appendReplyHeader(out, h.tag, StatusOK, es)
		result := out[ReplyHeaderSize : ReplyHeaderSize+es]
		out = out[:ReplyHeaderSize+es]
		if _, err := op.CompareAndSwap(h.basic, mem[h.disp:h.disp+int64(es)], data[:es], data[es:], result); err != nil {
			return nil, newError(statusOf(err), err.Error())
		}
		return out, nil
	}

	// Data length: Count*Type.Size(), or nothing for NO_OP. The product is
	// bounded by MaxMessage before it is formed.
	isz := typ.Size()
	var size int64
	big := isz != 0 && int64(h.count) > MaxMessage/isz
	if !big {
		size = int64(h.count) * isz
	}
	if big || int64(h.dataLen) != size {
		if !(h.op == op.NoOp && h.dataLen == 0) {
			return nil, newError(StatusLength, fmt.Sprintf("%v %v on window %d: %d bytes of data for %d instances of %d bytes",
				h.kind, h.op, h.window, h.dataLen, h.count, isz))
		}
	}
	var result []byte
	if h.kind == KindGetAccumulate {
		if big || size > int64(room) {
			return nil, newError(StatusTooLarge, fmt.Sprintf("GetAccumulate on window %d: old values of %d instances of %d bytes do not fit in a reply buffer of %d bytes",
				h.window, h.count, isz, cap(out)))
		}
		out = appendReplyHeader(out, h.tag, StatusOK, int(size))
		result = out[ReplyHeaderSize : ReplyHeaderSize+int(size)]
		out = out[:ReplyHeaderSize+int(size)]
	}
	// Now at most MaxMessage bytes of data (or of reply) are concerned, so
	// everything below costs O(message size) whatever the datatype.

	if h.typeLen == 0 {
		// Fast path: a predefined datatype, Count consecutive elements.
		if size > 0 && (h.disp < 0 || h.disp > int64(len(mem)) || size > int64(len(mem))-h.disp) {
			return nil, newError(StatusOutOfWindow, fmt.Sprintf("%v %v on window %d: %d elements of %v (%d bytes) at offset %d, not within [0, %d)",
				h.kind, h.op, h.window, h.count, h.basic, size, h.disp, len(mem)))
		}
		var err error
		if size > 0 {
			w := mem[h.disp : h.disp+size]
			if result != nil {
				err = op.ApplyFetch(h.op, h.basic, w, data, result)
			} else {
				err = op.Apply(h.op, h.basic, w, data)
			}
		}
		if err != nil {
			return nil, newError(statusOf(err), err.Error())
		}
	} else {
		// A derived datatype: ApplyType checks that the region is inside
		// the window and, except for NO_OP, that the target elements do not
		// overlap, before touching memory.
		if err := op.ApplyType(h.op, typ, h.count, mem, h.disp, data, result); err != nil {
			return nil, newError(statusOf(err), fmt.Sprintf("%v %v on window %d (%d bytes) at offset %d: %v",
				h.kind, h.op, h.window, len(mem), h.disp, err))
		}
	}
	if h.kind == KindAccumulate {
		out = appendReplyHeader(out, h.tag, StatusOK, 0)
	}
	return out, nil
}

// checkOp checks that op o may be used on basic datatype b (valid) in a
// request of kind k.
func checkOp(k Kind, o op.Op, b datatype.Basic) *Error {
	var err error
	switch k {
	case KindCompareAndSwap:
		err = op.CheckCompareAndSwap(b)
	case KindAccumulate, KindGetAccumulate:
		// A user-defined op must be registered by name in this process
		// (op.Register); a process-local one (op.Create) is unknown here
		// even if the value happens to match. op.Check then checks the
		// element type the op is bound to.
		if o.IsUser() && !o.Registered() {
			return newError(StatusUnknownOp, fmt.Sprintf("user-defined op %d is not registered on this rank", uint8(o)))
		}
		if !o.Predefined() && !o.IsUser() {
			return newError(StatusUnknownOp, fmt.Sprintf("unknown op %d", uint8(o)))
		}
		use := op.Accumulate
		if k == KindGetAccumulate {
			use = op.GetAccumulate
		}
		err = op.Check(o, b, use)
	default:
		return newError(StatusMalformed, "unknown kind "+k.String())
	}
	if err != nil {
		return newError(statusOf(err), err.Error())
	}
	return nil
}

// Check performs at the origin the checks the target will make on an
// accumulate of count instances of t at byte displacement disp of a target
// window of windowSize bytes, except those on the message: the op is
// allowed on t's basic datatype for kind (use op 0 for
// KindCompareAndSwap), t is valid (one predefined element for
// compare-and-swap), the region lies inside the window, and, except for
// NO_OP, the target elements do not overlap. Call it before [Split]: the
// target checks each piece, which cannot reveal an overlap between
// pieces. Errors are *[Error] with the status the target would reply.
func Check(kind Kind, o op.Op, t datatype.Type, count int, disp int64, windowSize int64) error {
	if !kind.Valid() {
		return newError(StatusMalformed, "unknown kind "+kind.String())
	}
	if !t.Valid() {
		return newError(StatusBadLayout, "invalid target datatype")
	}
	if e := checkOp(kind, o, t.Basic()); e != nil {
		return e
	}
	if count < 0 {
		return newError(StatusBadLayout, fmt.Sprintf("negative count %d", count))
	}
	if kind == KindCompareAndSwap && (!isPredefined(t) || count != 1) {
		return newError(StatusBadLayout, "compare-and-swap takes one element of a predefined datatype")
	}
	if err := t.Fits(count, windowSize, disp); err != nil {
		return newError(StatusOutOfWindow, err.Error())
	}
	if o != op.NoOp && kind != KindCompareAndSwap && t.OverlapsN(count) {
		return newError(StatusOverlap, fmt.Sprintf("%d instances of %v", count, t))
	}
	return nil
}
