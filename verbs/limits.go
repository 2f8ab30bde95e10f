package verbs

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// What a process needs besides a device: the right to open the device's
// files and enough locked memory for what it registers. This file needs no
// cgo; a build without verbs (CheckAccess) checks nothing.

// ErrResourceLimit is matched (errors.Is) by every *LimitError: a limit of
// the process or its container (locked memory, access to an RDMA device
// file) keeps the library from working. errors.As gives the *LimitError,
// which names the limit, its value, what was needed and the fix.
var ErrResourceLimit = errors.New("verbs: resource limit")

// Unlimited is the value of a limit that limits nothing (RLIM_INFINITY).
const Unlimited = ^uint64(0)

// capIPCLock is CAP_IPC_LOCK's bit number in the capability sets.
const capIPCLock = 14

// Resource says what a LimitError is about.
type Resource int

const (
	// ResourceLockedMemory is RLIMIT_MEMLOCK. Registering memory pins its
	// pages, and the kernel counts them against this limit (the process's
	// VmPin plus the new pages may not exceed it) unless the process holds
	// CAP_IPC_LOCK in the initial user namespace.
	ResourceLockedMemory Resource = 1
	// ResourceDeviceFile is a character device under /dev/infiniband that
	// the process must open read-write: uverbsN for the device it uses.
	ResourceDeviceFile Resource = 2
)

// String returns "locked memory" or "device file".
func (r Resource) String() string {
	switch r {
	case ResourceLockedMemory:
		return "locked memory"
	case ResourceDeviceFile:
		return "device file"
	}
	return "Resource(" + strconv.Itoa(int(r)) + ")"
}

// LimitError says which limit refused what, and how to lift it. It matches
// ErrResourceLimit; Unwrap gives the errno the kernel returned, if any.
type LimitError struct {
	// Resource is what ran short: locked memory or a device file.
	Resource Resource
	// Limit names the limit: "RLIMIT_MEMLOCK", or the device file's path.
	Limit string
	// Value is the limit's value: the soft RLIMIT_MEMLOCK in bytes
	// (Unlimited for none); 0 for a device file.
	Value uint64
	// Pinned is what the process had pinned already (VmPin), counted
	// against the same limit; Need is what the refused operation had to pin
	// on top of it, in whole pages. Both are bytes; 0 for a device file.
	// A limit of at least Pinned+Need would have let it through.
	Pinned, Need uint64
	// For says what needed it: "joining a 2-rank group",
	// "registering 1048576 bytes", "opening rxe0 as uid 65534".
	For string
	// Mode, UID and GID describe a device file that exists (Mode is 0
	// when it does not; UID and GID are -1 when not known).
	Mode     fs.FileMode
	UID, GID int
	// Err is the kernel's answer, when there was one: syscall.ENOMEM or
	// EPERM from a registration; EACCES, EPERM or ENOENT from opening a
	// device file. An up-front check that refuses before trying leaves it nil.
	Err error
	// Fix says what to change: the commands for a shell, systemd, docker
	// and Kubernetes.
	Fix string
}

// Error says what needed how much of which limit, what the limit is, the
// kernel's answer if any, then "; fix: " and the fix.
func (e *LimitError) Error() string {
	var b strings.Builder
	switch e.Resource {
	case ResourceLockedMemory:
		fmt.Fprintf(&b, "verbs: locked memory: %s pins %s, but %s is %s", e.For, formatBytes(e.Need), e.Limit, formatBytes(e.Value))
		if e.Pinned > 0 {
			fmt.Fprintf(&b, " and %s of it is pinned already", formatBytes(e.Pinned))
		}
	case ResourceDeviceFile:
		fmt.Fprintf(&b, "verbs: device file: %s needs %s read-write", e.For, e.Limit)
		if e.Mode != 0 {
			fmt.Fprintf(&b, ", but it is mode %s owner uid %d gid %d", modeString(e.Mode), e.UID, e.GID)
		} else {
			b.WriteString(", but it does not exist")
		}
	default:
		fmt.Fprintf(&b, "verbs: %s: %s needs %s", e.Resource, e.For, e.Limit)
	}
	if e.Err != nil {
		fmt.Fprintf(&b, " (%v)", e.Err)
	}
	if e.Fix != "" {
		b.WriteString("; fix: ")
		b.WriteString(e.Fix)
	}
	return b.String()
}

// Is matches ErrResourceLimit.
func (e *LimitError) Is(target error) bool { return target == ErrResourceLimit }

// Unwrap gives the kernel's errno (nil for an up-front check).
func (e *LimitError) Unwrap() error { return e.Err }

