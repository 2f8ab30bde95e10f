package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// hostSep separates the hosts' commands on rxevm's command line with -hosts 2.
const hostSep = ":::"

// KillMarker is the line that, written by a host's command to its stdout, makes rxevm kill
// that host's guest at once (qemu gets SIGKILL): the other host sees a host die, with no
// FIN, RST or link-down. The killed host's exit code then does not count; the other's does.
const KillMarker = "rxevm: kill this host"

// splitHosts splits args at hostSep into one command per host: with no separator, every host
// runs the same command.
func splitHosts(args []string, hosts int) ([][]string, error) {
	var cmds [][]string
	start := 0
	for i, a := range args {
		if a == hostSep {
			cmds = append(cmds, args[start:i])
			start = i + 1
		}
	}
	cmds = append(cmds, args[start:])
	if len(cmds) == 1 {
		for len(cmds) < hosts {
			cmds = append(cmds, cmds[0])
		}
	}
	if len(cmds) != hosts {
		return nil, fmt.Errorf("%d commands separated by %s for %d hosts", len(cmds), hostSep, hosts)
	}
	for i, c := range cmds {
		if len(c) == 0 {
			return nil, fmt.Errorf("no command for host %d", i)
		}
	}
	return cmds, nil
}

// hostAddr is the IPv4 address of host i (0-based) on the guests' wire.
func hostAddr(i int) string { return fmt.Sprintf("10.77.0.%d", i+1) }

// hostMAC is the MAC address of host i's NIC.
func hostMAC(i int) string { return fmt.Sprintf("52:54:00:77:00:%02x", i+1) }

// hostEnv is the environment that tells host i of hosts where it runs; it comes after
// guestEnv's, so that it wins.
func hostEnv(i, hosts int) []string {
	return []string{"RMA_HOST=" + strconv.Itoa(i), "RMA_HOSTS=" + strconv.Itoa(hosts), "RMA_HOST_ADDR=" + hostAddr(i)}
}

// netdevArgs returns qemu's NIC arguments for host i of two: qemu's socket netdev in its UDP
// form, which receives on the host's own loopback port, ports[i], and sends to sendTo (the
// other host's port, or the relay's).
func netdevArgs(i int, ports [2]int, sendTo int) []string {
	return []string{
		"-netdev", fmt.Sprintf("socket,id=n0,udp=127.0.0.1:%d,localaddr=127.0.0.1:%d", sendTo, ports[i]),
		"-device", "virtio-net-pci,netdev=n0,mac=" + hostMAC(i),
	}
}

// freeUDPPorts returns two distinct UDP ports of 127.0.0.1 that were free a moment ago.
func freeUDPPorts() ([2]int, error) {
	var ports [2]int
	for i := range ports {
		c, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			return ports, err
		}
		defer c.Close() // held until both are chosen, so that they differ
		ports[i] = c.LocalAddr().(*net.UDPAddr).Port
	}
	return ports, nil
}

// A guest is one host of a two-host run.
type guest struct {
	i       int
	share   string
	cmd     *exec.Cmd
	cancel  context.CancelFunc // kills qemu
	console io.Writer          // a *tail unless -v
	outs    []*prefixWriter    // flushed when qemu has exited
	copies  sync.WaitGroup     // copying the serial ports out

	// Known once qemu has exited.
	werr     error
	code     int
	reported bool   // the guest reported code
	killed   string // why rxevm killed the guest, if it did before the timeout
	// asked: the command wrote KillMarker and the guest was killed for it.
	asked   atomic.Bool
	askedAt atomic.Int64 // when, in Unix nanoseconds

	// The last maxFailLines lines of its command's stdout that say FAIL
	// or panic, repeated at the end of a failed run: a CI log that keeps
	// only its tail still shows why each host failed.
	failMu    sync.Mutex
	failLines []string
}

const maxFailLines = 8

