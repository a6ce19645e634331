package collkit

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

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

// hasNativeAllReduce says whether t has an all-reduce of its own that
// adaptive may choose: shm's, not NCCL's, which runs every collective
// itself and takes no other algorithm.
func hasNativeAllReduce(t transport.Transport) bool {
	t = unwrap(t)
	_, native := t.(transport.NativeAllReducer)
	_, all := t.(transport.NativeCollectives)
	return native && !all
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
	if runtime.GOOS != "linux" {
		return shm.ErrUnsupported
	}
	st, err := os.Stat(shm.DefaultDir)
	if err != nil {
		return fmt.Errorf("shm: %w (shared memory needs a tmpfs at %s)", err, shm.DefaultDir)
	}
	if !st.IsDir() {
		return fmt.Errorf("shm: %s is not a directory", shm.DefaultDir)
	}
	return nil
}

// connectShmJob is the shm transport's Connect: every rank of the job on
// one host.
func connectShmJob(ctx context.Context, env bootstrap.Env, store bootstrap.Store, opts Options) (transport.Transport, error) {
	host, _ := os.Hostname()
	return connectShmOn(ctx, env, store, shm.Config{Rank: env.Rank, Size: env.Size, JobID: env.JobID}, host, nil)
}

// connectShmKnown is connectShmJob for ranks that know where every rank
// runs (an elastic round told them: hosts[r] is rank r's node name), so
// that they need not exchange host names.
func connectShmKnown(hosts [][]byte) func(context.Context, bootstrap.Env, bootstrap.Store, Options) (transport.Transport, error) {
	return func(ctx context.Context, env bootstrap.Env, store bootstrap.Store, opts Options) (transport.Transport, error) {
		if err := shmAvailable(); err != nil {
			return nil, err
		}
		return connectShmOn(ctx, env, store, shm.Config{Rank: env.Rank, Size: env.Size, JobID: env.JobID}, string(hosts[env.Rank]), hosts)
	}
}

// connectShmOn connects the shm transport of cfg, this rank running on
// host, the ranks on hosts (exchanged through store when nil). Ranks on
// different hosts cannot share segments; the shm error then says that a
// peer's segment is missing, and this adds which ranks run where. Host
// names alone do not refuse the job: containers on one machine can have
// different names and share /dev/shm.
func connectShmOn(ctx context.Context, env bootstrap.Env, store bootstrap.Store, cfg shm.Config, host string, hosts [][]byte) (transport.Transport, error) {
	if hosts == nil {
		var err error
		if hosts, err = bootstrap.Exchange(ctx, store, "collkit/shm/host", env.Rank, env.Size, []byte(host)); err != nil {
			return nil, fmt.Errorf("shm: rank %d: exchanging host names: %w", env.Rank, err)
		}
	}
	t, err := shm.New(cfg)
	if err = connect(ctx, store, t, err); err != nil {
		if where, ok := whereRanksRun(hosts); !ok {
			return nil, fmt.Errorf("shm across hosts (%s): shared memory needs every rank on one host; use tcp or rdma, "+
				"with the hierarchical algorithm for shared memory inside each host: %w", where, err)
		}
		return nil, err
	}
	return t, nil
}

// whereRanksRun describes which ranks run on which host, and reports
// whether they all run on one.
func whereRanksRun(hosts [][]byte) (string, bool) {
	var names []string
	ranks := map[string][]string{}
	for r, h := range hosts {
		name := string(h)
		if _, ok := ranks[name]; !ok {
			names = append(names, name)
		}
		ranks[name] = append(ranks[name], strconv.Itoa(r))
	}
	var parts []string
	for i, name := range names {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("%d more hosts", len(names)-i))
			break
		}
		rs := ranks[name]
		if len(rs) > 4 {
			rs = append(rs[:3:3], "...")
		}
		label := "rank"
		if len(ranks[name]) > 1 {
			label = "ranks"
		}
		parts = append(parts, fmt.Sprintf("%s %s on %q", label, strings.Join(rs, ","), name))
	}
	return strings.Join(parts, ", "), len(names) <= 1
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

// connectIntra connects the ranks of this rank's node for the inner level
// of the hierarchical all-reduce: with NCCL for opts.IntraNode "nccl"
// (comm_hybrid.go), else over shared memory when the main transport is not
// shared memory already, the node has more than one rank and
// opts.IntraNode allows it. It returns nil when there is nothing to do.
// Every rank calls it with the same nodes, so the ranks of a node agree.
func connectIntra(ctx context.Context, env bootstrap.Env, store bootstrap.Store, opts Options, nodes []int) (transport.Transport, error) {
	switch opts.IntraNode {
	case "", "shm":
	case "group":
		return nil, nil
	case "nccl":
		return connectIntraNCCL(ctx, env, store, opts, nodes)
	default:
		return nil, fmt.Errorf("%w: Options.IntraNode %q (use shm, group or nccl)", ErrBadArgument, opts.IntraNode)
	}
	if opts.Transport == "shm" || (opts.IntraNode == "" && shmAvailable() != nil) {
		return nil, nil
	}
	local, size := localRankIn(env.Rank, nodes)
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
// native over shared memory and NCCL, halving-doubling otherwise.
func intraAllReduce(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error {
	return nativeAllReduce(ctx, t, h, send, recv)
}
