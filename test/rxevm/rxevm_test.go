package main

import (
	"bytes"
	"os/exec"
	"reflect"
	"strings"
	"sync"
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
kernel/drivers/net/virtio_net.ko: kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/net/net_failover.ko: kernel/net/core/failover.ko
kernel/net/core/failover.ko:
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

// TestTwoHostModules checks that a two-host guest loads virtio_net after failover and
// net_failover, and that the one-host guest's modules do not change.
func TestTwoHostModules(t *testing.T) {
	want := []string{"virtio_pci", "9pnet_virtio", "9p", "overlay", "crc32-generic", "rdma_rxe", "veth"}
	one, err := loadOrder(strings.NewReader(modulesDep), want, nil)
	if err != nil {
		t.Fatal(err)
	}
	two, err := loadOrder(strings.NewReader(modulesDep), append(want, twoHostModules...), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(two[:len(one)], one) {
		t.Errorf("two-host modules %v do not start with the one-host modules %v", two, one)
	}
	added := []string{}
	for _, f := range two[len(one):] {
		added = append(added, modName(f))
	}
	if w := []string{"failover", "net_failover", "virtio_net"}; !reflect.DeepEqual(added, w) {
		t.Errorf("two-host guest adds %v, want %v", added, w)
	}
	for _, f := range one {
		if strings.Contains(f, "failover") || strings.Contains(f, "virtio_net") {
			t.Errorf("one-host guest loads %s", f)
		}
	}
}

func TestSplitHosts(t *testing.T) {
	for _, c := range []struct {
		args []string
		want [][]string // nil: an error
	}{
		{[]string{"a", "x", ":::", "b"}, [][]string{{"a", "x"}, {"b"}}},
		{[]string{"a", "x"}, [][]string{{"a", "x"}, {"a", "x"}}},
		{[]string{"sh", "-c", "echo :::", ":::", "b", ":::x"}, [][]string{{"sh", "-c", "echo :::"}, {"b", ":::x"}}},
		{[]string{"a", ":::", "b", ":::", "c"}, nil},
		{[]string{"a", ":::"}, nil},
		{[]string{":::", "b"}, nil},
		{[]string{":::"}, nil},
	} {
		got, err := splitHosts(c.args, 2)
		if c.want == nil {
			if err == nil {
				t.Errorf("splitHosts(%q) = %q, want an error", c.args, got)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("splitHosts(%q) = %q, %v; want %q", c.args, got, err, c.want)
		}
	}
}

func TestHostWire(t *testing.T) {
	env := hostEnv(1, 2)
	if w := []string{"RMA_HOST=1", "RMA_HOSTS=2", "RMA_HOST_ADDR=10.77.0.2"}; !reflect.DeepEqual(env, w) {
		t.Errorf("hostEnv(1, 2) = %q, want %q", env, w)
	}
	ports := [2]int{4001, 4002}
	for i, want := range [][]string{
		{"-netdev", "socket,id=n0,udp=127.0.0.1:4002,localaddr=127.0.0.1:4001", "-device", "virtio-net-pci,netdev=n0,mac=52:54:00:77:00:01"},
		{"-netdev", "socket,id=n0,udp=127.0.0.1:4001,localaddr=127.0.0.1:4002", "-device", "virtio-net-pci,netdev=n0,mac=52:54:00:77:00:02"},
	} {
		if got := netdevArgs(i, ports, ports[1-i]); !reflect.DeepEqual(got, want) {
			t.Errorf("netdevArgs(%d) = %q, want %q", i, got, want)
		}
	}
	p, err := freeUDPPorts()
	if err != nil {
		t.Fatal(err)
	}
	if p[0] == p[1] || p[0] <= 0 || p[1] <= 0 {
		t.Errorf("freeUDPPorts = %v", p)
	}
	if got := kernelArgs(options{rt: true, kargs: "loglevel=7"}, "rxevm_eth=10.77.0.1/24"); !strings.HasSuffix(got, " rxevm_rtsoftirq=1 rxevm_eth=10.77.0.1/24 loglevel=7") {
		t.Errorf("kernelArgs = %q", got)
	}
}

func TestPrefixWriter(t *testing.T) {
	var b bytes.Buffer
	var mu sync.Mutex
	w := &prefixWriter{mu: &mu, w: &b, prefix: "[host1] "}
	for _, s := range []string{"a", "b\r\nc\n", "", "\nd\re", "f"} {
		w.Write([]byte(s))
	}
	w.Flush()
	if want := "[host1] ab\n[host1] c\n[host1] \n[host1] d\ref\n"; b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}
