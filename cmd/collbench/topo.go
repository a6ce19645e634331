package main

import (
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/collkit/collkit/gpu"
	"github.com/collkit/collkit/transport/nccl"
	"github.com/collkit/collkit/transport/rdma"
)

// topo is the topo subcommand: this machine's network interfaces and the
// RDMA device behind each, every RDMA device with its ports (what
// --transport rdma uses), its GPUs and how they connect, and whether NCCL
// loads. It takes no flags.
func topo(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if args[0] == "-h" || args[0] == "--help" {
			fmt.Fprintln(stderr, "Usage: collbench topo\n\nLists network interfaces, RDMA devices and their ports, GPUs and their links, and whether NCCL loads.")
			return 0
		}
		fmt.Fprintf(stderr, "collbench: topo takes no arguments, got %q\n", args[0])
		return exitUsage
	}
	if err := writeNetworkTopo(stdout); err != nil {
		fmt.Fprintf(stderr, "collbench: topo: %v\n", err)
		return exitFailed
	}
	fmt.Fprintln(stdout, "# GPUs (NVML)")
	if err := gpu.Describe(stdout); err != nil {
		fmt.Fprintf(stderr, "collbench: topo: %v\n", err)
		return exitFailed
	}
	fmt.Fprintf(stdout, "# node key for hierarchical grouping: %s\n", gpu.NodeKey())
	fmt.Fprintln(stdout, "# NCCL")
	if err := nccl.Available(); err != nil {
		fmt.Fprintf(stdout, "%v\n", err)
	} else if t, err := nccl.New(nccl.Config{Size: 1}); err == nil {
		fmt.Fprintln(stdout, t.Version())
	}
	return 0
}

func writeNetworkTopo(w io.Writer) error {
	ifs, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("listing network interfaces: %w", err)
	}
	fmt.Fprintf(w, "# Network interfaces\n# %-12s %-5s %-6s %-30s %s\n", "name", "state", "mtu", "addresses", "rdma device")
	for _, ifc := range ifs {
		state := "down"
		if ifc.Flags&net.FlagUp != 0 {
			state = "up"
		}
		var addrs []string
		if as, err := ifc.Addrs(); err == nil {
			for _, a := range as {
				addrs = append(addrs, a.String())
			}
		}
		dev := "none"
		if d, err := rdma.DeviceForInterface(ifc.Name); err == nil {
			dev = d.UCXName()
		}
		fmt.Fprintf(w, "  %-12s %-5s %-6d %-30s %s\n", ifc.Name, state, ifc.MTU, strings.Join(addrs, ","), dev)
	}
	devs := rdma.Devices()
	fmt.Fprintln(w, "# RDMA devices")
	if len(devs) == 0 {
		fmt.Fprintln(w, "  none: this machine has no RDMA devices (no /sys/class/infiniband); --transport rdma runs over UCX's tcp or shared-memory transports")
	}
	for _, d := range devs {
		fmt.Fprintf(w, "  %s node_guid %s\n", d.Name, d.NodeGUID)
		if len(d.Ports) == 0 {
			fmt.Fprintln(w, "    no ports")
		}
		for _, p := range d.Ports {
			nd := strings.Join(p.Netdevs, ",")
			if nd == "" {
				nd = "-"
			}
			fmt.Fprintf(w, "    port %d (%s:%d): %s, %s, %s, netdevs %s\n", p.Port, d.Name, p.Port, p.State, p.LinkLayer, p.Rate, nd)
		}
	}
	if rdma.Built {
		fmt.Fprintln(w, "# UCX transport: built in (-tags rdma); UCX_TLS and UCX_NET_DEVICES select what it uses")
	} else {
		fmt.Fprintln(w, "# UCX transport: not built; rebuild with -tags rdma and libucx-dev installed to use --transport rdma")
	}
	return nil
}
