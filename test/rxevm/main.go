// Command rxevm is the rxe test VM: it runs a command where an RDMA device is available.
//
//	rxevm [flags] [--] CMD [ARGS...]
//
// If the host already has an RDMA device (an entry in /sys/class/infiniband), rxevm runs CMD
// directly. Otherwise (the usual case on CI machines, whose kernels have no RDMA) it boots a
// small qemu guest under TCG emulation with Debian's kernel, whose root file system is the
// host's own / shared read-only over 9p. The guest loads rdma_rxe, creates a veth pair
// (veth0 10.99.0.1/24, veth1), creates the Soft-RoCE device rxe0 on veth0 with this
// repository's hack/soft-roce-setup.sh, and runs CMD in the same working directory. Several
// processes of CMD can talk to each other through rxe0 and its own IPv4 GID (index 1).
//
// CMD's stdout and stderr come out on rxevm's stdout and stderr, live (the guest's second and
// third serial ports); the kernel's console (first serial port) is hidden unless -v, or shown
// when the guest fails before CMD ends. rxevm exits with CMD's exit code (carried out through a
// writable 9p share), 124 on timeout, 125 when rxevm itself fails.
//
// In the guest, /tmp and /var/tmp show the host's files but writes go to memory (an overlay on
// a tmpfs); /run is an empty tmpfs; everything else is the host's, read-only. Only PATH, HOME,
// CI, RMA_* and the variables named with -env reach CMD.
//
// rxevm installs the Debian packages it misses (qemu-system-x86, busybox-static, ...) with
// apt-get, downloads the kernel package that linux-image-amd64 depends on, and caches the
// extracted kernel and the initramfs it builds (keyed by kernel version and a hash of the
// init script, modules and busybox) in -cache, so that later runs boot in seconds.
//
// Example, two processes talking over rxe0 (binaries must live outside /run):
//
//	go run ./test/rxevm -- sh -c 'ib_write_lat -d rxe0 -x 1 & sleep 2; ib_write_lat -d rxe0 -x 1 10.99.0.1'
//	go test -exec 'go run github.com/onesided/rma/test/rxevm --' ./verbs
//
// Note that go run always exits 1 when the program fails: build rxevm to get CMD's exit code.
//
// # Two hosts
//
//	rxevm -hosts 2 [flags] [--] CMD0 [ARGS...] ::: CMD1 [ARGS...]
//	rxevm -hosts 2 [flags] [--] CMD [ARGS...]
//
// With -hosts 2, rxevm boots two guests (always, even on a host with an RDMA device), host0
// and host1, each with 1 vCPU and 2 GiB unless -smp and -mem say otherwise, and runs CMD0 on
// host0 and CMD1 on host1, both in rxevm's working directory; with no ":::", both hosts run
// the same CMD. Each guest has a virtio NIC eth0, 10.77.0.1/24 on host0 and 10.77.0.2/24 on
// host1, and the Soft-RoCE device rxe0 on it (GID index 1 is the RoCE v2 IPv4 GID). The two
// NICs are joined by qemu's socket netdev in its UDP form, over two free ports of the host's
// loopback: a wire with no other hosts on it, where a killed guest is a host that died. The
// guests' hostnames are rxevm's with "-host0" and "-host1" appended. Besides the variables
// of the one-host guest, each command gets RMA_HOST (0 or 1), RMA_HOSTS (2) and RMA_HOST_ADDR
// (its own address, 10.77.0.1 or 10.77.0.2), and with -wire RMA_WIRE (the relay's first
// faults: a command that finds it may change them).
//
// Every line that a command writes comes out on rxevm's stdout or stderr, live, prefixed with
// "[host0] " or "[host1] "; qemu's own messages with "[hostN qemu] ", and the consoles (with
// -v) with "[hostN console] ". At the end rxevm prints both exit codes on stderr. It exits 0
// if both commands succeed; else with the exit code of the first host (host0 first) whose
// command failed; 124 on timeout, which kills both guests; 125 when a guest stopped before
// its command ended (its console is then printed). When one command fails or its guest dies,
// the other guest is killed -linger later, as its command may be waiting for the first.
// A command that writes the line "rxevm: kill this host" to its stdout has its guest killed
// at once (qemu gets SIGKILL), which the other host sees as a host that died; that host's
// exit code then does not count, and rxevm exits with the other's.
//
// The guests' vCPU threads run at nice -vcpunice (default 19), so that busy-polling guests do
// not starve qemu's main loop, which moves their frames and serves 9p. Example, perftest
// across the hosts:
//
//	rxevm -hosts 2 -- ib_write_lat -d rxe0 -x 1 -n 200 10.77.0.2 ::: ib_write_lat -d rxe0 -x 1 -n 200
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// Exit codes of rxevm itself.
const (
	exitTimeout = 124
	exitFailure = 125
)

