package collkit

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/nccl"
	"github.com/collkit/collkit/transport/tcp"
)

// ErrTransportUnavailable is wrapped by TransportAvailable and Connect for a
// transport this build or machine cannot run (not built in, no device).
var ErrTransportUnavailable = errors.New("transport unavailable")

// transportEntry is one transport Options.Transport can name.
type transportEntry struct {
	name string
	// available says why the transport cannot run here (not built with its
	// tag, no device), or nil when it can. A nil func means always.
	available func() error
	// connect builds and connects this rank's transport through store.
	connect func(ctx context.Context, env bootstrap.Env, store bootstrap.Store, opts Options) (transport.Transport, error)
}

// transportRegistry lists every transport, in the order collbench runs them.
// Adding a transport is one line here: a name, an availability check (for
// a build-tagged or device-bound transport, its stub's "not built with ..."
// error) and a constructor.
var transportRegistry = []transportEntry{
	{name: "tcp", connect: connectTCP},
	{name: "shm", available: shmAvailable, connect: func(ctx context.Context, env bootstrap.Env, store bootstrap.Store, opts Options) (transport.Transport, error) {
		return connectShm(ctx, store, env.Rank, env.Size, env.JobID, "")
	}},
	{name: "nccl", available: nccl.Available, connect: connectNCCL},
	{name: "rdma", available: rdmaAvailable, connect: connectRDMA},
}

// Transports lists the transport names Options.Transport accepts, available
// here or not (see TransportAvailable).
func Transports() []string {
	names := make([]string, len(transportRegistry))
	for i, e := range transportRegistry {
		names[i] = e.name
	}
	return names
}

// TransportAvailable returns nil when the named transport can run in this
// build on this machine, an error wrapping ErrTransportUnavailable that says
// why not, or one wrapping ErrBadArgument for a name no build knows.
func TransportAvailable(name string) error {
	e, err := findTransport(name)
	if err != nil {
		return err
	}
	if e.available == nil {
		return nil
	}
	if err := e.available(); err != nil {
		return fmt.Errorf("%w: %w", ErrTransportUnavailable, err)
	}
	return nil
}

func findTransport(name string) (transportEntry, error) {
	if name == "" {
		name = "tcp"
	}
	i := slices.IndexFunc(transportRegistry, func(e transportEntry) bool { return e.name == name })
	if i < 0 {
		return transportEntry{}, fmt.Errorf("%w: unknown transport %q (use one of %v)", ErrBadArgument, name, Transports())
	}
	return transportRegistry[i], nil
}

func connectTransport(ctx context.Context, env bootstrap.Env, store bootstrap.Store, opts Options) (transport.Transport, error) {
	e, err := findTransport(opts.Transport)
	if err != nil {
		return nil, err
	}
	if err := TransportAvailable(e.name); err != nil {
		return nil, err
	}
	return e.connect(ctx, env, store, opts)
}

func connectTCP(ctx context.Context, env bootstrap.Env, store bootstrap.Store, opts Options) (transport.Transport, error) {
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
	if err := connect(ctx, store, t, err); err != nil {
		return nil, err
	}
	return t, nil
}

// connect connects t, just made by a transport's New with err, through
// store, closing it when that fails; it returns New's error or Connect's.
func connect(ctx context.Context, store bootstrap.Store, t interface {
	Connect(context.Context, bootstrap.Store) error
	Close() error
}, err error) error {
	if err != nil {
		return err
	}
	if err := t.Connect(ctx, store); err != nil {
		t.Close()
		return err
	}
	return nil
}
