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
	// Algo forces NCCL's all-reduce algorithm, "ring" or "tree", through
	// NCCL_ALGO, which NCCL reads when the communicator is created (so it
	// is fixed for the communicator's life). On NCCL 2.24 and newer it is
	// set for all-reduce only ("allreduce:tree"); older NCCL takes one
	// algorithm for every collective, so there ring is set for all of
	// them and tree is refused. Empty means NCCL chooses.
	Algo string
	// CloseTimeout bounds how long Close waits for NCCL to finish the
	// communicators in order before it aborts them. Zero means 10 s.
	CloseTimeout time.Duration
	// NonBlocking creates communicators in NCCL's non-blocking mode, where
	// every call returns at once and collkit polls it to the end. It costs
	// a thread that NCCL starts for each grouped call (each collective), so
	// the default is NCCL's blocking mode, with a watchdog that aborts the
	// communicator when a call outlives its context (see the package doc).
	// NCCL older than 2.14 has no non-blocking mode.
	NonBlocking bool
	// KeepForShrink keeps the communicator of all ranks when a call on it
	// fails (a peer gone, a context that ended while NCCL ran), so that
	// Shrink can make the next one from it with ncclCommShrink: later calls
	// fail as after an abort, and Shrink (NCCL_SHRINK_ABORT) or Close ends
	// what the failed call left running. It applies where NCCL has
	// ncclCommShrink (2.27 and newer) and the communicator is blocking. A
	// call blocked inside NCCL is aborted by the watchdog all the same.
	// False means abort at once (ncclCommAbort), which tells peers on a
	// network at once too.
	KeepForShrink bool
}

// ErrNoDevice is wrapped by Connect, Alloc and DeviceCount when NCCL loads
// but no CUDA device can be used (no driver, no GPU, CUDA_VISIBLE_DEVICES
// empty), or the device asked for is not one of those visible.
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
// The []byte methods take host memory: each call copies its input to the
// GPU, runs NCCL there, and copies the result back. The Device methods
// (transport.DeviceCollectives, transport.DeviceExchanger) take GPU memory
// and copy nothing.
type Transport struct {
	cfg      Config
	a        *api
	version  int
	dev      int32
	cuCtx    uintptr
	prefix   string // store key prefix
	store    bootstrap.Store
	rank     int
	size     int
	main     *comm
	life     context.Context
	kill     context.CancelFunc
	closed   atomic.Bool
	failed   atomic.Bool // Fail kept main for Shrink
	mu       sync.Mutex  // guards pairs, splits, started
	started  bool
	pairs    map[[2]int]*pairEntry
	splits   int
	children []*Transport
}

var (
	_ transport.Transport         = (*Transport)(nil)
	_ transport.NativeCollectives = (*Transport)(nil)
	_ transport.DeviceCollectives = (*Transport)(nil)
	_ transport.DeviceExchanger   = (*Transport)(nil)
	_ transport.DeviceGrouper     = (*Transport)(nil)
)

// Available returns nil when NCCL and the CUDA driver load on this machine,
// and otherwise the error, wrapping ErrNotAvailable, that New would return.
// It does not look for a GPU.
func Available() error { return available() }

// New checks cfg and loads NCCL and the CUDA driver (once per process). It
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
	if cfg.Algo != "" && cfg.Algo != "ring" && cfg.Algo != "tree" {
		_, err := algoEnv(cfg.Algo, 0)
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
	return fmt.Sprintf("NCCL %s (%s, CUDA driver %s)", versionString(t.version), t.a.ncclPath, t.a.cudaPath)
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
	return t.connect(ctx, store, func() (*comm, error) {
		id, err := t.exchangeID(ctx, t.prefix+"/id", t.rank == 0)
		if err != nil {
			return nil, err
		}
		return t.initComm(ctx, "the communicator of all ranks", t.size, id, t.rank)
	})
}

// connect picks this rank's GPU and makes the communicator of all ranks
// with create.
func (t *Transport) connect(ctx context.Context, store bootstrap.Store, create func() (*comm, error)) error {
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

	n, err := t.a.devices()
	if err != nil {
		return fmt.Errorf("nccl: rank %d: %w", t.rank, err)
	}
	if err := t.shareGPU(n); err != nil {
		return err
	}
	t.dev = int32(t.cfg.LocalRank % n)
	if t.cuCtx, err = t.a.context(int(t.dev)); err != nil {
		return fmt.Errorf("nccl: rank %d: GPU %d: %w", t.rank, t.dev, err)
	}
	algo, err := algoEnv(t.cfg.Algo, t.version)
	if err != nil {
		return fmt.Errorf("nccl: rank %d: %w", t.rank, err)
	}
	if algo != "" {
		if cur := os.Getenv("NCCL_ALGO"); cur != "" && cur != algo {
			return fmt.Errorf("nccl: rank %d: NCCL_ALGO=%s is set but the algorithm asked for is %s (NCCL_ALGO=%s); unset NCCL_ALGO or ask for no algorithm", t.rank, cur, t.cfg.Algo, algo)
		}
		os.Setenv("NCCL_ALGO", algo)
	}
	c, err := create()
	if err != nil {
		return err
	}
	c.keep = t.keeps(c)
	t.mu.Lock()
	t.main = c
	t.mu.Unlock()
	return nil
}

