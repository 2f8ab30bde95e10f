//go:build integration

package test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/verbs"
	"github.com/onesided/rma/win"
)

// Ranks run as an unprivileged user: uid and gid 65534 (nobody), no
// supplementary groups, every capability dropped (effective, permitted,
// inheritable, ambient and bounding sets), and RLIMIT_MEMLOCK set to a given
// size, soft and hard, by prlimit and setpriv from util-linux. The test runs
// as root (in the test VM, root of the guest).
const (
	unprivUID   = 65534
	unprivRanks = 2
	// unprivNeed is what a group of unprivRanks ranks pins with the default
	// options, as README's "Permissions, containers and Kubernetes" counts
	// it for N ranks and 4 KiB pages: the scratch area (256 slots of 256
	// bytes and two 32-entry completion arrays, rounded up to a page: 68
	// KiB) with 32 staging chunks of 64 KiB, the active-message buffers of
	// 64 KiB (receive buffers shared by every peer: min(64, 16(N+1)); request
	// buffers: 8 min(N, 2); reply buffers: 8), the fabric's probe word (a
	// page) and the page of group.Join's atomics probe.
	unprivNeed = 69632 + 32*65536 + (min(64, 16*(unprivRanks+1))+8*min(unprivRanks, 2)+8)*65536 + 4096 + 4096
	// unprivBigWindow is a window beyond what the working case leaves free.
	unprivBigWindow = 4 << 20
	// unprivFaddIters FetchAndOps per rank.
	unprivFaddIters = 100
)

func init() {
	workers["unpriv"] = workUnpriv
	// A rank whose Join must fail cannot be a worker (runWorker joins
	// before it calls one): it runs here, before the tests' TestMain.
	if os.Getenv("RMA_TEST_ROLE") == "unpriv-join" {
		os.Exit(workUnprivJoin())
	}
}

// unprivEnv is what TestUnpriv's cases share: the copy of the test binary
// that uid 65534 may run, and the device the ranks use.
type unprivEnv struct {
	bin    string
	device string
	file   verbs.DeviceFile // the device's uverbs file
}

