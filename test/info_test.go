//go:build integration

package test

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onesided/rma/verbs"
)

// rmainfoReport is the part of rmainfo -json that the test checks.
type rmainfoReport struct {
	Devices []struct {
		Name            string `json:"name"`
		NodeGUID        string `json:"node_guid"`
		VendorID        uint32 `json:"vendor_id"`
		AtomicCap       string `json:"atomic_cap"`
		MaxQPRdAtom     int    `json:"max_qp_rd_atom"`
		MaxQPInitRdAtom int    `json:"max_qp_init_rd_atom"`
		MaxQP           int    `json:"max_qp"`
		MaxQPWR         int    `json:"max_qp_wr"`
		MaxSGE          int    `json:"max_sge"`
		MaxCQE          int    `json:"max_cqe"`
		MaxInlineData   int    `json:"max_inline_data"`
		Ports           []struct {
			Port       int    `json:"port"`
			State      string `json:"state"`
			LinkLayer  string `json:"link_layer"`
			ActiveMTU  int    `json:"active_mtu"`
			MaxMTU     int    `json:"max_mtu"`
			LID        uint16 `json:"lid"`
			MaxMsgSize uint32 `json:"max_msg_size"`
			DefaultGID int    `json:"default_gid"`
			GIDs       []struct {
				Index int    `json:"index"`
				GID   string `json:"gid"`
				Type  string `json:"type"`
			} `json:"gids"`
		} `json:"ports"`
		Probe *struct {
			NICAtomics string `json:"nic_atomics"`
			Ops        []struct {
				Name       string  `json:"name"`
				Route      string  `json:"route"`
				Iterations int     `json:"iterations"`
				MedianUS   float64 `json:"median_us"`
				Error      string  `json:"error"`
			} `json:"ops"`
			Error string `json:"error"`
		} `json:"probe"`
	} `json:"devices"`
}

// devinfo is what ibv_devinfo -v prints about one device: the device's
// "key: value" lines, each port's, and each port's GID lines.
type devinfo struct {
	dev   map[string]string
	ports []map[string]string
	gids  []map[int][2]string // index -> gid, type
}

var gidLine = regexp.MustCompile(`^GID\[\s*(\d+)\]:\s+(\S+), (.+)$`)

func ibvDevinfo(t *testing.T, name string) devinfo {
	t.Helper()
	out, err := exec.Command("ibv_devinfo", "-v", "-d", name).CombinedOutput()
	if err != nil {
		t.Fatalf("ibv_devinfo -v -d %s: %v\n%s", name, err, out)
	}
	d := devinfo{dev: map[string]string{}}
	cur := d.dev
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if m := gidLine.FindStringSubmatch(line); m != nil && len(d.ports) > 0 {
			i, _ := strconv.Atoi(m[1])
			d.gids[len(d.gids)-1][i] = [2]string{m[2], m[3]}
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if k == "port" {
			cur = map[string]string{}
			d.ports = append(d.ports, cur)
			d.gids = append(d.gids, map[int][2]string{})
			continue
		}
		if _, seen := cur[k]; !seen {
			cur[k] = v
		}
	}
	return d
}

// firstInt reads the number a value starts with ("1024 (3)", "0x800000").
func firstInt(t *testing.T, s string) uint64 {
	t.Helper()
	f, _, _ := strings.Cut(s, " ")
	v, err := strconv.ParseUint(f, 0, 64)
	if err != nil {
		t.Fatalf("ibv_devinfo value %q: %v", s, err)
	}
	return v
}

