package group

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/onesided/rma/internal/bootstrap"
	"github.com/onesided/rma/internal/fabric"
	"github.com/onesided/rma/verbs"
)

// fakeLoss stands in for one process's fabric: the test marks ranks lost.
type fakeLoss struct {
	mu   sync.Mutex
	errs map[int]error
	next chan struct{}
}

func (f *fakeLoss) PeerErr(rank int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.errs[rank]
}

func (f *fakeLoss) Losses() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.next == nil {
		f.next = make(chan struct{})
	}
	return f.next
}

func (f *fakeLoss) PeerTimeout() time.Duration { return 300 * time.Millisecond }

// lose marks rank lost, as the fabric does: its error, then the notice.
func (f *fakeLoss) lose(rank int, cause error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.errs == nil {
		f.errs = make(map[int]error)
	}
	f.errs[rank] = fmt.Errorf("fabric: %w: rank %d: %w", verbs.ErrPeerLost, rank, cause)
	if f.next != nil {
		close(f.next)
		f.next = nil
	}
}

// testGroups forms n groups over loopback TCP without RDMA: enough for
// Split and for collectives through overTCP (not Barrier and AllGather,
// which synchronise with the engine). Each has its own fakeLoss.
func testGroups(t *testing.T, n int) ([]*Group, []*fakeLoss) {
	t.Helper()
	secret := []byte("a test secret of the group")
	cfg := bootstrap.Config{Rank: 0, Size: n, Addr: "127.0.0.1:0", Secret: secret}
	l, err := bootstrap.Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gs := make([]*Group, n)
	losses := make([]*fakeLoss, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		losses[r] = new(fakeLoss)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var boot *bootstrap.Conn
			if r == 0 {
				boot, errs[r] = l.Accept(ctx)
			} else {
				c := cfg
				c.Rank, c.Addr = r, l.Addr()
				boot, errs[r] = bootstrap.Join(ctx, c)
			}
			if errs[r] == nil {
				gs[r] = &Group{boot: boot, loss: losses[r], secret: secret, splits: new(serials)}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, g := range gs {
			g.boot.Close()
		}
	})
	return gs, losses
}

type result struct {
	err  error
	took time.Duration
}

// concurrently runs call on each of ranks, with a context of timeout, and
// returns the results by rank.
func concurrently(ranks []int, timeout time.Duration, call func(ctx context.Context, r int) error) map[int]result {
	var mu sync.Mutex
	res := make(map[int]result)
	var wg sync.WaitGroup
	for _, r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			start := time.Now()
			err := call(ctx, r)
			mu.Lock()
			res[r] = result{err, time.Since(start)}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return res
}

func wantLost(t *testing.T, what string, res map[int]result, bound time.Duration) {
	t.Helper()
	for r, x := range res {
		t.Logf("rank %d: %s: %v in %v", r, what, x.err, x.took)
		if !errors.Is(x.err, verbs.ErrPeerLost) || !errors.Is(x.err, ErrPeerLost) {
			t.Errorf("rank %d: %s: %v, want an error matching ErrPeerLost", r, what, x.err)
		}
		if x.took > bound {
			t.Errorf("rank %d: %s took %v, want at most %v", r, what, x.took, bound)
		}
	}
}

// TestSplitKnownLoss: a rank known lost fails Split at once with
// ErrPeerLost on the others (it went to the bootstrap, and waited for the
// dead rank or failed with its connection's EOF).
func TestSplitKnownLoss(t *testing.T) {
	gs, losses := testGroups(t, 3)
	for _, l := range losses[:2] {
		l.lose(2, errors.New("its process is gone (EOF)"))
	}
	res := concurrently([]int{0, 1}, 10*time.Second, func(ctx context.Context, r int) error {
		_, err := gs[r].Split(ctx, 0, r)
		return err
	})
	wantLost(t, "Split", res, 100*time.Millisecond)
}

