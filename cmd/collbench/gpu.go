package main

import (
	"fmt"
	"slices"

	"github.com/collkit/collkit/transport/nccl"
)

// Where --transport nccl's buffers live (--mem).
const (
	memDevice = "device" // GPU memory: nothing is copied in the timed loop, as nccl-tests
	memHost   = "host"   // host memory, staged through the GPU on every call
)

// onDevice reports whether transport tr's buffers are GPU memory: nccl's
// are unless --mem host, and so are the hybrid all-reduce's (--intra
// nccl: NCCL on the GPU inside nodes, tr between them).
func (o options) onDevice(tr string) bool {
	return (tr == "nccl" || o.intra == "nccl" && o.coll == "allreduce") && o.mem != memHost
}

// checkMem checks --mem against the transports and the collective.
func checkMem(o options) error {
	switch o.mem {
	case "", memDevice, memHost:
	default:
		return fmt.Errorf("--mem %q: want device (GPU memory, the default with --transport nccl) or host", o.mem)
	}
	if o.mem == memDevice {
		for _, tr := range o.transports {
			if tr != "nccl" && !o.onDevice(tr) {
				return fmt.Errorf("--mem device: transport %s moves host memory only; use --transport nccl (or --intra nccl with --algo hierarchical), or drop --mem", tr)
			}
		}
	}
	if !slices.Contains(o.transports, "nccl") && o.intra != "nccl" || o.mem == memHost {
		return nil
	}
	if o.coll == "alltoall" || o.coll == "gather" || o.coll == "scatter" {
		return fmt.Errorf("--coll %s with --transport nccl: NCCL has no %s of its own, so it runs on host memory only; add --mem host", o.coll, o.coll)
	}
	return nil
}

// gpuRanks makes --np default to the GPUs this machine shows with
// --transport nccl, and says in one line when --np asks for more ranks
// than GPUs and NCCL cannot share them.
func gpuRanks(o *options) error {
	if !slices.Contains(o.transports, "nccl") {
		return nil
	}
	gpus, err := nccl.DeviceCount()
	if err != nil {
		return fmt.Errorf("--transport nccl: %w", err)
	}
	if !o.npSet {
		o.np = gpus
		return nil
	}
	lib, err := nccl.Installed()
	if err != nil {
		return fmt.Errorf("--transport nccl: %w", err)
	}
	if err := nccl.GPUShareError(o.np, gpus, lib.VersionCode); err != nil {
		return fmt.Errorf("--np %d --transport nccl: %w (by default --np is the number of GPUs)", o.np, err)
	}
	return nil
}
