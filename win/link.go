package win

import (
	"context"

	"github.com/onesided/rma/fallback"
	"github.com/onesided/rma/internal/fabric"
	"github.com/onesided/rma/verbs"
)

// transport is what a window needs of the connections to its peers, in
// the window's ranks: one-sided WRITE and READ, the two NIC atomics, the
// active messages of the accumulate engine (package fallback's wire
// format, applied by each rank's fallback.Target and answered to its
// fallback.Client), and what the peers' liveness says. link is the one
// over the group's RDMA connections; the unit tests have an in-process
// fake (fake_test.go), through which the epoch, lock, request and routing
// logic of this package runs without a device.
type transport interface {
	Write(ctx context.Context, rank int, src []byte, raddr uint64, rkey uint32) error
	Read(ctx context.Context, rank int, dst []byte, raddr uint64, rkey uint32) error
	ReadV(ctx context.Context, rank int, rkey uint32, dst []byte, segs []fabric.Segment) error
	// StartRead starts a request-based read of segs into dst.
	StartRead(rd *fabric.ReadOp, rank int, rkey uint32, dst []byte, segs []fabric.Segment)
	Read8(ctx context.Context, rank int, raddr uint64, rkey uint32) (uint64, error)
	FetchAdd(ctx context.Context, rank int, raddr uint64, rkey uint32, add uint64) (uint64, error)
	// Words does n independent fetch-and-adds (fadd) or 8-byte reads in
	// order, several in flight.
	Words(ctx context.Context, rank int, rkey uint32, fadd bool, addrs, vals, olds []uint64) error
	CompareSwap(ctx context.Context, rank int, raddr uint64, rkey uint32, compare, swap uint64) (uint64, error)
	// Flush completes at rank the WRITEs and READs posted to it.
	Flush(ctx context.Context, rank int) error

	// Acquire takes a credit for an active message to rank and its send
	// buffer; Send sends the n bytes written to it (the reply comes to
	// the client's Slot(slot(rank), credit)); Release gives back a credit
	// not sent.
	Acquire(ctx context.Context, rank int) (int, []byte, error)
	Send(ctx context.Context, rank, credit, n int) error
	Release(rank, credit int)
	slot(rank int) int
	// FlushMessages waits for the replies of every message sent to rank;
	// WaitMessages until done() holds; ProgressMessages makes progress
	// without waiting; Pending reports whether replies are outstanding.
	FlushMessages(ctx context.Context, rank int) error
	WaitMessages(ctx context.Context, rank int, done func() bool) error
	// WaitOp is WaitMessages until every reply of op has come (a call of
	// its own: a method value through the interface would be allocated).
	WaitOp(ctx context.Context, rank int, op *fallback.Op) error
	ProgressMessages(rank int)
	Pending(rank int) bool
	// MsgSize is the largest active message.
	MsgSize() int
	// SyncEngine orders this rank's own engine's updates before what
	// follows (see fabric.Fabric.SyncEngine).
	SyncEngine()

	// PeerErr is why rank is unreachable (nil while it is not); Settled
	// turns err, of a call to rank, into what the caller reports; Fenced
	// reports whether holder, lost, can no longer reach target's memory.
	PeerErr(rank int) error
	Settled(ctx context.Context, rank int, err error) error
	Fenced(ctx context.Context, target, holder int) (bool, error)

	Register(mem []byte, access verbs.Access) (registration, error)
}

// registration is registered memory (a *verbs.MR on a device).
type registration interface {
	Addr() uint64
	RKey() uint32
	Close() error
}

// link is a window's view of its group's RDMA connections: the fabric's
// calls, taking ranks of the window's group. A group made by Split shares
// its parent's connections, whose ranks are those of the whole job; link
// translates (one slice index, none at all for a group formed by Join).
// It has only the calls win uses, so that a call that takes a rank cannot
// reach the fabric untranslated.
type link struct {
	f     *fabric.Fabric
	world []int // window rank -> fabric rank; nil: the same
}

func (l link) slot(r int) int { return l.rank(r) }

func (l link) rank(r int) int {
	if l.world == nil {
		return r
	}
	return l.world[r]
}

func (l link) Write(ctx context.Context, rank int, src []byte, raddr uint64, rkey uint32) error {
	return l.f.Write(ctx, l.rank(rank), src, raddr, rkey)
}