// TestSplitLossDuring: a rank that never takes part (its host died: no
// connection closes) and is then found lost fails a Split in progress
// with ErrPeerLost, not at its context's deadline.
func TestSplitLossDuring(t *testing.T) {
	gs, losses := testGroups(t, 3)
	go func() {
		time.Sleep(100 * time.Millisecond)
		for _, l := range losses[:2] {
			l.lose(2, errors.New("transport retry counter exceeded"))
		}
	}()
	res := concurrently([]int{0, 1}, 10*time.Second, func(ctx context.Context, r int) error {
		_, err := gs[r].Split(ctx, 0, r)
		return err
	})
	wantLost(t, "Split", res, 2*time.Second)
}

// TestSplitFormingLoss: a member of the new subgroup found lost while the
// subgroup is being formed (after the group's exchanges) fails it.
func TestSplitFormingLoss(t *testing.T) {
	gs, losses := testGroups(t, 3)
	// Rank 2 is in the exchanges of Split but, its host dead, never joins
	// its subgroup's listener: ranks 0 and 2 form {0,2}, rank 1 none.
	res := concurrently([]int{0, 1, 2}, 10*time.Second, func(ctx context.Context, r int) error {
		color := 0
		if r == 1 {
			color = Undefined
		}
		if r == 2 {
			// Through the group's two exchanges (and the serial's), not
			// the forming: give rank 0 the subgroup's address and stop.
			g := gs[r]
			var mine [24]byte
			mine[16] = 1
			if _, err := g.allGather(ctx, mine[:]); err != nil {
				return err
			}
			if _, err := g.allGather(ctx, append([]byte{1}, make([]byte, 8)...)); err != nil {
				return err
			}
			if _, err := g.allGather(ctx, nil); err != nil {
				return err
			}
			time.Sleep(100 * time.Millisecond)
			losses[0].lose(2, errors.New("its host is gone"))
			return nil
		}
		s, err := gs[r].Split(ctx, color, r)
		if s != nil {
			s.Close()
			return errors.New("formed a subgroup with a lost member")
		}
		return err
	})
	if x := res[1]; x.err != nil {
		t.Errorf("rank 1, in no subgroup: %v", x.err)
	}
	wantLost(t, "Split", map[int]result{0: res[0]}, 2*time.Second)
}

// subgroups splits 4 test groups into {0,2} and {1,3}.
func subgroups(t *testing.T) ([]*Group, []*fakeLoss) {
	t.Helper()
	gs, losses := testGroups(t, 4)
	subs := make([]*Group, 4)
	res := concurrently([]int{0, 1, 2, 3}, 10*time.Second, func(ctx context.Context, r int) (err error) {
		subs[r], err = gs[r].Split(ctx, r%2, r)
		return err
	})
	for r, x := range res {
		if x.err != nil {
			t.Fatalf("rank %d: Split: %v", r, x.err)
		}
	}
	t.Cleanup(func() {
		for _, s := range subs {
			s.Close()
		}
	})
	for r, s := range subs {
		if s.Size() != 2 || s.fabricRank(0) != r%2 || s.fabricRank(1) != r%2+2 {
			t.Fatalf("rank %d: subgroup of %d ranks %v", r, s.Size(), s.world)
		}
	}
	return subs, losses
}

// subBarrier is a subgroup's barrier as Barrier runs it, without the
// engine.
func subBarrier(ctx context.Context, s *Group) error {
	return s.overTCP(ctx, func(ctx context.Context) error { return s.boot.Barrier(ctx) })
}

