package collkit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/nccl"
	"github.com/collkit/collkit/transport/shm"
	"github.com/collkit/collkit/transport/tcp"
)

// ErrTransportUnavailable is wrapped by TransportAvailable and Connect for a
// transport this build or machine cannot run (not built in, no device).
var ErrTransportUnavailable = errors.New("transport unavailable")

// TransportDriver makes the transports of one kind: RegisterTransport
// gives it a name, which Options.Transport (for FromEnv, Connect and
// ConnectStore) and collbench's --transport then accept.
type TransportDriver struct {
	// Connect makes this rank's transport and connects it to the other ranks
	// through store, within ctx. env says who this rank is (Rank, Size,
	// LocalRank, JobID, Secret, the store's address); opts is the
	// communicator's Options. Every rank of the job calls it at the same
	// point; keys it writes to store must not begin with "collkit/". On
	// error it closes what it made. Required.
	Connect func(ctx context.Context, env bootstrap.Env, store bootstrap.Store, opts Options) (transport.Transport, error)
	// Available returns nil when the transport can run in this build on
	// this machine, or why not (for a transport behind a build tag, its
	// stub's "not built with ..." error; no device). Connect is called only
	// when it returns nil. Nil means always available.
	Available func() error
}

// The transport registry, in the order collbench runs "all": the built-ins,
// then the others in the order they were registered.
var (
	transportsMu      sync.Mutex
	transportRegistry []transportEntry
)

// transportEntry is one registered transport.
type transportEntry struct {
	name string
	TransportDriver
}

func init() {
	// The built-ins register as users do. Adding one is one line here: a
	// name, its availability check and its constructor.
	RegisterTransport("tcp", TransportDriver{Connect: connectTCP})
	RegisterTransport("shm", TransportDriver{Available: shmAvailable, Connect: connectShmJob})
	RegisterTransport("nccl", TransportDriver{Available: nccl.Available, Connect: connectNCCL})
	RegisterTransport("rdma", TransportDriver{Available: rdmaAvailable, Connect: connectRDMA})
}

// RegisterTransport makes a transport available by name to
// Options.Transport (FromEnv, Connect, ConnectStore), Transports,
// TransportAvailable and collbench's --transport, as database/sql.Register
// does for drivers: call it from an init function of the package that
// provides the transport. The built-in transports are registered the same
// way.
//
// Like database/sql.Register, it panics if d.Connect is nil or name is
// already registered. It also panics if name is empty, is "all" or contains
// a comma or a space (collbench's --transport lists names with commas).
func RegisterTransport(name string, d TransportDriver) {
	if d.Connect == nil {
		panic("collkit: RegisterTransport: transport " + name + " has no Connect function")
	}
	checkName("RegisterTransport", name)
	transportsMu.Lock()
	defer transportsMu.Unlock()
	if slices.ContainsFunc(transportRegistry, func(e transportEntry) bool { return e.name == name }) {
		panic("collkit: RegisterTransport called twice for transport " + name)
	}
	transportRegistry = append(transportRegistry, transportEntry{name, d})
}

// Transports lists the names of the registered transports, which
// Options.Transport accepts, available here or not (see TransportAvailable).
func Transports() []string {
	transportsMu.Lock()
	defer transportsMu.Unlock()
	names := make([]string, len(transportRegistry))
	for i, e := range transportRegistry {
		names[i] = e.name
	}
	return names
}

// AutoTransport is the name under which Options.Transport (and
// collbench's --transport, whose default it is) lets ChooseTransport pick
// the transport of the job.
const AutoTransport = "auto"

