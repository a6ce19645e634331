package nccl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/transport"
)

// Config configures one rank's Transport. Every rank of a job uses the same
// Size, Name and Algo.
type Config struct {
	Rank, Size int
	// LocalRank is this rank's index among the ranks on its host; the rank
	// uses CUDA device LocalRank modulo the number of visible devices.
	LocalRank int
	// Name sets this communicator's keys in the bootstrap store apart from
	// other communicators' on the same store. Empty means "default".
	Name string
	// Algo forces NCCL's algorithm: "ring" or "tree" set NCCL_ALGO for the
	// process before the communicator is created (NCCL reads it then, so it
	// is fixed for the communicator's life). Empty means NCCL chooses.
	Algo string
	// CloseTimeout bounds how long Close waits for NCCL to finish the
	// communicators in order before it aborts them. Zero means 10 s.
	CloseTimeout time.Duration
	// Blocking creates communicators with NCCL's default blocking mode
	// instead of the non-blocking one. Creating one then cannot be bounded
	// by a context: a missing peer hangs Connect. Use it only to work
	// around an NCCL whose non-blocking mode misbehaves. NCCL older than
	// 2.14 has no non-blocking mode and is always blocking.
	Blocking bool
}

// ErrNoDevice is wrapped by Connect when NCCL loads but no CUDA device can
// be used (no driver, no GPU, CUDA_VISIBLE_DEVICES empty).
var ErrNoDevice = errors.New("no CUDA device")

// DefaultCloseTimeout is Config.CloseTimeout's zero value.
const DefaultCloseTimeout = 10 * time.Second

// Transport is one rank's NCCL communicator. Its native collectives
// (AllReduce, Broadcast, Reduce, AllGather, ReduceScatter) and grouped
// point-to-point transfers (Exchange) run on one communicator of all ranks;
// its framed Send and Recv, which make it a transport.Transport, run on
// two-rank communicators made on first use, one per direction of each pair
// of ranks, because NCCL runs the operations of one communicator one after
// another, in issue order, and the Transport contract lets a rank send to
// and receive from a peer concurrently.
//
// All data passes through host memory: each call copies its input to the
// GPU, runs NCCL there, and copies the result back.
type Transport struct {
	cfg      Config
	a        *api
	version  int
	dev      int32
	prefix   string // store key prefix
	store    bootstrap.Store
	rank     int
	size     int
	main     *comm
	life     context.Context
	kill     context.CancelFunc
	closed   atomic.Bool
	mu       sync.Mutex // guards pairs, splits, started
	started  bool
	pairs    map[[2]int]*pairEntry
	splits   int
	children []*Transport
}

var (
	_ transport.Transport         = (*Transport)(nil)
	_ transport.NativeCollectives = (*Transport)(nil)
)

// Available returns nil when NCCL and the CUDA runtime load on this machine,
// and otherwise the error, wrapping ErrNotAvailable, that New would return.
// It does not look for a GPU.
func Available() error { return available() }

// New checks cfg and loads NCCL and the CUDA runtime (once per process). It
// touches no GPU and talks to no one; Connect does.
func New(cfg Config) (*Transport, error) {
	a, err := loadDefault()
	if err != nil {
		return nil, err
	}
	return newWith(cfg, a)
}

func newWith(cfg Config, a *api) (*Transport, error) {
	bad := func(format string, args ...any) (*Transport, error) {
		return nil, fmt.Errorf("nccl: invalid config for rank %d: "+format, append([]any{cfg.Rank}, args...)...)
	}
	switch {
	case cfg.Size < 1:
		return bad("Size %d: a job has at least 1 rank", cfg.Size)
	case cfg.Rank < 0 || cfg.Rank >= cfg.Size:
		return bad("Rank must be in [0, %d)", cfg.Size)
	case cfg.LocalRank < 0:
		return bad("LocalRank %d is negative", cfg.LocalRank)
	case cfg.CloseTimeout < 0:
		return bad("CloseTimeout %v is negative", cfg.CloseTimeout)
	}
	if _, err := algoEnv(cfg.Algo); err != nil {
		return bad("%v", err)
	}
	if cfg.Name == "" {
		cfg.Name = "default"
	}
	if cfg.CloseTimeout == 0 {
		cfg.CloseTimeout = DefaultCloseTimeout
	}
	var v int32
	if r := a.ncclGetVersion(&v); r != ncclSuccess {
		return nil, fmt.Errorf("nccl: rank %d: ncclGetVersion failed (code %d) in %s", cfg.Rank, r, a.ncclPath)
	}
	life, kill := context.WithCancel(context.Background())
	return &Transport{
		cfg: cfg, a: a, version: int(v), prefix: "nccl/" + cfg.Name,
		rank: cfg.Rank, size: cfg.Size, life: life, kill: kill,
		pairs: make(map[[2]int]*pairEntry),
	}, nil
}

