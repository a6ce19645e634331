package rdma

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/Mellanox/rdmamap"
)

// fakeSysfs builds /sys/class/infiniband in a temporary directory as the
// kernel lays it out (device entries are symlinks into /sys/devices) and
// points rdmamap at it for the test.
func fakeSysfs(t *testing.T, devs map[string][]fakePort) {
	t.Helper()
	root := t.TempDir()
	class := filepath.Join(root, "class", "infiniband")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	write := func(path, s string) {
		must(os.MkdirAll(filepath.Dir(path), 0o755))
		must(os.WriteFile(path, []byte(s+"\n"), 0o644))
	}
	must(os.MkdirAll(class, 0o755))
	for name, ports := range devs {
		dev := filepath.Join(root, "devices", "pci0000:00", name)
		write(filepath.Join(dev, "node_guid"), "b859:9f03:00d4:e2a0")
		for _, p := range ports {
			pdir := filepath.Join(dev, "ports", p.num)
			write(filepath.Join(pdir, "state"), p.state)
			write(filepath.Join(pdir, "link_layer"), p.link)
			write(filepath.Join(pdir, "rate"), "100 Gb/sec (4X EDR)")
			must(os.MkdirAll(filepath.Join(pdir, "gid_attrs", "ndevs"), 0o755))
			for i, nd := range p.netdevs {
				write(filepath.Join(pdir, "gid_attrs", "ndevs", string(rune('0'+i))), nd)
			}
		}
		must(os.Symlink(dev, filepath.Join(class, name)))
	}
	old := rdmamap.RdmaClassDir
	rdmamap.RdmaClassDir = class
	t.Cleanup(func() { rdmamap.RdmaClassDir = old })
}

type fakePort struct {
	num, state, link string
	netdevs          []string
}

// etherInterface returns a real Ethernet interface of this machine: rdmamap
// asks the kernel (netlink) for the interface's type before it reads sysfs.
func etherInterface(t *testing.T) string {
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagLoopback == 0 && len(ifc.HardwareAddr) == 6 {
			return ifc.Name
		}
	}
	t.Skip("this machine has no Ethernet interface to map")
	return ""
}

func TestDevicesFromFakeSysfs(t *testing.T) {
	fakeSysfs(t, map[string][]fakePort{
		"mlx5_1": {{"1", "1: DOWN", "InfiniBand", nil}},
		"mlx5_0": {
			{"2", "4: ACTIVE", "Ethernet", []string{"enp1s0f1", "enp1s0f1"}},
			{"1", "4: ACTIVE", "Ethernet", []string{"enp1s0f0"}},
		},
	})
	got := Devices()
	if len(got) != 2 || got[0].Name != "mlx5_0" || got[1].Name != "mlx5_1" {
		t.Fatalf("Devices() = %+v, want mlx5_0 then mlx5_1", got)
	}
	d := got[0]
	if d.NodeGUID != "b859:9f03:00d4:e2a0" {
		t.Errorf("mlx5_0 NodeGUID = %q", d.NodeGUID)
	}
	want := []PortInfo{
		{Port: 1, State: "ACTIVE", LinkLayer: "Ethernet", Rate: "100 Gb/sec (4X EDR)", Netdevs: []string{"enp1s0f0"}},
		{Port: 2, State: "ACTIVE", LinkLayer: "Ethernet", Rate: "100 Gb/sec (4X EDR)", Netdevs: []string{"enp1s0f1"}},
	}
	if !slices.EqualFunc(d.Ports, want, func(a, b PortInfo) bool {
		return a.Port == b.Port && a.State == b.State && a.LinkLayer == b.LinkLayer && a.Rate == b.Rate && slices.Equal(a.Netdevs, b.Netdevs)
	}) {
		t.Errorf("mlx5_0 ports = %+v, want %+v", d.Ports, want)
	}
	if p := got[1].Ports; len(p) != 1 || p[0].Active() || p[0].LinkLayer != "InfiniBand" {
		t.Errorf("mlx5_1 ports = %+v, want one inactive InfiniBand port", p)
	}
}

func TestNoDevices(t *testing.T) {
	old := rdmamap.RdmaClassDir
	rdmamap.RdmaClassDir = filepath.Join(t.TempDir(), "missing")
	t.Cleanup(func() { rdmamap.RdmaClassDir = old })
	if got := Devices(); len(got) != 0 {
		t.Errorf("Devices() without sysfs = %+v, want none", got)
	}
	if _, err := DeviceForInterface("lo"); !errors.Is(err, ErrNoDevice) {
		t.Errorf("DeviceForInterface(lo) = %v, want ErrNoDevice", err)
	}
}

