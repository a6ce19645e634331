//go:build nvml && cgo && linux

package gpu

import (
	"errors"
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvmlMu serialises Discover: Init and Shutdown are reference counted by
// go-nvml, but there is no reason to race them.
var nvmlMu sync.Mutex

// Discover asks NVML about every GPU of this host. It returns an error
// wrapping ErrNoDriver when nvml.Init fails, and makes no other NVML call
// in that case.
func Discover() (*Topology, error) {
	nvmlMu.Lock()
	defer nvmlMu.Unlock()
	if ret := nvml.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: NVML init failed: %v (is the NVIDIA driver installed and libnvidia-ml.so.1 on the library path?)", ErrNoDriver, ret)
	}
	defer nvml.Shutdown()
	t := &Topology{}
	if v, ret := nvml.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		t.Driver = v
	}
	if v, ret := nvml.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		t.CUDA = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	}
	n, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("gpu: nvmlDeviceGetCount: %w", errors.New(ret.Error()))
	}
	handles := make([]nvml.Device, n)
	remote := make([]map[string]int, n) // NVLinks to each remote bus id
	for i := range n {
		h, ret := nvml.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("gpu: nvmlDeviceGetHandleByIndex(%d): %v", i, ret)
		}
		handles[i] = h
		d := Device{Index: i}
		if s, ret := h.GetName(); ret == nvml.SUCCESS {
			d.Name = s
		}
		if s, ret := h.GetUUID(); ret == nvml.SUCCESS {
			d.UUID = s
		}
		if p, ret := h.GetPciInfo(); ret == nvml.SUCCESS {
			d.BusID = busID(p.BusId)
		}
		if m, ret := h.GetMemoryInfo(); ret == nvml.SUCCESS {
			d.MemoryTotal, d.MemoryUsed = m.Total, m.Used
		}
		remote[i] = map[string]int{}
		for l := range nvml.NVLINK_MAX_LINKS {
			state, ret := h.GetNvLinkState(l)
			if ret != nvml.SUCCESS {
				continue // no such link, or no NVLink on this GPU
			}
			if state != nvml.FEATURE_ENABLED {
				continue
			}
			d.NVLinks++
			if p, ret := h.GetNvLinkRemotePciInfo(l); ret == nvml.SUCCESS {
				remote[i][busID(p.BusId)]++
			}
		}
		t.Devices = append(t.Devices, d)
	}
	t.Links = make([][]Link, n)
	for i := range n {
		t.Links[i] = make([]Link, n)
		for j := range n {
			switch {
			case i == j:
				t.Links[i][j] = Link{Level: LevelSelf}
			case remote[i][t.Devices[j].BusID] > 0:
				t.Links[i][j] = Link{Level: LevelNVLink, NVLinks: remote[i][t.Devices[j].BusID]}
			default:
				lv, ret := handles[i].GetTopologyCommonAncestor(handles[j])
				t.Links[i][j] = Link{Level: LevelUnknown}
				if ret == nvml.SUCCESS {
					t.Links[i][j] = Link{Level: level(lv)}
				}
			}
		}
	}
	return t, nil
}

func level(l nvml.GpuTopologyLevel) Level {
	switch l {
	case nvml.TOPOLOGY_INTERNAL:
		return LevelBoard
	case nvml.TOPOLOGY_SINGLE:
		return LevelSwitch
	case nvml.TOPOLOGY_MULTIPLE:
		return LevelSwitches
	case nvml.TOPOLOGY_HOSTBRIDGE:
		return LevelHostBridge
	case nvml.TOPOLOGY_NODE:
		return LevelNUMA
	case nvml.TOPOLOGY_SYSTEM:
		return LevelSystem
	}
	return LevelUnknown
}

func busID(b [32]int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}
