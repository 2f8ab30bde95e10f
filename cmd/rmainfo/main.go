// Command rmainfo reports the RDMA devices of this host and what this
// library makes of them: device attributes (atomic_cap above all), ports,
// GID tables with the GID a group uses by default, and the largest payload
// a queue pair sends inline. With -probe it also forms a group of one
// process on each device and runs every path over the loopback connection:
// the NIC fetch-and-add (checked for host byte order), the NIC
// compare-and-swap, RDMA WRITE and READ, and accumulates applied by the
// target engine, each checked and timed.
//
// First it reports what the library checks before it forms a group, each
// ok or with its fix: the locked-memory limit (RLIMIT_MEMLOCK, its hard
// limit and what the process has pinned), whether the process holds
// CAP_IPC_LOCK where it lifts that limit, and whether each device's file
// under /dev/infiniband (and rdma_cm, if present) opens read-write. On a
// host with no RDMA device it says so, and exits with status 2, instead.
//
//	rmainfo [-d device] [-probe] [-n iterations] [-json]
//
// It exits with 1 when a device cannot be queried, a device file it needs
// cannot be opened or a probe fails, and with 2 when there is no device.
package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/onesided/rma/datatype"
	"github.com/onesided/rma/group"
	"github.com/onesided/rma/op"
	"github.com/onesided/rma/verbs"
	"github.com/onesided/rma/win"
)

// Report is what rmainfo prints (-json gives it as is).
type Report struct {
	Access  Access   `json:"access"`
	Devices []Device `json:"devices"`
}

// Access is what the library checks before it forms a group (see
// verbs.CheckAccess and verbs.LimitError): locked memory and device files.
type Access struct {
	UID         int          `json:"uid"`
	Memlock     MemlockCheck `json:"memlock"`
	CapIPCLock  CapCheck     `json:"cap_ipc_lock"`
	DeviceFiles []FileCheck  `json:"device_files"`
}

// MemlockCheck is RLIMIT_MEMLOCK, which registered memory counts against.
// Sizes are bytes, -1 for unlimited (Pinned: -1 when not known).
type MemlockCheck struct {
	Soft   int64  `json:"soft_bytes"`
	Hard   int64  `json:"hard_bytes"`
	Pinned int64  `json:"pinned_bytes"`
	Value  string `json:"value"`
	// OK: nothing limits pinning (unlimited, or CAP_IPC_LOCK held where it
	// counts). A finite limit is not OK: a group fails at Join when it
	// needs more (verbs.ErrResourceLimit, naming the bytes it needs).
	OK   bool   `json:"ok"`
	Note string `json:"note,omitempty"`
	Fix  string `json:"fix,omitempty"`
}

// CapCheck is CAP_IPC_LOCK, which lifts the locked-memory limit.
type CapCheck struct {
	Held          bool `json:"held"`           // in the effective set (CapEff)
	UserNamespace bool `json:"user_namespace"` // in a user namespace other than the initial one, where it does not count
	// OK: held where it counts, or not needed (the limit is unlimited).
	OK   bool   `json:"ok"`
	Note string `json:"note,omitempty"`
	Fix  string `json:"fix,omitempty"`
}

// FileCheck is one device file under /dev/infiniband.
type FileCheck struct {
	Path     string `json:"path"`
	Device   string `json:"device,omitempty"` // the RDMA device it serves; "" for rdma_cm
	Required bool   `json:"required"`         // a group opens it (rdma_cm: only the RDMA CM does)
	Exists   bool   `json:"exists"`
	Mode     string `json:"mode,omitempty"` // as ls prints it
	UID      int    `json:"uid"`
	GID      int    `json:"gid"`
	OK       bool   `json:"ok"` // opens read-write
	Error    string `json:"error,omitempty"`
	Fix      string `json:"fix,omitempty"`
}

