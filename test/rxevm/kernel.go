package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// A need is a Debian package and a file that shows it is installed: a command name
// (looked up in PATH and the sbin directories) or an absolute glob.
type need struct{ pkg, file string }

var needs = []need{
	{"qemu-system-x86", "qemu-system-x86_64"},
	{"busybox-static", "busybox"}, // and it must be static: see staticBusybox
	{"iproute2", "rdma"},
	{"kmod", "depmod"},
	{"xz-utils", "xz"},
	{"rdma-core", "rdma-ndd"},
	{"ibverbs-utils", "ibv_devinfo"},
	{"ibverbs-providers", "/usr/lib/*/libibverbs/librxe-rdmav*.so"},
	{"libibverbs-dev", "/usr/include/infiniband/verbs.h"},
	{"perftest", "ib_write_lat"},
}

func lookPath(name string) (string, error) {
	if filepath.IsAbs(name) {
		m, _ := filepath.Glob(name)
		if len(m) == 0 {
			return "", fmt.Errorf("%s: not found", name)
		}
		return m[0], nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/local/sbin", "/usr/sbin", "/sbin"} {
		if p := filepath.Join(d, name); isExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found", name)
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// staticBusybox returns the path of a statically linked busybox, or "".
func staticBusybox() string {
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		static := true
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				static = false
			}
		}
		f.Close()
		if static {
			return p
		}
	}
	return ""
}

