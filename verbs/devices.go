package verbs

import (
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/Mellanox/rdmamap"
)

// DeviceInfo names an RDMA device and the network devices it runs over.
type DeviceInfo struct {
	// Name is the RDMA device's name (mlx5_0, rxe0); Netdevs the names of
	// its network devices.
	Name    string
	Netdevs []string
}

// Devices lists the RDMA devices of this host with their network devices
// (for RoCE and rxe: the Ethernet netdev; for InfiniBand: the IPoIB one).
// It reads sysfs and needs no cgo; an empty list with a nil error means none.
func Devices() ([]DeviceInfo, error) {
	names := rdmamap.GetRdmaDeviceList()
	sort.Strings(names)
	byDev := map[string]map[string]bool{}
	for _, n := range names {
		byDev[n] = map[string]bool{}
	}
	// netdev -> RDMA device, as rdmamap maps it (PCI and IPoIB devices).
	if ifs, err := os.ReadDir("/sys/class/net"); err == nil {
		for _, ifc := range ifs {
			if dev, err := rdmamap.GetRdmaDeviceForNetdevice(ifc.Name()); err == nil && byDev[dev] != nil {
				byDev[dev][ifc.Name()] = true
			}
		}
	}
	// Software devices (rxe, siw) have no PCI parent: their GID table names the netdev.
	for _, n := range names {
		ndevs, _ := filepath.Glob(filepath.Join("/sys/class/infiniband", n, "ports", "*", "gid_attrs", "ndevs", "*"))
		for _, f := range ndevs {
			if b, err := os.ReadFile(f); err == nil {
				if nd := strings.TrimSpace(string(b)); nd != "" {
					byDev[n][nd] = true
				}
			}
		}
	}
	out := make([]DeviceInfo, 0, len(names))
	for _, n := range names {
		d := DeviceInfo{Name: n}
		for nd := range byDev[n] {
			d.Netdevs = append(d.Netdevs, nd)
		}
		sort.Strings(d.Netdevs)
		out = append(out, d)
	}
	return out, nil
}