// Device is one RDMA device.
type Device struct {
	Name            string   `json:"name"`
	Netdevs         []string `json:"netdevs"`
	Firmware        string   `json:"firmware,omitempty"`
	VendorID        uint32   `json:"vendor_id"`
	VendorPartID    uint32   `json:"vendor_part_id"`
	NodeGUID        string   `json:"node_guid"`
	AtomicCap       string   `json:"atomic_cap"`
	MaxQPRdAtom     int      `json:"max_qp_rd_atom"`
	MaxQPInitRdAtom int      `json:"max_qp_init_rd_atom"`
	MaxMRSize       uint64   `json:"max_mr_size"`
	MaxQP           int      `json:"max_qp"`
	MaxQPWR         int      `json:"max_qp_wr"`
	MaxSGE          int      `json:"max_sge"`
	MaxCQE          int      `json:"max_cqe"`
	MaxInlineData   int      `json:"max_inline_data"` // granted to a QP asking for inlineAsk bytes
	Ports           []Port   `json:"ports"`
	Probe           *Probe   `json:"probe,omitempty"`
	Error           string   `json:"error,omitempty"`
}

// Port is one port of a device.
type Port struct {
	Port       int    `json:"port"`
	State      string `json:"state"`
	LinkLayer  string `json:"link_layer"`
	ActiveMTU  int    `json:"active_mtu"`
	MaxMTU     int    `json:"max_mtu"`
	LID        uint16 `json:"lid"`
	MaxMsgSize uint32 `json:"max_msg_size"`
	GIDs       []GID  `json:"gids"`
	DefaultGID int    `json:"default_gid"` // the index a group uses unless told otherwise; -1: none
	Error      string `json:"error,omitempty"`
}

// GID is one non-zero entry of a port's GID table.
type GID struct {
	Index  int    `json:"index"`
	GID    string `json:"gid"`
	Type   string `json:"type"`
	Netdev string `json:"netdev,omitempty"`
}

// Probe is the loopback check of one device.
type Probe struct {
	NICAtomics string    `json:"nic_atomics"` // "ok", or why NIC atomics are not used
	Ops        []ProbeOp `json:"ops"`
	Error      string    `json:"error,omitempty"`
}

// ProbeOp is one operation run Iterations times over the loopback connection.
type ProbeOp struct {
	Name       string  `json:"name"`
	Route      string  `json:"route"`
	Iterations int     `json:"iterations"`
	MedianUS   float64 `json:"median_us"`
	Error      string  `json:"error,omitempty"`
}

// inlineAsk is the inline size the library's queue pairs ask for.
const inlineAsk = 256

func main() {
	dev := flag.String("d", "", "report only this device")
	probe := flag.Bool("probe", false, "also run every path over a loopback connection on each device")
	iters := flag.Int("n", 1000, "iterations of each probe operation")
	asJSON := flag.Bool("json", false, "print the report as JSON")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: rmainfo [-d device] [-probe] [-n iterations] [-json]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 || *iters < 1 {
		flag.Usage()
		os.Exit(2)
	}
	rep, err := collect(*dev, *probe, *iters)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rmainfo:", err)
		os.Exit(2)
	}
	if *asJSON {
		e := json.NewEncoder(os.Stdout)
		e.SetIndent("", "  ")
		e.Encode(rep)
	} else {
		rep.print(os.Stdout)
	}
	if rep.failed() {
		os.Exit(1)
	}
}

func collect(only string, probe bool, iters int) (*Report, error) {
	devs, err := verbs.Devices()
	if err != nil {
		return nil, err
	}
	rep := &Report{Access: access(only)}
	for _, d := range devs {
		if only != "" && d.Name != only {
			continue
		}
		dv := describe(d)
		if probe && dv.Error == "" {
			dv.Probe = runProbe(d.Name, iters)
		}
		rep.Devices = append(rep.Devices, dv)
	}
	if len(rep.Devices) == 0 {
		if only != "" {
			return nil, fmt.Errorf("no RDMA device %q (%d devices on this host)", only, len(devs))
		}
		return nil, errors.New("no RDMA device on this host")
	}
	return rep, nil
}

