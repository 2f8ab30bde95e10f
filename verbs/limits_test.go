package verbs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestParseStatus(t *testing.T) {
	const status = "Name:\tit.test\nUmask:\t0022\nVmLck:\t       0 kB\nVmPin:\t    2116 kB\n" +
		"CapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\nCapEff:\t0000000000004000\nCapBnd:\t000001ffffffffff\n"
	st := parseStatus(strings.NewReader(status))
	if !st.haveVMPin || st.vmPin != 2116*1024 {
		t.Errorf("VmPin: %d (known %v), want %d", st.vmPin, st.haveVMPin, 2116*1024)
	}
	if !st.haveCapEff || st.capEff != 1<<14 {
		t.Errorf("CapEff: %#x (known %v), want %#x (CAP_IPC_LOCK only)", st.capEff, st.haveCapEff, 1<<14)
	}
	// A kernel without VmPin, a garbled CapEff.
	st = parseStatus(strings.NewReader("Name:\tx\nCapEff:\tzz\nVmPin: lots\n"))
	if st.haveVMPin || st.haveCapEff {
		t.Errorf("garbled status parsed as %+v", st)
	}
}

func TestInitialUIDMap(t *testing.T) {
	for _, c := range []struct {
		m    string
		want bool
	}{
		{"         0          0 4294967295\n", true},
		{"0 0 4294967295", true},
		{"         0       1000          1\n         1     100000      65536\n", false}, // rootless container
		{"0 100000 65536\n", false},
		{"", false},
	} {
		if got := initialUIDMap(c.m); got != c.want {
			t.Errorf("initialUIDMap(%q) = %v, want %v", c.m, got, c.want)
		}
	}
}

func TestCheckPin(t *testing.T) {
	const kib = 1024
	for _, c := range []struct {
		name string
		l    Limits
		need uint64
		ok   bool
	}{
		{"unlimited", Limits{Memlock: Unlimited, InitUserNS: true}, 1 << 40, true},
		{"CAP_IPC_LOCK", Limits{Memlock: 64 * kib, CapIPCLock: true, InitUserNS: true}, 1 << 40, true},
		{"CAP_IPC_LOCK in a user namespace", Limits{Memlock: 64 * kib, CapIPCLock: true}, 68 * kib, false},
		{"fits exactly", Limits{Memlock: 64 * kib, InitUserNS: true}, 64 * kib, true},
		{"one page over", Limits{Memlock: 64 * kib, InitUserNS: true}, 68 * kib, false},
		{"pinned counts", Limits{Memlock: 64 * kib, Pinned: 8 * kib, InitUserNS: true}, 60 * kib, false},
		{"pinned plus need fits", Limits{Memlock: 64 * kib, Pinned: 8 * kib, InitUserNS: true}, 56 * kib, true},
		{"zero limit", Limits{Memlock: 0, InitUserNS: true}, 4 * kib, false},
		{"overflow", Limits{Memlock: 1 << 62, Pinned: 1 << 63, InitUserNS: true}, 1 << 63, false},
	} {
		err := c.l.CheckPin(c.need, "joining a 2-rank group")
		if (err == nil) != c.ok {
			t.Errorf("%s: CheckPin(%d) with %+v = %v, want ok=%v", c.name, c.need, c.l, err, c.ok)
			continue
		}
		if err == nil {
			continue
		}
		var le *LimitError
		if !errors.Is(err, ErrResourceLimit) || !errors.As(err, &le) {
			t.Errorf("%s: %v does not match ErrResourceLimit / *LimitError", c.name, err)
			continue
		}
		if le.Resource != ResourceLockedMemory || le.Limit != "RLIMIT_MEMLOCK" || le.Value != c.l.Memlock ||
			le.Pinned != c.l.Pinned || le.Need != c.need || le.Err != nil {
			t.Errorf("%s: %+v", c.name, le)
		}
	}
}

