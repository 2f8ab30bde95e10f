package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// -compare on one host with -mpich also runs osclat (mpich/osclat.c, built
// with mpicc.mpich) under mpiexec.mpich on the same device, once per round
// after the perftest tests: MPICH's latency of the six operations that
// rmabench times one at a time. Its rows, informational, are named as ours
// with /mpich appended; their ratio is ours/MPICH, MPICH's figure in the
// perftest column. MPICH 4.0.2 runs over UCX, which on rxe does the
// atomics and accumulates in software at the target (a SEND each way).

// mpichCase is a case of osclat: it is named as the row of ours that it is
// compared with.
type mpichCase struct {
	name  string // osclat's case and our row
	calls string // what osclat times
}

var mpichCases = []mpichCase{
	{"fetch_and_op_sum_int64", "MPI_Fetch_and_op(SUM, int64) + MPI_Win_flush"},
	{"compare_and_swap_int64", "MPI_Compare_and_swap(int64) + MPI_Win_flush"},
	{"get_8B", "MPI_Get(8 B) + MPI_Win_flush"},
	{"put_8B_flush", "MPI_Put(8 B) + MPI_Win_flush"},
	{"accumulate_sum_float64_1_flush", "MPI_Accumulate(SUM, 1 float64) + MPI_Win_flush"},
	{"get_accumulate_sum_float64_1", "MPI_Get_accumulate(SUM, 1 float64) + MPI_Win_flush"},
}

// mpichSuffix ends the names of the rows against MPICH.
const mpichSuffix = "/mpich"

// pt is the case as the test of a row: rd.pts holds its figure under
// pt().String(), as perftest's.
func (m mpichCase) pt() ptest {
	return ptest{id: "mpich_" + m.name, bin: "MPICH", args: []string{m.calls}}
}

// mpichTargets are the rows against MPICH: each is our row of the same
// name (the same case of ours, so the same figure of ours), against
// osclat's t_typical (its median), with no target.
func mpichTargets() []target {
	var ts []target
	for _, m := range mpichCases {
		for _, t := range append(append([]target{}, targets...), extras...) {
			if t.name == m.name {
				t.name += mpichSuffix
				t.pt, t.column, t.scale, t.max = m.pt(), "t_typical[usec]", 0, 0
				ts = append(ts, t)
				break
			}
		}
	}
	return ts
}

// mpichLimit bounds one run of osclat (in the emulated test VM, MPICH
// starts in about 2 s and its six cases of 300 iterations take 1 s, its
// stalls of 4-16 ms included). A run killed on this limit is not tried
// again in the later rounds, which would only wait as long. (A variable
// for the tests.)
var mpichLimit = time.Minute

// errMPICHKilled is the error of a run of osclat killed on mpichLimit.
var errMPICHKilled = errors.New("killed on its time limit")

// mpichEnv is the environment of mpiexec.mpich: UCX on the device, port
// and GID index that perftest uses, over verbs only (MPIR_CVAR_NOLOCAL: no
// shared memory between the two ranks, which would leave the device out).
// UCX_UD_VERBS_ETH_DGID_CHECK=n: UCX's UD transport otherwise checks the
// RoCE header type in a completion field that only Mellanox NICs fill, and
// every rank aborts on rxe with "UD endpoint ... unhandled timeout error".
// The transports, that check and MPIR_CVAR_NOLOCAL can be set otherwise in
// environ; the device and GID are always those of the comparison.
func mpichEnv(environ []string, dev string, port, gid int) []string {
	env := append([]string{}, environ...)
	set := map[string]bool{}
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	for _, kv := range []string{"UCX_TLS=rc_verbs,ud_verbs,self", "UCX_UD_VERBS_ETH_DGID_CHECK=n", "MPIR_CVAR_NOLOCAL=1"} {
		if k, _, _ := strings.Cut(kv, "="); !set[k] {
			env = append(env, kv)
		}
	}
	return append(env, "UCX_NET_DEVICES="+dev+":"+strconv.Itoa(port), "UCX_IB_GID_INDEX="+strconv.Itoa(gid))
}

