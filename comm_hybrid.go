package collkit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/collkit/collkit/algo/hierarchical"
	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/nccl"
)

// The hybrid hierarchical all-reduce (Options.IntraNode "nccl"): NCCL inside
// each node, the main transport (tcp, rdma) between nodes, as the hybrid
// TCP+NCCL backends of other frameworks do. The hierarchical algorithm
// finds NCCL's own collectives on the intra-node transport
// (transport.NativeCollectives) and runs them for the intra-node phases.

// localRankIn returns rank's index among the ranks of its node and the
// node's number of ranks.
func localRankIn(rank int, nodes []int) (local, size int) {
	for r, node := range nodes {
		if node == nodes[rank] {
			if r == rank {
				local = size
			}
			size++
		}
	}
	return local, size
}

// connectIntraNCCL connects the ranks of this rank's node with NCCL. Every
// node gets its communicator, one of a single rank included, so that NCCL
// holds the node's part of the work whatever the layout (two simulated
// nodes of one rank each run on one GPU).
func connectIntraNCCL(ctx context.Context, env bootstrap.Env, store bootstrap.Store, opts Options, nodes []int) (transport.Transport, error) {
	if opts.Transport == "nccl" {
		return nil, fmt.Errorf("%w: Options.IntraNode \"nccl\" with Transport \"nccl\": NCCL carries every rank already; "+
			"for NCCL inside nodes and another transport between them, set Transport to tcp or rdma", ErrBadArgument)
	}
	local, size := localRankIn(env.Rank, nodes)
	node := nodes[env.Rank]
	// The GPU: the launcher's local rank on this host when it gave one and
	// the host has that many GPUs, else the rank's index in its node, so
	// that simulated nodes on a host of few GPUs each start at GPU 0.
	dev := local
	if n, err := nccl.DeviceCount(); err == nil && env.LocalSize > 0 && env.LocalRank < n {
		dev = env.LocalRank
	}
	t, err := nccl.New(nccl.Config{Rank: local, Size: size, LocalRank: dev, Name: env.JobID + "/intra/" + strconv.Itoa(node)})
	if err = connect(ctx, store, t, err); err == nil {
		return &ncclIntra{Transport: t}, nil
	}
	what := fmt.Sprintf("NCCL inside node %d (local rank %d of %d) for the hierarchical all-reduce (Options.IntraNode \"nccl\")", node, local, size)
	if errors.Is(err, nccl.ErrNotAvailable) || errors.Is(err, nccl.ErrNoDevice) {
		return nil, fmt.Errorf("%s: %w; or keep the main transport inside nodes with Options.IntraNode \"shm\" or \"group\" (collbench --intra shm|group)", what, err)
	}
	return nil, fmt.Errorf("%s: %w", what, err)
}

// GPU is the CUDA device of this rank's NCCL communicator: the main
// transport's with Transport "nccl", the one inside its node with
// IntraNode "nccl". ok is false when the communicator has no NCCL.
func (c *Comm) GPU() (dev int, ok bool) {
	if t, ok := c.Transport().(*nccl.Transport); ok {
		return t.Device(), true
	}
	if in, ok := c.intra.(*ncclIntra); ok {
		return in.Device(), true
	}
	return 0, false
}

// ncclIntra is the NCCL communicator of a node with the GPU scratch memory
// the device all-reduce stages what crosses nodes in.
type ncclIntra struct {
	*nccl.Transport
	mu    sync.Mutex
	stage *nccl.Memory // nil until a device all-reduce needs it
}

// stageFor returns scratch memory of at least n bytes on this rank's GPU.
func (in *ncclIntra) stageFor(n int) (*nccl.Memory, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.stage != nil && in.stage.Buffer().Len >= n {
		return in.stage, nil
	}
	if in.stage != nil {
		in.stage.Free()
		in.stage = nil
	}
	m, err := nccl.Alloc(in.Device(), max(n, 4096))
	if err != nil {
		return nil, fmt.Errorf("GPU scratch memory for the part of the all-reduce that crosses nodes: %w", err)
	}
	in.stage = m
	return m, nil
}

// Close frees the scratch memory and closes the communicator.
func (in *ncclIntra) Close() error {
	in.mu.Lock()
	if in.stage != nil {
		in.stage.Free()
		in.stage = nil
	}
	in.mu.Unlock()
	return in.Transport.Close()
}

// hybridAllReduceDevice is AllReduceDevice of a communicator with NCCL
// inside nodes running the hierarchical algorithm: NCCL on the GPU inside
// every node, and only the part that crosses nodes staged through host
// memory for the main transport (hierarchical.Config.AllReduceDevice).
func (c *Comm) hybridAllReduceDevice(ctx context.Context, in *ncclIntra, h transport.Header, send, recv DeviceBuffer, argErr error) error {
	h.Algo = c.algo
	return c.call(ctx, nameAllReduceDevice, funcOp(func(ctx context.Context) error {
		if err := c.usable(); err != nil {
			return err
		}
		return c.runColl(ctx, nameAllReduceDevice.String(), h, func(ctx context.Context, t transport.Transport, h transport.Header) error {
			stage, err := in.stageFor(send.Len)
			if err != nil {
				return err
			}
			return hierarchical.Config{Nodes: c.nodes, IntraTransport: in}.AllReduceDevice(ctx, t, h, send, recv, stage)
		})
	}), argErr)
}
