//go:build integration

package test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onesided/rma/group"
	"github.com/onesided/rma/verbs"
)

// The collectives of a group and of its subgroups fail with ErrPeerLost,
// within the documented bound (about three peer timeouts plus a second),
// once a member is lost: Split as Barrier does (it went around the group's
// failure detection, and failed with a bootstrap EOF, or waited for its
// context), and a subgroup's collective in progress when one of its
// members is lost after another rank was (only the first loss was
// noticed).

func init() {
	if os.Getenv("RMA_TEST_HOLDER") != "" {
		// A process that holds the sockets it was handed (ExtraFiles)
		// open, as a dead host's kernel would, for a bounded time.
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	workers["glsplit"] = workGroupLossSplit
	workers["glsub"] = workGroupLossSub
}

// lossBound is how soon after a member's death a collective must fail:
// three peer timeouts plus a second (README).
const lossBound = 3*peerTimeout + time.Second

// workGroupLossSplit (3 ranks): rank 2 kills itself after a barrier; the
// survivors call Split at once, which must fail with ErrPeerLost within
// lossBound, then Split again, which must fail with it at once.
func workGroupLossSplit(ctx context.Context, g *group.Group) error {
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if g.Rank() == 2 {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Minute)
		return errors.New("still alive a minute after SIGKILL")
	}
	for i, bound := range []time.Duration{lossBound, 200 * time.Millisecond} {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		start := time.Now()
		sub, err := g.Split(sctx, 0, g.Rank())
		took := time.Since(start)
		cancel()
		fmt.Printf("split %d after rank 2's death: %v in %v\n", i+1, err, took.Round(time.Millisecond))
		if sub != nil {
			sub.Close()
		}
		if !errors.Is(err, verbs.ErrPeerLost) {
			return fmt.Errorf("split %d after rank 2's death: %v (after %v), want an error matching ErrPeerLost", i+1, err, took)
		}
		if took > bound {
			return fmt.Errorf("split %d after rank 2's death took %v, want at most %v", i+1, took, bound)
		}
	}
	fmt.Println("split=ok")
	return nil
}

func TestGroupLossSplit(t *testing.T) {
	l := newLaunch(t, "glsplit", 3, "RMA_PEER_TIMEOUT="+peerTimeout.String())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	procs := l.startAll(ctx)
	victimExit(t, procs[2])
	outs := l.wait(procs[:2])
	for r, out := range outs {
		value(t, out, "split")
		t.Logf("rank %d: %s", r, strings.Join(grepLines(out, "split "), "; "))
	}
}

// The subgroup scenario's delay between rank 0 entering the Barrier of
// its subgroup {0,2} and rank 2's death.
const subDelay = 700 * time.Millisecond