func TestDeviceForInterface(t *testing.T) {
	eth := etherInterface(t)
	fakeSysfs(t, map[string][]fakePort{
		"mlx5_0": {{"1", "4: ACTIVE", "Ethernet", []string{"other0"}}},
		"mlx5_3": {
			{"1", "4: ACTIVE", "Ethernet", []string{"other1"}},
			{"2", "4: ACTIVE", "Ethernet", []string{eth}},
		},
	})
	d, err := DeviceForInterface(eth)
	if err != nil {
		t.Fatalf("DeviceForInterface(%s): %v", eth, err)
	}
	if d != (Device{"mlx5_3", 2}) || d.UCXName() != "mlx5_3:2" {
		t.Errorf("DeviceForInterface(%s) = %+v (%s), want mlx5_3 port 2 (mlx5_3:2)", eth, d, d.UCXName())
	}

	t.Setenv("UCX_NET_DEVICES", "")
	cfg, err := Config{Rank: 0, Size: 2, Interface: eth}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NetDevices != "mlx5_3:2" {
		t.Errorf("Config{Interface: %q} gave NetDevices %q, want mlx5_3:2", eth, cfg.NetDevices)
	}
	cfg, _ = Config{Rank: 0, Size: 2, Interface: eth, NetDevices: "mlx5_0:1"}.withDefaults()
	if cfg.NetDevices != "mlx5_0:1" {
		t.Errorf("an explicit NetDevices was replaced by %q", cfg.NetDevices)
	}
	t.Setenv("UCX_NET_DEVICES", "mlx5_0:1")
	cfg, _ = Config{Rank: 0, Size: 2, Interface: eth}.withDefaults()
	if cfg.NetDevices != "" {
		t.Errorf("with $UCX_NET_DEVICES set, Config chose %q; the environment must win", cfg.NetDevices)
	}
}

func TestDeviceForInterfaceWithoutRDMA(t *testing.T) {
	fakeSysfs(t, map[string][]fakePort{"mlx5_0": {{"1", "4: ACTIVE", "Ethernet", []string{"other0"}}}})
	for _, name := range []string{"lo", etherInterface(t)} {
		if _, err := DeviceForInterface(name); !errors.Is(err, ErrNoDevice) {
			t.Errorf("DeviceForInterface(%s) = %v, want an error wrapping ErrNoDevice", name, err)
		}
	}
	_, err := DeviceForInterface("nosuchif0")
	if err == nil || errors.Is(err, ErrNoDevice) {
		t.Errorf("DeviceForInterface(nosuchif0) = %v, want an error saying there is no such interface", err)
	}
}

func TestInterfaceForAddr(t *testing.T) {
	name, err := InterfaceForAddr("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ifc, err := net.InterfaceByName(name)
	if err != nil || ifc.Flags&net.FlagLoopback == 0 {
		t.Errorf("InterfaceForAddr(127.0.0.1) = %q, not the loopback interface", name)
	}
	if _, err := InterfaceForAddr("192.0.2.77"); err == nil {
		t.Error("InterfaceForAddr of a TEST-NET address no interface holds returned no error")
	}
	if _, err := InterfaceForAddr("not-an-ip"); err == nil {
		t.Error("InterfaceForAddr(not-an-ip) returned no error")
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{{Size: 0}, {Rank: 2, Size: 2}, {Size: MaxSize + 1}, {Size: 1, ConnectTimeout: -1}} {
		if _, err := c.withDefaults(); err == nil {
			t.Errorf("Config %+v accepted", c)
		}
	}
}

func TestTags(t *testing.T) {
	for _, r := range []int{0, 1, 7, MaxSize - 1} {
		for _, seq := range []uint64{0, 1, seqMask, seqMask + 5} {
			tag := dataTag(r, seq)
			if tagRank(tag) != r || tag&ctrlBit != 0 || tag&seqMask != seq&seqMask {
				t.Errorf("dataTag(%d, %d) = %#x decodes to rank %d", r, seq, tag, tagRank(tag))
			}
		}
		if c := ctrlTag(r, ctrlBye); tagRank(c) != r || c&ctrlBit == 0 || c&seqMask != ctrlBye {
			t.Errorf("ctrlTag(%d, bye) = %#x", r, c)
		}
	}
}
