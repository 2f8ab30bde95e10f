package main

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// guestModules are the modules the guest loads (with their dependencies, from modules.dep):
// virtio PCI and 9p for the root file system, overlay for a writable /tmp, veth, rdma_rxe and
// ib_uverbs, crc32_generic, which rxe asks the crypto API for (no modprobe to load it), and
// sch_netem, with which tests make a wire lossy.
var guestModules = []string{"virtio_pci", "9pnet_virtio", "9p", "overlay", "veth", "crc32_generic", "ib_uverbs", "rdma_rxe", "rdma_ucm", "sch_netem"}

// twoHostModules are the modules that a guest of a two-host run loads besides guestModules:
// the virtio NIC's driver (with its dependencies failover and net_failover, from modules.dep).
// They make a different initramfs from the one-host guest's.
var twoHostModules = []string{"virtio_net"}

// initScript is the guest's /init, run by busybox sh as PID 1. The host's serial ports are:
// ttyS0 the console (hidden), ttyS1 CMD's stdout, ttyS2 CMD's stderr. /run/rxevm (the 9p
// share "rxevm") holds setup (the path of soft-roce-setup.sh), hostname and cmd.sh from the
// host, and gets exit, CMD's exit code. The kernel command line gives rxevm_rtsoftirq=1 (make
// ksoftirqd SCHED_FIFO) and, in a two-host run, rxevm_eth=10.77.0.N/24 (put rxe0 on eth0 with
// that address instead of on a veth pair).
const initScript = `#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
R=/root S=/root/run/rxevm p9=trans=virtio,version=9p2000.L,msize=262144
die() { echo "rxevm-init: $*"; poweroff -f; }
ch() { chroot $R /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"; }

mount -t proc proc /proc && mount -t sysfs sysfs /sys && mount -t devtmpfs dev /dev || die "mount /proc /sys /dev"
for m in $(cat /modules); do insmod /lib/modules/$m.ko || die "insmod $m"; done

# The host's / (read-only; cached, as it does not change under a test), with the usual
# kernel file systems, and writable places.
mount -t 9p -o $p9,ro,cache=loose hostroot $R || die "mount the host root (9p)"
mount -t proc proc $R/proc && mount -t sysfs sysfs $R/sys && mount --bind /dev $R/dev || die "mount $R/proc $R/sys $R/dev"
ln -s /proc/self/fd /dev/fd && ln -s fd/0 /dev/stdin && ln -s fd/1 /dev/stdout && ln -s fd/2 /dev/stderr &&
	mkdir -p /dev/shm /dev/pts && mount -t tmpfs -o mode=1777 shm $R/dev/shm && mount -t devpts -o ptmxmode=0666 devpts $R/dev/pts || die "mount $R/dev/shm $R/dev/pts"
mount -t tmpfs -o mode=755 run $R/run || die "mount $R/run"
for d in tmp var/tmp; do
	mkdir -p /rw/$d && mount -t tmpfs tmpfs /rw/$d && mkdir /rw/$d/up /rw/$d/work && chmod 1777 /rw/$d/up &&
	mount -t overlay -o lowerdir=$R/$d,upperdir=/rw/$d/up,workdir=/rw/$d/work overlay $R/$d ||
	mount -t tmpfs -o mode=1777 tmpfs $R/$d || die "mount $R/$d"
done
mkdir $S && mount -t 9p -o $p9 rxevm $S || die "mount the run share (9p)"
hostname "$(cat $S/hostname)"

# One host: rxe0 on one end of a veth pair. Two hosts (rxevm_eth=ADDR/24 on the kernel command
# line): rxe0 on the virtio NIC eth0, whose wire leads to the other guest.
if [ -n "$rxevm_eth" ]; then
	nd=eth0 addr=$rxevm_eth
	ch sh -ec 'ip addr add "$1" dev eth0; ip link set eth0 up; ip link set lo up' sh "$addr" || die "eth0 setup failed"
else
	nd=veth0 addr=10.99.0.1/24
	ch sh -ec 'ip link set lo up; ip link add veth0 type veth peer name veth1
		ip addr add 10.99.0.1/24 dev veth0; ip link set veth0 up; ip link set veth1 up' || die "veth setup failed"
fi
ch bash "$(cat $S/setup)" $nd || die "soft-roce setup failed"
# rxe does its work in softirqs. With every vCPU busy polling a CQ, a woken ksoftirqd waits
# for the next tick (4 ms): make it a real-time thread, as the work of a NIC would be.
if [ "$rxevm_rtsoftirq" = 1 ]; then
	for f in /proc/[0-9]*/comm; do case $(cat $f) in ksoftirqd/*) f=${f%/comm} pids="$pids ${f#/proc/}" ;; esac; done
	ch sh -c 'for p; do chrt -f -p 50 $p; done' sh $pids || die "chrt ksoftirqd"
fi

exec 3>/dev/ttyS1 4>/dev/ttyS2
stty raw -echo <&3 && stty raw -echo <&4 || die "stty"
echo "rxevm: RDMA device $(ls $R/sys/class/infiniband) on $nd (${addr%/*}), guest up in $(cut -d' ' -f1 /proc/uptime) s" >&4
ch sh /run/rxevm/cmd.sh </dev/null >&3 2>&4
code=$?
kill -9 -1
stty raw -echo <&3; stty raw -echo <&4 # tcsetattr(TCSADRAIN): wait for the output to leave
echo $code >$S/exit
poweroff -f
`

