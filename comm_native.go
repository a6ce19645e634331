package collkit

import (
	"context"
	"fmt"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/nccl"
)

// ncclAllReduce hands all-reduce to a transport that runs collectives
// itself (NCCL). Its library has its own ring and tree; collkit's other
// algorithms do not apply.
func ncclAllReduce(t transport.Transport, n transport.NativeCollectives, algo string) (AllReduceFunc, error) {
	if algo != "ring" && algo != "tree" {
		return nil, fmt.Errorf("%w: algorithm %q: this transport runs its own collectives; use ring or tree (NCCL_ALGO)", ErrBadArgument, algo)
	}
	if f, ok := t.(interface{ Algorithm() string }); ok && f.Algorithm() != "" && f.Algorithm() != algo {
		return nil, fmt.Errorf("%w: algorithm %q: the communicator was created with NCCL_ALGO for %s, which NCCL reads only then; run once per algorithm",
			ErrBadArgument, algo, f.Algorithm())
	}
	return func(ctx context.Context, _ transport.Transport, h transport.Header, send, recv []byte) error {
		return n.AllReduce(ctx, h, send, recv)
	}, nil
}

// defaultAlgorithm is the algorithm of Options{} over t: "native" on
// transports with their own all-reduce (shm), "ring" on the others,
// including those that run every collective themselves (NCCL), which take
// their algorithm by name.
func defaultAlgorithm(t transport.Transport) string {
	if _, ok := t.(transport.NativeCollectives); ok {
		return "ring"
	}
	if _, ok := t.(transport.NativeAllReducer); ok {
		return "native"
	}
	return "ring"
}

// connectNCCL creates the NCCL transport: the rank's GPU from its local
// rank, NCCL_ALGO from the algorithm.
func connectNCCL(ctx context.Context, env bootstrap.Env, store bootstrap.Store, opts Options) (transport.Transport, error) {
	cfg, err := ncclConfig(env, opts)
	if err != nil {
		return nil, err
	}
	t, err := nccl.New(cfg)
	if err := connect(ctx, store, t, err); err != nil {
		return nil, err
	}
	return t, nil
}

// ncclConfig is the NCCL transport's configuration for rank env.Rank. Its
// communicator is kept after a failed call for an elastic Shrink
// (comm_elastic_nccl.go); Close ends it.
func ncclConfig(env bootstrap.Env, opts Options) (nccl.Config, error) {
	algo := opts.Algorithm
	if algo == "" {
		algo = "ring"
	}
	if algo != "ring" && algo != "tree" {
		return nccl.Config{}, fmt.Errorf("%w: algorithm %q over nccl: NCCL runs its own ring or tree; use --algo ring or tree", ErrBadArgument, algo)
	}
	return nccl.Config{Rank: env.Rank, Size: env.Size, LocalRank: env.LocalRank, Name: env.JobID, Algo: algo, KeepForShrink: true}, nil
}
