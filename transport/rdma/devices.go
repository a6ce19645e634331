package rdma

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/Mellanox/rdmamap"
)

// ErrNoDevice is wrapped by DeviceForInterface when no RDMA device serves the
// interface: plain Ethernet, loopback, or a machine without RDMA.
var ErrNoDevice = errors.New("no RDMA device")

// Device is one port of an RDMA device.
type Device struct {
	Name string // as in /sys/class/infiniband, e.g. "mlx5_0"
	Port int    // 1-based
}

// UCXName is the device as UCX_NET_DEVICES names it: "mlx5_0:1".
func (d Device) UCXName() string { return d.Name + ":" + strconv.Itoa(d.Port) }

// DeviceForInterface returns the RDMA device port behind the network
// interface ifname (a RoCE netdev or an IPoIB interface), found through
// rdmamap: the port whose GID table names ifname, else the device's first
// active port. It returns an error wrapping ErrNoDevice when there is none.
func DeviceForInterface(ifname string) (Device, error) {
	name, err := rdmamap.GetRdmaDeviceForNetdevice(ifname)
	if err != nil || name == "" {
		if _, lerr := net.InterfaceByName(ifname); lerr != nil {
			return Device{}, fmt.Errorf("rdma: network interface %q: %w", ifname, lerr)
		}
		why := "no device in " + rdmamap.RdmaClassDir + " lists it"
		if err != nil {
			why = err.Error()
		}
		return Device{}, fmt.Errorf("rdma: network interface %q: %w (%s)", ifname, ErrNoDevice, why)
	}
	info := deviceInfo(name)
	if len(info.Ports) == 0 {
		return Device{}, fmt.Errorf("rdma: network interface %q: device %s has no ports in %s: %w",
			ifname, name, rdmamap.RdmaClassDir, ErrNoDevice)
	}
	for _, p := range info.Ports {
		if slices.Contains(p.Netdevs, ifname) {
			return Device{name, p.Port}, nil
		}
	}
	for _, p := range info.Ports {
		if p.Active() {
			return Device{name, p.Port}, nil
		}
	}
	return Device{name, info.Ports[0].Port}, nil
}

// InterfaceForAddr returns the name of the local network interface that
// holds the IP address addr (for example bootstrap.LocalAddrFor(master)).
func InterfaceForAddr(addr string) (string, error) {
	ip := net.ParseIP(addr)
	if ip == nil {
		return "", fmt.Errorf("rdma: %q is not an IP address", addr)
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return "", fmt.Errorf("rdma: listing network interfaces: %w", err)
	}
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return ifc.Name, nil
			}
		}
	}
	return "", fmt.Errorf("rdma: no local network interface holds %s", addr)
}

// DeviceInfo describes one RDMA device as sysfs shows it.
type DeviceInfo struct {
	Name     string
	NodeGUID string
	Ports    []PortInfo
}

// PortInfo describes one port of an RDMA device.
type PortInfo struct {
	Port      int
	State     string   // "ACTIVE", "DOWN", ...
	LinkLayer string   // "InfiniBand" or "Ethernet"
	Rate      string   // "100 Gb/sec (4X EDR)"
	Netdevs   []string // network interfaces in the port's GID table (RoCE)
}

// Active reports whether the port can carry traffic.
func (p PortInfo) Active() bool { return p.State == "ACTIVE" }

// Devices lists the RDMA devices of this machine and their ports, sorted by
// name; none when the kernel has no RDMA support.
func Devices() []DeviceInfo {
	names := rdmamap.GetRdmaDeviceList()
	slices.Sort(names)
	out := make([]DeviceInfo, 0, len(names))
	for _, n := range names {
		out = append(out, deviceInfo(n))
	}
	return out
}

func deviceInfo(name string) DeviceInfo {
	dir := filepath.Join(rdmamap.RdmaClassDir, name)
	d := DeviceInfo{Name: name, NodeGUID: readLine(filepath.Join(dir, rdmamap.RdmaNodeGuidFile))}
	for _, ps := range rdmamap.GetPorts(name) {
		n, err := strconv.Atoi(ps)
		if err != nil {
			continue
		}
		pdir := filepath.Join(dir, rdmamap.RdmaPortsdir, ps)
		p := PortInfo{Port: n, LinkLayer: readLine(filepath.Join(pdir, "link_layer")), Rate: readLine(filepath.Join(pdir, "rate"))}
		p.State = readLine(filepath.Join(pdir, "state")) // "4: ACTIVE"
		if _, s, ok := strings.Cut(p.State, ": "); ok {
			p.State = s
		}
		ndevs := filepath.Join(pdir, rdmamap.RdmaGidAttrDir, rdmamap.RdmaGidAttrNdevDir)
		if ents, err := os.ReadDir(ndevs); err == nil {
			for _, e := range ents {
				if nd := readLine(filepath.Join(ndevs, e.Name())); nd != "" && !slices.Contains(p.Netdevs, nd) {
					p.Netdevs = append(p.Netdevs, nd)
				}
			}
		}
		d.Ports = append(d.Ports, p)
	}
	slices.SortFunc(d.Ports, func(a, b PortInfo) int { return a.Port - b.Port })
	return d
}

func readLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