// setupUnpriv checks that the test can drop privileges, copies the test
// binary where uid 65534 may run it, and makes the device's uverbs file
// readable and writable by everyone as the kernel (and udev's default)
// leave it, restoring its mode afterwards.
func setupUnpriv(t *testing.T) *unprivEnv {
	t.Helper()
	requireDevice(t)
	need := func(ok bool, why string) {
		t.Helper()
		if ok {
			return
		}
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s: in CI this test must run (the test VM runs it as root)", why)
		}
		t.Skip(why)
	}
	need(os.Geteuid() == 0, "not root: cannot run a rank as another user")
	for _, tool := range []string{"setpriv", "prlimit"} {
		_, err := exec.LookPath(tool)
		need(err == nil, tool+" (util-linux) not found")
	}
	e := &unprivEnv{device: os.Getenv("RMA_DEVICE")}
	if e.device == "" {
		devs, err := verbs.Devices()
		if err != nil || len(devs) == 0 {
			t.Fatalf("devices: %v %v", devs, err)
		}
		e.device = devs[0].Name
	}
	files := verbs.DeviceFiles(e.device)
	if len(files) == 0 || !files[0].Required {
		t.Fatalf("no uverbs file for %s in %v", e.device, files)
	}
	e.file = files[0]
	t.Logf("device %s: %s mode %v uid %d gid %d (err %v); all device files: %+v", e.device, e.file.Path, e.file.Mode, e.file.UID, e.file.GID, e.file.Err, files)
	if perm := e.file.Mode.Perm(); perm != 0o666 {
		if err := os.Chmod(e.file.Path, 0o666); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(e.file.Path, perm) })
	}

	dir, err := os.MkdirTemp("", "rma-unpriv-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	e.bin = filepath.Join(dir, "it.test")
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(e.bin, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return e
}

// run starts l's ranks as uid 65534 without capabilities under a memlock
// limit of memlock bytes, waits for them (failing the test if one fails)
// and returns their outputs.
func (e *unprivEnv) run(l *launch, memlock uint64, timeout time.Duration) []string {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	procs := make([]*proc, l.size)
	for r := range procs {
		p := &proc{rank: r}
		lim := strconv.FormatUint(memlock, 10)
		p.cmd = exec.CommandContext(ctx, "prlimit", "--memlock="+lim+":"+lim, "--",
			"setpriv", "--reuid="+strconv.Itoa(unprivUID), "--regid="+strconv.Itoa(unprivUID), "--clear-groups",
			"--inh-caps=-all", "--bounding-set=-all", "--",
			e.bin, "-test.run=^$")
		p.cmd.Env = append(os.Environ(),
			"RMA_TEST_ROLE="+l.role,
			"RMA_RANK="+strconv.Itoa(r),
			"RMA_SIZE="+strconv.Itoa(l.size),
			"RMA_ADDR="+l.addr,
			"RMA_SECRET="+l.secret,
			"RMA_DEVICE="+e.device,
			"RMA_TEST_MEMLOCK="+lim,
		)
		p.cmd.Env = append(p.cmd.Env, l.env...)
		p.cmd.Stdout = &p.out
		p.cmd.Stderr = &p.out
		p.cmd.WaitDelay = time.Second
		if err := p.cmd.Start(); err != nil {
			l.t.Fatalf("start rank %d: %v", r, err)
		}
		procs[r] = p
	}
	return l.wait(procs)
}

// TestUnpriv runs two ranks as an unprivileged user with every capability
// dropped: under a 64 KiB memlock limit Join fails on both with a
// verbs.LimitError that names RLIMIT_MEMLOCK, its value, what the group
// needs and the fix; with exactly that much (on rxe, whose queues are not
// pinned; with 1 MiB more on other devices) plus 8 KiB for a window the
// group works: a window beyond the limit fails with a LimitError from its
// registration, and a small one does FetchAndOp and Put/Get with exact
// values; with the device's uverbs file closed to other users, Join fails
// with a LimitError naming the file.
func TestUnpriv(t *testing.T) {
	e := setupUnpriv(t)
	t.Run("memlock64k", func(t *testing.T) {
		l := newLaunch(t, "unpriv-join", unprivRanks, "RMA_TEST_WANT=locked memory")
		outs := e.run(l, 64<<10, 2*time.Minute)
		for r, out := range outs {
			check := func(key, want string) {
				t.Helper()
				if got := value(t, out, key); got != want {
					t.Errorf("rank %d: %s=%s, want %s", r, key, got, want)
				}
			}
			check("uid", strconv.Itoa(unprivUID))
			check("resource", "locked memory")
			check("limit", "RLIMIT_MEMLOCK")
			check("value", "65536")
			check("pinned", "0")
			check("need", strconv.Itoa(unprivNeed))
			check("errno", "<nil>") // refused up front, before anything was pinned
			msg := value(t, out, "error")
			for _, w := range []string{
				fmt.Sprintf("group: rank %d: verbs: locked memory: joining a %d-rank group pins 6.57 MiB (%d bytes), but RLIMIT_MEMLOCK is 64 KiB (65536 bytes); fix: ",
					r, unprivRanks, unprivNeed),
				fmt.Sprintf("at least %d KiB", unprivNeed/1024), "`ulimit -l unlimited`",
				"its hard limit is 64 KiB (65536 bytes)", "/etc/security/limits.conf",
				"LimitMEMLOCK=infinity", "`docker run --ulimit memlock=-1`",
				"CAP_IPC_LOCK", "`docker run --cap-add IPC_LOCK`", `capabilities.add: ["IPC_LOCK"]`,
			} {
				if !strings.Contains(msg, w) {
					t.Errorf("rank %d: the message lacks %q:\n%s", r, w, msg)
				}
			}
			if strings.Contains(msg, "register MR") {
				t.Errorf("rank %d: the message is the bare registration failure:\n%s", r, msg)
			}
		}
	})

	t.Run("enough", func(t *testing.T) {
		// rxe keeps its queues in kernel memory: what the group pins is
		// exactly what the library counts. Other providers pin their queues
		// too, which the library does not count.
		margin := uint64(1 << 20)
		if _, err := os.Stat(filepath.Join("/sys/class/infiniband", e.device, "parent")); err == nil {
			margin = 0 // rxe (its sysfs names the netdev it runs over)
		}
		memlock := unprivNeed + margin + 8192 // a 4096-byte window and its synchronisation page
		l := newLaunch(t, "unpriv", unprivRanks)
		outs := e.run(l, memlock, 3*time.Minute)
		var olds [unprivRanks][]int64
		for r, out := range outs {
			if got := value(t, out, "big_window"); !strings.Contains(got, fmt.Sprintf("verbs: locked memory: registering %d bytes pins 4 MiB (%d bytes), but RLIMIT_MEMLOCK is ", unprivBigWindow, unprivBigWindow)) ||
				!strings.Contains(got, "(cannot allocate memory); fix: ") {
				t.Errorf("rank %d: the window beyond the limit failed with: %s", r, got)
			}
			if got := value(t, out, "putget"); got != "ok" {
				t.Errorf("rank %d: putget=%s", r, got)
			}
			for _, f := range strings.Split(value(t, out, "olds"), ",") {
				v, err := strconv.ParseInt(f, 10, 64)
				if err != nil {
					t.Fatalf("rank %d: olds: %v", r, err)
				}
				olds[r] = append(olds[r], v)
			}
			if len(olds[r]) != unprivFaddIters {
				t.Fatalf("rank %d: %d old values, want %d", r, len(olds[r]), unprivFaddIters)
			}
		}
		// Rank r adds r+1 each time: sorted by old value, the updates of
		// both ranks form one chain from 0, each old value the previous one
		// plus what the previous update added, ending at 100*1 + 100*2.
		type upd struct{ old, add int64 }
		var all []upd
		for r := range olds {
			for _, v := range olds[r] {
				all = append(all, upd{v, int64(r + 1)})
			}
		}
		sort.Slice(all, func(i, j int) bool { return all[i].old < all[j].old })
		next := int64(0)
		for i, u := range all {
			if u.old != next {
				t.Fatalf("update %d saw %d, want %d: an update was lost or applied twice (%v)", i, u.old, next, all)
			}
			next += u.add
		}
		if want := int64(unprivFaddIters * (1 + 2)); next != want || value(t, outs[0], "total") != strconv.FormatInt(want, 10) {
			t.Errorf("counter ended at %d (rank 0 read %s), want %d", next, value(t, outs[0], "total"), want)
		}
	})

	t.Run("devicefile", func(t *testing.T) {
		// As a udev rule giving the file to root alone would leave it.
		if err := os.Chmod(e.file.Path, 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(e.file.Path, 0o666)
		l := newLaunch(t, "unpriv-join", unprivRanks, "RMA_TEST_WANT=device file")
		outs := e.run(l, unprivNeed+1<<20, 2*time.Minute)
		for r, out := range outs {
			if got := value(t, out, "limit"); got != e.file.Path {
				t.Errorf("rank %d: limit=%s, want %s", r, got, e.file.Path)
			}
			if got := value(t, out, "errno"); got != syscall.EACCES.Error() {
				t.Errorf("rank %d: errno=%s, want %v", r, got, syscall.EACCES)
			}
			msg := value(t, out, "error")
			for _, w := range []string{
				fmt.Sprintf("group: rank %d: verbs: device file: opening %s as uid %d needs %s read-write, but it is mode crw------- owner uid %d gid %d (permission denied); fix: ",
					r, e.device, unprivUID, e.file.Path, e.file.UID, e.file.GID),
				"`chmod 666 " + e.file.Path + "`", `KERNEL=="uverbs*", MODE="0666"`,
				"`docker run --device " + e.file.Path + "`", "k8s-rdma-shared-dev-plugin",
			} {
				if !strings.Contains(msg, w) {
					t.Errorf("rank %d: the message lacks %q:\n%s", r, w, msg)
				}
			}
		}
	})
}

// workUnprivJoin: Join must fail with a verbs.LimitError about the resource
// RMA_TEST_WANT names; it prints the error's fields and exits 0 if so.
func workUnprivJoin() int {
	verbs.TrackObjects(true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts, err := group.FromEnv()
	if err != nil {
		fmt.Println("FAIL:", err)
		return 1
	}
	if err := checkUnprivileged(); err != nil {
		fmt.Println("FAIL:", err)
		return 1
	}
	g, err := group.Join(ctx, opts)
	if err == nil {
		g.Close()
		fmt.Println("FAIL: Join succeeded")
		return 1
	}
	var le *verbs.LimitError
	if !errors.Is(err, verbs.ErrResourceLimit) || !errors.As(err, &le) {
		fmt.Printf("FAIL: Join: %v: not a verbs.ErrResourceLimit\n", err)
		return 1
	}
	if want := os.Getenv("RMA_TEST_WANT"); le.Resource.String() != want {
		fmt.Printf("FAIL: Join: %v: about %s, want %s\n", err, le.Resource, want)
		return 1
	}
	if le.Err != nil && !errors.Is(err, le.Err) {
		fmt.Printf("FAIL: Join: %v does not unwrap to %v\n", err, le.Err)
		return 1
	}
	fmt.Printf("uid=%d\nresource=%s\nlimit=%s\nvalue=%d\npinned=%d\nneed=%d\nerrno=%v\nerror=%v\n",
		os.Getuid(), le.Resource, le.Limit, le.Value, le.Pinned, le.Need, le.Err, err)
	if open := verbs.OpenObjects(); len(open) > 0 {
		fmt.Printf("FAIL: the failed Join left %d verbs objects open:\n%s\n", len(open), strings.Join(open, "\n"))
		return 1
	}
	return 0
}

// checkUnprivileged checks that the process runs as unprivUID without
// CAP_IPC_LOCK and with RLIMIT_MEMLOCK at RMA_TEST_MEMLOCK.
func checkUnprivileged() error {
	l := verbs.ReadLimits()
	want, err := strconv.ParseUint(os.Getenv("RMA_TEST_MEMLOCK"), 10, 64)
	switch {
	case err != nil:
		return fmt.Errorf("RMA_TEST_MEMLOCK: %v", err)
	case os.Getuid() != unprivUID || os.Geteuid() != unprivUID:
		return fmt.Errorf("running as uid %d (effective %d), want %d", os.Getuid(), os.Geteuid(), unprivUID)
	case !l.CapKnown || l.CapIPCLock:
		return fmt.Errorf("CAP_IPC_LOCK held %v (known %v): privileges not dropped", l.CapIPCLock, l.CapKnown)
	case l.Memlock != want || l.MemlockHard != want:
		return fmt.Errorf("RLIMIT_MEMLOCK %d hard %d, want %d", l.Memlock, l.MemlockHard, want)
	}
	return nil
}

// workUnpriv, as an unprivileged rank with room for the group and one small
// window: a window beyond that fails with a LimitError from its
// registration; then in a 4096-byte window each rank adds rank+1 to rank
// 0's counter unprivFaddIters times (NIC fetch-and-add) and prints the old
// values, and puts 1000 bytes into the other rank's window and reads them
// back, all checked exactly.
func workUnpriv(ctx context.Context, g *group.Group) error {
	if err := checkUnprivileged(); err != nil {
		return err
	}
	if err := g.NICAtomics(); err != nil {
		return fmt.Errorf("NIC atomics: %v", err)
	}
	memlock, _ := strconv.ParseUint(os.Getenv("RMA_TEST_MEMLOCK"), 10, 64)
	big, err := win.Allocate(ctx, g, unprivBigWindow, 8)
	if err == nil {
		big.Free(ctx)
		return fmt.Errorf("a %d-byte window was registered under a memlock limit of %d", unprivBigWindow, memlock)
	}
	var le *verbs.LimitError
	if !errors.Is(err, verbs.ErrResourceLimit) || !errors.As(err, &le) || !errors.Is(err, syscall.ENOMEM) ||
		le.Resource != verbs.ResourceLockedMemory || le.Need != unprivBigWindow || le.Value != memlock || le.For != "registering 4194304 bytes" {
		return fmt.Errorf("window beyond the limit: %v (%+v)", err, le)
	}
	fmt.Printf("big_window=%v\n", err)

	w, err := win.Allocate(ctx, g, 4096, 1)
	if err != nil {
		return fmt.Errorf("4096-byte window: %w", err)
	}
	if r := w.RouteFetchAndOp(op.Sum, datatype.Int64); r.String() != "nic-fetch-add" {
		return fmt.Errorf("SUM int64 routed to %v", r)
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	olds := make([]string, 0, unprivFaddIters)
	for i := 0; i < unprivFaddIters; i++ {
		old, err := win.FetchAndOp(ctx, w, int64(g.Rank()+1), 0, 0, op.Sum)
		if err != nil {
			return fmt.Errorf("FetchAndOp %d: %w", i, err)
		}
		olds = append(olds, strconv.FormatInt(old, 10))
	}
	fmt.Printf("olds=%s\n", strings.Join(olds, ","))
	pattern := func(r int) []byte {
		b := make([]byte, 1000)
		for i := range b {
			b[i] = byte(i*7 + r*13 + 1)
		}
		return b
	}
	peer := (g.Rank() + 1) % g.Size()
	disp := func(r int) int { return 1024 + 1024*r } // where rank r's bytes go
	if err := w.Put(ctx, pattern(g.Rank()), peer, disp(g.Rank())); err != nil {
		return err
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	if got, want := w.Bytes()[disp(peer):disp(peer)+1000], pattern(peer); string(got) != string(want) {
		return fmt.Errorf("rank %d's Put left %x, want %x", peer, got, want)
	}
	if g.Rank() == 0 {
		fmt.Printf("total=%d\n", int64(binary.NativeEndian.Uint64(w.Bytes())))
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	got := make([]byte, 1000)
	if err := w.Get(ctx, got, peer, disp(g.Rank())); err != nil {
		return err
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	if want := pattern(g.Rank()); string(got) != string(want) {
		return fmt.Errorf("Get from rank %d read %x, want %x", peer, got, want)
	}
	fmt.Println("putget=ok")
	return w.Free(ctx)
}