// noteFail keeps l if it says why the command failed.
func (g *guest) noteFail(l []byte) {
	if !bytes.Contains(l, []byte("FAIL")) && !bytes.Contains(l, []byte("panic:")) {
		return
	}
	g.failMu.Lock()
	defer g.failMu.Unlock()
	if len(g.failLines) == maxFailLines {
		g.failLines = append(g.failLines[:0], g.failLines[1:]...)
	}
	g.failLines = append(g.failLines, string(l))
}

func (g *guest) name() string { return "host" + strconv.Itoa(g.i) }

// start writes the guest's run share and starts its qemu.
func (g *guest) start(ctx context.Context, o options, files *guestFiles, qemu, hostname string, args []string, ports [2]int, sendTo int, w *wire, outMu *sync.Mutex) error {
	var err error
	if g.share, err = os.MkdirTemp("", "rxevm-run-"); err != nil {
		return err
	}
	env := append(guestEnv(os.Environ(), o.env), hostEnv(g.i, 2)...)
	if w != nil {
		env = append(env, "RMA_WIRE="+w.faults.String()) // the relay is there: a command may set its faults
	}
	if err := writeShare(g.share, files.setup, hostname, commandScript(env, files.wd, args)); err != nil {
		return err
	}
	// Serial ports as in the one-host guest: console, CMD's stdout, CMD's stderr on fd 3, 4, 5.
	var readers, writers []*os.File
	defer func() {
		for _, w := range writers {
			w.Close()
		}
	}()
	for j := 0; j < 3; j++ {
		r, w, err := os.Pipe()
		if err != nil {
			for _, r := range readers {
				r.Close()
			}
			return err
		}
		readers, writers = append(readers, r), append(writers, w)
	}
	qargs := qemuArgs(o, files, g.share, kernelArgs(o, "rxevm_eth="+hostAddr(g.i)+"/24"))
	qargs = append(qargs, "-name", g.name()+",debug-threads=on") // names the vCPU threads
	qargs = append(qargs, netdevArgs(g.i, ports, sendTo)...)

	gctx, cancel := context.WithCancel(ctx)
	g.cancel = cancel
	g.cmd = exec.CommandContext(gctx, qemu, qargs...)
	g.cmd.ExtraFiles = writers
	qemuOut := &prefixWriter{mu: outMu, w: os.Stderr, prefix: "[" + g.name() + " qemu] "}
	g.cmd.Stdout, g.cmd.Stderr = qemuOut, qemuOut
	g.cmd.WaitDelay = 5 * time.Second
	g.console = &tail{max: 64 << 10}
	if o.verbose {
		c := &prefixWriter{mu: outMu, w: os.Stderr, prefix: "[" + g.name() + " console] "}
		g.console = c
		g.outs = append(g.outs, c)
	}
	stdout := &prefixWriter{mu: outMu, w: os.Stdout, prefix: "[" + g.name() + "] ", onLine: func(l []byte) {
		g.noteFail(l)
		if string(l) == KillMarker && !g.asked.Swap(true) {
			g.askedAt.Store(time.Now().UnixNano())
			g.cancel()
		}
		if spec, ok := strings.CutPrefix(string(l), WireMarker); ok && w != nil {
			f, _, err := parseWire(spec)
			if err != nil {
				logf("%s: %v", g.name(), err)
				return
			}
			w.set(f)
			logf("%s set the wire: %v (so far: %v)", g.name(), f, &w.counts)
		}
	}}
	stderr := &prefixWriter{mu: outMu, w: os.Stderr, prefix: "[" + g.name() + "] "}
	g.outs = append(g.outs, stdout, stderr, qemuOut)
	if err := g.cmd.Start(); err != nil {
		for _, r := range readers {
			r.Close()
		}
		return err
	}
	for j, w := range []io.Writer{g.console, stdout, stderr} {
		g.copies.Add(1)
		go func(w io.Writer, r *os.File) {
			defer g.copies.Done()
			defer r.Close()
			io.Copy(w, r)
		}(w, readers[j])
	}
	if o.vcpuNice != 0 {
		go reniceVCPUs(gctx, g.cmd.Process.Pid, o.smp, o.vcpuNice)
	}
	return nil
}

