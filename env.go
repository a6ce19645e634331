package collkit

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/transport"
)

// FromEnv creates a communicator from the variables a launcher sets
// (torchrun, mpirun, srun or collbench's own --np launcher; see
// bootstrap.FromEnv). It returns an error wrapping bootstrap.ErrNoEnv when
// none are set. ctx bounds the whole setup: rendezvous and connections.
func FromEnv(ctx context.Context, opts Options) (*Comm, error) {
	env, err := bootstrap.FromEnv(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("collkit: %w", err)
	}
	return Connect(ctx, env, opts)
}

// Connect creates the communicator of rank env.Rank: it meets the other ranks
// through the bootstrap store at env.MasterAddr:env.MasterPort, then connects
// the transport named by opts.Transport.
func Connect(ctx context.Context, env bootstrap.Env, opts Options) (*Comm, error) {
	if _, err := findAlgorithm(opts.Algorithm); err != nil {
		return nil, fmt.Errorf("collkit: rank %d: %w", env.Rank, err)
	}
	if env.Secret == "" && env.Rank == 0 {
		slog.Warn("collkit: no COLLKIT_SECRET: connections are checked for job id, rank and world size only, "+
			"so any process that can reach the store or the ranks' ports may join; set the same COLLKIT_SECRET "+
			"(at least 16 random characters) on every rank to require an HMAC proof", "job", env.JobID)
	}
	store, closer, err := bootstrap.Rendezvous(ctx, env)
	if err != nil {
		return nil, fmt.Errorf("collkit: rank %d: %w", env.Rank, err)
	}
	c, err := ConnectStore(ctx, env, store, opts)
	if err != nil {
		closer.Close()
		return nil, err
	}
	c.closers = append(c.closers, closer)
	return c, nil
}

// ConnectStore is Connect through a store the caller already joined (see
// bootstrap.Rendezvous) and keeps open until the communicator is closed.
// Every communicator of one job needs its own keys: connect the second and
// later ones through bootstrap.WithPrefix.
func ConnectStore(ctx context.Context, env bootstrap.Env, store bootstrap.Store, opts Options) (*Comm, error) {
	if _, err := findAlgorithm(opts.Algorithm); err != nil {
		return nil, fmt.Errorf("collkit: rank %d: %w", env.Rank, err)
	}
	start := time.Now()
	t, err := connectTransport(ctx, env, store, opts)
	if err != nil {
		return nil, fmt.Errorf("collkit: rank %d: %w", env.Rank, err)
	}
	connected := time.Since(start)
	if opts.Nodes == nil && opts.SimulatedNodes == 0 {
		name := os.Getenv("COLLKIT_NODE")
		if name == "" {
			name, _ = os.Hostname()
		}
		names, err := bootstrap.Exchange(ctx, store, "collkit/node", env.Rank, env.Size, []byte(name))
		if err != nil {
			t.Close()
			return nil, fmt.Errorf("collkit: rank %d: exchanging node names: %w", env.Rank, err)
		}
		opts.Nodes = groupNames(names)
	}
	nodes, err := opts.nodes(env.Size)
	var intra transport.Transport
	if err == nil {
		intra, err = connectIntra(ctx, env, store, opts, nodes)
	}
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("collkit: rank %d: %w", env.Rank, err)
	}
	c, err := New(t, opts)
	if err != nil {
		t.Close()
		if intra != nil {
			intra.Close()
		}
		return nil, err
	}
	c.logSetup(env, opts, connected, intra != nil)
	if intra != nil {
		c.intra = intra
		c.closers = append(c.closers, intra)
		if c.run, err = c.algorithm(c.algo); err != nil { // with the intra-node transport
			c.Close()
			return nil, fmt.Errorf("collkit: rank %d: %w", env.Rank, err)
		}
	}
	return c, nil
}

func secretOf(env bootstrap.Env) []byte {
	if env.Secret == "" {
		return nil
	}
	return []byte(env.Secret)
}