// Limits is what the kernel lets this process pin, as it counts it.
type Limits struct {
	// Memlock and MemlockHard are RLIMIT_MEMLOCK's soft and hard limits in
	// bytes (Unlimited for none). The soft one is what counts; a process
	// without CAP_SYS_RESOURCE may raise it up to the hard one.
	Memlock, MemlockHard uint64
	// Pinned is what the process has pinned (VmPin in /proc/self/status):
	// registered memory, counted against Memlock. PinnedKnown is false
	// when /proc could not be read.
	Pinned      uint64
	PinnedKnown bool
	// CapIPCLock: CAP_IPC_LOCK is in the effective set (CapEff), which
	// lifts the limit. CapKnown is false when /proc could not be read.
	CapIPCLock bool
	CapKnown   bool
	// InitUserNS: the process is in the initial user namespace. The kernel
	// checks CAP_IPC_LOCK there, so in any other one (a rootless
	// container) the capability does not lift the limit.
	InitUserNS bool
}

// Unbounded reports whether pinning is not limited: the soft limit is
// Unlimited, or the process holds CAP_IPC_LOCK in the initial user namespace.
func (l Limits) Unbounded() bool {
	return l.Memlock == Unlimited || l.CapIPCLock && l.InitUserNS
}

// CheckPin returns nil if the process may pin need more bytes (in whole
// pages, see PinnedSize), and otherwise a *LimitError saying that what
// (such as "joining a 4-rank group") needs them.
func (l Limits) CheckPin(need uint64, what string) error {
	if l.Unbounded() || l.Pinned+need <= l.Memlock && l.Pinned+need >= l.Pinned {
		return nil
	}
	return l.memlockError(need, what, nil)
}

func (l Limits) memlockError(need uint64, what string, errno error) *LimitError {
	return &LimitError{Resource: ResourceLockedMemory, Limit: "RLIMIT_MEMLOCK", Value: l.Memlock, Pinned: l.Pinned,
		Need: need, For: what, UID: -1, GID: -1, Err: errno, Fix: l.MemlockFix(l.Pinned + need)}
}

// MemlockFix says how to let this process pin total bytes in all (0: as
// much as it likes): the commands that raise RLIMIT_MEMLOCK for a shell,
// systemd, docker and Kubernetes, and CAP_IPC_LOCK. It is LimitError.Fix.
func (l Limits) MemlockFix(total uint64) string {
	kib := (total + 1023) / 1024
	var b strings.Builder
	if total == 0 {
		b.WriteString("raise the locked-memory limit to unlimited where the ranks start: `ulimit -l unlimited` in their shell")
	} else {
		fmt.Fprintf(&b, "raise the locked-memory limit to at least %d KiB, better to unlimited, where the ranks start: "+
			"`ulimit -l unlimited` (or `ulimit -l %d`) in their shell", kib, kib)
	}
	if l.MemlockHard != Unlimited && (total == 0 || l.MemlockHard < total) {
		fmt.Fprintf(&b, " (its hard limit is %s: raise that as root first, e.g. `* hard memlock unlimited` in /etc/security/limits.conf)",
			formatBytes(l.MemlockHard))
	}
	b.WriteString(", LimitMEMLOCK=infinity in a systemd unit, `docker run --ulimit memlock=-1`, or for Kubernetes the container runtime's own LimitMEMLOCK; " +
		"or give the process CAP_IPC_LOCK (`docker run --cap-add IPC_LOCK`, Kubernetes securityContext.capabilities.add: [\"IPC_LOCK\"]), " +
		"which a process gets only when it runs as root in its container")
	if l.CapIPCLock && !l.InitUserNS {
		b.WriteString("; this process holds CAP_IPC_LOCK only inside a user namespace, where it does not lift the limit")
	}
	return b.String()
}

// ReadLimits reads RLIMIT_MEMLOCK, VmPin and CapEff of this process, and
// whether it runs in the initial user namespace. What cannot be read is
// left unknown (PinnedKnown, CapKnown false; InitUserNS true).
func ReadLimits() Limits {
	var l Limits
	l.Memlock, l.MemlockHard = memlockLimits()
	if f, err := os.Open(procStatus); err == nil {
		st := parseStatus(f)
		f.Close()
		l.Pinned, l.PinnedKnown = st.vmPin, st.haveVMPin
		l.CapIPCLock, l.CapKnown = st.capEff&(1<<capIPCLock) != 0, st.haveCapEff
	}
	l.InitUserNS = true
	if b, err := os.ReadFile(procUIDMap); err == nil {
		l.InitUserNS = initialUIDMap(string(b))
	}
	return l
}

// Where the kernel's answers are; tests point them elsewhere.
var (
	procStatus = "/proc/self/status"
	procUIDMap = "/proc/self/uid_map"
	sysVerbs   = "/sys/class/infiniband_verbs" // one directory per uverbs device, with its ibdev
	devDir     = "/dev/infiniband"
)

