// Package verbs is a thin Go binding of libibverbs: the only package of this
// module that uses cgo.
//
// It covers what one-sided communication needs: listing devices with their
// network devices (Devices), opening one (Open), device, port and GID
// attributes, protection domains, memory regions over memory that does not
// move (Alloc gives page-aligned memory outside the Go heap), completion
// queues and channels, reliable-connected queue pairs with their
// RESET-INIT-RTR-RTS transitions for RoCE (GRH, GID index) and InfiniBand
// (LID), posting WRITE, READ, SEND, RECV, WRITE with immediate and the
// 8-byte atomics, and polling completions in batches.
//
// Work requests are built in C from scalars; a work request id is an index
// chosen by the caller, never an address; C keeps no Go pointer.
//
// Ownership: every object is closed by its owner, children before parents
// (QP, then CQ, then channel; MR and PD; the Context last). OpenObjects
// lists what is still open, with creation stacks after TrackObjects(true).
//
// Concurrency: posting to a QP and polling a CQ are safe from several
// goroutines (the provider locks); Close must not race with use.
//
// Errors: a failed completion is a *CompletionError that errors.Is matches
// against ErrRemoteAccess, ErrPeerLost, ErrFlushed, ErrRemoteOp or
// ErrLocal. Without cgo, or outside Linux, every constructor returns
// ErrNotSupported. A limit of the process or its container gives a
// *LimitError matching ErrResourceLimit, which names the limit, its value,
// what was needed and the fix: a device file that Open cannot open
// read-write, or RLIMIT_MEMLOCK refusing a RegisterMR; CheckAccess makes
// the same checks up front (limits.go, without cgo).
//
// The stand-in NIC: built with the tag standin, the package's calls go to
// standin.c instead of libibverbs, a device in the process's memory that
// carries out each work request while it is posted (or, with
// RMA_STANDIN_DELAY_NS, makes its completion visible that much later), so
// that what a benchmark times is the software above the verbs (package
// internal/swbench). It is for timing only; it moves no byte between
// processes.
package verbs
