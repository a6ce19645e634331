package collkit

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/collkit/collkit/algo/halvingdoubling"
	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/shm"
)

// nativeAllReduce is the "native" algorithm: the transport's own all-reduce
// (transport.NativeAllReducer, such as shared memory reducing straight out
// of the other ranks' buffers), and halving-doubling on transports without
// one.
func nativeAllReduce(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error {
	if n, ok := unwrap(t).(transport.NativeAllReducer); ok {
		return n.AllReduce(ctx, h, send, recv)
	}
	return halvingdoubling.AllReduce(ctx, t, h, send, recv)
}

// unwrap returns the transport under the communicator's wrappers
// (statistics, tracing), where capabilities such as NativeAllReducer live.
func unwrap(t transport.Transport) transport.Transport {
	for {
		w, ok := t.(interface{ Unwrap() transport.Transport })
		if !ok {
			return t
		}
		t = w.Unwrap()
	}
}

// shmAvailable says why this host cannot have shm segments, or nil.
func shmAvailable() error {
	st, err := os.Stat(shm.DefaultDir)
	if err != nil {
		return fmt.Errorf("shm: %w (shared memory needs a tmpfs at %s)", err, shm.DefaultDir)
	}
	if !st.IsDir() {
		return fmt.Errorf("shm: %s is not a directory", shm.DefaultDir)
	}
	return nil
}

// connectShm connects a shm transport of size ranks, this one being rank,
// through store under prefix.
func connectShm(ctx context.Context, store bootstrap.Store, rank, size int, jobID, prefix string) (*shm.Transport, error) {
	t, err := shm.New(shm.Config{Rank: rank, Size: size, JobID: jobID, Prefix: prefix})
	if err := connect(ctx, store, t, err); err != nil {
		return nil, err
	}
	return t, nil
}

// connectIntra connects the ranks of this rank's node over shared memory,
// for the inner level of the hierarchical all-reduce, when the main
// transport is not shared memory already, the node has more than one rank
// and opts.IntraNode allows it. It returns nil when there is nothing to do.
// Every rank calls it with the same nodes, so the ranks of a node agree.
func connectIntra(ctx context.Context, env bootstrap.Env, store bootstrap.Store, opts Options, nodes []int) (transport.Transport, error) {
	switch opts.IntraNode {
	case "", "shm":
	case "group":
		return nil, nil
	default:
		return nil, fmt.Errorf("%w: Options.IntraNode %q (use shm or group)", ErrBadArgument, opts.IntraNode)
	}
	if opts.Transport == "shm" || (opts.IntraNode == "" && shmAvailable() != nil) {
		return nil, nil
	}
	local, size := 0, 0
	for r, node := range nodes {
		if node == nodes[env.Rank] {
			if r == env.Rank {
				local = size
			}
			size++
		}
	}
	if size < 2 {
		return nil, nil
	}
	t, err := connectShm(ctx, store, local, size, env.JobID, "collkit/intra/"+strconv.Itoa(nodes[env.Rank]))
	if err != nil {
		return nil, fmt.Errorf("shared memory inside node %d for the hierarchical all-reduce: %w (set Options.IntraNode to \"group\" to use the main transport instead)",
			nodes[env.Rank], err)
	}
	return t, nil
}

// intraAllReduce is the hierarchical algorithm's all-reduce inside a node:
// native over shared memory, ring otherwise.
func intraAllReduce(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error {
	return nativeAllReduce(ctx, t, h, send, recv)
}