// workGroupLossSub (4 ranks, subgroups {0,2} and {1,3}): rank 3 dies
// first and every survivor learns it (a group barrier fails); then rank 0
// waits in the Barrier of {0,2}, which rank 2 never enters, and rank 2
// dies. Rank 2 hands its subgroup's bootstrap socket to a process that
// keeps it open, as a dead host's kernel does, so that the Barrier learns
// of the death only through the group's failure detection: it must fail
// with ErrPeerLost within lossBound of the death, not wait for its
// context. Rank 1's Barrier of {1,3} fails with ErrPeerLost at once.
func workGroupLossSub(ctx context.Context, g *group.Group) error {
	dir := os.Getenv("RMA_TEST_DIR")
	before, err := socketFDs()
	if err != nil {
		return err
	}
	sub, err := g.Split(ctx, g.Rank()%2, g.Rank())
	if err != nil {
		return err
	}
	defer sub.Close()
	after, err := socketFDs()
	if err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if g.Rank() == 3 {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Minute)
		return errors.New("still alive a minute after SIGKILL")
	}
	// Every survivor learns of rank 3's loss: the first.
	bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	start := time.Now()
	err = g.Barrier(bctx)
	cancel()
	fmt.Printf("group barrier after rank 3's death: %v in %v\n", err, time.Since(start).Round(time.Millisecond))
	if !errors.Is(err, verbs.ErrPeerLost) {
		return fmt.Errorf("group barrier after rank 3's death: %v, want ErrPeerLost", err)
	}
	switch g.Rank() {
	case 2:
		old := make(map[string]bool)
		for _, link := range before {
			old[link] = true
		}
		var held []*os.File
		for fd, link := range after {
			if !old[link] {
				dup, err := syscall.Dup(fd)
				if err != nil {
					return err
				}
				held = append(held, os.NewFile(uintptr(dup), link))
			}
		}
		if len(held) == 0 {
			return fmt.Errorf("no socket opened by Split (before %v, after %v)", before, after)
		}
		holder := exec.Command(os.Args[0], "-test.run=^$")
		holder.Env = append(os.Environ(), "RMA_TEST_HOLDER=1")
		holder.ExtraFiles = held
		if err := holder.Start(); err != nil {
			return err
		}
		os.WriteFile(filepath.Join(dir, "holder"), []byte(strconv.Itoa(holder.Process.Pid)), 0o644)
		fmt.Printf("holder %d keeps %d subgroup socket(s) open\n", holder.Process.Pid, len(held))
		time.Sleep(subDelay)
		os.WriteFile(filepath.Join(dir, "death"), []byte(strconv.FormatInt(time.Now().UnixNano(), 10)), 0o644)
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Minute)
		return errors.New("still alive a minute after SIGKILL")
	case 0, 1:
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		start := time.Now()
		err := sub.Barrier(sctx)
		took := time.Since(start)
		cancel()
		if g.Rank() == 1 {
			fmt.Printf("sub{1,3} barrier (3 lost): %v in %v\n", err, took.Round(time.Millisecond))
			if !errors.Is(err, verbs.ErrPeerLost) || took > 200*time.Millisecond {
				return fmt.Errorf("sub{1,3} barrier with rank 3 lost: %v after %v, want ErrPeerLost at once", err, took)
			}
			break
		}
		var since time.Duration = -1
		if b, rerr := os.ReadFile(filepath.Join(dir, "death")); rerr == nil {
			if ns, perr := strconv.ParseInt(string(b), 10, 64); perr == nil {
				since = time.Since(time.Unix(0, ns))
			}
		}
		fmt.Printf("sub{0,2} barrier (2 dies %v in): %v in %v, %v after rank 2's death\n", subDelay, err, took.Round(time.Millisecond), since.Round(time.Millisecond))
		if !errors.Is(err, verbs.ErrPeerLost) {
			return fmt.Errorf("sub{0,2} barrier with rank 2 lost second: %v after %v, want ErrPeerLost", err, took)
		}
		if since < 0 || since > lossBound {
			return fmt.Errorf("sub{0,2} barrier failed %v after rank 2's death, want at most %v", since, lossBound)
		}
	}
	fmt.Println("sub=ok")
	return nil
}

func TestGroupLossSubgroup(t *testing.T) {
	l := newLaunch(t, "glsub", 4, "RMA_PEER_TIMEOUT="+peerTimeout.String())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t.Cleanup(func() {
		if b, err := os.ReadFile(l.file("holder")); err == nil {
			if pid, err := strconv.Atoi(string(b)); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	procs := l.startAll(ctx)
	victimExit(t, procs[3])
	victimExit(t, procs[2])
	outs := l.wait(procs[:2])
	for r, out := range outs {
		value(t, out, "sub")
		t.Logf("rank %d: %s", r, strings.Join(grepLines(out, "barrier"), "; "))
	}
}

// victimExit waits for a rank that kills itself and checks that it did.
func victimExit(t *testing.T, p *proc) {
	t.Helper()
	err := p.cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() {
		t.Errorf("rank %d: %v, want killed by SIGKILL", p.rank, err)
	}
	t.Logf("rank %d (killed itself) output:\n%s", p.rank, p.out.String())
}

// socketFDs lists this process's sockets: descriptor -> "socket:[inode]".
func socketFDs() (map[int]string, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	fds := make(map[int]string)
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if link, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(link, "socket:") {
			fds[fd] = link
		}
	}
	return fds, nil
}

func grepLines(out, word string) []string {
	var lines []string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, word) {
			lines = append(lines, strings.TrimSpace(line))
		}
	}
	return lines
}
