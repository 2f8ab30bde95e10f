// Package fallback is the transport-independent core of the active-message
// path of the accumulate family: the accumulates the NIC cannot do
// atomically (every (op, datatype) pair but the NIC-capable ones, see
// package atomics) are sent as messages to the target process, whose
// engine applies them to its own window memory and replies, with the old
// contents for the fetching forms. Package win also sends through it, when
// asked to (win.PackSmallBlocks), Puts (as REPLACE) and Gets (as NO_OP)
// whose target layout has many small blocks.
//
// This package holds the wire format ([Request], [Reply] and their
// encoders and decoders), the target side ([Target]: validation and
// application) and the origin side ([Check], [Split], [AppendPiece],
// [AppendPackRange], [UnpackRange]). It does no I/O: the transport posts
// the messages (SEND/RECV with credits), runs the engine goroutine and
// calls [Target.Handle] with each received request.
//
// # Protocol
//
// The origin checks the call ([Check]: the op is allowed on the datatype in
// that kind of call, the region is inside the window, the target datatype
// does not overlap), cuts it into pieces that fit the transport's buffers
// ([Split]) and sends one request per piece, in order. For each request
// the target sends exactly one reply, carrying the request's tag, a
// [Status], and for GetAccumulate (and FetchAndOp) the old values of the
// target elements, packed in target type-map order; for CompareAndSwap the
// old value of the element. The origin unpacks the old values of each piece
// into its result buffer ([UnpackRange]). A refused request has not
// modified the window; its reply says why, in a status and a short text
// ([Reply.Err]).
//
//	origin                                         target engine
//	Check, Split ─ AppendPiece ── request ──▶ Target.Handle: decode, check,
//	                                           apply to window memory
//	DecodeReply, UnpackRange ◀── reply ─────── (old values | status, reason)
//
// # Message layout
//
// Headers are little endian; element data is in host byte order with Go's
// layout (see package datatype), as for the NIC atomics: a big-endian host
// sets bit 7 of the version byte and a target refuses data in the other
// byte order. A request:
//
//	offset  size  field
//	0       1     version (Version = 1; bit 7: big-endian element data)
//	1       1     kind (1 Accumulate, 2 GetAccumulate/FetchAndOp, 3 CompareAndSwap)
//	2       1     op (op.Op; 0 for CompareAndSwap)
//	3       1     basic datatype (datatype.Basic) of the target datatype
//	4       4     window id
//	8       4     tag (at this offset in every version)
//	12      4     count: instances of the target datatype, at most MaxCount
//	16      8     displacement in the window, bytes, signed
//	24      4     T: length of the target datatype encoding (0: the basic datatype itself)
//	28      4     D: length of the data
//	32      T     target datatype (datatype.Type.AppendBinary), zero padding to a multiple of 8
//	32+T'   D     data: origin elements packed in type-map order (CompareAndSwap: compare then origin)
//
// A 1-element accumulate on a predefined datatype is thus 32 bytes of
// header plus the element, and its data is 8-byte aligned when the
// buffer is. A reply:
//
//	offset  size  field
//	0       1     version, as in a request (the target's)
//	1       1     status (Status; 0 is OK)
//	2       2     reserved, zero
//	4       4     tag of the request (0 if it could not be read)
//	8       4     D: length of the data
//	12      4     reserved, zero
//	16      D     OK: old values (GetAccumulate, CompareAndSwap), else nothing;
//	              refused: an explanation, at most MaxReason bytes of text
//
// The encoding is canonical: every length must match the bytes present
// exactly, padding and reserved bytes must be zero, the datatype encoding
// must be the canonical one of a derived datatype (a predefined one is
// sent as T = 0), and a decoded request re-encodes to the same bytes.
//
// # Bounds and buffer sizes
//
// No message exceeds [MaxMessage] (16 MiB); transports use smaller buffers
// and pass their size to [Split] as maxMsg. A piece's request is at most
// maxMsg bytes, and so is its reply, since ReplyHeaderSize (16) is smaller
// than RequestHeaderSize (32) and the old values are no longer than the
// data (for NO_OP, which sends no data, Split still budgets for it). An
// error reply is at most ReplyHeaderSize+MaxReason bytes and never longer
// than the reply buffer the target was given. So a transport whose send and
// receive buffers all have one size S, whose pieces come from Split(...,
// S, ...), and which passes Handle a reply buffer of capacity S never
// truncates a message. [Request.ReplyLen] gives the size of the reply to a
// given request. Every length read from the wire is checked against the
// bytes present before it is used: a hostile message can cost neither a
// panic nor an allocation beyond a small multiple of its own size.
//
// # What the target checks, in order
//
// [Target.Handle] checks everything before it touches window memory, and
// refuses with the first failing check:
//
//  1. framing: a version byte of this Version and byte order
//     (StatusBadVersion); at most MaxMessage bytes (StatusTooLarge); the
//     full header, a known kind, count <= MaxCount, lengths that add up to
//     the message's exactly, zero padding, op byte 0 for CompareAndSwap
//     (StatusMalformed);
//  2. the window id (StatusUnknownWindow);
//  3. the basic datatype (StatusBadLayout);
//  4. the op: predefined, or a user op this process registered with
//     op.Register (otherwise StatusUnknownOp), allowed on the datatype and
//     in the kind of call by
//     op.Check with op.Accumulate or op.GetAccumulate, or
//     op.CheckCompareAndSwap (StatusOpDatatype, StatusOpUse);
//  5. the target datatype: a canonical encoding of a valid datatype built
//     from the header's basic datatype; CompareAndSwap takes one element of
//     a predefined datatype (StatusBadLayout);
//  6. the data length: Count*Type.Size() bytes, two elements for
//     CompareAndSwap, empty allowed for NO_OP (StatusLength);
//  7. for the fetching forms, that the old values fit in the reply buffer
//     (StatusTooLarge);
//  8. the region [Disp+lb, Disp+ub) of Count instances inside the window,
//     without overflow (StatusOutOfWindow);
//  9. except for NO_OP, that the target elements do not overlap
//     (StatusOverlap).
//
// Steps 8 and 9 for derived datatypes are those of op.ApplyType, which
// then applies the op; a predefined datatype takes a fast path (op.Apply,
// op.ApplyFetch). Since step 6 (or 7) bounds the number of elements by the
// message (or reply) size before any walk of the datatype, a hostile
// datatype costs O(message size) time and memory. Every refusal is counted
// ([Target.Rejected]) and the target goes on serving other requests. A
// user-defined op that panics while it is applied (after every check) is
// refused with StatusOpFailed: the elements it had updated stay updated.
//
// # Concurrency and atomicity
//
// A [Target] serialises [Target.Handle] calls with a mutex (uncontended when
// the transport calls it from one engine goroutine), which makes each
// element update atomic with respect to every other accumulate applied by
// that Target, and applies each origin's requests in the order it is given
// them (the transport keeps the per-origin order, MPI's default
// accumulate_ordering). It is not atomic with respect to NIC atomics or to
// the CPU of the target process writing window memory directly: the
// routing in package win never lets a NIC atomic and this path update one
// location concurrently. [Target.AddWindow] and [Target.RemoveWindow] may be
// called at any time from any goroutine; once RemoveWindow returns, no
// Handle touches that window's memory.
//
// The encoders and decoders are pure functions, safe from any goroutine;
// a decoded Request or Reply aliases the message it was decoded from. A
// 1-element Accumulate or GetAccumulate on a predefined datatype is
// encoded, decoded, applied and answered without allocation.
//
// # Errors
//
// Every error is an *[Error]: a [Status] (the reason, the same for a local
// check and for the target's refusal), whether the target reported it
// (Remote), and a message. It wraps the sentinel of its status
// ([ErrVersion], [ErrUnknownWindow], [ErrUnknownOp], op.ErrOpDatatype,
// op.ErrOpUse, [ErrBadLayout] (and datatype.ErrOverlap for an overlap),
// [ErrOutOfWindow] (and datatype.ErrOutOfRange), [ErrLength],
// [ErrTooLarge], [ErrMalformed], [ErrOpFailed] (and op.ErrInvalid)) and,
// when the target refused the request,
// [ErrRemoteRejected]. Test with errors.Is.
package fallback