type procStatusFields struct {
	vmPin      uint64
	capEff     uint64
	haveVMPin  bool
	haveCapEff bool
}

// parseStatus reads the lines of /proc/self/status this file uses:
// "VmPin:\t  1024 kB" and "CapEff:\t000001ffffffffff".
func parseStatus(r io.Reader) procStatusFields {
	var st procStatusFields
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		switch key {
		case "VmPin":
			num, unit, _ := strings.Cut(val, " ")
			if n, err := strconv.ParseUint(num, 10, 64); err == nil && (unit == "kB" || unit == "") {
				if unit == "kB" {
					n *= 1024
				}
				st.vmPin, st.haveVMPin = n, true
			}
		case "CapEff":
			if n, err := strconv.ParseUint(val, 16, 64); err == nil {
				st.capEff, st.haveCapEff = n, true
			}
		}
	}
	return st
}

// initialUIDMap reports whether a uid_map is the initial user namespace's:
// the single line "0 0 4294967295".
func initialUIDMap(s string) bool {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) != 1 {
		return false
	}
	f := strings.Fields(lines[0])
	return len(f) == 3 && f[0] == "0" && f[1] == "0" && f[2] == "4294967295"
}

// PinnedSize is what registering buffers of the given sizes, each
// page-aligned (as Alloc gives), pins: each size rounded up to whole pages.
func PinnedSize(sizes ...int) uint64 {
	page := uint64(os.Getpagesize())
	var n uint64
	for _, s := range sizes {
		if s > 0 {
			n += (uint64(s) + page - 1) / page * page
		}
	}
	return n
}

// pinnedSpan is what registering n bytes at addr pins: the pages the range
// touches.
func pinnedSpan(addr uintptr, n int) uint64 {
	if n <= 0 {
		return 0
	}
	page := uintptr(os.Getpagesize())
	first, end := addr&^(page-1), (addr+uintptr(n)+page-1)&^(page-1)
	return uint64(end - first)
}

// registerError explains a failed registration of n bytes at addr: when
// the kernel refused it with ENOMEM, EPERM or EACCES and the locked-memory
// limit accounts for that (the process has no CAP_IPC_LOCK, and what it had
// pinned plus these pages exceed the limit, or what it had pinned is not
// known), it returns a *LimitError; otherwise err as it is.
func registerError(err error, addr uintptr, n int) error {
	return explainRegister(err, addr, n, ReadLimits)
}

// explainRegister is registerError with the limits read by limits.
func explainRegister(err error, addr uintptr, n int, limits func() Limits) error {
	var errno syscall.Errno
	if !errors.As(err, &errno) || errno != syscall.ENOMEM && errno != syscall.EPERM && errno != syscall.EACCES {
		return err
	}
	l := limits()
	need := pinnedSpan(addr, n)
	if l.Unbounded() || l.PinnedKnown && l.Pinned+need <= l.Memlock {
		return err
	}
	return l.memlockError(need, "registering "+strconv.Itoa(n)+" bytes", errno)
}

// DeviceFile is a character device under /dev/infiniband and whether this
// process can open it read-write.
type DeviceFile struct {
	// Path is the file: /dev/infiniband/uverbsN, or /dev/infiniband/rdma_cm.
	Path string
	// Device is the RDMA device it serves ("" for rdma_cm).
	Device string
	// Required: a group (Join) opens it. rdma_cm is reported but not
	// required: only connections made through the RDMA connection manager
	// need it, and a group connects its queue pairs through its TCP
	// bootstrap.
	Required bool
	// Exists, and then its Mode and owner (UID, GID; -1 if not known).
	Exists   bool
	Mode     fs.FileMode
	UID, GID int
	// Err is nil when the file opens read-write, else a *LimitError
	// (missing, permission denied, refused by the device cgroup) or the
	// error open gave.
	Err error
}

// DeviceFiles lists the device file of RDMA device (of every device when
// device is ""), then rdma_cm if it exists, each opened read-write once to
// see whether this process may. A device without a uverbs entry in sysfs
// (ib_uverbs not loaded, or no such device) has no entry.
func DeviceFiles(device string) []DeviceFile {
	out := uverbsFiles(device)
	cm := filepath.Join(devDir, "rdma_cm")
	if _, err := os.Lstat(cm); err == nil {
		out = append(out, checkDeviceFile(DeviceFile{Path: cm}))
	}
	return out
}

// uverbsFiles checks the uverbs files of device (every device for "").
func uverbsFiles(device string) []DeviceFile {
	dirs, _ := filepath.Glob(filepath.Join(sysVerbs, "*", "ibdev"))
	var out []DeviceFile
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		dev := strings.TrimSpace(string(b))
		if device != "" && dev != device {
			continue
		}
		name := filepath.Base(filepath.Dir(f))
		out = append(out, checkDeviceFile(DeviceFile{Path: filepath.Join(devDir, name), Device: dev, Required: true}))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Device < out[j].Device })
	return out
}