// wait waits for the guest's qemu to exit and its output to be out.
func (g *guest) wait() {
	g.werr = g.cmd.Wait()
	g.copies.Wait()
	for _, w := range g.outs {
		w.Flush()
	}
	g.code, g.reported = readExit(g.share)
}

// runTwoHosts boots two guests joined by a virtual Ethernet wire and runs cmds[i] on host i.
// It returns 0 if both commands succeed, else the exit code of the first host (in host order)
// whose command failed; an error if a guest stopped without reporting an exit code.
func runTwoHosts(ctx context.Context, o options, cmds [][]string) (int, error) {
	files, err := prepare(o, append([]string(nil), twoHostModules...))
	if err != nil {
		return 0, err
	}
	qemu, err := lookPath("qemu-system-x86_64")
	if err != nil {
		return 0, err
	}
	ports, err := freeUDPPorts()
	if err != nil {
		return 0, err
	}
	sendTo := [2]int{ports[1], ports[0]}
	var w *wire
	if o.wire != "" {
		f, seed, err := parseWire(o.wire)
		if err != nil {
			return 0, err
		}
		if w, err = newWire(f, seed, ports); err != nil {
			return 0, err
		}
		defer func() {
			w.close()
			logf("wire: %v", &w.counts)
		}()
		sendTo = w.Ports()
		w.start()
		logf("wire through rxevm: %v, seed %d", f, seed)
	}
	base, _ := os.Hostname()
	if base == "" {
		base = "rxevm"
	}
	if len(base) > 48 {
		base = base[:48]
	}

	var outMu sync.Mutex // whole lines, one at a time, on stdout and stderr
	guests := make([]*guest, len(cmds))
	done := make(chan *guest, len(cmds))
	started := 0
	for i, args := range cmds {
		g := &guest{i: i}
		guests[i] = g
		err = g.start(ctx, o, files, qemu, fmt.Sprintf("%s-host%d", base, i), args, ports, sendTo[i], w, &outMu)
		if g.share != "" {
			defer os.RemoveAll(g.share)
		}
		if g.cancel != nil {
			defer g.cancel()
		}
		if err != nil {
			err = fmt.Errorf("%s: %w", g.name(), err)
			break
		}
		started++
		go func() { g.wait(); done <- g }()
	}
	if err != nil { // stop the guests already started
		for _, g := range guests[:started] {
			g.cancel()
		}
		for range started {
			<-done
		}
		return 0, err
	}

	// When one host fails or dies, the other's command may wait for it forever: give it
	// o.linger, then kill its guest too.
	var linger <-chan time.Time
	var cause string
	ended := make([]bool, len(guests))
	for range guests {
		var g *guest
		select {
		case g = <-done:
		case <-linger:
			for _, h := range guests {
				if !ended[h.i] && h.killed == "" {
					h.killed = fmt.Sprintf("killed %v after %s", o.linger, cause)
					h.cancel()
				}
			}
			linger = nil
			g = <-done
		}
		ended[g.i] = true
		failed := !g.reported || g.code != 0
		if failed && cause == "" && ctx.Err() == nil && g.killed == "" && !g.asked.Load() {
			cause = g.name() + " failed"
			if !g.reported {
				cause = g.name() + "'s guest died"
			}
			if o.linger > 0 {
				linger = time.After(o.linger)
			}
		}
	}

	// Report.
	var code int
	var died []string
	var summary []string
	for _, g := range guests {
		switch {
		case g.asked.Load():
			summary = append(summary, fmt.Sprintf("%s (%s): killed at %s, as its command asked",
				g.name(), hostAddr(g.i), time.Unix(0, g.askedAt.Load()).UTC().Format("15:04:05.000")))
		case g.reported:
			s := fmt.Sprintf("%s (%s): exit %d", g.name(), hostAddr(g.i), g.code)
			if g.code != 0 {
				s += " (failed)"
				if code == 0 {
					code = g.code
				}
			}
			summary = append(summary, s)
		case g.killed != "":
			summary = append(summary, fmt.Sprintf("%s (%s): %s", g.name(), hostAddr(g.i), g.killed))
		case ctx.Err() != nil:
			summary = append(summary, fmt.Sprintf("%s (%s): killed, no exit code", g.name(), hostAddr(g.i)))
		default:
			summary = append(summary, fmt.Sprintf("%s (%s): the guest stopped without reporting an exit code (qemu: %v)", g.name(), hostAddr(g.i), exitStatus(g.werr)))
			died = append(died, g.name())
		}
		if !g.reported && g.killed == "" && !g.asked.Load() {
			if t, ok := g.console.(*tail); ok && len(t.buf) > 0 {
				fmt.Fprintf(os.Stderr, "rxevm: %s's guest console:\n%s\n", g.name(), bytes.TrimRight(t.buf, "\r\n"))
			}
		}
	}
	for _, g := range guests {
		if g.reported && g.code != 0 && len(g.failLines) > 0 {
			logf("%s failed; its last lines saying FAIL or panic:", g.name())
			for _, l := range g.failLines {
				fmt.Fprintf(os.Stderr, "  [%s] %s\n", g.name(), l)
			}
		}
	}
	logf("%s", strings.Join(summary, "; "))
	if ctx.Err() != nil {
		return 0, nil // timeout or interrupt: main says so
	}
	if code != 0 {
		return code, nil
	}
	if len(died) > 0 {
		return 0, fmt.Errorf("%s: the guest stopped without reporting an exit code", strings.Join(died, ", "))
	}
	return 0, nil
}