// keeps reports whether c, a communicator of all ranks, is kept after a
// failed call (Config.KeepForShrink).
func (t *Transport) keeps(c *comm) bool {
	return t.cfg.KeepForShrink && t.a.ncclCommShrink != nil && c.blocking
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

// ErrGPUShared is wrapped by Connect when more ranks than GPUs run on one
// node and this NCCL cannot put two ranks on one GPU.
var ErrGPUShared = errors.New("more ranks than GPUs")

// EnvMultiRankGPU is the variable with which NCCL 2.30 and newer let
// several ranks share one GPU.
const EnvMultiRankGPU = "NCCL_MULTI_RANK_GPU_ENABLE"

// shareGPU returns an error when this rank would share a GPU with a rank
// of lower local rank and NCCL cannot do that ("Duplicate GPU").
func (t *Transport) shareGPU(gpus int) error {
	if t.cfg.LocalRank < gpus {
		return nil
	}
	return fmt.Errorf("nccl: rank %d: %w", t.rank, GPUShareError(t.cfg.LocalRank+1, gpus, t.version))
}

// GPUShareError is nil when ranks ranks can run on a node of gpus GPUs with
// an NCCL of version code v, and otherwise says why not and what to do.
func GPUShareError(ranks, gpus, v int) error {
	if ranks <= gpus {
		return nil
	}
	if v >= ncclVersionCode2_30 {
		if os.Getenv(EnvMultiRankGPU) == "1" {
			return nil
		}
		return fmt.Errorf("%w: %d ranks on %d GPU(s): NCCL %s puts several ranks on one GPU only with %s=1; set it, or run at most %d ranks per node",
			ErrGPUShared, ranks, gpus, versionString(v), EnvMultiRankGPU, gpus)
	}
	return fmt.Errorf("%w: %d ranks on %d GPU(s): NCCL %s allows one rank per GPU (NCCL 2.30 and newer take %s=1 to share); run at most %d ranks per node",
		ErrGPUShared, ranks, gpus, versionString(v), EnvMultiRankGPU, gpus)
}

// initComm creates a communicator of n ranks on this rank's device,
// bounded by ctx. A non-blocking communicator is polled to the end. A
// blocking one is created on a goroutine of its own: when ctx ends first,
// initComm returns an error at once and the goroutine aborts the
// communicator if NCCL ever returns it.
func (t *Transport) initComm(ctx context.Context, what string, n int, id uniqueID, rank int) (*comm, error) {
	c := newComm(t, rank)
	fail := func(err error) (*comm, error) {
		c.destroy(0)
		return nil, fmt.Errorf("nccl: rank %d: creating %s (%d ranks) on GPU %d: %w", t.rank, what, n, t.dev, err)
	}
	if err := c.createStream(); err != nil {
		return fail(err)
	}
	if !c.blocking {
		var r int32
		c.onDevice(func() error {
			r = t.a.ncclCommInitRankCfg(&c.h, int32(n), id, int32(rank), configure(false))
			return nil
		})
		switch r {
		case ncclSuccess:
		case ncclInProgress:
			if err := c.poll(ctx, "ncclCommInitRank", false); err != nil {
				return fail(err)
			}
		default:
			err := c.ncclErr("ncclCommInitRank", r)
			c.abort(err)
			return fail(err)
		}
		return c, nil
	}
	if err := t.createBlocking(ctx, c, "ncclCommInitRank", func(h *uintptr) int32 {
		return t.a.ncclCommInitRank(h, int32(n), id, int32(rank))
	}); err != nil {
		return fail(err)
	}
	return c, nil
}

// createBlocking sets c.h with create, a blocking NCCL call that makes a
// communicator, run on a goroutine of its own: when ctx or the transport's
// life ends first, it returns an error at once, and the goroutine aborts
// the communicator if NCCL ever returns it.
func (t *Transport) createBlocking(ctx context.Context, c *comm, call string, create func(h *uintptr) int32) error {
	type result struct {
		h uintptr
		r int32
	}
	const pending, delivered, abandoned = 0, 1, 2
	var state atomic.Int32
	done := make(chan result, 1)
	go func() {
		var res result
		c.onDevice(func() error {
			res.r = create(&res.h)
			return nil
		})
		if !state.CompareAndSwap(pending, delivered) && res.r == ncclSuccess {
			t.a.ncclCommAbort(res.h) // nobody waits for it any more
		}
		done <- res
	}()
	var res result
	select {
	case <-ctx.Done():
	case <-t.life.Done():
	case res = <-done:
	}
	if state.CompareAndSwap(pending, abandoned) {
		if t.life.Err() != nil {
			return transport.ErrClosed
		}
		return fmt.Errorf("%s did not return: %w; a rank is missing or stuck (if NCCL ever forms the communicator, it is aborted)", call, context.Cause(ctx))
	}
	if res.h == 0 && res.r == ncclSuccess {
		res = <-done // delivered while ctx ended
	}
	if res.r != ncclSuccess {
		return &CallError{Rank: c.rank, Call: call, Code: res.r, Msg: t.a.ncclGetErrorString(res.r)}
	}
	c.h = res.h
	return nil
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