// initramfs returns the path of the guest's initramfs (a gzipped newc cpio), built into
// the cache unless there already. Its name holds the kernel release and a hash of the
// init script, modules and busybox.
func initramfs(cache string, k *kernel, extra []string) (string, error) {
	names, mods, err := k.modules(append(guestModules[:len(guestModules):len(guestModules)], extra...))
	if err != nil {
		return "", err
	}
	bb := staticBusybox()
	if bb == "" {
		return "", fmt.Errorf("no static busybox (apt-get install busybox-static)")
	}
	busybox, err := os.ReadFile(bb)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	io.WriteString(h, initScript)
	for i := range names {
		fmt.Fprintf(h, "%s %d\n", names[i], len(mods[i]))
		h.Write(mods[i])
	}
	h.Write(busybox)
	file := filepath.Join(cache, fmt.Sprintf("initramfs-%s-%s.cpio.gz", k.release, hex.EncodeToString(h.Sum(nil))[:16]))
	if _, err := os.Stat(file); err == nil {
		return file, nil
	}

	var buf bytes.Buffer
	z := gzip.NewWriter(&buf)
	w := &cpioWriter{w: z}
	for _, d := range []string{"bin", "dev", "proc", "sys", "root", "lib", "lib/modules"} {
		w.dir(d)
	}
	w.node("dev/console", 0o20600, 5, 1)
	w.file("init", 0o755, []byte(initScript))
	w.file("bin/busybox", 0o755, busybox)
	w.file("modules", 0o644, []byte(strings.Join(names, "\n")+"\n"))
	for i, n := range names {
		w.file("lib/modules/"+n+".ko", 0o644, mods[i])
	}
	w.close()
	if err := z.Close(); err != nil {
		return "", err
	}
	if w.err != nil {
		return "", w.err
	}
	tmp := file + ".tmp" + fmt.Sprint(os.Getpid())
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return "", err
	}
	logf("built %s (%d KiB; modules: %s)", file, buf.Len()>>10, strings.Join(names, " "))
	return file, os.Rename(tmp, file)
}

// cpioWriter writes a cpio archive in the "newc" format that the kernel unpacks.
type cpioWriter struct {
	w   io.Writer
	ino int
	err error
}

func (c *cpioWriter) entry(name string, mode, rdevMajor, rdevMinor int, data []byte) {
	if c.err != nil {
		return
	}
	c.ino++
	nlink := 1
	if mode&0o170000 == 0o040000 {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	b := append([]byte(hdr), name...)
	b = append(b, 0)
	b = append(b, make([]byte, pad4(len(b)))...)
	b = append(b, data...)
	b = append(b, make([]byte, pad4(len(data)))...)
	_, c.err = c.w.Write(b)
}

func pad4(n int) int { return (4 - n%4) % 4 }

func (c *cpioWriter) dir(name string) { c.entry(name, 0o040755, 0, 0, nil) }
func (c *cpioWriter) file(name string, perm int, data []byte) {
	c.entry(name, 0o100000|perm, 0, 0, data)
}
func (c *cpioWriter) node(name string, mode, major, minor int) {
	c.entry(name, mode, major, minor, nil)
}
func (c *cpioWriter) close() { c.ino = -1; c.entry("TRAILER!!!", 0, 0, 0, nil) }
