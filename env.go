package collkit

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/transport"
)

// DefaultSetupTimeout bounds the setup of Connect, FromEnv and
// ConnectStore when their context has no deadline and
// Options.SetupTimeout is zero. It is what torch's TCPStore waits by
// default: long enough for ranks that a busy cluster starts minutes apart,
// short enough that a rank that never comes is reported rather than waited
// for forever.
const DefaultSetupTimeout = 5 * time.Minute

// FromEnv creates a communicator from the variables a launcher sets
// (torchrun, mpirun, srun or collbench's own --np launcher; see
// bootstrap.FromEnv). It returns an error wrapping bootstrap.ErrNoEnv when
// none are set. ctx bounds the whole setup, rendezvous and connections;
// without a deadline, Options.SetupTimeout does (see Connect).
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
//
// Every rank registers with the store and waits for the others
// (bootstrap.RendezvousWith): ranks that disagree on the world size, or two
// processes that claim one rank, fail every rank at once; while ranks are
// missing the log (Options.Logger, COLLKIT_DEBUG=INFO) names them every few
// seconds, and when ctx ends, or Options.SetupTimeout passes, the error
// names them and the store's address. When rank 0's setup fails, the ranks
// still waiting on its store fail at once with its reason.
func Connect(ctx context.Context, env bootstrap.Env, opts Options) (*Comm, error) {
	if _, err := findAlgorithm(opts.Algorithm); err != nil {
		return nil, fmt.Errorf("collkit: rank %d: %w", env.Rank, err)
	}
	ctx, cancel := setupContext(ctx, opts)
	defer cancel()
	if opts.Logger == nil { // resolved once, for the rendezvous and the communicator
		var err error
		if opts.Logger, err = LoggerFromEnv(os.Getenv); err != nil {
			return nil, fmt.Errorf("collkit: rank %d: %w", env.Rank, err)
		}
	}
	if env.Secret == "" && env.Rank == 0 {
		slog.Warn("collkit: no COLLKIT_SECRET: connections are checked for job id, rank and world size only, "+
			"so any process that can reach the store or the ranks' ports may join; set the same COLLKIT_SECRET "+
			"(at least 16 random characters) on every rank to require an HMAC proof", "job", env.JobID)
	}
	store, closer, err := bootstrap.RendezvousWith(ctx, env, bootstrap.RendezvousConfig{Log: opts.Logger.With("rank", env.Rank), Progress: setupProgress})
	if err != nil {
		return nil, fmt.Errorf("collkit: rank %d: %w", env.Rank, err)
	}
	c, err := ConnectStore(ctx, env, store, opts)
	if err != nil {
		closer.Abort(err)
		return nil, err
	}
	c.closers = append(c.closers, storeCloser{closer, c})
	return c, nil
}

// setupProgress is how often Connect logs the ranks it still waits for;
// zero means bootstrap.DefaultProgress. Tests shorten it.
var setupProgress time.Duration

// setupContext bounds ctx by opts.SetupTimeout unless ctx has a deadline.
func setupContext(ctx context.Context, opts Options) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || opts.SetupTimeout < 0 {
		return ctx, func() {}
	}
	d := cmp.Or(opts.SetupTimeout, DefaultSetupTimeout)
	return context.WithTimeoutCause(ctx, d, fmt.Errorf(
		"the setup exceeded Options.SetupTimeout of %v (raise it if ranks start further apart)", d))
}

// storeCloser stops the store of a communicator made by Connect. After a
// failure the other ranks are failing too, and one that is stuck or
// stopped would hold rank 0's Close for the whole bootstrap.ShutdownGrace,
// so a failed communicator waits only bootstrap.AbortGrace.
type storeCloser struct {
	cl *bootstrap.Closer
	c  *Comm
}

func (s storeCloser) Close() error {
	if err := s.c.failure(); err != nil {
		return s.cl.Abort(err)
	}
	return s.cl.Close()
}

// failure is the error that ended the communicator, or nil. A collective
// still running holds c.mu: being closed, it fails, so that counts as a
// failure too, and Close does not wait for the collective to return.
func (c *Comm) failure() error {
	if !c.mu.TryLock() {
		return fmt.Errorf("collkit: rank %d: closed during a collective", c.rank)
	}
	defer c.mu.Unlock()
	return c.err
}

// ConnectStore is Connect through a store the caller already joined (see
// bootstrap.Rendezvous) and keeps open until the communicator is closed.
// Without a deadline on ctx, Options.SetupTimeout bounds it.
// Every communicator of one job needs its own keys: connect the second and
// later ones through bootstrap.WithPrefix.
func ConnectStore(ctx context.Context, env bootstrap.Env, store bootstrap.Store, opts Options) (*Comm, error) {
	return connectStore(ctx, env, store, opts, connectTransport)
}

// connectStore is ConnectStore with the transport connected by conn: an
// elastic generation's members connect it with what their round told them
// (comm_elastic.go).
func connectStore(ctx context.Context, env bootstrap.Env, store bootstrap.Store, opts Options,
	conn func(context.Context, bootstrap.Env, bootstrap.Store, Options) (transport.Transport, error)) (*Comm, error) {
	if _, err := findAlgorithm(opts.Algorithm); err != nil {
		return nil, fmt.Errorf("collkit: rank %d: %w", env.Rank, err)
	}
	ctx, cancel := setupContext(ctx, opts)
	defer cancel()
	if opts.Transport == AutoTransport {
		var why string
		opts.Transport, why = ChooseTransport(env, opts)
		if env.Rank == 0 && opts.Logger != nil {
			opts.Logger.Info("transport auto", "chose", opts.Transport, "why", why)
		}
	}
	saved := opts // for the next generations (comm_elastic.go)
	start := time.Now()
	t, err := conn(ctx, env, store, opts)
	if err != nil {
		return nil, fmt.Errorf("collkit: rank %d: %w", env.Rank, explain(ctx, err))
	}
	connected := time.Since(start)
	if opts.Nodes == nil && opts.SimulatedNodes == 0 {
		names, err := bootstrap.Exchange(ctx, store, "collkit/node", env.Rank, env.Size, []byte(nodeName()))
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
	c.el = &elastic{store: store, env: env, opts: saved, ids: make([]int, env.Size)}
	for r := range c.el.ids {
		c.el.ids[r] = r
	}
	if intra != nil {
		c.intra, c.tGen = intra, c.tGen+1
		c.closers = append(c.closers, intra)
		if c.run, err = c.algorithm(c.algo); err != nil { // with the intra-node transport
			c.Close()
			return nil, fmt.Errorf("collkit: rank %d: %w", env.Rank, err)
		}
	}
	return c, nil
}

// nodeName is the name of the node this process runs on, which groups the
// ranks for the hierarchical algorithm: $COLLKIT_NODE, else the host name.
func nodeName() string {
	if name := os.Getenv("COLLKIT_NODE"); name != "" {
		return name
	}
	name, _ := os.Hostname()
	return name
}

func secretOf(env bootstrap.Env) []byte {
	if env.Secret == "" {
		return nil
	}
	return []byte(env.Secret)
}
