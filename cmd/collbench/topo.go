package main

import (
	"fmt"
	"io"

	"github.com/collkit/collkit/gpu"
	"github.com/collkit/collkit/transport/nccl"
)

// topo is the topo subcommand: this host's GPUs and how they connect, and
// whether NCCL loads.
func topo(stdout, stderr io.Writer) int {
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
