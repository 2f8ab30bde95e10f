package main

import (
	"bytes"
	"os/exec"
	"reflect"
	"strings"
	"testing"
)

// Lines of a real modules.dep (Debian 6.1), plus an unrelated module and a compressed one.
const modulesDep = `kernel/crypto/crc32_generic.ko:
kernel/drivers/infiniband/core/ib_core.ko:
kernel/drivers/infiniband/core/ib_uverbs.ko: kernel/drivers/infiniband/core/ib_core.ko
kernel/drivers/net/veth.ko:
kernel/fs/netfs/netfs.ko:
kernel/fs/fscache/fscache.ko: kernel/fs/netfs/netfs.ko
kernel/net/9p/9pnet.ko:
kernel/fs/9p/9p.ko: kernel/net/9p/9pnet.ko kernel/fs/fscache/fscache.ko kernel/fs/netfs/netfs.ko
kernel/net/ipv4/udp_tunnel.ko:
kernel/net/ipv6/ip6_udp_tunnel.ko:
kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko: kernel/drivers/infiniband/core/ib_uverbs.ko kernel/drivers/infiniband/core/ib_core.ko kernel/net/ipv4/udp_tunnel.ko kernel/net/ipv6/ip6_udp_tunnel.ko
kernel/drivers/virtio/virtio_ring.ko:
kernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_pci_legacy_dev.ko:
kernel/drivers/virtio/virtio_pci_modern_dev.ko:
kernel/drivers/virtio/virtio_pci.ko: kernel/drivers/virtio/virtio_pci_modern_dev.ko kernel/drivers/virtio/virtio_pci_legacy_dev.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/net/9p/9pnet_virtio.ko: kernel/drivers/virtio/virtio.ko kernel/net/9p/9pnet.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/net/dummy.ko:
kernel/fs/overlayfs/overlay.ko.xz:
`

func TestLoadOrder(t *testing.T) {
	want := []string{"virtio_pci", "9pnet_virtio", "9p", "overlay", "crc32-generic", "rdma_rxe", "veth"}
	got, err := loadOrder(strings.NewReader(modulesDep), want, map[string]bool{"veth": true})
	if err != nil {
		t.Fatal(err)
	}
	pos := map[string]int{}
	for i, f := range got {
		pos[modName(f)] = i
	}
	if len(pos) != len(got) {
		t.Errorf("duplicates in %v", got)
	}
	for _, m := range []string{"dummy", "veth"} { // unwanted, builtin
		if _, ok := pos[m]; ok {
			t.Errorf("%s in %v", m, got)
		}
	}
	if got := got[pos["overlay"]]; got != "kernel/fs/overlayfs/overlay.ko.xz" {
		t.Errorf("overlay file = %s", got)
	}
	for _, dep := range [][2]string{
		{"virtio_ring", "virtio"}, {"virtio", "virtio_pci"}, {"virtio_pci_legacy_dev", "virtio_pci"},
		{"9pnet", "9pnet_virtio"}, {"netfs", "fscache"}, {"fscache", "9p"}, {"9pnet", "9p"},
		{"ib_core", "ib_uverbs"}, {"ib_uverbs", "rdma_rxe"}, {"udp_tunnel", "rdma_rxe"},
		{"ip6_udp_tunnel", "rdma_rxe"}, {"crc32_generic", "crc32_generic"},
	} {
		a, oka := pos[dep[0]]
		b, okb := pos[dep[1]]
		if !oka || !okb || a > b {
			t.Errorf("%s must load before %s: %v", dep[0], dep[1], got)
		}
	}
	if len(got) != 17 {
		t.Errorf("got %d modules, want 17: %v", len(got), got)
	}

	if _, err := loadOrder(strings.NewReader(modulesDep), []string{"nosuch"}, nil); err == nil {
		t.Error("no error for a missing module")
	}
	if _, err := loadOrder(strings.NewReader("a.ko: b.ko\nb.ko: a.ko\n"), []string{"a"}, nil); err == nil {
		t.Error("no error for a cycle")
	}
}

func TestGuestEnv(t *testing.T) {
	got := guestEnv([]string{"PATH=/bin", "GOCACHE=/x", "RMA_N=2", "HOME=/root", "TERM=xterm", "RMAX=1"},
		[]string{"A=b=c", "TERM_NOT_SET_ANYWHERE_RXEVM"})
	want := []string{"PATH=/bin", "RMA_N=2", "HOME=/root", "A=b=c"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("guestEnv = %q, want %q", got, want)
	}
}

// TestCommandScript runs the generated script with the host's sh.
func TestCommandScript(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	args := []string{"printf", `[%s]`, "a b", "it's", `$HOME`, "", `"\`, "x\ny"}
	script := commandScript([]string{"RMA_Q=it's $x", "EMPTY="}, "/", args)
	out, err := exec.Command("sh", "-c", script+"\n").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s\nscript:\n%s", err, out, script)
	}
	if want := "[a b][it's][$HOME][][\"\\][x\ny]"; string(out) != want {
		t.Errorf("output %q, want %q\nscript:\n%s", out, want, script)
	}
	env := commandScript([]string{"RMA_Q=it's $x", "EMPTY="}, "/", []string{"sh", "-c", `printf %s "$RMA_Q"`})
	if out, _ := exec.Command("sh", "-c", env).Output(); string(out) != "it's $x" {
		t.Errorf("RMA_Q = %q", out)
	}
}

func TestCPIO(t *testing.T) {
	var b bytes.Buffer
	w := &cpioWriter{w: &b}
	w.dir("bin")
	w.file("init", 0o755, []byte("#!/bin/sh\n"))
	w.close()
	if w.err != nil {
		t.Fatal(w.err)
	}
	s := b.String()
	if b.Len()%4 != 0 || strings.Count(s, "070701") != 3 || !strings.Contains(s, "TRAILER!!!\x00") {
		t.Fatalf("bad archive %q", s)
	}
	// The second header: after the 110-byte header, "bin\0" and 2 bytes of padding.
	if i := strings.Index(s[4:], "070701") + 4; i != 116 {
		t.Errorf("second header at %d, want 116", i)
	}
	if cpio, err := exec.LookPath("cpio"); err == nil {
		cmd := exec.Command(cpio, "-t", "--quiet")
		cmd.Stdin = &b
		out, err := cmd.Output()
		if err != nil || string(out) != "bin\ninit\n" {
			t.Errorf("cpio -t: %v: %q", err, out)
		}
	}
}

func TestModName(t *testing.T) {
	for in, want := range map[string]string{
		"kernel/fs/9p/9p.ko.xz": "9p", "crc32-generic": "crc32_generic", "/a/b/veth.ko": "veth", "ib_core": "ib_core",
	} {
		if got := modName(in); got != want {
			t.Errorf("modName(%q) = %q, want %q", in, got, want)
		}
	}
}