// checkDeviceFile stats and opens d.Path read-write and fills in the rest of d.
func checkDeviceFile(d DeviceFile) DeviceFile {
	d.UID, d.GID = -1, -1
	if fi, err := os.Stat(d.Path); err == nil {
		d.Exists, d.Mode = true, fi.Mode()
		d.UID, d.GID = fileOwner(fi)
	}
	f, err := os.OpenFile(d.Path, os.O_RDWR, 0)
	if err == nil {
		f.Close()
		return d
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) || errno != syscall.ENOENT && errno != syscall.EACCES && errno != syscall.EPERM {
		d.Err = fmt.Errorf("verbs: open %s: %w", d.Path, err)
		return d
	}
	what := d.Device
	if what == "" {
		what = "the RDMA connection manager"
	}
	what = "opening " + what + " as uid " + strconv.Itoa(os.Getuid())
	d.Err = &LimitError{Resource: ResourceDeviceFile, Limit: d.Path, For: what, Mode: d.Mode, UID: d.UID, GID: d.GID,
		Err: errno, Fix: deviceFix(d.Path, errno)}
	return d
}

// deviceFix says how to let the process open path read-write after errno.
func deviceFix(path string, errno syscall.Errno) string {
	plugin := "in Kubernetes, request the resource of an RDMA device plugin (k8s-rdma-shared-dev-plugin, " +
		"or the SR-IOV network device plugin with \"isRdma\": true), which mounts the device's files into the pod"
	switch errno {
	case syscall.ENOENT:
		return "make the file exist where the process runs: in a container, pass it in with `docker run --device " + path +
			"` (and --device /dev/infiniband/rdma_cm for tools that use the RDMA CM); " + plugin
	case syscall.EPERM:
		return "the container's device cgroup refuses it: pass it with `docker run --device " + path +
			"` rather than a bind mount; " + plugin
	}
	return "let this user open it read-write: the kernel creates it mode 0666, so a udev rule or an administrator narrowed it " +
		"(restore with a rule such as KERNEL==\"uverbs*\", MODE=\"0666\", or `chmod 666 " + path +
		"` as root, or add the user to the file's group); in a container, pass it with `docker run --device " + path + "`; " + plugin
}

// checkDevice returns the error of the uverbs file of device, or, for
// device "", nil if any device's file opens and else the first error. It
// returns nil when sysfs lists no uverbs file for it: opening the device
// then says what is wrong.
func checkDevice(device string) error {
	files := uverbsFiles(device)
	for _, f := range files {
		if f.Err == nil {
			return nil
		}
	}
	if len(files) > 0 {
		return files[0].Err
	}
	return nil
}

// CheckAccess is what the library checks before it opens device ("" for
// the first one) and registers buffers of the given sizes (page-aligned):
// that the device's uverbs file opens read-write, and that RLIMIT_MEMLOCK
// leaves room for PinnedSize(sizes...) beyond what the process has pinned.
// It returns a *LimitError (matching ErrResourceLimit) saying what is
// short and what for, nil otherwise, and nil in a build without verbs.
func CheckAccess(device, what string, sizes ...int) error {
	if !haveVerbs {
		return nil
	}
	if err := checkDevice(device); err != nil {
		return err
	}
	return ReadLimits().CheckPin(PinnedSize(sizes...), what)
}

// openError explains a device that did not open: when its uverbs file is
// missing or refused, the *LimitError that says so; otherwise err.
func openError(device string, err error) error {
	var errno syscall.Errno
	if errors.Is(err, ErrNoDevice) || errors.As(err, &errno) && (errno == syscall.EACCES || errno == syscall.EPERM || errno == syscall.ENOENT) {
		if lerr := checkDevice(device); lerr != nil {
			return lerr
		}
	}
	return err
}

// modeString prints a file mode as ls does: crw-rw-rw- for a character device.
func modeString(m fs.FileMode) string {
	kind := byte('-')
	switch {
	case m&fs.ModeCharDevice != 0:
		kind = 'c'
	case m&fs.ModeDevice != 0:
		kind = 'b'
	case m.IsDir():
		kind = 'd'
	}
	return string(kind) + m.Perm().String()[1:]
}

// formatBytes prints a size as "64 KiB (65536 bytes)", or "unlimited".
func formatBytes(n uint64) string {
	if n == Unlimited {
		return "unlimited"
	}
	if n < 1024 {
		return strconv.FormatUint(n, 10) + " bytes"
	}
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB"}
	v, u := float64(n)/1024, 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	s := strconv.FormatFloat(v, 'f', 2, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s + " " + units[u] + " (" + strconv.FormatUint(n, 10) + " bytes)"
}