// installMissing installs, with apt-get, the packages of needs whose file is absent.
func installMissing() error {
	var missing []string
	for _, n := range needs {
		_, err := lookPath(n.file)
		if n.pkg == "busybox-static" {
			if staticBusybox() == "" {
				err = errors.New("no static busybox")
			}
		}
		if err != nil {
			missing = append(missing, n.pkg)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	logf("installing %s", strings.Join(missing, " "))
	if os.Geteuid() != 0 && !haveSudo() {
		return fmt.Errorf("not root and no sudo: install them with: apt-get install -y %s", strings.Join(missing, " "))
	}
	if err := aptGet("update", "-q"); err != nil {
		return err
	}
	return aptGet(append([]string{"install", "-y", "-q", "--no-install-recommends"}, missing...)...)
}

func haveSudo() bool {
	_, err := exec.LookPath("sudo")
	return err == nil
}

// aptGet runs apt-get as root: through sudo when this process is not.
func aptGet(args ...string) error {
	if os.Geteuid() == 0 || !haveSudo() {
		return run("apt-get", args...)
	}
	return run("sudo", append([]string{"env", "DEBIAN_FRONTEND=noninteractive", "apt-get"}, args...)...)
}

// run runs a command non-interactively, its output on stderr.
func run(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return nil
}

var kernelDep = regexp.MustCompile(`Depends: (linux-image-[0-9][^\s]*-amd64)\b`)

// kernelPackage returns the name of the kernel package that linux-image-amd64 depends on,
// e.g. linux-image-6.1.0-56-amd64. The answer is remembered until apt's lists change
// (apt-cache takes half a second).
func kernelPackage(cache string) (string, error) {
	memo := filepath.Join(cache, "kernel-package")
	key := "?"
	if st, err := os.Stat("/var/lib/apt/lists"); err == nil {
		key = st.ModTime().String()
	}
	if b, err := os.ReadFile(memo); err == nil {
		if k, p, _ := strings.Cut(strings.TrimSpace(string(b)), "\n"); k == key && p != "" {
			return p, nil
		}
	}
	depends := func() string {
		out, _ := exec.Command("apt-cache", "depends", "linux-image-amd64").Output()
		if m := kernelDep.FindSubmatch(out); m != nil {
			os.MkdirAll(cache, 0o755)
			os.WriteFile(memo, []byte(key+"\n"+string(m[1])+"\n"), 0o644)
			return string(m[1])
		}
		return ""
	}
	if p := depends(); p != "" {
		return p, nil
	}
	// Offline or no package lists: use a cached kernel if there is one.
	if m, _ := filepath.Glob(filepath.Join(cache, "linux-image-*")); len(m) > 0 {
		sort.Strings(m)
		return filepath.Base(m[len(m)-1]), nil
	}
	if err := aptGet("update", "-q"); err != nil {
		return "", err
	}
	if p := depends(); p != "" {
		return p, nil
	}
	return "", errors.New("apt-cache depends linux-image-amd64 names no kernel package: the test VM boots Debian's amd64 kernel package, from a Debian host's package archive (on a host whose own kernel has rdma_rxe, create a device with hack/soft-roce-setup.sh instead, and rxevm runs commands there without a VM)")
}

// A kernel is an extracted kernel package.
type kernel struct {
	release string // e.g. 6.1.0-56-amd64
	vmlinuz string
	modDir  string // .../lib/modules/RELEASE, with modules.dep
}

// fetchKernel downloads and extracts the kernel package into cache/PKG, unless it is there.
func fetchKernel(cache, pkg string) (*kernel, error) {
	dir := filepath.Join(cache, pkg)
	if _, err := os.Stat(dir); err != nil {
		if err := os.MkdirAll(cache, 0o755); err != nil {
			return nil, err
		}
		tmp, err := os.MkdirTemp(cache, ".tmp-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		logf("downloading and extracting %s into %s", pkg, cache)
		args := []string{"download", "-q", pkg}
		if os.Geteuid() == 0 {
			args = append([]string{"-o", "APT::Sandbox::User=root"}, args...)
		}
		cmd := exec.Command("apt-get", args...)
		cmd.Dir, cmd.Stdout, cmd.Stderr = tmp, os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("apt-get download %s: %w", pkg, err)
		}
		debs, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
		if len(debs) != 1 {
			return nil, fmt.Errorf("apt-get download %s: no .deb", pkg)
		}
		x := filepath.Join(tmp, "x")
		if err := run("dpkg-deb", "-x", debs[0], x); err != nil {
			return nil, err
		}
		k, err := findKernel(x)
		if err != nil {
			return nil, err
		}
		if _, err := os.Stat(filepath.Join(k.modDir, "modules.dep")); err != nil {
			// The package's postinst would run depmod; do it here.
			if err := run(mustLook("depmod"), "-b", x, k.release); err != nil {
				return nil, err
			}
		}
		if err := os.Rename(x, dir); err != nil && !os.IsExist(err) {
			if _, err2 := os.Stat(dir); err2 != nil { // not a concurrent rxevm's
				return nil, err
			}
		}
	}
	return findKernel(dir)
}

func mustLook(name string) string {
	if p, err := lookPath(name); err == nil {
		return p
	}
	return name
}

// bootImage returns the kernel image for qemu's -kernel: the uncompressed vmlinux, which qemu
// boots through the PVH entry point (skipping the BIOS and the decompressor: 2 s less under
// TCG), when the kernel has CONFIG_PVH; else the bzImage. vmlinux is extracted once, next to it.
func (k *kernel) bootImage() string {
	vmlinux := filepath.Join(filepath.Dir(k.vmlinuz), "vmlinux-"+k.release)
	if _, err := os.Stat(vmlinux); err == nil {
		return vmlinux
	}
	config, _ := os.ReadFile(filepath.Join(filepath.Dir(k.vmlinuz), "config-"+k.release))
	bz, err := os.ReadFile(k.vmlinuz)
	if err != nil || !bytes.Contains(config, []byte("\nCONFIG_PVH=y\n")) {
		return k.vmlinuz
	}
	elf, err := extractVmlinux(bz)
	if err != nil {
		logf("cannot extract vmlinux, booting the bzImage: %v", err)
		return k.vmlinuz
	}
	tmp := fmt.Sprintf("%s.tmp%d", vmlinux, os.Getpid())
	if os.WriteFile(tmp, elf, 0o644) != nil || os.Rename(tmp, vmlinux) != nil {
		os.Remove(tmp)
		return k.vmlinuz
	}
	return vmlinux
}

// extractVmlinux decompresses the ELF kernel inside a bzImage: the payload starts at the
// first xz, zstd or gzip magic number after which decompression gives an ELF file.
func extractVmlinux(bz []byte) ([]byte, error) {
	for _, c := range []struct {
		magic string
		tool  []string
	}{
		{"\xfd7zXZ\x00", []string{"xz", "-dc", "--single-stream"}},
		{"\x28\xb5\x2f\xfd", []string{"zstd", "-dc"}},
		{"\x1f\x8b\x08", []string{"gzip", "-dc"}},
	} {
		i := bytes.Index(bz, []byte(c.magic))
		if i < 0 {
			continue
		}
		cmd := exec.Command(c.tool[0], c.tool[1:]...)
		cmd.Stdin = bytes.NewReader(bz[i:])
		out, _ := cmd.Output() // trailing data after the payload makes some tools complain
		if bytes.HasPrefix(out, []byte(elf.ELFMAG)) {
			return out, nil
		}
	}
	return nil, errors.New("no xz, zstd or gzip payload")
}

func findKernel(dir string) (*kernel, error) {
	m, _ := filepath.Glob(filepath.Join(dir, "lib/modules/*/modules.order"))
	if len(m) != 1 {
		return nil, fmt.Errorf("%s: want one lib/modules/RELEASE, found %d", dir, len(m))
	}
	k := &kernel{modDir: filepath.Dir(m[0])}
	k.release = filepath.Base(k.modDir)
	k.vmlinuz = filepath.Join(dir, "boot", "vmlinuz-"+k.release)
	if _, err := os.Stat(k.vmlinuz); err != nil {
		return nil, err
	}
	return k, nil
}

// modName turns a module path or name into the kernel's module name: "kernel/fs/9p/9p.ko.xz"
// and "9p" give "9p", "crc32-generic" gives "crc32_generic".
func modName(s string) string {
	s = filepath.Base(s)
	if i := strings.Index(s, ".ko"); i >= 0 {
		s = s[:i]
	}
	return strings.ReplaceAll(s, "-", "_")
}

// loadOrder reads a modules.dep text and returns the module files (as written there) to
// insmod, in an order where each comes after its dependencies, for the given modules and
// everything they depend on. Modules in builtin (module names) are skipped.
func loadOrder(modulesDep io.Reader, want []string, builtin map[string]bool) ([]string, error) {
	path := map[string]string{}
	deps := map[string][]string{}
	sc := bufio.NewScanner(modulesDep)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		file, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		name := modName(file)
		path[name] = strings.TrimSpace(file)
		for _, d := range strings.Fields(rest) {
			deps[name] = append(deps[name], modName(d))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	var order []string
	state := map[string]int{} // 1: visiting, 2: done
	var visit func(string) error
	visit = func(m string) error {
		switch {
		case state[m] == 2 || builtin[m]:
			return nil
		case state[m] == 1:
			return fmt.Errorf("modules.dep: dependency cycle through %s", m)
		case path[m] == "":
			return fmt.Errorf("modules.dep: no module %s", m)
		}
		state[m] = 1
		for _, d := range deps[m] {
			if err := visit(d); err != nil {
				return err
			}
		}
		state[m] = 2
		order = append(order, path[m])
		return nil
	}
	for _, m := range want {
		if err := visit(modName(m)); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// modules returns the guest's modules, in load order, as name and (decompressed) contents.
func (k *kernel) modules(want []string) (names []string, data [][]byte, err error) {
	builtin := map[string]bool{}
	if b, err := os.ReadFile(filepath.Join(k.modDir, "modules.builtin")); err == nil {
		for _, l := range strings.Fields(string(b)) {
			builtin[modName(l)] = true
		}
	}
	dep, err := os.Open(filepath.Join(k.modDir, "modules.dep"))
	if err != nil {
		return nil, nil, err
	}
	defer dep.Close()
	files, err := loadOrder(dep, want, builtin)
	if err != nil {
		return nil, nil, err
	}
	for _, f := range files {
		if !filepath.IsAbs(f) {
			f = filepath.Join(k.modDir, f)
		}
		b, err := readModule(f)
		if err != nil {
			return nil, nil, err
		}
		names = append(names, modName(f))
		data = append(data, b)
	}
	return names, data, nil
}

// readModule reads a .ko, .ko.gz, .ko.xz or .ko.zst file, decompressed: insmod in the guest
// is busybox's, which may not decompress.
func readModule(f string) ([]byte, error) {
	var tool string
	switch filepath.Ext(f) {
	case ".ko":
		return os.ReadFile(f)
	case ".gz":
		r, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		defer r.Close()
		z, err := gzip.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		return io.ReadAll(z)
	case ".xz":
		tool = "xz"
	case ".zst":
		tool = "zstd"
	default:
		return nil, fmt.Errorf("%s: unknown module compression", f)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(tool, "-dc", f)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s -dc %s: %v: %s", tool, f, err, stderr.String())
	}
	return out, nil
}