// The message of the failure that was observed: two ranks, 64 KiB of
// locked memory, nothing pinned yet.
func TestLimitErrorMemlockMessage(t *testing.T) {
	l := Limits{Memlock: 64 << 10, MemlockHard: 64 << 10, PinnedKnown: true, CapKnown: true, InitUserNS: true}
	err := fmt.Errorf("group: rank 1: %w", l.CheckPin(7413760, "joining a 2-rank group"))
	want := []string{
		"group: rank 1: verbs: locked memory: joining a 2-rank group pins 7.07 MiB (7413760 bytes), but RLIMIT_MEMLOCK is 64 KiB (65536 bytes); fix: ",
		"at least 7240 KiB", // 7413760 / 1024
		"`ulimit -l unlimited`", "`ulimit -l 7240`",
		"its hard limit is 64 KiB (65536 bytes)", "* hard memlock unlimited", "/etc/security/limits.conf",
		"LimitMEMLOCK=infinity", "`docker run --ulimit memlock=-1`",
		"CAP_IPC_LOCK", "--cap-add IPC_LOCK", `capabilities.add: ["IPC_LOCK"]`,
	}
	msg := err.Error()
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("message lacks %q:\n%s", w, msg)
		}
	}
	if strings.Contains(msg, "user namespace") || strings.Contains(msg, "pinned already") {
		t.Errorf("message speaks of a user namespace or pinned memory it does not have:\n%s", msg)
	}
	if !errors.Is(err, ErrResourceLimit) {
		t.Errorf("wrapped error does not match ErrResourceLimit")
	}

	// A hard limit that allows it: no word about raising it; memory pinned
	// already and a capability held only in a user namespace are named.
	l = Limits{Memlock: 8 << 20, MemlockHard: Unlimited, Pinned: 2 << 20, CapIPCLock: true}
	msg = l.CheckPin(7413760, "joining a 2-rank group").Error()
	for _, w := range []string{"RLIMIT_MEMLOCK is 8 MiB (8388608 bytes) and 2 MiB (2097152 bytes) of it is pinned already",
		"at least 9288 KiB", "only inside a user namespace"} { // (2097152+7413760)/1024 = 9288
		if !strings.Contains(msg, w) {
			t.Errorf("message lacks %q:\n%s", w, msg)
		}
	}
	if strings.Contains(msg, "hard limit") {
		t.Errorf("message asks to raise an unlimited hard limit:\n%s", msg)
	}
}

func TestExplainRegister(t *testing.T) {
	page := os.Getpagesize()
	limited := func() Limits {
		return Limits{Memlock: 64 << 10, MemlockHard: 64 << 10, Pinned: 16 << 10, PinnedKnown: true, CapKnown: true, InitUserNS: true}
	}
	regErr := func(e syscall.Errno) error { return fmt.Errorf("verbs: register MR of %d bytes: %w", 2166784, e) }

	// ENOMEM beyond the limit: a *LimitError with the registration's pages.
	addr := uintptr(16 * page)
	err := explainRegister(regErr(syscall.ENOMEM), addr, 2166784, limited)
	var le *LimitError
	if !errors.As(err, &le) || !errors.Is(err, ErrResourceLimit) || !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("ENOMEM over the limit: %v, want a *LimitError wrapping ENOMEM", err)
	}
	wantNeed := uint64((2166784 + page - 1) / page * page)
	if le.Need != wantNeed || le.Value != 64<<10 || le.Pinned != 16<<10 || le.For != "registering 2166784 bytes" {
		t.Errorf("LimitError %+v, want Need %d, Value 65536, Pinned 16384", le, wantNeed)
	}
	if !strings.Contains(err.Error(), "(cannot allocate memory)") {
		t.Errorf("message does not give the kernel's answer: %v", err)
	}
	// EPERM (a zero limit on kernels that check can_do_mlock) and EACCES too.
	for _, e := range []syscall.Errno{syscall.EPERM, syscall.EACCES} {
		if err := explainRegister(regErr(e), addr, 1<<20, limited); !errors.Is(err, ErrResourceLimit) || !errors.Is(err, e) {
			t.Errorf("%v over the limit: %v", e, err)
		}
	}
	// Other errors, and failures the limit does not explain, stay as they are.
	for _, c := range []struct {
		name   string
		err    error
		n      int
		limits func() Limits
	}{
		{"EINVAL", regErr(syscall.EINVAL), 1 << 20, limited},
		{"within the limit", regErr(syscall.ENOMEM), 8 << 10, limited},
		{"unlimited", regErr(syscall.ENOMEM), 1 << 20, func() Limits { return Limits{Memlock: Unlimited, InitUserNS: true} }},
		{"CAP_IPC_LOCK", regErr(syscall.ENOMEM), 1 << 20, func() Limits { return Limits{Memlock: 0, CapIPCLock: true, InitUserNS: true} }},
		{"no errno", errors.New("verbs: register MR: something"), 1 << 20, limited},
	} {
		if got := explainRegister(c.err, addr, c.n, c.limits); got != c.err {
			t.Errorf("%s: %v, want the error unchanged", c.name, got)
		}
	}
	// Pinned memory not known: the limit is the likely cause.
	unknown := func() Limits { return Limits{Memlock: 64 << 10, InitUserNS: true} }
	if err := explainRegister(regErr(syscall.ENOMEM), addr, 8<<10, unknown); !errors.Is(err, ErrResourceLimit) {
		t.Errorf("ENOMEM with VmPin unknown: %v", err)
	}
}