// access runs the checks the library makes before it forms a group.
func access(only string) Access {
	a := Access{UID: os.Getuid()}
	l := verbs.ReadLimits()
	bytes := func(n uint64) int64 {
		if n == verbs.Unlimited {
			return -1
		}
		return int64(n)
	}
	m := &a.Memlock
	m.Soft, m.Hard, m.Pinned = bytes(l.Memlock), bytes(l.MemlockHard), -1
	if l.PinnedKnown {
		m.Pinned = int64(l.Pinned)
	}
	m.Value = fmt.Sprintf("%s, hard limit %s", sizeText(l.Memlock), sizeText(l.MemlockHard))
	if l.PinnedKnown {
		m.Value += fmt.Sprintf(", %s pinned", sizeText(l.Pinned))
	}
	m.OK = l.Unbounded()
	switch {
	case l.Memlock == verbs.Unlimited:
		m.Note = "unlimited"
	case m.OK:
		m.Note = "CAP_IPC_LOCK lifts the limit"
	default:
		m.Note = "a group of N ranks pins about 2 MiB per rank plus 3 MiB with the default options, and each window its size; " +
			"Join fails with verbs.ErrResourceLimit, naming what it needs, when that does not fit"
		m.Fix = l.MemlockFix(0) // as a LimitError words it, without a size: that depends on the group
	}
	c := &a.CapIPCLock
	c.Held, c.UserNamespace = l.CapIPCLock, !l.InitUserNS
	c.OK = l.CapIPCLock && l.InitUserNS || l.Memlock == verbs.Unlimited
	switch {
	case !l.CapKnown:
		c.Note = "not known: /proc/self/status could not be read"
	case l.CapIPCLock && !l.InitUserNS:
		c.Note = "held only inside a user namespace, where it does not lift the limit"
	case l.CapIPCLock:
		c.Note = "held: the locked-memory limit does not apply"
	case l.Memlock == verbs.Unlimited:
		c.Note = "not held, not needed: the limit is unlimited"
	default:
		c.Note = "not held, so RLIMIT_MEMLOCK applies"
		c.Fix = "for it to lift the limit, run as root in the container with `docker run --cap-add IPC_LOCK` or " +
			"Kubernetes securityContext.capabilities.add: [\"IPC_LOCK\"] (a process that is not root there does not get it)"
	}
	for _, f := range verbs.DeviceFiles(only) {
		fc := FileCheck{Path: f.Path, Device: f.Device, Required: f.Required, Exists: f.Exists, UID: f.UID, GID: f.GID, OK: f.Err == nil}
		if f.Exists {
			fc.Mode = lsMode(f.Mode)
		}
		if f.Err != nil {
			fc.Error = f.Err.Error()
			var le *verbs.LimitError
			if errors.As(f.Err, &le) {
				fc.Error, _, _ = strings.Cut(fc.Error, "; fix: ")
				fc.Fix = le.Fix
			}
		}
		a.DeviceFiles = append(a.DeviceFiles, fc)
	}
	return a
}

// sizeText prints a byte count as "64 KiB (65536 bytes)" or "unlimited".
func sizeText(n uint64) string {
	if n == verbs.Unlimited {
		return "unlimited"
	}
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB (%d bytes)", n>>20, n)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB (%d bytes)", n>>10, n)
	}
	return fmt.Sprintf("%d bytes", n)
}

// lsMode prints a file mode as ls does (crw-rw-rw-).
func lsMode(m os.FileMode) string {
	kind := "-"
	switch {
	case m&os.ModeCharDevice != 0:
		kind = "c"
	case m&os.ModeDevice != 0:
		kind = "b"
	case m.IsDir():
		kind = "d"
	}
	return kind + m.Perm().String()[1:]
}

// describe queries one device and its ports.
func describe(d verbs.DeviceInfo) Device {
	dv := Device{Name: d.Name, Netdevs: d.Netdevs}
	c, err := verbs.Open(d.Name)
	if err != nil {
		dv.Error = err.Error()
		return dv
	}
	defer c.Close()
	a, err := c.QueryDevice()
	if err != nil {
		dv.Error = err.Error()
		return dv
	}
	dv.Firmware, dv.VendorID, dv.VendorPartID = a.FirmwareVersion, a.VendorID, a.VendorPartID
	dv.NodeGUID = guid(a.NodeGUID)
	dv.AtomicCap = a.AtomicCap.String()
	dv.MaxQPRdAtom, dv.MaxQPInitRdAtom = a.MaxQPRdAtom, a.MaxQPInitRdAtom
	dv.MaxMRSize, dv.MaxQP, dv.MaxQPWR, dv.MaxSGE, dv.MaxCQE = a.MaxMRSize, a.MaxQP, a.MaxQPWR, a.MaxSGE, a.MaxCQE
	if dv.MaxInlineData, err = maxInline(c); err != nil {
		dv.Error = err.Error()
	}
	for p := 1; p <= a.PhysPortCount; p++ {
		dv.Ports = append(dv.Ports, describePort(c, p))
	}
	return dv
}

