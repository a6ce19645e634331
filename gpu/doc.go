// Package gpu discovers this host's NVIDIA GPUs through NVML
// (github.com/NVIDIA/go-nvml): their names, memory, PCI bus ids, NVLinks
// and the topology level between every pair, as `nvidia-smi topo -m`
// shows it. Describe prints it for `collbench topo`; NodeKey gives ranks a
// key to group them by node for hierarchical collectives.
//
// NVML is loaded when Discover runs; every NVML call is made only after
// nvml.Init succeeded (calling NVML otherwise kills the process). go-nvml
// needs cgo, so it is built only with the nvml build tag (go build -tags
// nvml); other builds compile a stub whose Discover returns an error
// wrapping ErrNoDriver that says so.
package gpu
