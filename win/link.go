package win

import (
	"context"

	"github.com/onesided/rma/internal/fabric"
	"github.com/onesided/rma/verbs"
)

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

func (l link) Pending(rank int) bool { return l.f.Pending(l.rank(rank)) }

func (l link) PeerErr(rank int) error { return l.f.PeerErr(l.rank(rank)) }

func (l link) Settled(ctx context.Context, rank int, err error) error {
	return l.f.Settled(ctx, l.rank(rank), err)
}

// The calls that take no rank.

func (l link) Register(mem []byte, access verbs.Access) (*verbs.MR, error) {
	return l.f.Register(mem, access)
}
func (l link) SyncEngine()  { l.f.SyncEngine() }
func (l link) MsgSize() int { return l.f.MsgSize() }
