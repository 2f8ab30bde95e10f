package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "rxevm: "+format+"\n", args...)
}

// guestFiles is what every guest boots from and runs in.
type guestFiles struct {
	kernel *kernel
	initrd string // the initramfs
	setup  string // absolute path of soft-roce-setup.sh
	wd     string // the working directory of the command(s)
}

// prepare installs what is missing and finds or builds the kernel and the initramfs, with
// the guest modules plus extra.
func prepare(o options, extra []string) (*guestFiles, error) {
	if err := installMissing(); err != nil {
		return nil, err
	}
	setup, err := o.setup, error(nil)
	if setup == "" {
		if setup, err = findSetup(); err != nil {
			return nil, err
		}
	}
	if setup, err = filepath.Abs(setup); err != nil {
		return nil, err
	}
	wd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	if wd == "/run" || strings.HasPrefix(wd, "/run/") {
		logf("warning: %s is hidden in the guest by a tmpfs on /run", wd)
	}

	pkg, err := kernelPackage(o.cache)
	if err != nil {
		return nil, err
	}
	k, err := fetchKernel(o.cache, pkg)
	if err != nil {
		return nil, err
	}
	if o.modules != "" {
		extra = append(extra, strings.Split(o.modules, ",")...)
	}
	initrd, err := initramfs(o.cache, k, extra)
	if err != nil {
		return nil, err
	}
	return &guestFiles{kernel: k, initrd: initrd, setup: setup, wd: wd}, nil
}

// qemuArgs returns qemu's arguments for a guest of g with the run share share, whose serial
// ports are the files 3, 4 and 5 that qemu inherits (console, CMD's stdout, CMD's stderr).
func qemuArgs(o options, g *guestFiles, share, kargs string) []string {
	return []string{
		"-nodefaults", "-no-user-config", "-no-reboot", "-display", "none",
		"-accel", "tcg,thread=multi", "-cpu", "max",
		"-smp", strconv.Itoa(o.smp), "-m", strconv.Itoa(o.mem),
		"-kernel", g.kernel.bootImage(), "-initrd", g.initrd,
		"-append", kargs,
		"-chardev", "file,id=con,path=/dev/fd/3", "-serial", "chardev:con",
		"-chardev", "file,id=out,path=/dev/fd/4", "-serial", "chardev:out",
		"-chardev", "file,id=err,path=/dev/fd/5", "-serial", "chardev:err",
		"-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
		"-virtfs", "local,path=" + share + ",mount_tag=rxevm,security_model=none",
	}
}

// writeShare writes the files that the guest's /init reads from the run share.
func writeShare(share, setup, hostname, script string) error {
	for name, text := range map[string]string{
		"setup":    setup,
		"hostname": hostname,
		"cmd.sh":   script,
	} {
		if err := os.WriteFile(filepath.Join(share, name), []byte(text+"\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// readExit returns the exit code that the guest wrote into the run share, if it did.
func readExit(share string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(share, "exit"))
	if err != nil {
		return 0, false
	}
	code, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return code, err == nil
}

// runInVM boots the guest and runs args in it; it returns CMD's exit code.
func runInVM(ctx context.Context, o options, args []string) (int, error) {
	g, err := prepare(o, nil)
	if err != nil {
		return 0, err
	}

	// The run share: what to run in, CMD's exit code out.
	share, err := os.MkdirTemp("", "rxevm-run-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(share)
	host, _ := os.Hostname()
	if host == "" {
		host = "rxevm"
	}
	if err := writeShare(share, g.setup, host, commandScript(guestEnv(os.Environ(), o.env), g.wd, args)); err != nil {
		return 0, err
	}

	// Serial ports: ttyS0 the console, ttyS1 CMD's stdout, ttyS2 CMD's stderr,
	// each on a pipe given to qemu as fd 3, 4, 5. qemu does not read its stdin.
	var readers, writers []*os.File
	for i := 0; i < 3; i++ {
		r, w, err := os.Pipe()
		if err != nil {
			return 0, err
		}
		defer r.Close()
		readers, writers = append(readers, r), append(writers, w)
	}
	qemu, err := lookPath("qemu-system-x86_64")
	if err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, qemu, qemuArgs(o, g, share, kernelArgs(o))...)
	cmd.ExtraFiles = writers
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	for _, w := range writers {
		w.Close()
	}

	var console io.Writer = &tail{max: 64 << 10}
	if o.verbose {
		console = os.Stderr
	}
	var wg sync.WaitGroup
	for i, w := range []io.Writer{console, os.Stdout, os.Stderr} {
		wg.Add(1)
		go func(w io.Writer, r io.Reader) {
			defer wg.Done()
			io.Copy(w, r)
		}(w, readers[i])
	}
	werr := cmd.Wait()
	wg.Wait()

	if code, ok := readExit(share); ok {
		return code, nil
	}
	if t, ok := console.(*tail); ok && len(t.buf) > 0 {
		fmt.Fprintf(os.Stderr, "rxevm: guest console:\n%s\n", t.buf)
	}
	if ctx.Err() != nil {
		return 0, nil // timeout or interrupt: main says so
	}
	if werr != nil {
		return 0, fmt.Errorf("qemu: %v; the guest did not report an exit code", werr)
	}
	return 0, fmt.Errorf("the guest stopped without reporting an exit code")
}

// kernelArgs is the guest kernel's command line. Parameters like rxevm_x=y reach /init as
// environment variables.
// Parameters in more (e.g. rxevm_eth=10.77.0.1/24) come before -kargs.
func kernelArgs(o options, more ...string) string {
	// TCG derives every vCPU's TSC from one host clock, but the kernel's boot-time sync
	// check marks it unstable and falls back to the HPET, which a Go process reads on
	// every time.Now and in its scheduler (1.8 us a read against 0.14 us from the TSC,
	// each an exit to qemu's device emulation).
	args := "console=ttyS0 quiet loglevel=1 panic=-1 edd=off mitigations=off clocksource=tsc tsc=reliable"
	if o.rt {
		args += " rxevm_rtsoftirq=1"
	}
	for _, a := range more {
		args += " " + a
	}
	return strings.TrimSpace(args + " " + o.kargs)
}

// tail keeps the last max bytes written to it.
type tail struct {
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}