// ChooseTransport is the transport AutoTransport runs on, and why: "shm"
// when every rank of the job runs on this host (env.LocalSize equals
// env.Size, as launchers set it), shared memory works here, its directory
// could hold the job's segments twice over, and opts sets nothing only
// TCP has (Streams, TLS, TCPCongestion, SpinWait, simulated nodes, NCCL
// inside nodes); "tcp" otherwise. So mpirun and NCCL move data between
// the ranks of one host. It looks only at what every rank of a job sees
// alike, so they all choose the same. A directory that is large enough
// but full fails at connect, with the error of the rank that found it so
// (set "tcp" then, or free it).
func ChooseTransport(env bootstrap.Env, opts Options) (name, why string) {
	var tcpOnly string
	switch {
	case opts.Streams > 1:
		tcpOnly = fmt.Sprintf("Streams %d", opts.Streams)
	case opts.TLS != nil:
		tcpOnly = "TLS"
	case opts.TCPCongestion != "":
		tcpOnly = "TCPCongestion " + opts.TCPCongestion
	case opts.SpinWait != 0:
		tcpOnly = fmt.Sprintf("SpinWait %v", opts.SpinWait)
	case opts.SimulatedNodes > 0:
		tcpOnly = fmt.Sprintf("%d simulated nodes", opts.SimulatedNodes)
	case opts.IntraNode == "nccl":
		tcpOnly = "NCCL inside nodes"
	}
	if tcpOnly != "" {
		return "tcp", tcpOnly + " asks for TCP"
	}
	if env.LocalSize != env.Size || env.Size < 1 {
		return "tcp", fmt.Sprintf("the job's %d ranks are not all on this host (the launcher says %d)", env.Size, env.LocalSize)
	}
	if err := shmAvailable(); err != nil {
		return "tcp", err.Error()
	}
	need, err := shm.JobBytes(shm.Config{Size: env.Size})
	if err != nil {
		return "tcp", err.Error()
	}
	total, err := shm.Room(shm.DefaultDir)
	if err != nil {
		return "tcp", fmt.Sprintf("shm: %s: %v", shm.DefaultDir, err)
	}
	if total < 2*int64(need) {
		return "tcp", fmt.Sprintf("%s holds %d MiB, and shared memory for %d ranks takes %d MiB", shm.DefaultDir, total>>20, env.Size, need>>20)
	}
	return "shm", fmt.Sprintf("all %d ranks on this host", env.Size)
}

// TransportAvailable returns nil when the named transport can run in this
// build on this machine (AutoTransport always can), an error wrapping
// ErrTransportUnavailable that says why not, or one wrapping ErrBadArgument
// for a name no build knows.
func TransportAvailable(name string) error {
	if name == AutoTransport {
		return nil
	}
	e, err := findTransport(name)
	if err != nil {
		return err
	}
	return e.available()
}

// available is TransportAvailable for a registered transport.
func (e transportEntry) available() error {
	if e.Available == nil {
		return nil
	}
	if err := e.Available(); err != nil {
		return fmt.Errorf("%w: %w", ErrTransportUnavailable, err)
	}
	return nil
}

func findTransport(name string) (transportEntry, error) {
	if name == "" {
		name = "tcp"
	}
	transportsMu.Lock()
	i := slices.IndexFunc(transportRegistry, func(e transportEntry) bool { return e.name == name })
	var e transportEntry
	if i >= 0 {
		e = transportRegistry[i]
	}
	transportsMu.Unlock()
	if i < 0 {
		return transportEntry{}, fmt.Errorf("%w: unknown transport %q (use one of %v, or register it with collkit.RegisterTransport)",
			ErrBadArgument, name, Transports())
	}
	return e, nil
}

func connectTransport(ctx context.Context, env bootstrap.Env, store bootstrap.Store, opts Options) (transport.Transport, error) {
	e, err := findTransport(opts.Transport)
	if err != nil {
		return nil, err
	}
	if err := e.available(); err != nil {
		return nil, err
	}
	t, err := e.Connect(ctx, env, store, opts)
	if err == nil && t == nil {
		err = fmt.Errorf("transport %s: Connect returned no transport", e.name)
	}
	return t, err
}

func connectTCP(ctx context.Context, env bootstrap.Env, store bootstrap.Store, opts Options) (transport.Transport, error) {
	return connectTCPOn(ctx, env, store, opts, nil, nil)
}

// connectTCPOn is connectTCP on listener ln, when not nil, which it owns
// from the call on, and with the peers' addresses when known (see
// tcp.Config.Listener and Peers): an elastic round published them.
func connectTCPOn(ctx context.Context, env bootstrap.Env, store bootstrap.Store, opts Options, ln net.Listener, peers []string) (transport.Transport, error) {
	t, err := tcp.New(tcp.Config{
		Rank:       env.Rank,
		Size:       env.Size,
		JobID:      env.JobID,
		Secret:     secretOf(env),
		TLS:        opts.TLS,
		Addr:       tcpAddrFor(env),
		Streams:    opts.Streams,
		SpinWait:   opts.SpinWait,
		Congestion: opts.TCPCongestion,
		Listener:   ln,
		Peers:      peers,
	})
	if err != nil && ln != nil {
		ln.Close()
	}
	if err := connect(ctx, store, t, err); err != nil {
		return nil, err
	}
	return t, nil
}

// tcpAddrFor is the address the tcp transport listens on: this host's on
// the route to the store.
func tcpAddrFor(env bootstrap.Env) string { return bootstrap.LocalAddrFor(env.StoreAddr()) }

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
