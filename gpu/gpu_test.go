package gpu

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestDescribeWithoutDriver(t *testing.T) {
	_, err := Discover()
	if err == nil {
		t.Skip("NVML works on this host")
	}
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("Discover: %v, want ErrNoDriver", err)
	}
	var b bytes.Buffer
	if err := Describe(&b); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.HasPrefix(out, "no NVIDIA driver: ") || strings.Count(out, "\n") != 1 {
		t.Errorf("Describe without a driver printed %q, want one line starting \"no NVIDIA driver: \"", out)
	}
}

func TestDescribeWithDriver(t *testing.T) {
	topo, err := Discover()
	if err != nil {
		t.Skip(err)
	}
	if len(topo.Links) != len(topo.Devices) {
		t.Fatalf("%d devices but %d rows of links", len(topo.Devices), len(topo.Links))
	}
	for i := range topo.Devices {
		if topo.Links[i][i].Level != LevelSelf || topo.Devices[i].BusID == "" {
			t.Errorf("GPU%d: %+v, self link %v", i, topo.Devices[i], topo.Links[i][i])
		}
	}
}

func TestWrite(t *testing.T) {
	topo := &Topology{Driver: "550.54", CUDA: "12.4",
		Devices: []Device{
			{Index: 0, Name: "NVIDIA H100", UUID: "GPU-a", BusID: "00000000:18:00.0", MemoryTotal: 80 << 30, NVLinks: 18},
			{Index: 1, Name: "NVIDIA H100", UUID: "GPU-b", BusID: "00000000:2A:00.0", MemoryTotal: 80 << 30, NVLinks: 18},
			{Index: 2, Name: "NVIDIA H100", UUID: "GPU-c", BusID: "00000000:3A:00.0", MemoryTotal: 80 << 30},
		},
		Links: [][]Link{
			{{Level: LevelSelf}, {Level: LevelNVLink, NVLinks: 18}, {Level: LevelSystem}},
			{{Level: LevelNVLink, NVLinks: 18}, {Level: LevelSelf}, {Level: LevelNUMA}},
			{{Level: LevelSystem}, {Level: LevelNUMA}, {Level: LevelSelf}},
		}}
	var b bytes.Buffer
	if err := topo.Write(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"NVIDIA driver 550.54, CUDA 12.4, 3 GPU(s)",
		"GPU0  NVIDIA H100                  GPU-a  bus 00000000:18:00.0  memory 80.0 GiB (0.0 GiB used)  NVLinks 18",
		"GPU0        X   NV18    SYS", "GPU1     NV18      X   NODE"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestNodeKey(t *testing.T) {
	t.Setenv("COLLKIT_NODE", "rack3-node7")
	if k := NodeKey(); k != "rack3-node7" {
		t.Errorf("NodeKey with COLLKIT_NODE = %q", k)
	}
	t.Setenv("COLLKIT_NODE", "")
	if k := NodeKey(); k == "" {
		t.Error("NodeKey is empty")
	}
	a := fingerprint([]Device{{UUID: "GPU-b"}, {UUID: "GPU-a"}})
	if b := fingerprint([]Device{{UUID: "GPU-a"}, {UUID: "GPU-b"}}); a != b {
		t.Errorf("fingerprint depends on order: %s %s", a, b)
	}
	if c := fingerprint([]Device{{UUID: "GPU-a"}}); c == a {
		t.Error("different GPU sets share a fingerprint")
	}
}