func describePort(c *verbs.Context, n int) Port {
	p := Port{Port: n, DefaultGID: -1}
	a, err := c.QueryPort(n)
	if err != nil {
		p.Error = err.Error()
		return p
	}
	p.State, p.LinkLayer = a.State.String(), a.LinkLayer.String()
	p.ActiveMTU, p.MaxMTU, p.LID, p.MaxMsgSize = a.ActiveMTU.Bytes(), a.MaxMTU.Bytes(), a.LID, a.MaxMsgSize
	table, err := c.GIDTable(n)
	if err != nil {
		p.Error = err.Error()
		return p
	}
	for _, e := range table {
		if !e.GID.IsZero() {
			p.GIDs = append(p.GIDs, GID{Index: e.Index, GID: e.GID.String(), Type: e.Type.String(), Netdev: e.Netdev})
		}
	}
	if i, err := verbs.DefaultGIDIndex(table); err == nil {
		p.DefaultGID = i
	}
	return p
}

// maxInline creates a queue pair asking for inlineAsk bytes of inline data
// and returns what the device granted.
func maxInline(c *verbs.Context) (int, error) {
	pd, err := c.AllocPD()
	if err != nil {
		return 0, err
	}
	defer pd.Close()
	cq, err := c.CreateCQ(4, nil)
	if err != nil {
		return 0, err
	}
	defer cq.Close()
	qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: 1, MaxRecvWR: 1, MaxInlineData: inlineAsk})
	if err != nil {
		return 0, err
	}
	defer qp.Close()
	return qp.MaxInline(), nil
}

func guid(v uint64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	h := hex.EncodeToString(b[:])
	return h[0:4] + ":" + h[4:8] + ":" + h[8:12] + ":" + h[12:16]
}

// Window layout of the probe.
const (
	dispFAdd = 0  // int64: FetchAndOp SUM (NIC)
	dispCAS  = 8  // int64: CompareAndSwap (NIC)
	dispMax  = 16 // float64: FetchAndOp MAX (engine)
	dispFSum = 24 // float64: Accumulate SUM (engine)
	dispData = 64 // Put/Get
)

// runProbe forms a group of one process on device and runs every path to
// itself, checking each result.
func runProbe(device string, iters int) *Probe {
	pr := &Probe{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute+time.Duration(iters)*5*time.Millisecond)
	defer cancel()
	secret := make([]byte, 16)
	rand.Read(secret)
	g, err := group.Join(ctx, group.Options{Rank: 0, Size: 1, Addr: "127.0.0.1:0", Secret: secret, Device: device})
	if err != nil {
		pr.Error = err.Error()
		return pr
	}
	defer g.Close()
	pr.NICAtomics = "ok"
	if err := g.NICAtomics(); err != nil {
		pr.NICAtomics = err.Error()
	}
	w, err := win.Allocate(ctx, g, 4096, 1)
	if err != nil {
		pr.Error = err.Error()
		return pr
	}
	defer w.Free(ctx)
	if err := w.LockAll(ctx); err != nil {
		pr.Error = err.Error()
		return pr
	}
	defer w.UnlockAll(ctx)
	for _, c := range probeCases(w) {
		pr.Ops = append(pr.Ops, c.run(ctx, iters))
	}
	return pr
}

type probeCase struct {
	name  string
	route string
	// do runs iteration i (from 0) and checks its result.
	do func(ctx context.Context, i int) error
}

func (c probeCase) run(ctx context.Context, iters int) ProbeOp {
	res := ProbeOp{Name: c.name, Route: c.route}
	lat := make([]time.Duration, 0, iters)
	for i := 0; i < iters; i++ {
		t0 := time.Now()
		if err := c.do(ctx, i); err != nil {
			res.Error = fmt.Sprintf("iteration %d: %v", i, err)
			break
		}
		lat = append(lat, time.Since(t0))
	}
	res.Iterations = len(lat)
	if len(lat) > 0 {
		slices.Sort(lat)
		res.MedianUS = math.Round(float64(lat[len(lat)/2].Nanoseconds())/10) / 100
	}
	return res
}

