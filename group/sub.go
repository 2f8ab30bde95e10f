package group

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net"
	"slices"

	"github.com/onesided/rma/internal/bootstrap"
)

// Undefined is the color of a rank that joins no subgroup in Split
// (MPI_UNDEFINED).
const Undefined = -1

// maxSplits bounds the subgroups a process takes part in: a subgroup's
// serial number is part of the ids of its windows, below the top bit (set
// in the ids of a dynamic window's attached regions).
const maxSplits = 1<<(31-windowBits) - 1

// windowBits is the width of a window's number within its group, in the
// window id; the group's serial number (0 for a group formed by Join) is
// above it.
const windowBits = 20

// Split divides g into disjoint subgroups, one per color (MPI_Comm_split).
// It is collective over g. The ranks that pass the same color form a
// subgroup, ranked by key, then by rank in g; a rank that passes Undefined
// joins none and gets nil. A subgroup shares g's RDMA connections, engine
// and peer-failure detection (nothing is connected anew): windows created
// on it are windows of its ranks only, and its collective calls (Barrier,
// AllGather, window creation and Free) involve its ranks only. Close it
// before g.
func (g *Group) Split(ctx context.Context, color, key int) (*Group, error) {
	if color < 0 && color != Undefined {
		return nil, fmt.Errorf("group: %w: color %d (colors are >= 0, or Undefined)", ErrConfig, color)
	}
	// Round one: everyone's color and key, and a serial number for the
	// subgroups (the largest of the ranks' next numbers, so that it is new
	// on every rank).
	var mine [24]byte
	binary.LittleEndian.PutUint64(mine[0:], uint64(int64(color)))
	binary.LittleEndian.PutUint64(mine[8:], uint64(int64(key)))
	binary.LittleEndian.PutUint64(mine[16:], uint64(g.splits.Load()+1))
	all, err := g.boot.AllGather(ctx, mine[:])
	if err != nil {
		return nil, fmt.Errorf("group: split: %w", err)
	}
	type member struct{ rank, key int }
	var members []member
	serial := uint64(0)
	for r, b := range all {
		if len(b) != len(mine) {
			return nil, fmt.Errorf("group: split: rank %d sent %d bytes", r, len(b))
		}
		serial = max(serial, binary.LittleEndian.Uint64(b[16:]))
		if c := int(int64(binary.LittleEndian.Uint64(b[0:]))); c == color && color != Undefined {
			members = append(members, member{r, int(int64(binary.LittleEndian.Uint64(b[8:])))})
		}
	}
	if serial > maxSplits {
		return nil, fmt.Errorf("group: split: %w: more than %d subgroups in one process", ErrConfig, maxSplits)
	}
	for {
		cur := g.splits.Load()
		if uint64(cur) >= serial || g.splits.CompareAndSwap(cur, uint32(serial)) {
			break
		}
	}
	slices.SortStableFunc(members, func(a, b member) int { return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.rank, b.rank)) })
	sub := -1
	world := make([]int, len(members))
	for i, m := range members {
		world[i] = g.FabricRank(m.rank)
		if m.rank == g.Rank() {
			sub = i
		}
	}

	// Round two: the address of each subgroup's first rank, which forms
	// the subgroup's own bootstrap (for its collectives).
	var l *bootstrap.Listener
	cfg := bootstrap.Config{Rank: max(sub, 0), Size: max(len(members), 1), Secret: subSecret(g.secret, serial, color)}
	var addr []byte
	if sub == 0 && len(members) > 1 {
		cfg.Addr = net.JoinHostPort(g.boot.LocalIP().String(), "0")
		if l, err = bootstrap.Listen(cfg); err != nil {
			return nil, fmt.Errorf("group: split: %w", err)
		}
		defer l.Close()
		addr = []byte(l.Addr())
	}
	addrs, err := g.boot.AllGather(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("group: split: %w", err)
	}
	if sub < 0 {
		return nil, nil
	}
	var boot *bootstrap.Conn
	switch {
	case len(members) == 1:
		boot, err = bootstrap.Join(ctx, cfg)
	case l != nil:
		boot, err = l.Accept(ctx)
	default:
		cfg.Addr = string(addrs[members[0].rank])
		boot, err = bootstrap.Join(ctx, cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("group: split: forming the subgroup of color %d: %w", color, err)
	}
	s := &Group{boot: boot, fab: g.fab, probeErr: g.probeErr, target: g.target, client: g.client,
		parent: g, world: world, secret: g.secret, splits: g.splits, serial: uint32(serial)}
	return s, nil
}

// subSecret is the secret of a subgroup's bootstrap: derived from the
// group's, so that it never crosses the network.
func subSecret(secret []byte, serial uint64, color int) []byte {
	m := hmac.New(sha256.New, secret)
	fmt.Fprintf(m, "rma subgroup %d color %d", serial, color)
	return m.Sum(nil)
}

// FabricRank translates a rank of g into the rank of the same process in
// g.Fabric() (they differ in a subgroup made by Split).
func (g *Group) FabricRank(r int) int {
	if g.world == nil {
		return r
	}
	return g.world[r]
}

// FabricRanks is FabricRank for every rank of g, in rank order (nil when
// the two rankings are the same).
func (g *Group) FabricRanks() []int { return g.world }
