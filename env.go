package collkit

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/tcp"
)

// Transports lists the transport names Options.Transport accepts.
func Transports() []string { return []string{"tcp"} }

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
	t, err := connectTransport(ctx, env, store, opts)
	if err != nil {
		closer.Close()
		return nil, fmt.Errorf("collkit: rank %d: %w", env.Rank, err)
	}
	if opts.Nodes == nil && opts.SimulatedNodes == 0 {
		name := os.Getenv("COLLKIT_NODE")
		if name == "" {
			name, _ = os.Hostname()
		}
		names, err := bootstrap.Exchange(ctx, store, "collkit/node", env.Rank, env.Size, []byte(name))
		if err != nil {
			t.Close()
			closer.Close()
			return nil, fmt.Errorf("collkit: rank %d: exchanging node names: %w", env.Rank, err)
		}
		opts.Nodes = groupNames(names)
	}
	c, err := New(t, opts)
	if err != nil {
		t.Close()
		closer.Close()
		return nil, err
	}
	c.closers = append(c.closers, closer)
	return c, nil
}

func connectTransport(ctx context.Context, env bootstrap.Env, store bootstrap.Store, opts Options) (transport.Transport, error) {
	switch opts.Transport {
	case "", "tcp":
		t, err := tcp.New(tcp.Config{
			Rank:     env.Rank,
			Size:     env.Size,
			JobID:    env.JobID,
			Secret:   secretOf(env),
			TLS:      opts.TLS,
			Addr:     bootstrap.LocalAddrFor(env.StoreAddr()),
			Streams:  opts.Streams,
			SpinWait: opts.SpinWait,
		})
		if err != nil {
			return nil, err
		}
		if err := t.Connect(ctx, store); err != nil {
			t.Close()
			return nil, err
		}
		return t, nil
	}
	return nil, fmt.Errorf("%w: unknown transport %q (use one of %v)", ErrBadArgument, opts.Transport, Transports())
}

func secretOf(env bootstrap.Env) []byte {
	if env.Secret == "" {
		return nil
	}
	return []byte(env.Secret)
}