// TestRmainfo runs the device report with its loopback probe and checks
// every attribute it prints against ibv_devinfo, and every probe operation
// (each checks its own results) against the routes the library documents.
func TestRmainfo(t *testing.T) {
	requireDevice(t)
	dir := os.Getenv("RMA_EXAMPLES_DIR")
	if dir == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("RMA_EXAMPLES_DIR is not set: in CI rmainfo must run (make integration builds it)")
		}
		t.Skip("RMA_EXAMPLES_DIR is not set; run through make integration")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "rmainfo"), "-json", "-probe", "-n", "200")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	t.Logf("rmainfo -json -probe -n 200:\n%s", out)
	if err != nil {
		t.Fatalf("rmainfo: %v", err)
	}
	var rep rmainfoReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("rmainfo -json: %v", err)
	}
	devs, err := verbs.Devices()
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Devices) != len(devs) {
		t.Fatalf("rmainfo reports %d devices, the host has %d", len(rep.Devices), len(devs))
	}
	for i, d := range rep.Devices {
		if d.Name != devs[i].Name {
			t.Errorf("device %d: rmainfo says %s, verbs %s", i, d.Name, devs[i].Name)
			continue
		}
		ref := ibvDevinfo(t, d.Name)
		check := func(what string, got, want any) {
			t.Helper()
			if got != want {
				t.Errorf("%s %s: rmainfo %v, ibv_devinfo %v", d.Name, what, got, want)
			}
		}
		check("node_guid", d.NodeGUID, ref.dev["node_guid"])
		check("vendor_id", uint64(d.VendorID), firstInt(t, ref.dev["vendor_id"]))
		check("atomic_cap", d.AtomicCap, strings.Fields(ref.dev["atomic_cap"])[0])
		check("max_qp_rd_atom", uint64(d.MaxQPRdAtom), firstInt(t, ref.dev["max_qp_rd_atom"]))
		check("max_qp_init_rd_atom", uint64(d.MaxQPInitRdAtom), firstInt(t, ref.dev["max_qp_init_rd_atom"]))
		check("max_qp", uint64(d.MaxQP), firstInt(t, ref.dev["max_qp"]))
		check("max_qp_wr", uint64(d.MaxQPWR), firstInt(t, ref.dev["max_qp_wr"]))
		check("max_sge", uint64(d.MaxSGE), firstInt(t, ref.dev["max_sge"]))
		check("max_cqe", uint64(d.MaxCQE), firstInt(t, ref.dev["max_cqe"]))
		if d.MaxInlineData <= 0 {
			t.Errorf("%s: max_inline_data %d", d.Name, d.MaxInlineData)
		}
		if len(d.Ports) != len(ref.ports) {
			t.Fatalf("%s: rmainfo reports %d ports, ibv_devinfo %d", d.Name, len(d.Ports), len(ref.ports))
		}
		for j, p := range d.Ports {
			rp := ref.ports[j]
			check("port state", "PORT_"+p.State, strings.Fields(rp["state"])[0])
			check("link_layer", p.LinkLayer, rp["link_layer"])
			check("active_mtu", uint64(p.ActiveMTU), firstInt(t, rp["active_mtu"]))
			check("max_mtu", uint64(p.MaxMTU), firstInt(t, rp["max_mtu"]))
			check("port_lid", uint64(p.LID), firstInt(t, rp["port_lid"]))
			check("max_msg_sz", uint64(p.MaxMsgSize), firstInt(t, rp["max_msg_sz"]))
			if len(p.GIDs) != len(ref.gids[j]) {
				t.Errorf("%s port %d: rmainfo lists %d GIDs, ibv_devinfo %d", d.Name, p.Port, len(p.GIDs), len(ref.gids[j]))
			}
			v4 := -1 // the RoCE v2 GID with an IPv4-mapped address: the documented default
			for _, g := range p.GIDs {
				r, ok := ref.gids[j][g.Index]
				if !ok || !net.ParseIP(g.GID).Equal(net.ParseIP(r[0])) || g.Type != r[1] {
					t.Errorf("%s port %d GID[%d]: rmainfo %s %s, ibv_devinfo %v", d.Name, p.Port, g.Index, g.GID, g.Type, r)
				}
				if v4 < 0 && r[1] == "RoCE v2" && strings.HasPrefix(r[0], "::ffff:") {
					v4 = g.Index
				}
			}
			if v4 >= 0 && p.DefaultGID != v4 {
				t.Errorf("%s port %d: default GID %d, want %d (RoCE v2, IPv4)", d.Name, p.Port, p.DefaultGID, v4)
			}
		}
		pr := d.Probe
		if pr == nil || pr.Error != "" {
			t.Fatalf("%s: probe: %+v", d.Name, pr)
		}
		if d.AtomicCap != "ATOMIC_NONE" && pr.NICAtomics != "ok" {
			t.Errorf("%s: NIC atomics: %s", d.Name, pr.NICAtomics)
		}
		wantRoute := map[string]string{
			"fetch_and_op_sum_int64":       "nic-fetch-add",
			"compare_and_swap_int64":       "nic-compare-swap",
			"put_8B_flush_get_8B":          "rdma-write+rdma-read",
			"fetch_and_op_max_float64":     "engine",
			"accumulate_sum_float64_flush": "engine",
		}
		for _, o := range pr.Ops {
			if o.Error != "" || o.Iterations != 200 || o.MedianUS <= 0 {
				t.Errorf("%s: probe %s: %d iterations, median %v us, error %q", d.Name, o.Name, o.Iterations, o.MedianUS, o.Error)
			}
			if w, ok := wantRoute[o.Name]; !ok || o.Route != w {
				t.Errorf("%s: probe %s took route %s, want %q", d.Name, o.Name, o.Route, w)
			}
			delete(wantRoute, o.Name)
		}
		if len(wantRoute) > 0 {
			t.Errorf("%s: probe did not run %v", d.Name, wantRoute)
		}
	}
}