func probeCases(w *win.Window) []probeCase {
	var put, got, half [8]byte
	binary.NativeEndian.PutUint64(half[:], math.Float64bits(0.5))
	return []probeCase{
		{"fetch_and_op_sum_int64", w.RouteFetchAndOp(op.Sum, datatype.Int64).String(),
			func(ctx context.Context, i int) error {
				old, err := win.FetchAndOp(ctx, w, int64(1), 0, dispFAdd, op.Sum)
				if err == nil && old != int64(i) {
					err = fmt.Errorf("fetched %d, want %d", old, i)
				}
				return err
			}},
		{"compare_and_swap_int64", w.RouteCompareAndSwap(datatype.Int64).String(),
			func(ctx context.Context, i int) error {
				old, err := win.CompareAndSwap(ctx, w, int64(i), int64(i+1), 0, dispCAS)
				if err == nil && old != int64(i) {
					err = fmt.Errorf("compare %d found %d", i, old)
				}
				return err
			}},
		{"put_8B_flush_get_8B", "rdma-write+rdma-read",
			func(ctx context.Context, i int) error {
				binary.NativeEndian.PutUint64(put[:], uint64(i)*0x9e3779b97f4a7c15)
				if err := w.Put(ctx, put[:], 0, dispData); err != nil {
					return err
				}
				if err := w.Flush(ctx, 0); err != nil {
					return err
				}
				if err := w.Get(ctx, got[:], 0, dispData); err != nil {
					return err
				}
				if got != put {
					return fmt.Errorf("read back %x, wrote %x", got, put)
				}
				return nil
			}},
		{"fetch_and_op_max_float64", w.RouteFetchAndOp(op.Max, datatype.Float64).String(),
			func(ctx context.Context, i int) error {
				old, err := win.FetchAndOp(ctx, w, float64(i+1), 0, dispMax, op.Max)
				if err == nil && old != float64(i) {
					err = fmt.Errorf("fetched %v, want %v", old, float64(i))
				}
				return err
			}},
		{"accumulate_sum_float64_flush", w.Route(op.Sum, datatype.Float64).String(),
			func(ctx context.Context, i int) error {
				if err := w.Accumulate(ctx, half[:], datatype.Float64, 0, dispFSum, op.Sum); err != nil {
					return err
				}
				if err := w.Flush(ctx, 0); err != nil {
					return err
				}
				if v := math.Float64frombits(binary.NativeEndian.Uint64(w.Bytes()[dispFSum:])); v != float64(i+1)/2 {
					return fmt.Errorf("window holds %v after %d additions of 0.5", v, i+1)
				}
				return nil
			}},
	}
}

func (r *Report) failed() bool {
	for _, f := range r.Access.DeviceFiles {
		if f.Required && !f.OK {
			return true
		}
	}
	for _, d := range r.Devices {
		if d.Error != "" {
			return true
		}
		for _, p := range d.Ports {
			if p.Error != "" {
				return true
			}
		}
		if pr := d.Probe; pr != nil {
			if pr.Error != "" {
				return true
			}
			for _, o := range pr.Ops {
				if o.Error != "" {
					return true
				}
			}
		}
	}
	return false
}

