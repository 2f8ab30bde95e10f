package group

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync"

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
//
// As g's other collectives, Split fails with an error matching
// verbs.ErrPeerLost (ErrPeerLost) at once if a rank of g is known lost, and
// as soon as one is found lost while it runs (one of the subgroup's, once
// the subgroups are being formed).
func (g *Group) Split(ctx context.Context, color, key int) (*Group, error) {
	if color < 0 && color != Undefined {
		return nil, fmt.Errorf("group: %w: color %d (colors are >= 0, or Undefined)", ErrConfig, color)
	}
	// Round one: everyone's color and key, and a proposal for the
	// subgroups' serial number (agreeSerial).
	var mine [24]byte
	binary.LittleEndian.PutUint64(mine[0:], uint64(int64(color)))
	binary.LittleEndian.PutUint64(mine[8:], uint64(int64(key)))
	binary.LittleEndian.PutUint64(mine[16:], uint64(g.splits.propose(1)))
	all, err := g.allGather(ctx, mine[:])
	if err != nil {
		return nil, fmt.Errorf("group: split: %w", err)
	}
	type member struct{ rank, key int }
	var members []member
	proposals := make([]uint64, len(all))
	for r, b := range all {
		if len(b) != len(mine) {
			return nil, fmt.Errorf("group: split: rank %d sent %d bytes", r, len(b))
		}
		proposals[r] = binary.LittleEndian.Uint64(b[16:])
		if c := int(int64(binary.LittleEndian.Uint64(b[0:]))); c == color && color != Undefined {
			members = append(members, member{r, int(int64(binary.LittleEndian.Uint64(b[8:])))})
		}
	}
	serial, err := g.agreeSerial(ctx, proposals)
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(members, func(a, b member) int { return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.rank, b.rank)) })
	sub := -1
	world := make([]int, len(members))
	for i, m := range members {
		world[i] = g.fabricRank(m.rank)
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
	addrs, err := g.allGather(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("group: split: %w", err)
	}
	if sub < 0 {
		return nil, nil
	}
	// Its members only form the subgroup: the loss of one of them fails
	// it, on its members.
	var boot *bootstrap.Conn
	err = g.overTCPAmong(ctx, world, len(world), func(ctx context.Context) (err error) {
		switch {
		case len(members) == 1:
			boot, err = bootstrap.Join(ctx, cfg)
		case l != nil:
			boot, err = l.Accept(ctx)
		default:
			cfg.Addr = string(addrs[members[0].rank])
			boot, err = bootstrap.Join(ctx, cfg)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("group: split: forming the subgroup of color %d: %w", color, err)
	}
	s := &Group{boot: boot, fab: g.fab, loss: g.loss, probeErr: g.probeErr, target: g.target, client: g.client,
		parent: g, world: world, secret: g.secret, splits: g.splits, serial: serial}
	return s, nil
}

// allGather is the bootstrap's AllGather over g's ranks, failed by a lost
// member as every collective of g is (overTCP); unlike AllGather, it does
// not synchronise with the engine.
func (g *Group) allGather(ctx context.Context, mine []byte) ([][]byte, error) {
	var all [][]byte
	err := g.overTCP(ctx, func(ctx context.Context) (err error) {
		all, err = g.boot.AllGather(ctx, mine)
		return err
	})
	return all, err
}

// serials are the subgroup serial numbers a process has taken: every group
// of the process (the one Join formed and its subgroups) has its own, which
// is part of the ids of its windows.
type serials struct {
	mu   sync.Mutex
	used map[uint32]bool
}

// propose returns the smallest serial number from floor up that the process
// has not taken, maxSplits+1 if none is left.
func (s *serials) propose(floor uint64) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for n := max(floor, 1); n <= maxSplits; n++ {
		if !s.used[uint32(n)] {
			return n
		}
	}
	return maxSplits + 1
}

// take marks n taken unless it was: it reports whether it did.
func (s *serials) take(n uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n > maxSplits || s.used[uint32(n)] {
		return false
	}
	if s.used == nil {
		s.used = make(map[uint32]bool)
	}
	s.used[uint32(n)] = true
	return true
}

func (s *serials) give(n uint64) {
	s.mu.Lock()
	delete(s.used, uint32(n))
	s.mu.Unlock()
}

// agreeSerial agrees with the other ranks of g on a serial number no rank
// of g's processes has taken, and takes it. The candidate is the largest of
// the ranks' proposals (the first round's are in proposals); each rank
// takes it if it is still free in its process and all tell whether they
// did. Splits of several groups may run at once in one process (from
// different goroutines, as MPI_Comm_split of different communicators from
// different threads): they contend for the same numbers, and a candidate
// that some rank could not take is given back everywhere and the ranks try
// again above it, from a random offset so that two contending Splits part.
func (g *Group) agreeSerial(ctx context.Context, proposals []uint64) (uint32, error) {
	for {
		cand := slices.Max(proposals)
		if cand > maxSplits {
			return 0, fmt.Errorf("group: split: %w: more than %d subgroups in one process", ErrConfig, maxSplits)
		}
		took := g.splits.take(cand)
		var mine [9]byte
		if took {
			mine[0] = 1
		}
		binary.LittleEndian.PutUint64(mine[1:], g.splits.propose(cand+1+uint64(rand.IntN(8))))
		all, err := g.allGather(ctx, mine[:])
		if err != nil {
			if took {
				g.splits.give(cand)
			}
			return 0, fmt.Errorf("group: split: %w", err)
		}
		agreed := true
		for r, b := range all {
			if len(b) != len(mine) {
				return 0, fmt.Errorf("group: split: rank %d sent %d bytes", r, len(b))
			}
			agreed = agreed && b[0] == 1
			proposals[r] = binary.LittleEndian.Uint64(b[1:])
		}
		if agreed {
			return uint32(cand), nil
		}
		if took {
			g.splits.give(cand)
		}
	}
}

// subSecret is the secret of a subgroup's bootstrap: derived from the
// group's, so that it never crosses the network.
func subSecret(secret []byte, serial uint32, color int) []byte {
	m := hmac.New(sha256.New, secret)
	fmt.Fprintf(m, "rma subgroup %d color %d", serial, color)
	return m.Sum(nil)
}

// fabricRank translates a rank of g into the rank of the same process in
// the group Join formed (grouphooks.FabricRank).
func (g *Group) fabricRank(r int) int {
	if g.world == nil {
		return r
	}
	return g.world[r]
}