type envFlag []string

func (e *envFlag) String() string     { return strings.Join(*e, ",") }
func (e *envFlag) Set(s string) error { *e = append(*e, s); return nil }

type options struct {
	vm      string
	timeout time.Duration
	cache   string
	smp     int
	mem     int
	env     envFlag
	setup   string
	modules string
	verbose bool
	kargs   string
	rt      bool

	hosts    int           // 1, or 2 for two guests on one wire
	wire     string        // with two hosts: the relay's faults (see parseWire); "" for no relay
	linger   time.Duration // with two hosts: how long the other host may run after one fails
	vcpuNice int           // with two hosts: nice value of the guests' vCPU threads
}

func main() {
	var o options
	flag.StringVar(&o.vm, "vm", "auto", "auto: boot a VM only if the host has no RDMA device; always; never")
	flag.DurationVar(&o.timeout, "timeout", 30*time.Minute, "kill the VM (or CMD) and fail after this long")
	flag.StringVar(&o.cache, "cache", defaultCache(), "cache `dir` for the kernel and the initramfs")
	flag.IntVar(&o.smp, "smp", 2, "guest vCPUs")
	flag.IntVar(&o.mem, "mem", 3072, "guest memory in MiB")
	flag.Var(&o.env, "env", "pass `K=V` (or K, with the host's value) to CMD in the guest; repeatable")
	flag.StringVar(&o.setup, "setup", "", "soft-roce-setup.sh to run in the guest (default: hack/soft-roce-setup.sh of this repository)")
	flag.StringVar(&o.modules, "modules", "", "extra kernel modules for the guest, comma-separated (e.g. rdma_ucm)")
	flag.BoolVar(&o.verbose, "v", false, "show the guest's console (kernel and init messages) on stderr")
	flag.BoolVar(&o.rt, "rtsoftirq", true, "make the guest's ksoftirqd threads SCHED_FIFO, so that rxe is not starved by busy polling (else ~4 ms per message with every vCPU polling)")
	flag.StringVar(&o.kargs, "kargs", "", "extra guest kernel command line `args` (e.g. loglevel=7 with -v)")
	flag.IntVar(&o.hosts, "hosts", 1, "1, or 2: boot two guests joined by a virtual Ethernet wire and run CMD0 ::: CMD1 on them")
	flag.DurationVar(&o.linger, "linger", time.Minute, "with -hosts 2: when one host's command fails or its guest dies, kill the other guest this long after (0: wait for it, up to -timeout)")
	flag.StringVar(&o.wire, "wire", "", "with -hosts 2: relay the wire through rxevm with these faults: `spec` loss=P,dup=P,reorder=P,delay=D,jitter=D,seed=N (P in % or a fraction; \"none\": a clean relay); a host's command changes them by writing a line \""+WireMarker+"SPEC\" to its stdout")
	flag.IntVar(&o.vcpuNice, "vcpunice", 19, "with -hosts 2: nice value of the guests' vCPU threads (0: leave them)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: rxevm [flags] [--] CMD [ARGS...]\n"+
			"       rxevm -hosts 2 [flags] [--] CMD0 [ARGS...] [::: CMD1 [ARGS...]]\n\n"+
			"Run CMD where an RDMA device is available: on the host if it has one, else in a qemu\n"+
			"guest with Soft-RoCE device rxe0 on veth0 (10.99.0.1). Exits with CMD's exit code\n"+
			"(124: timeout, 125: rxevm failed).\n\n"+
			"With -hosts 2, run CMD0 on host0 and CMD1 on host1 (both CMD0 without :::), two guests\n"+
			"whose rxe0 sit on eth0, 10.77.0.1 and 10.77.0.2, joined by a virtual wire; output lines\n"+
			"are prefixed with [host0] or [host1]; RMA_HOST, RMA_HOSTS and RMA_HOST_ADDR tell each\n"+
			"command where it runs. Exits 0 if both succeed, else with the first failing host's code.\n\n"+
			"flags:\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	switch o.vm {
	case "auto", "always", "never":
	default:
		fmt.Fprintf(os.Stderr, "rxevm: -vm must be auto, always or never, not %q\n", o.vm)
		os.Exit(2)
	}
	var hostCmds [][]string
	switch o.hosts {
	case 1:
	case 2:
		if o.vm == "never" {
			fmt.Fprintln(os.Stderr, "rxevm: -hosts 2 boots two guests: it cannot be used with -vm never")
			os.Exit(2)
		}
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["smp"] {
			o.smp = 1
		}
		if !set["mem"] {
			o.mem = 2048
		}
		var err error
		if hostCmds, err = splitHosts(flag.Args(), o.hosts); err != nil {
			fmt.Fprintf(os.Stderr, "rxevm: %v\n", err)
			flag.Usage()
			os.Exit(2)
		}
	default:
		fmt.Fprintf(os.Stderr, "rxevm: -hosts must be 1 or 2, not %d\n", o.hosts)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	var code int
	var err error
	switch {
	case o.hosts == 2:
		code, err = runTwoHosts(ctx, o, hostCmds)
	case o.vm == "never" || (o.vm == "auto" && hostHasRDMA()):
		code, err = runOnHost(ctx, o, flag.Args())
	default:
		code, err = runInVM(ctx, o, flag.Args())
	}
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		fmt.Fprintf(os.Stderr, "rxevm: timeout after %v: killed\n", o.timeout)
		code, err = exitTimeout, nil
	case ctx.Err() != nil:
		fmt.Fprintln(os.Stderr, "rxevm: interrupted")
		code, err = 130, nil
	}
	cancel()
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "rxevm: %v\n", err)
		code = exitFailure
	}
	os.Exit(code)
}