// runMPICH runs osclat (the program at path) on 2 ranks of mpiexec.mpich
// on this host and returns its figures by case, and the line naming the
// MPI library.
func runMPICH(ctx context.Context, path, dev string, port, gid, iters, warmup int) (map[string]ptResult, string, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, "", fmt.Errorf("%w (hack/bench.sh builds it from cmd/rmabench/mpich/osclat.c with mpicc.mpich: apt-get install mpich libmpich-dev)", err)
	}
	mpiexec, err := exec.LookPath("mpiexec.mpich")
	if err != nil {
		return nil, "", fmt.Errorf("%w (apt-get install mpich)", err)
	}
	ctx, cancel := context.WithTimeout(ctx, mpichLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, mpiexec, "-launcher", "fork", "-n", "2", path, "-n", strconv.Itoa(iters), "-w", strconv.Itoa(warmup))
	cmd.Env = mpichEnv(os.Environ(), dev, port, gid)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// The ranks are mpiexec's children: on the time limit the whole
	// process group goes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Run()
	if ctx.Err() == context.DeadlineExceeded {
		err = fmt.Errorf("%w (%v)", errMPICHKilled, mpichLimit)
	}
	if err != nil {
		if why := firstError(stderr.Bytes()); why != "" {
			err = fmt.Errorf("%w: %s", err, why)
		}
		return nil, "", fmt.Errorf("mpiexec.mpich %s: %w\n%s%s", path, err, stdout.Bytes(), firstLines(stderr.Bytes(), 20))
	}
	res, lib, err := parseOsclat(stdout.Bytes())
	if err != nil {
		return nil, "", fmt.Errorf("%s: %v\n%s%s", path, err, stdout.Bytes(), firstLines(stderr.Bytes(), 20))
	}
	return res, lib, nil
}

// parseOsclat reads osclat's output: a "# " line naming the library, a
// header that starts with #case, and a line per case, whose columns it
// returns by case.
func parseOsclat(out []byte) (map[string]ptResult, string, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	var head []string
	var lib string
	res := map[string]ptResult{}
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "#case"):
			head = strings.Fields(line)
			continue
		case strings.HasPrefix(line, "# ") && lib == "":
			lib = strings.TrimSpace(line[2:])
			continue
		case head == nil:
			continue
		}
		f := strings.Fields(line)
		if len(f) != len(head) {
			continue
		}
		r := ptResult{}
		for i, h := range head[1:] {
			v, err := strconv.ParseFloat(f[i+1], 64)
			if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
				return nil, "", fmt.Errorf("osclat's %s of %s is %q, not a number", h, f[0], f[i+1])
			}
			r[h] = v
		}
		res[f[0]] = r
	}
	if head == nil {
		return nil, "", errors.New("no result table (#case ...) in osclat's output")
	}
	if len(res) == 0 {
		return nil, "", errors.New("no result line after osclat's header")
	}
	return res, lib, nil
}

// measureMPICH runs osclat once and keeps its figures in rd under the
// tests of the rows against MPICH, or for each, why it has none: a failed
// run fails those rows, not the comparison.
func (b *bench) measureMPICH(ctx context.Context, dev string, port, gid, iters int, rd *round) {
	var res map[string]ptResult
	var lib string
	err := b.mpichHung
	if err == nil {
		res, lib, err = runMPICH(ctx, b.c.mpich, dev, port, gid, iters, b.c.warmup)
		if err != nil {
			b.prog.print(os.Stderr, fmt.Sprintf("rmabench: MPICH: %v\n", err))
		}
		switch {
		case errors.Is(err, errMPICHKilled):
			b.mpichHung = fmt.Errorf("not run: an earlier run was %w", errMPICHKilled)
		case err == nil && b.mpichLib == "":
			b.mpichLib = lib
		}
	}
	if err != nil {
		err = fmt.Errorf("MPICH: %s", firstLine(err))
	}
	for _, m := range mpichCases {
		key := m.pt().String()
		switch r, ok := res[m.name]; {
		case err != nil:
			rd.refErrs[key] = err
		case !ok:
			rd.refErrs[key] = fmt.Errorf("MPICH: osclat printed no line for %s", m.name)
		default:
			rd.pts[key] = r
		}
	}
}

// firstError is the first line of out that reports an error (UCX's and
// MPICH's messages), for a row's error; "" if none does.
func firstError(out []byte) string {
	for _, line := range strings.Split(string(out), "\n") {
		l := strings.ToLower(line)
		if strings.Contains(l, "error") || strings.Contains(l, "fatal") || strings.Contains(l, "abort") {
			line = strings.Join(strings.Fields(line), " ")
			if len(line) > 200 {
				line = line[:200] + "..."
			}
			return line
		}
	}
	return ""
}

// firstLines is the first n lines of out (UCX's fatal error comes first,
// then its backtrace).
func firstLines(out []byte, n int) string {
	lines := strings.SplitAfterN(string(out), "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "")
}