func (r *Report) print(out io.Writer) {
	r.Access.print(out)
	for _, d := range r.Devices {
		fmt.Fprintln(out)
		fmt.Fprintf(out, "%s (netdevs %s)\n", d.Name, strings.Join(d.Netdevs, ","))
		if d.Error != "" {
			fmt.Fprintf(out, "  error: %s\n", d.Error)
			if d.AtomicCap == "" {
				continue
			}
		}
		fmt.Fprintf(out, "  firmware %q, vendor 0x%x part %d, node GUID %s\n", d.Firmware, d.VendorID, d.VendorPartID, d.NodeGUID)
		fmt.Fprintf(out, "  atomic_cap          %s (%s)\n", d.AtomicCap, atomicMeaning(d.AtomicCap))
		fmt.Fprintf(out, "  max_qp_rd_atom      %d (initiator %d)\n", d.MaxQPRdAtom, d.MaxQPInitRdAtom)
		fmt.Fprintf(out, "  max_inline_data     %d (granted to a QP asking %d)\n", d.MaxInlineData, inlineAsk)
		fmt.Fprintf(out, "  max_mr_size         %d\n", d.MaxMRSize)
		fmt.Fprintf(out, "  max_qp %d, max_qp_wr %d, max_sge %d, max_cqe %d\n", d.MaxQP, d.MaxQPWR, d.MaxSGE, d.MaxCQE)
		for _, p := range d.Ports {
			fmt.Fprintf(out, "  port %d: %s, link layer %s, MTU %d (max %d), LID %d, max message %d\n",
				p.Port, p.State, p.LinkLayer, p.ActiveMTU, p.MaxMTU, p.LID, p.MaxMsgSize)
			if p.Error != "" {
				fmt.Fprintf(out, "    error: %s\n", p.Error)
			}
			for _, g := range p.GIDs {
				mark := ""
				if g.Index == p.DefaultGID {
					mark = "  <- default"
				}
				fmt.Fprintf(out, "    GID[%3d] %-40s %-8s %s%s\n", g.Index, g.GID, g.Type, g.Netdev, mark)
			}
		}
		if pr := d.Probe; pr != nil {
			fmt.Fprintf(out, "  probe (loopback, one process):\n")
			if pr.Error != "" {
				fmt.Fprintf(out, "    error: %s\n", pr.Error)
				continue
			}
			fmt.Fprintf(out, "    NIC atomics: %s\n", pr.NICAtomics)
			for _, o := range pr.Ops {
				status := "ok"
				if o.Error != "" {
					status = "FAILED: " + o.Error
				}
				fmt.Fprintf(out, "    %-30s %-20s %6d x  median %8.2f us  %s\n", o.Name, o.Route, o.Iterations, o.MedianUS, status)
			}
		}
	}
}

func (a *Access) print(out io.Writer) {
	status := func(ok bool, fix string) string {
		if ok {
			return "ok"
		}
		if fix == "" {
			return "NOT OK"
		}
		return "NOT OK; fix: " + fix
	}
	limited := func(ok bool, fix string) string { // a finite limit: enough or not depends on the group
		if ok {
			return "ok"
		}
		return "LIMITED; to lift it: " + fix
	}
	fmt.Fprintf(out, "access (uid %d):\n", a.UID)
	m := a.Memlock
	fmt.Fprintf(out, "  %-34s %s: %s\n", "RLIMIT_MEMLOCK (ulimit -l)", m.Value, limited(m.OK, m.Fix))
	if !m.OK && m.Note != "" {
		fmt.Fprintf(out, "  %-34s %s\n", "", m.Note)
	}
	c := a.CapIPCLock
	if c.OK || c.Fix == "" {
		fmt.Fprintf(out, "  %-34s %s\n", "CAP_IPC_LOCK", c.Note)
	} else {
		fmt.Fprintf(out, "  %-34s %s; %s\n", "CAP_IPC_LOCK", c.Note, c.Fix)
	}
	if len(a.DeviceFiles) == 0 {
		fmt.Fprintf(out, "  %-34s none listed in /sys/class/infiniband_verbs (is ib_uverbs loaded?)\n", "device files")
	}
	for _, f := range a.DeviceFiles {
		name := f.Path
		if f.Device != "" {
			name += " (" + f.Device + ")"
		}
		state := "missing"
		if f.Exists {
			state = fmt.Sprintf("%s uid %d gid %d", f.Mode, f.UID, f.GID)
		}
		if !f.Required {
			state += ", needed only by the RDMA connection manager"
		}
		if f.OK {
			fmt.Fprintf(out, "  %-34s %s: ok\n", name, state)
		} else {
			fmt.Fprintf(out, "  %-34s %s: %s\n", name, state, status(false, f.Fix))
		}
	}
}

func atomicMeaning(c string) string {
	switch c {
	case verbs.AtomicNone.String():
		return "no remote atomics: every accumulate goes through the target engine"
	case verbs.AtomicHCA.String():
		return "NIC atomics are atomic among themselves only: routed so they never meet CPU updates"
	case verbs.AtomicGlob.String():
		return "NIC atomics are atomic against the CPU too (the library does not rely on it)"
	}
	return "unknown"
}