func defaultCache() string {
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "rma-rxevm")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".cache", "rma-rxevm")
	}
	return filepath.Join(os.TempDir(), "rma-rxevm")
}

func hostHasRDMA() bool {
	ents, _ := os.ReadDir("/sys/class/infiniband")
	return len(ents) > 0
}

// runOnHost runs the command directly, with the host's environment plus -env.
func runOnHost(ctx context.Context, o options, args []string) (int, error) {
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), o.env...)
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.Exited() {
		return ee.ExitCode(), nil
	}
	if err != nil {
		return exitFailure, err
	}
	return 0, nil
}

// guestEnv returns the K=V pairs that CMD gets in the guest, in order, later ones winning.
func guestEnv(environ, extra []string) []string {
	var out []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if k == "PATH" || k == "HOME" || k == "CI" || strings.HasPrefix(k, "RMA_") {
			out = append(out, kv)
		}
	}
	for _, kv := range extra {
		if !strings.Contains(kv, "=") {
			v, ok := os.LookupEnv(kv)
			if !ok {
				continue
			}
			kv += "=" + v
		}
		out = append(out, kv)
	}
	return out
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// commandScript is the sh script that the guest runs, in a clean environment, to run CMD.
func commandScript(env []string, dir string, args []string) string {
	var b strings.Builder
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(v))
	}
	fmt.Fprintf(&b, "cd %s || exit %d\nexec", shellQuote(dir), exitFailure)
	for _, a := range args {
		b.WriteString(" " + shellQuote(a))
	}
	b.WriteString("\n")
	return b.String()
}

// findSetup finds hack/soft-roce-setup.sh above the working directory, or above this source file.
func findSetup() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	for _, d := range starts {
		for {
			p := filepath.Join(d, "hack", "soft-roce-setup.sh")
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
			parent := filepath.Dir(d)
			if parent == d {
				break
			}
			d = parent
		}
	}
	return "", errors.New("cannot find hack/soft-roce-setup.sh above the working directory: use -setup")
}