func exitStatus(err error) string {
	if err == nil {
		return "exit 0"
	}
	return err.Error()
}

// reniceVCPUs gives qemu's vCPU threads (named "CPU n/TCG" with -name debug-threads=on) the
// nice value nice, so that on a small host they do not starve qemu's main loop, which runs
// the NIC, the netdev and 9p. It looks for them for a few seconds after qemu starts.
func reniceVCPUs(ctx context.Context, pid, vcpus, nice int) {
	done := map[int]bool{}
	deadline := time.Now().Add(10 * time.Second)
	for len(done) < vcpus && time.Now().Before(deadline) && ctx.Err() == nil {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/comm", pid))
		for _, f := range tasks {
			tid, err := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			if err != nil || done[tid] {
				continue
			}
			b, _ := os.ReadFile(f)
			comm := strings.TrimSpace(string(b))
			if !strings.HasPrefix(comm, "CPU ") || !strings.HasSuffix(comm, "/TCG") {
				continue
			}
			// With PRIO_PROCESS, Linux's setpriority takes a thread id and sets that thread's nice.
			if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, nice); err != nil && !errors.Is(err, syscall.ESRCH) {
				logf("renice %s (thread %d of qemu %d): %v", comm, tid, pid, err)
			}
			done[tid] = true
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	if len(done) < vcpus && ctx.Err() == nil {
		logf("found %d of %d vCPU threads of qemu %d to renice", len(done), vcpus, pid)
	}
}

// prefixWriter writes each line written to it to w with prefix, whole, under mu. A "\r"
// before a line's "\n" is dropped (the guest's console ends lines with "\r\n").
type prefixWriter struct {
	mu     *sync.Mutex
	w      io.Writer
	prefix string
	buf    []byte
	onLine func(line []byte) // if not nil, called with each line after it is written
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			break
		}
		p.line(p.buf[:i])
		p.buf = p.buf[i+1:]
	}
	if len(p.buf) > 64<<10 { // a very long line: out in pieces
		p.line(p.buf)
		p.buf = p.buf[:0]
	}
	return len(b), nil
}

// Flush writes out a last line that has no "\n".
func (p *prefixWriter) Flush() {
	if len(p.buf) > 0 {
		p.line(p.buf)
		p.buf = nil
	}
}

func (p *prefixWriter) line(l []byte) {
	l = bytes.TrimSuffix(l, []byte("\r"))
	out := make([]byte, 0, len(p.prefix)+len(l)+1)
	out = append(append(append(out, p.prefix...), l...), '\n')
	p.mu.Lock()
	p.w.Write(out)
	p.mu.Unlock()
	if p.onLine != nil {
		p.onLine(l)
	}
}