// Version is the loaded NCCL's version, such as "2.21.5", and the paths
// of the libraries.
func (t *Transport) Version() string {
	return fmt.Sprintf("NCCL %s (%s, CUDA runtime %s)", versionString(t.version), t.a.ncclPath, t.a.cudartPath)
}

// Rank is this rank in the communicator.
func (t *Transport) Rank() int { return t.rank }

// Size is the number of ranks in the communicator.
func (t *Transport) Size() int { return t.size }

// Device is the CUDA device this rank uses (valid after Connect).
func (t *Transport) Device() int { return int(t.dev) }

// Algorithm is the NCCL algorithm Config.Algo forced, or "" when NCCL
// chooses.
func (t *Transport) Algorithm() string { return t.cfg.Algo }

// Connect picks this rank's GPU, shares NCCL's unique id through store
// (rank 0 creates it and publishes it under "nccl/<Name>/id") and creates
// the communicator of all ranks. ctx bounds all of it: a rank that never
// arrives makes Connect abort the communicator and return an error. The
// store must stay open while the Transport is used: Send and Recv publish
// the ids of their pair communicators through it on first use.
func (t *Transport) Connect(ctx context.Context, store bootstrap.Store) error {
	t.mu.Lock()
	switch {
	case t.closed.Load():
		t.mu.Unlock()
		return fmt.Errorf("nccl: rank %d connect: %w", t.rank, transport.ErrClosed)
	case t.started:
		t.mu.Unlock()
		return fmt.Errorf("nccl: rank %d: Connect called twice; make a new Transport to connect again", t.rank)
	}
	t.started = true
	t.mu.Unlock()
	t.store = store

	var n int32
	if r := t.a.cudaGetDeviceCount(&n); r != cudaSuccess || n == 0 {
		why := "none is visible"
		if r != cudaSuccess {
			why = fmt.Sprintf("cudaGetDeviceCount: %s (code %d)", t.a.cudaGetErrorString(r), r)
		}
		return fmt.Errorf("nccl: rank %d: %w: %s; check the NVIDIA driver (nvidia-smi) and CUDA_VISIBLE_DEVICES", t.rank, ErrNoDevice, why)
	}
	t.dev = int32(t.cfg.LocalRank % int(n))
	if algo, _ := algoEnv(t.cfg.Algo); algo != "" {
		if cur := os.Getenv("NCCL_ALGO"); cur != "" && cur != algo {
			return fmt.Errorf("nccl: rank %d: NCCL_ALGO=%s is set but the algorithm asked for is %s; unset NCCL_ALGO or ask for the same", t.rank, cur, t.cfg.Algo)
		}
		os.Setenv("NCCL_ALGO", algo)
	}
	id, err := t.exchangeID(ctx, t.prefix+"/id", t.rank == 0)
	if err != nil {
		return err
	}
	c, err := t.initComm(ctx, "the communicator of all ranks", t.size, id, t.rank)
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.main = c
	t.mu.Unlock()
	return nil
}

// exchangeID returns the unique id published under key, which this rank
// creates and publishes when create is true.
func (t *Transport) exchangeID(ctx context.Context, key string, create bool) (uniqueID, error) {
	return exchangeID(ctx, t.store, key, t.rank, func() (uniqueID, error) {
		var id uniqueID
		if r := t.a.ncclGetUniqueId(&id); r != ncclSuccess {
			return id, &CallError{Rank: t.rank, Call: "ncclGetUniqueId", Code: r, Msg: t.a.ncclGetErrorString(r)}
		}
		return id, nil
	}, create)
}

