package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/onesided/rma/verbs"
)

func TestSizeText(t *testing.T) {
	for _, c := range []struct {
		n    uint64
		want string
	}{
		{0, "0 bytes"}, {1000, "1000 bytes"}, {65536, "64 KiB (65536 bytes)"}, {8 << 20, "8 MiB (8388608 bytes)"},
		{7417856, "7244 KiB (7417856 bytes)"}, {verbs.Unlimited, "unlimited"},
	} {
		if got := sizeText(c.n); got != c.want {
			t.Errorf("sizeText(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}

func TestLsMode(t *testing.T) {
	for _, c := range []struct {
		m    os.FileMode
		want string
	}{
		{os.ModeDevice | os.ModeCharDevice | 0o666, "crw-rw-rw-"},
		{os.ModeDevice | 0o600, "brw-------"},
		{os.ModeDir | 0o755, "drwxr-xr-x"},
		{0o644, "-rw-r--r--"},
	} {
		if got := lsMode(c.m); got != c.want {
			t.Errorf("lsMode(%v) = %q, want %q", c.m, got, c.want)
		}
	}
}

// The access report of an unprivileged process under a 64 KiB limit whose
// uverbs file is closed to it and whose rdma_cm is missing: the memlock
// line is limited with its fix, the uverbs line fails with its fix, and
// only the required file makes the run fail.
func TestAccessReport(t *testing.T) {
	a := Access{UID: 65534,
		Memlock: MemlockCheck{Soft: 65536, Hard: 65536, Value: "64 KiB (65536 bytes), hard limit 64 KiB (65536 bytes), 0 bytes pinned",
			Note: "a group of N ranks pins ...", Fix: "raise the locked-memory limit to unlimited ..."},
		CapIPCLock: CapCheck{Note: "not held, so RLIMIT_MEMLOCK applies", Fix: "for it to lift the limit, run as root ..."},
		DeviceFiles: []FileCheck{
			{Path: "/dev/infiniband/uverbs0", Device: "rxe0", Required: true, Exists: true, Mode: "crw-------", Error: "verbs: device file: ...", Fix: "let this user open it read-write ..."},
			{Path: "/dev/infiniband/rdma_cm", UID: -1, GID: -1, Error: "verbs: device file: ...", Fix: "make the file exist ..."},
		},
	}
	var out bytes.Buffer
	a.print(&out)
	for _, w := range []string{
		"access (uid 65534):\n",
		"RLIMIT_MEMLOCK (ulimit -l)         64 KiB (65536 bytes), hard limit 64 KiB (65536 bytes), 0 bytes pinned: LIMITED; to lift it: raise the locked-memory limit to unlimited ...\n",
		"a group of N ranks pins ...\n",
		"CAP_IPC_LOCK                       not held, so RLIMIT_MEMLOCK applies; for it to lift the limit, run as root ...\n",
		"/dev/infiniband/uverbs0 (rxe0)     crw------- uid 0 gid 0: NOT OK; fix: let this user open it read-write ...\n",
		"/dev/infiniband/rdma_cm            missing, needed only by the RDMA connection manager: NOT OK; fix: make the file exist ...\n",
	} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("report lacks %q:\n%s", w, out.String())
		}
	}
	r := &Report{Access: a}
	if !r.failed() {
		t.Errorf("a required device file that does not open does not fail the report")
	}
	r.Access.DeviceFiles[0].OK = true
	if r.failed() {
		t.Errorf("a missing rdma_cm or a finite memlock limit fails the report")
	}
}