func TestPinnedSize(t *testing.T) {
	p := uint64(os.Getpagesize())
	for _, c := range []struct {
		sizes []int
		want  uint64
	}{
		{nil, 0}, {[]int{0, -5}, 0}, {[]int{1}, p}, {[]int{int(p)}, p}, {[]int{int(p) + 1}, 2 * p},
		{[]int{8, 8, int(p)}, 3 * p},
	} {
		if got := PinnedSize(c.sizes...); got != c.want {
			t.Errorf("PinnedSize(%v) = %d, want %d", c.sizes, got, c.want)
		}
	}
	pp := uintptr(p)
	for _, c := range []struct {
		addr uintptr
		n    int
		want uint64
	}{
		{10 * pp, int(p), p}, {10*pp + pp - 1, 2, 2 * p}, {10*pp + 8, 8, p}, {10 * pp, 0, 0},
	} {
		if got := pinnedSpan(c.addr, c.n); got != c.want {
			t.Errorf("pinnedSpan(%#x, %d) = %d, want %d", c.addr, c.n, got, c.want)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for _, c := range []struct {
		n    uint64
		want string
	}{
		{0, "0 bytes"}, {1023, "1023 bytes"}, {1024, "1 KiB (1024 bytes)"}, {65536, "64 KiB (65536 bytes)"},
		{1536, "1.5 KiB (1536 bytes)"}, {7413760, "7.07 MiB (7413760 bytes)"}, {8 << 30, "8 GiB (8589934592 bytes)"},
		{Unlimited, "unlimited"},
	} {
		if got := formatBytes(c.n); got != c.want {
			t.Errorf("formatBytes(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}

// fakeDevices points sysfs and /dev/infiniband at a temporary tree with
// uverbs0 for rxe0 and uverbs1 for mlx5_0 and returns the device directory.
func fakeDevices(t *testing.T) string {
	root := t.TempDir()
	oldSys, oldDev := sysVerbs, devDir
	sysVerbs, devDir = filepath.Join(root, "sys"), filepath.Join(root, "dev")
	t.Cleanup(func() { sysVerbs, devDir = oldSys, oldDev })
	for n, dev := range []string{"rxe0", "mlx5_0"} {
		d := filepath.Join(sysVerbs, fmt.Sprintf("uverbs%d", n))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "ibdev"), []byte(dev+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(devDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return devDir
}

func TestDeviceFiles(t *testing.T) {
	dev := fakeDevices(t)
	// Only rxe0's file exists.
	if err := os.WriteFile(filepath.Join(dev, "uverbs0"), nil, 0o666); err != nil {
		t.Fatal(err)
	}
	files := DeviceFiles("")
	if len(files) != 2 || files[0].Device != "mlx5_0" || files[1].Device != "rxe0" {
		t.Fatalf("DeviceFiles(\"\") = %+v, want mlx5_0 then rxe0", files)
	}
	missing, ok := files[0], files[1]
	if ok.Err != nil || !ok.Exists || !ok.Required || ok.Path != filepath.Join(dev, "uverbs0") || ok.Mode.Perm() != 0o666&^umask(t) {
		t.Errorf("rxe0's file: %+v", ok)
	}
	var le *LimitError
	if missing.Exists || !errors.As(missing.Err, &le) || !errors.Is(missing.Err, ErrResourceLimit) || !errors.Is(missing.Err, syscall.ENOENT) {
		t.Fatalf("mlx5_0's missing file: %+v", missing)
	}
	path1 := filepath.Join(dev, "uverbs1")
	if le.Resource != ResourceDeviceFile || le.Limit != path1 || le.Mode != 0 || le.UID != -1 {
		t.Errorf("LimitError %+v", le)
	}
	msg := le.Error()
	for _, w := range []string{"verbs: device file: opening mlx5_0 as uid ", " needs " + path1 + " read-write, but it does not exist (no such file or directory); fix: ",
		"`docker run --device " + path1 + "`", "k8s-rdma-shared-dev-plugin", "SR-IOV network device plugin", `"isRdma": true`} {
		if !strings.Contains(msg, w) {
			t.Errorf("message lacks %q:\n%s", w, msg)
		}
	}

	// The checks Join makes: the named device's file; for "", any device's.
	if err := checkDevice("rxe0"); err != nil {
		t.Errorf("checkDevice(rxe0): %v", err)
	}
	if err := checkDevice(""); err != nil {
		t.Errorf("checkDevice(\"\") with rxe0 usable: %v", err)
	}
	if err := checkDevice("mlx5_0"); !errors.Is(err, ErrResourceLimit) {
		t.Errorf("checkDevice(mlx5_0): %v", err)
	}
	if err := checkDevice("nosuch0"); err != nil {
		t.Errorf("checkDevice of a device sysfs does not list: %v", err)
	}
	if err := openError("mlx5_0", fmt.Errorf("verbs: open device mlx5_0: %w", syscall.EACCES)); !errors.Is(err, ErrResourceLimit) {
		t.Errorf("openError(mlx5_0, EACCES): %v", err)
	}
	if err := openError("mlx5_0", ErrNoDevice); !errors.Is(err, ErrResourceLimit) {
		t.Errorf("openError(mlx5_0, ErrNoDevice): %v", err)
	}
	other := fmt.Errorf("verbs: open device mlx5_0: %w", syscall.EIO)
	if err := openError("mlx5_0", other); err != other {
		t.Errorf("openError(mlx5_0, EIO): %v, want it unchanged", err)
	}
	if err := os.Remove(filepath.Join(dev, "uverbs0")); err != nil {
		t.Fatal(err)
	}
	if err := checkDevice(""); !errors.Is(err, ErrResourceLimit) || !strings.Contains(err.Error(), path1) {
		t.Errorf("checkDevice(\"\") with no usable device: %v, want mlx5_0's error first", err)
	}

	// rdma_cm is listed when it exists, and not required.
	if err := os.WriteFile(filepath.Join(dev, "rdma_cm"), nil, 0o666); err != nil {
		t.Fatal(err)
	}
	files = DeviceFiles("rxe0")
	if len(files) != 2 || files[1].Path != filepath.Join(dev, "rdma_cm") || files[1].Required || files[1].Err != nil {
		t.Errorf("DeviceFiles(rxe0) with rdma_cm: %+v", files)
	}
}

// A file this process may not open: only a process without
// CAP_DAC_OVERRIDE sees EACCES, so as root the message is checked on a
// LimitError built the way checkDeviceFile builds it.
func TestDeviceFileDenied(t *testing.T) {
	dev := fakeDevices(t)
	path := filepath.Join(dev, "uverbs0")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	var le *LimitError
	if os.Geteuid() != 0 {
		if err := os.Chmod(path, 0); err != nil {
			t.Fatal(err)
		}
		err := checkDevice("rxe0")
		if !errors.As(err, &le) || !errors.Is(err, syscall.EACCES) {
			t.Fatalf("checkDevice of a mode 000 file: %v", err)
		}
	} else {
		le = &LimitError{Resource: ResourceDeviceFile, Limit: path, For: "opening rxe0 as uid 65534", Mode: os.ModeDevice | os.ModeCharDevice | 0o600,
			UID: 0, GID: 0, Err: syscall.EACCES, Fix: deviceFix(path, syscall.EACCES)}
	}
	msg := le.Error()
	for _, w := range []string{" needs " + path + " read-write, but it is mode ", " owner uid ", "(permission denied); fix: ",
		`KERNEL=="uverbs*", MODE="0666"`, "`chmod 666 " + path + "`", "`docker run --device " + path + "`"} {
		if !strings.Contains(msg, w) {
			t.Errorf("message lacks %q:\n%s", w, msg)
		}
	}
	if os.Geteuid() == 0 && !strings.Contains(msg, "mode crw------- owner uid 0 gid 0") {
		t.Errorf("message does not give the file's mode and owner:\n%s", msg)
	}
	if fix := deviceFix(path, syscall.EPERM); !strings.Contains(fix, "device cgroup") || !strings.Contains(fix, "--device "+path) {
		t.Errorf("EPERM fix: %s", fix)
	}
}

func TestCheckAccess(t *testing.T) {
	fakeDevices(t)
	err := CheckAccess("mlx5_0", "joining a 2-rank group", 4096)
	if !haveVerbs {
		if err != nil {
			t.Fatalf("CheckAccess in a build without verbs: %v, want nil", err)
		}
		return
	}
	var le *LimitError
	if !errors.As(err, &le) || le.Resource != ResourceDeviceFile {
		t.Fatalf("CheckAccess of a device whose file is missing: %v", err)
	}
	// A device sysfs does not list: only the locked memory is checked, as
	// CheckPin checks it with this process's limits.
	l := ReadLimits()
	want := l.CheckPin(1<<20, "joining a 2-rank group")
	err = CheckAccess("nosuch0", "joining a 2-rank group", 1<<20)
	if (err == nil) != (want == nil) || err != nil && err.Error() != want.Error() {
		t.Errorf("CheckAccess with limits %+v: %v, want %v", l, err, want)
	}
}

func TestResourceString(t *testing.T) {
	if s := ResourceLockedMemory.String(); s != "locked memory" {
		t.Errorf("ResourceLockedMemory = %q", s)
	}
	if s := ResourceDeviceFile.String(); s != "device file" {
		t.Errorf("ResourceDeviceFile = %q", s)
	}
	if s := Resource(9).String(); s != "Resource(9)" {
		t.Errorf("Resource(9) = %q", s)
	}
}

func umask(t *testing.T) os.FileMode {
	t.Helper()
	m := syscall.Umask(0)
	syscall.Umask(m)
	return os.FileMode(m)
}

func TestMemlockFixWithoutSize(t *testing.T) {
	fix := Limits{Memlock: 8 << 20, MemlockHard: 8 << 20, InitUserNS: true}.MemlockFix(0)
	for _, w := range []string{"to unlimited", "`ulimit -l unlimited`", "its hard limit is 8 MiB (8388608 bytes)", "--ulimit memlock=-1", "IPC_LOCK"} {
		if !strings.Contains(fix, w) {
			t.Errorf("fix lacks %q:\n%s", w, fix)
		}
	}
	if strings.Contains(fix, "at least") {
		t.Errorf("fix names a size it was not given:\n%s", fix)
	}
}