// TestSubgroupSecondLoss: rank 3 is lost first (not a member of {0,2});
// then rank 2, which never enters the barrier of {0,2} and closes no
// connection (a dead host), is lost while rank 0 waits in it: the barrier
// fails with ErrPeerLost (only the first loss woke it).
func TestSubgroupSecondLoss(t *testing.T) {
	subs, losses := subgroups(t)
	losses[0].lose(3, errors.New("its process is gone (EOF)"))
	go func() {
		time.Sleep(100 * time.Millisecond)
		losses[0].lose(1, fabric.ErrPeerLeft) // a member of neither: wakes, fails nothing
		time.Sleep(100 * time.Millisecond)
		losses[0].lose(2, errors.New("transport retry counter exceeded"))
	}()
	res := concurrently([]int{0}, 10*time.Second, func(ctx context.Context, r int) error { return subBarrier(ctx, subs[r]) })
	wantLost(t, "barrier of {0,2}", res, 2*time.Second)
	if x := res[0]; x.took < 150*time.Millisecond {
		t.Errorf("barrier of {0,2} failed after %v, before rank 2 was lost", x.took)
	}
}

// TestSubgroupLeftMember: a member of the subgroup that leaves (closes the
// group) while a collective is in progress does not fail it: it may have
// finished it before the others.
func TestSubgroupLeftMember(t *testing.T) {
	// Rank 0 enters with rank 2 known to have left: it fails at once.
	subs, losses := subgroups(t)
	losses[0].lose(2, fabric.ErrPeerLeft)
	res := concurrently([]int{0}, 10*time.Second, func(ctx context.Context, r int) error { return subBarrier(ctx, subs[r]) })
	wantLost(t, "barrier with a member known to have left", res, 100*time.Millisecond)

	subs, losses = subgroups(t)
	res = concurrently([]int{0, 2}, 10*time.Second, func(ctx context.Context, r int) error {
		if r == 2 {
			// Rank 0 waits; rank 2 is marked left there, then enters.
			time.Sleep(100 * time.Millisecond)
			losses[0].lose(2, fabric.ErrPeerLeft)
			time.Sleep(100 * time.Millisecond)
		}
		return subBarrier(ctx, subs[r])
	})
	for r, x := range res {
		if x.err != nil {
			t.Errorf("rank %d: barrier with a member that left during it: %v, want nil", r, x.err)
		}
	}
}

// TestSubgroupClosedThenLost: a member's process dies during a subgroup's
// barrier after another rank was lost: its connection closes first, and
// the barrier waits for the liveness connection to tell (it returned the
// bootstrap's error if any rank had been lost before).
func TestSubgroupClosedThenLost(t *testing.T) {
	subs, losses := subgroups(t)
	losses[0].lose(1, errors.New("its process is gone (EOF)")) // not a member of {0,2}
	go func() {
		time.Sleep(100 * time.Millisecond)
		subs[2].boot.Close() // rank 2's process dies: its connections close
		time.Sleep(50 * time.Millisecond)
		losses[0].lose(2, errors.New("its process is gone (EOF)"))
	}()
	res := concurrently([]int{0}, 10*time.Second, func(ctx context.Context, r int) error { return subBarrier(ctx, subs[r]) })
	wantLost(t, "barrier of {0,2}", res, 2*time.Second)
}

// TestCollectiveNoLoss: with no loss, the watcher ends with the call and
// nothing fails; a collective cut short by its context returns the
// context's error.
func TestCollectiveNoLoss(t *testing.T) {
	subs, losses := subgroups(t)
	losses[0].lose(3, errors.New("gone")) // not a member of {0,2}
	for range 20 {
		res := concurrently([]int{0, 2}, 10*time.Second, func(ctx context.Context, r int) error { return subBarrier(ctx, subs[r]) })
		for r, x := range res {
			if x.err != nil {
				t.Fatalf("rank %d: %v", r, x.err)
			}
		}
	}
	res := concurrently([]int{0}, 100*time.Millisecond, func(ctx context.Context, r int) error { return subBarrier(ctx, subs[r]) })
	if x := res[0]; !errors.Is(x.err, context.DeadlineExceeded) {
		t.Errorf("barrier that rank 2 never enters: %v, want context.DeadlineExceeded", x.err)
	}
}