// exchangeID shares one NCCL unique id through store: the creator makes it
// and sets key, everyone else waits for key.
func exchangeID(ctx context.Context, store bootstrap.Store, key string, rank int, make func() (uniqueID, error), create bool) (uniqueID, error) {
	var id uniqueID
	if create {
		id, err := make()
		if err != nil {
			return id, fmt.Errorf("nccl: rank %d: creating the unique id: %w", rank, err)
		}
		if err := store.Set(ctx, key, id.Internal[:]); err != nil {
			return id, fmt.Errorf("nccl: rank %d: publishing the unique id under %q: %w", rank, key, err)
		}
		return id, nil
	}
	v, err := store.Get(ctx, key)
	if err != nil {
		return id, fmt.Errorf("nccl: rank %d: waiting for the unique id under %q from its creator: %w", rank, key, err)
	}
	if len(v) != uniqueIDBytes {
		return id, fmt.Errorf("nccl: rank %d: the unique id under %q has %d bytes, want %d: another program wrote that key", rank, key, len(v), uniqueIDBytes)
	}
	copy(id.Internal[:], v)
	return id, nil
}

// initComm creates a communicator of n ranks on this rank's device,
// bounded by ctx unless it must be blocking.
func (t *Transport) initComm(ctx context.Context, what string, n int, id uniqueID, rank int) (*comm, error) {
	c := &comm{a: t.a, version: t.version, dev: t.dev, rank: rank, life: t.life,
		blocking: t.cfg.Blocking || t.a.ncclCommInitRankCfg == nil}
	var r int32
	err := c.onDevice(func() error {
		if r := t.a.cudaStreamCreate(&c.stream, cudaStreamNonBlocking); r != cudaSuccess {
			return c.cudaErr("cudaStreamCreateWithFlags", r)
		}
		if c.blocking {
			r = t.a.ncclCommInitRank(&c.h, int32(n), id, int32(rank))
		} else {
			r = t.a.ncclCommInitRankCfg(&c.h, int32(n), id, int32(rank), nonBlockingConfig())
		}
		return nil
	})
	if err == nil && r != ncclSuccess && r != ncclInProgress {
		err = c.ncclErr("ncclCommInitRank", r)
		c.abort(err)
	}
	if err == nil && r == ncclInProgress {
		err = c.poll(ctx, "ncclCommInitRank", false)
	}
	if err != nil {
		c.destroy(0)
		return nil, fmt.Errorf("nccl: rank %d: creating %s (%d ranks) on GPU %d: %w", t.rank, what, n, t.dev, err)
	}
	return c, nil
}

// ready returns the communicator of all ranks, or why there is none.
func (t *Transport) ready(what string) (*comm, error) {
	if t.closed.Load() {
		return nil, fmt.Errorf("nccl: rank %d: %s: %w", t.rank, what, transport.ErrClosed)
	}
	t.mu.Lock()
	c := t.main
	t.mu.Unlock()
	if c == nil {
		return nil, fmt.Errorf("nccl: rank %d: %s before Connect", t.rank, what)
	}
	return c, nil
}

// Close ends every communicator: in order when they are idle, by abort when
// that takes longer than Config.CloseTimeout. Operations blocked in other
// goroutines return errors wrapping transport.ErrClosed. Sub-communicators
// made by Split are closed too. Safe to call more than once.
func (t *Transport) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	t.kill()
	t.mu.Lock()
	var comms []*comm
	for _, e := range t.pairs {
		select {
		case <-e.ready:
			if e.c != nil {
				comms = append(comms, e.c)
			}
		default: // still being created: its poll sees life end and aborts
		}
	}
	if t.main != nil {
		comms = append(comms, t.main)
	}
	children := t.children
	t.mu.Unlock()
	var errs []error
	for _, ch := range children {
		errs = append(errs, ch.Close())
	}
	for _, c := range comms {
		errs = append(errs, c.destroy(t.cfg.CloseTimeout))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("nccl: rank %d close: %w", t.rank, err)
	}
	return nil
}
