package collkit

import (
	"context"
	"errors"
	"fmt"
	"strconv"

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
	if err := connect(ctx, store, t, err); err != nil {
		what := fmt.Sprintf("NCCL inside node %d (local rank %d of %d) for the hierarchical all-reduce (Options.IntraNode \"nccl\")", node, local, size)
		if errors.Is(err, nccl.ErrNotAvailable) || errors.Is(err, nccl.ErrNoDevice) {
			return nil, fmt.Errorf("%s: %w; or keep the main transport inside nodes with Options.IntraNode \"shm\" or \"group\" (collbench --intra shm|group)", what, err)
		}
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return t, nil
}