func (l link) Read(ctx context.Context, rank int, dst []byte, raddr uint64, rkey uint32) error {
	return l.f.Read(ctx, l.rank(rank), dst, raddr, rkey)
}

func (l link) ReadV(ctx context.Context, rank int, rkey uint32, dst []byte, segs []fabric.Segment) error {
	return l.f.ReadV(ctx, l.rank(rank), rkey, dst, segs)
}

func (l link) StartRead(rd *fabric.ReadOp, rank int, rkey uint32, dst []byte, segs []fabric.Segment) {
	l.f.Reads().StartV(rd, l.rank(rank), rkey, dst, segs)
}

func (l link) Read8(ctx context.Context, rank int, raddr uint64, rkey uint32) (uint64, error) {
	return l.f.Read8(ctx, l.rank(rank), raddr, rkey)
}

func (l link) FetchAdd(ctx context.Context, rank int, raddr uint64, rkey uint32, add uint64) (uint64, error) {
	return l.f.FetchAdd(ctx, l.rank(rank), raddr, rkey, add)
}

func (l link) Words(ctx context.Context, rank int, rkey uint32, fadd bool, addrs, vals, olds []uint64) error {
	return l.f.Words(ctx, l.rank(rank), rkey, fadd, addrs, vals, olds)
}

func (l link) CompareSwap(ctx context.Context, rank int, raddr uint64, rkey uint32, compare, swap uint64) (uint64, error) {
	return l.f.CompareSwap(ctx, l.rank(rank), raddr, rkey, compare, swap)
}

func (l link) ProgressMessages(rank int) { l.f.ProgressMessages(l.rank(rank)) }

func (l link) Fenced(ctx context.Context, target, holder int) (bool, error) {
	return l.f.Fenced(ctx, l.rank(target), l.rank(holder))
}

func (l link) Flush(ctx context.Context, rank int) error {
	return l.f.Flush(ctx, l.rank(rank))
}

func (l link) Acquire(ctx context.Context, rank int) (int, []byte, error) {
	return l.f.Acquire(ctx, l.rank(rank))
}

func (l link) Send(ctx context.Context, rank, c, n int) error {
	return l.f.Send(ctx, l.rank(rank), c, n)
}

func (l link) Release(rank, c int) { l.f.Release(l.rank(rank), c) }

func (l link) FlushMessages(ctx context.Context, rank int) error {
	return l.f.FlushMessages(ctx, l.rank(rank))
}

func (l link) WaitMessages(ctx context.Context, rank int, done func() bool) error {
	return l.f.WaitMessages(ctx, l.rank(rank), done)
}

func (l link) WaitOp(ctx context.Context, rank int, op *fallback.Op) error {
	return l.f.WaitMessages(ctx, l.rank(rank), op.Done)
}

func (l link) Pending(rank int) bool { return l.f.Pending(l.rank(rank)) }

func (l link) PeerErr(rank int) error { return l.f.PeerErr(l.rank(rank)) }

func (l link) Settled(ctx context.Context, rank int, err error) error {
	return l.f.Settled(ctx, l.rank(rank), err)
}

// The calls that take no rank.

func (l link) Register(mem []byte, access verbs.Access) (registration, error) {
	mr, err := l.f.Register(mem, access)
	if err != nil {
		return nil, err // not a typed nil
	}
	return mr, nil
}
func (l link) SyncEngine()  { l.f.SyncEngine() }
func (l link) MsgSize() int { return l.f.MsgSize() }

// rankNIC is the NIC atomics of the connection to one rank (core.NIC).
type rankNIC struct {
	f    transport
	rank int
}

func (n *rankNIC) Read8(ctx context.Context, addr uint64, rkey uint32) (uint64, error) {
	return n.f.Read8(ctx, n.rank, addr, rkey)
}

func (n *rankNIC) FetchAdd(ctx context.Context, addr uint64, rkey uint32, add uint64) (uint64, error) {
	return n.f.FetchAdd(ctx, n.rank, addr, rkey, add)
}

func (n *rankNIC) CompareSwap(ctx context.Context, addr uint64, rkey uint32, compare, swap uint64) (uint64, error) {
	return n.f.CompareSwap(ctx, n.rank, addr, rkey, compare, swap)
}
