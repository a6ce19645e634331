package gpu

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// ErrNoDriver is wrapped by Discover when NVML cannot be used: no NVIDIA
// driver, no libnvidia-ml.so.1, or a build without cgo.
var ErrNoDriver = errors.New("no NVIDIA driver")

// Device is one GPU.
type Device struct {
	Index       int
	Name        string
	UUID        string
	BusID       string // PCI bus id, as nvidia-smi prints it
	MemoryTotal uint64 // bytes
	MemoryUsed  uint64 // bytes
	NVLinks     int    // active NVLinks
}

// Level is how two GPUs are connected, from closest to farthest.
type Level string

// Topology levels, with nvidia-smi's names.
const (
	LevelSelf       Level = "X"
	LevelNVLink     Level = "NV"   // NVLink (the matrix shows NV<links>)
	LevelBoard      Level = "BRD"  // same board (NVML TOPOLOGY_INTERNAL)
	LevelSwitch     Level = "PIX"  // one PCIe switch
	LevelSwitches   Level = "PXB"  // several PCIe switches
	LevelHostBridge Level = "PHB"  // a PCIe host bridge
	LevelNUMA       Level = "NODE" // host bridges within one NUMA node
	LevelSystem     Level = "SYS"  // across NUMA nodes (SMP interconnect)
	LevelUnknown    Level = "?"
)

// Link is the connection between two GPUs.
type Link struct {
	Level   Level
	NVLinks int // NVLinks between the two, when Level is LevelNVLink
}

func (l Link) String() string {
	if l.Level == LevelNVLink {
		return fmt.Sprintf("NV%d", l.NVLinks)
	}
	return string(l.Level)
}

// Topology is what Discover found.
type Topology struct {
	Driver  string // driver version
	CUDA    string // CUDA version the driver supports
	Devices []Device
	Links   [][]Link // Links[i][j] between Devices[i] and Devices[j]
}

// Describe prints this host's GPUs and the topology matrix to w, or one
// line "no NVIDIA driver: ..." when NVML cannot be used (that is not an
// error: a host without GPUs is described). It returns only write errors
// and NVML errors after a successful init.
func Describe(w io.Writer) error {
	t, err := Discover()
	if errors.Is(err, ErrNoDriver) {
		_, werr := fmt.Fprintf(w, "%v\n", err)
		return werr
	}
	if err != nil {
		return err
	}
	return t.Write(w)
}

// Write renders t as text.
func (t *Topology) Write(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "NVIDIA driver %s, CUDA %s, %d GPU(s)\n", t.Driver, t.CUDA, len(t.Devices))
	for _, d := range t.Devices {
		fmt.Fprintf(&b, "GPU%d  %-28s %s  bus %s  memory %.1f GiB (%.1f GiB used)  NVLinks %d\n",
			d.Index, d.Name, d.UUID, d.BusID, gib(d.MemoryTotal), gib(d.MemoryUsed), d.NVLinks)
	}
	if len(t.Devices) > 1 {
		b.WriteString("\n      ")
		for j := range t.Devices {
			fmt.Fprintf(&b, " %6s", fmt.Sprintf("GPU%d", j))
		}
		b.WriteByte('\n')
		for i, row := range t.Links {
			fmt.Fprintf(&b, "%-6s", fmt.Sprintf("GPU%d", i))
			for _, l := range row {
				fmt.Fprintf(&b, " %6s", l)
			}
			b.WriteByte('\n')
		}
		b.WriteString("\nX = self, NV# = # NVLinks, BRD = same board, PIX = one PCIe switch, PXB = several PCIe switches,\n" +
			"PHB = PCIe host bridge, NODE = within a NUMA node, SYS = across NUMA nodes\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func gib(b uint64) float64 { return float64(b) / (1 << 30) }

// NodeKey is a key that is equal for ranks on the same node and differs
// between nodes, for grouping ranks in hierarchical collectives:
// $COLLKIT_NODE when set, else the host name followed by a fingerprint of
// the GPUs NVML sees (their UUIDs), so that containers that share a host
// name but not GPUs are told apart. Without NVML it is the host name.
func NodeKey() string {
	if k := os.Getenv("COLLKIT_NODE"); k != "" {
		return k
	}
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	t, err := Discover()
	if err != nil || len(t.Devices) == 0 {
		return host
	}
	return host + "/" + fingerprint(t.Devices)
}

func fingerprint(ds []Device) string {
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.UUID
	}
	slices.Sort(ids)
	sum := sha256.Sum256([]byte(strings.Join(ids, ",")))
	return "gpus-" + hex.EncodeToString(sum[:6])
}
