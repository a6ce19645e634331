package collkit

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/collkit/collkit/algo/adaptive"
	"github.com/collkit/collkit/internal/clock"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
)

// DType and Op are re-exported from package reduce so that most programs need
// only this package.
type (
	DType = reduce.DType
	Op    = reduce.Op
)

// Element types.
const (
	Float32  = reduce.Float32
	Float64  = reduce.Float64
	Int32    = reduce.Int32
	Int64    = reduce.Int64
	Uint8    = reduce.Uint8
	Float16  = reduce.Float16
	BFloat16 = reduce.BFloat16
)

// Reduction operators.
const (
	Sum  = reduce.Sum
	Prod = reduce.Prod
	Min  = reduce.Min
	Max  = reduce.Max
	Avg  = reduce.Avg
)

// DefaultTimeout bounds each collective when Options.Timeout is zero.
const DefaultTimeout = 5 * time.Minute

// Errors returned by Comm.
var (
	// ErrAborted is wrapped by every call on a communicator that already
	// failed; the first error is wrapped with it.
	ErrAborted = errors.New("communicator aborted by an earlier error")
	// ErrBadArgument is wrapped when a call's arguments are invalid on this
	// rank (sizes, dtype, op, root, algorithm name).
	ErrBadArgument = errors.New("invalid argument")
)

// adaptive is the adaptive algorithm's configuration for this communicator.
func (c *Comm) adaptive() adaptive.Config {
	cfg := adaptive.Config{Table: c.tuning, Transport: c.transportName}
	if hasNativeAllReduce(c.t) {
		cfg.Algorithms = withNative
	}
	return cfg
}

// withNative are adaptive's candidates over a transport with an all-reduce
// of its own, made once: every call asks for them.
var withNative = adaptive.WithNative(nativeAllReduce)

// chooseAdaptive is what adaptive runs for an all-reduce of bytes: the
// candidate's name and its run, bound to the candidate's place among them
// (adaptive.Config.Bind). It keeps the last choice: Choose walks every
// candidate's fits (0.65 us, a twentieth of an 8-byte all-reduce over
// loopback TCP), Bind their names, and a loop of all-reduces of one size,
// the usual case, need repeat neither (adaptive against native, 2 ranks
// over shm, 8 B: 1.38 against 1.22 us a call before the bound run was
// kept). Calls are serialized (see call), so the cache needs no lock, and
// a communicator's size and table never change.
func (c *Comm) chooseAdaptive(bytes int64) *adaptiveChoice {
	k := &c.lastChoice
	if k.bytes == bytes && k.name != "" {
		return k
	}
	cfg := c.adaptive()
	a, _ := cfg.Choose(bytes, c.size)
	// Bind fails only for a stranger, and Choose returns one of cfg's
	// candidates; a zero Bound's Run reports it at the call all the same.
	bound, _ := cfg.Bind(a)
	*k = adaptiveChoice{bytes: bytes, name: a.Name, bound: bound}
	c.noteChoice(int(bytes), a.Name)
	return k
}

// adaptiveChoice is chooseAdaptive's cache.
type adaptiveChoice struct {
	bytes int64
	name  string
	bound adaptive.Bound
}

// Choose names the algorithm an all-reduce of bytes runs: the configured
// one, or the one adaptive picks for that size.
func (c *Comm) Choose(bytes int64) string {
	if algorithmNames[c.algo] == "adaptive" {
		a, _ := c.adaptive().Choose(bytes, c.Size())
		return a.Name
	}
	return algorithmNames[c.algo]
}

// Options configures a Comm. The zero value is ready to use.
type Options struct {
	// Algorithm is the all-reduce algorithm by name: a built-in or one
	// registered with RegisterAlgorithm (see Algorithms). Empty means
	// "native" on transports with their own all-reduce
	// (transport.NativeAllReducer: shm), "ring" on the others (NCCL too).
	Algorithm string
	// Timeout bounds every collective that is called with a context without
	// an earlier deadline. Zero means DefaultTimeout; negative means none.
	Timeout time.Duration
	// SetupTimeout bounds Connect, FromEnv and ConnectStore (meeting the
	// other ranks through the store, connecting to them) when their context
	// has no deadline, as torch's init_process_group(timeout=...) does. Zero
	// means DefaultSetupTimeout; negative means none.
	SetupTimeout time.Duration
	// Transport names the transport FromEnv, Connect and ConnectStore
	// build: "tcp", "shm" (every rank on one host), "nccl" (NCCL installed),
	// "rdma" (UCX; needs the rdma build tag) or one registered with
	// RegisterTransport (see Transports); AutoTransport ("auto") picks
	// shm when every rank runs on this host, else tcp (see
	// ChooseTransport). Empty means "tcp".
	Transport string
	// Streams is the number of TCP connections per peer (tcp transport).
	// Zero means 1.
	Streams int
	// SpinWait is how long a tcp receive polls before sleeping (see
	// tcp.Config.SpinWait). Zero learns it per peer; negative
	// disables polling.
	SpinWait time.Duration
	// TCPCongestion is the TCP congestion control of the tcp transport's
	// connections (see tcp.Config.Congestion). Empty means cubic, else
	// reno; "system" keeps the kernel's default.
	TCPCongestion string
	// Tuning is the path of a tuning file written by `collbench tune`, used
	// by the adaptive algorithm. Empty means $COLLKIT_TUNING, and without
	// that, built-in cost terms.
	Tuning string
	// Nodes[r] is the node rank r runs on, for the hierarchical algorithm.
	// Nil means Connect groups ranks by host name (or $COLLKIT_NODE), and
	// New puts every rank on one node.
	Nodes []int
	// TLS, when set, wraps every tcp connection in TLS (see tcp.LoadTLS).
	// Nil means plain TCP.
	TLS *tls.Config
	// SimulatedNodes, when positive, overrides Nodes: the ranks are split
	// into that many "nodes" of consecutive ranks, to try hierarchical
	// algorithms on one machine.
	SimulatedNodes int
	// NoStats turns off the statistics every communicator keeps (see
	// Comm.Stats); they cost about 0.1 us per collective.
	NoStats bool
	// Trace records a span for every collective and every message of it,
	// for Comm.Trace and Comm.WriteTrace. Off by default.
	Trace bool
	// Logger receives the debug log. Nil means the one COLLKIT_DEBUG asks
	// for (see LoggerFromEnv), silent when it is unset.
	Logger *slog.Logger
	// ElasticWait bounds each step of Shrink and Grow (see Comm.Shrink): how
	// long a member waits for another that no member saw die, and for the
	// new generation's transport to connect. Zero means
	// DefaultElasticWait.
	ElasticWait time.Duration
	// IntraNode is the transport Connect gives the hierarchical algorithm
	// inside a node of several ranks: "shm" (shared memory), "group" (the
	// main transport) or "nccl" (NCCL inside every node, one of a single
	// rank included, and the main transport, tcp or rdma, between nodes;
	// its error wraps nccl.ErrNotAvailable where NCCL is not installed).
	// Empty means shm where /dev/shm exists; for the later generations of
	// an elastic communicator (Shrink, Grow, Join), only when
	// Options.Algorithm is hierarchical or one a program registered, so
	// that a shrink does not wait for a transport the algorithm never
	// uses: set "shm" to have it for a SetAlgorithm("hierarchical") later.
	IntraNode string
}

// nodes resolves the node of every rank from opts.
func (opts Options) nodes(size int) ([]int, error) {
	switch {
	case opts.SimulatedNodes > 0:
		if opts.SimulatedNodes > size {
			return nil, fmt.Errorf("%w: %d simulated nodes for %d ranks; use at most one node per rank", ErrBadArgument, opts.SimulatedNodes, size)
		}
		nodes := make([]int, size)
		for r := range nodes {
			nodes[r] = r * opts.SimulatedNodes / size
		}
		return nodes, nil
	case opts.Nodes != nil:
		if len(opts.Nodes) != size {
			return nil, fmt.Errorf("%w: Options.Nodes has %d entries for %d ranks", ErrBadArgument, len(opts.Nodes), size)
		}
		return opts.Nodes, nil
	}
	return make([]int, size), nil
}

// groupNames numbers distinct names in order of first appearance.
func groupNames(names [][]byte) []int {
	ids := map[string]int{}
	nodes := make([]int, len(names))
	for r, name := range names {
		id, ok := ids[string(name)]
		if !ok {
			id = len(ids)
			ids[string(name)] = id
		}
		nodes[r] = id
	}
	return nodes
}

// Comm is a communicator: one rank's handle on a group of ranks.
type Comm struct {
	t             transport.Transport
	transportName string
	algo          uint8
	run           AllReduceFunc
	tuning        *adaptive.Table
	lastChoice    adaptiveChoice      // adaptive's last pick (chooseAdaptive)
	tGen          uint64              // changes whenever t or intra does (see callWatch.begin)
	nodes         []int               // node of each rank
	intra         transport.Transport // inside this rank's node, if Connect made one
	timeout       time.Duration
	closers       []io.Closer
	rank, size    int
	base          transport.Transport // what New got: Close closes it
	treeBytes     int                 // rooted collectives up to this size use a tree
	directBytes   int                 // scatter and gather blocks from this size go straight between root and ranks (pairwise)
	bcastBytes    int                 // broadcasts up to this size use a tree
	sub           subState            // sub-communicators (comm_split.go)
	obs           observer            // statistics, spans, log (comm_observe.go)
	timeoutCtx    timeoutCtx          // reused by withTimeout; guarded by mu
	began         time.Duration       // when the running call began, clock.Since (withTimeout); guarded by mu
	timeoutErr    error               // made once by timeoutCause; guarded by mu
	counts        []int               // evenCounts' memory; guarded by mu

	eng engine // order of operations, concurrent-use checks (comm_async.go)
	// el makes the next generation (comm_elastic.go); nil for New's.
	el      *elastic
	revoked atomic.Pointer[error] // Revoke's error, first call's
	// watch finds peers that called another collective (comm_watch.go).
	watch callWatch

	mu     sync.Mutex // one collective at a time; guards seq, err, t and p2pSeq
	seq    uint64
	err    error
	p2pSeq []p2pSeq // per peer (comm_p2p.go)
}

// New returns a communicator over an already connected transport. The Comm
// owns t and closes it in Close.
func New(t transport.Transport, opts Options) (*Comm, error) {
	algo, err := findAlgorithm(opts.Algorithm)
	if err != nil {
		return nil, fmt.Errorf("collkit: rank %d: %w", t.Rank(), err)
	}
	if opts.Algorithm == "" {
		algo, _ = findAlgorithm(defaultAlgorithm(t))
	}
	c := &Comm{t: t, algo: algo, timeout: opts.Timeout, transportName: opts.Transport,
		rank: t.Rank(), size: t.Size(), base: t, treeBytes: DefaultTreeBytes, bcastBytes: DefaultBroadcastTreeBytes,
		directBytes: directBlockBytes}
	if c.nodes, err = opts.nodes(t.Size()); err != nil {
		return nil, fmt.Errorf("collkit: rank %d: %w", t.Rank(), err)
	}
	if c.timeout == 0 {
		c.timeout = DefaultTimeout
	}
	if c.transportName == "" {
		c.transportName = "tcp"
	}
	if path := cmp.Or(opts.Tuning, os.Getenv("COLLKIT_TUNING")); path != "" {
		if c.tuning, err = adaptive.Load(path); err != nil {
			return nil, fmt.Errorf("collkit: rank %d: %w", t.Rank(), err)
		}
	}
	if c.run, err = c.algorithm(algo); err != nil {
		return nil, fmt.Errorf("collkit: rank %d: %w", t.Rank(), err)
	}
	if c.obs, err = newObserver(opts, c.rank); err != nil {
		return nil, fmt.Errorf("collkit: rank %d: %w", t.Rank(), err)
	}
	c.obs.log.Info("communicator", "size", c.size, "transport", c.transportName, "algorithm", c.Algorithm(),
		"timeout", c.timeout, "nodes", c.nodes, "stats", c.obs.stats != nil, "trace", c.obs.rec != nil)
	return c, nil
}

// Rank is this process's rank in [0, Size()).
func (c *Comm) Rank() int { return c.rank }

// Size is the number of ranks.
func (c *Comm) Size() int { return c.size }

// Algorithm is the name of the all-reduce algorithm in use.
func (c *Comm) Algorithm() string { return algorithmNames[c.algo] }

// SetAlgorithm switches the all-reduce algorithm. Every rank must switch at
// the same point in its sequence of collectives.
func (c *Comm) SetAlgorithm(name string) error {
	id, err := findAlgorithm(name)
	if err != nil {
		return fmt.Errorf("collkit: rank %d: %w", c.Rank(), err)
	}
	// In turn with the operations started before it, which keep the
	// algorithm they were started under.
	return c.call(context.Background(), nameSetAlgorithm, funcOp(func(context.Context) error {
		run, err := c.algorithm(id)
		if err != nil {
			return fmt.Errorf("collkit: rank %d: %w", c.Rank(), err)
		}
		c.algo, c.run = id, run
		return nil
	}), nil)
}

// Nodes returns the node of every rank, as the hierarchical algorithm groups
// them.
func (c *Comm) Nodes() []int { return slices.Clone(c.nodes) }

// Transport is the transport the communicator runs on. After the first
// Split it is a view of a multiplexer over the original transport.
func (c *Comm) Transport() transport.Transport {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Close releases the transport and anything the communicator started (the
// bootstrap store of FromEnv). Safe to call more than once.
func (c *Comm) Close() error {
	err := c.base.Close()
	for _, cl := range slices.Backward(c.closers) {
		err = errors.Join(err, cl.Close())
	}
	c.closers = nil
	return err
}

// AllReduce reduces send over all ranks into recv with op, reading both as
// elements of dt. send and recv have the same length, a multiple of
// dt.Size(); recv may be send itself (in place).
func (c *Comm) AllReduce(ctx context.Context, dt DType, op Op, send, recv []byte) error {
	if err := checkBuffers(dt, op, send, recv); err != nil {
		return c.call(ctx, nameAllReduce, operation{}, fmt.Errorf("collkit: rank %d: allreduce: %w", c.Rank(), err))
	}
	if err := c.enter(nameAllReduce); err != nil {
		return err
	}
	if c.eng.pending.Load() > 0 {
		w := c.submit(ctx, nameAllReduce, operation{kind: opAllReduce, dt: dt, op: op, send: send, recv: recv})
		<-w.done
		return c.exit(w.err)
	}
	// The common case, inline: no closure, no goroutine hand-off.
	c.mu.Lock()
	err := c.allReduce(ctx, dt, op, send, recv)
	c.mu.Unlock()
	return c.exit(err)
}

// AllReduceAsync starts an all-reduce (see AllReduce) and returns at once;
// see Work for when its buffers may be touched and how operations are
// ordered.
func (c *Comm) AllReduceAsync(ctx context.Context, dt DType, op Op, send, recv []byte) *Work {
	var argErr error
	if err := checkBuffers(dt, op, send, recv); err != nil {
		argErr = fmt.Errorf("collkit: rank %d: allreduce: %w", c.Rank(), err)
	}
	return c.start(ctx, nameAllReduce, operation{kind: opAllReduce, dt: dt, op: op, send: send, recv: recv}, argErr)
}

// allReduce runs a checked all-reduce. The caller holds c.mu.
func (c *Comm) allReduce(ctx context.Context, dt DType, op Op, send, recv []byte) error {
	if err := c.usable(); err != nil {
		return err
	}
	h := transport.Header{
		Seq:   c.seq,
		Count: uint64(len(send) / dt.Size()),
		Root:  -1,
		Coll:  transport.CollAllReduce,
		DType: dt,
		Op:    op,
		Algo:  c.algo,
	}
	c.seq++
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	algo := algorithmNames[c.algo]
	var chosen *adaptiveChoice // adaptive chooses once: what runs is what the statistics name
	if algo == "adaptive" {
		chosen = c.chooseAdaptive(int64(len(send)))
		algo = chosen.name
	}
	err := c.observed("allreduce", algo, h, len(send), func(t transport.Transport) error {
		if chosen != nil {
			return chosen.bound.Run(ctx, t, h, send, recv)
		}
		return c.run(ctx, t, h, send, recv)
	})
	if err != nil {
		return c.fail(fmt.Errorf("collkit: rank %d: allreduce #%d (%s, %d x %v, %v): %w",
			c.Rank(), h.Seq, c.Algorithm(), h.Count, dt, op, explain(ctx, err)))
	}
	return nil
}

// explain adds the reason a context ended (the communicator's timeout, say)
// to an error caused by it. A transport's socket deadline is the context's
// own, and the runtime may fire it a moment before the context's timer:
// the error then says the deadline passed while ctx has not ended yet
// (2 of 20 timeouts over tcp said so without the reason), so explain waits
// for ctx that moment, and every rank names the same cause.
func explain(ctx context.Context, err error) error {
	if ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)) {
		awaitDeadline(ctx)
	}
	if ctx.Err() == nil {
		return err
	}
	if cause := context.Cause(ctx); cause != nil && cause != ctx.Err() {
		return fmt.Errorf("%w (%w)", err, cause)
	}
	return err
}

// deadlineSlack is how long after its deadline explain waits for a
// context to end.
const deadlineSlack = 100 * time.Millisecond

// awaitDeadline waits for ctx to end if its deadline has passed or is at
// most deadlineSlack away, and no longer than deadlineSlack past it.
func awaitDeadline(ctx context.Context) {
	dl, ok := ctx.Deadline()
	if !ok || time.Until(dl) > deadlineSlack {
		return
	}
	t := time.NewTimer(time.Until(dl) + deadlineSlack)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// AllReduce reduces send over all ranks into recv with op. recv may be send
// itself (in place).
func AllReduce[T Element](ctx context.Context, c *Comm, send, recv []T, op Op) error {
	return c.AllReduce(ctx, dtypeOf[T](), op, reduce.Bytes(send), reduce.Bytes(recv))
}

// AllReduceAsync starts a typed all-reduce (see Comm.AllReduceAsync).
func AllReduceAsync[T Element](ctx context.Context, c *Comm, send, recv []T, op Op) *Work {
	return c.AllReduceAsync(ctx, dtypeOf[T](), op, reduce.Bytes(send), reduce.Bytes(recv))
}

func dtypeOf[T Element]() DType {
	var zero T
	switch any(zero).(type) {
	case F16:
		return Float16
	case BF16:
		return BFloat16
	case float32:
		return Float32
	case float64:
		return Float64
	case int32:
		return Int32
	case int64:
		return Int64
	default:
		return Uint8
	}
}

func checkBuffers(dt DType, op Op, send, recv []byte) error {
	if !dt.Valid() {
		return fmt.Errorf("%w: data type %v", ErrBadArgument, dt)
	}
	if !op.Valid() {
		return fmt.Errorf("%w: reduction op %v", ErrBadArgument, op)
	}
	if len(send) != len(recv) {
		return fmt.Errorf("%w: send buffer is %d bytes but recv buffer is %d; they must be the same size",
			ErrBadArgument, len(send), len(recv))
	}
	if len(send)%dt.Size() != 0 {
		return fmt.Errorf("%w: buffer of %d bytes is not a whole number of %v elements (%d bytes each)",
			ErrBadArgument, len(send), dt, dt.Size())
	}
	return nil
}

func (c *Comm) usable() error {
	if m := c.eng.misuse.Load(); m != nil && c.err == nil {
		c.fail(*m)
	}
	if r := c.revoked.Load(); r != nil && c.err == nil {
		c.fail(*r)
	}
	if c.err != nil {
		return fmt.Errorf("collkit: rank %d: %w: %w", c.Rank(), ErrAborted, c.err)
	}
	return nil
}

// fail makes err, with a diagnosis (comm_failure.go), the communicator's
// sticky error and aborts the transport so that peers waiting on this rank
// see the failure at once.
func (c *Comm) fail(err error) error {
	if rv := revocation(err); rv != nil && !errors.Is(err, ErrRevoked) {
		err = fmt.Errorf("%w (%w)", rv, err)
	}
	fe := c.diagnose(err)
	c.err = fe
	c.abort(fe)
	return fe
}

// Making a context with a timer costs more than an 8-byte all-reduce over
// shared memory (about 700 ns of a 2 us call), so the context made for a
// parent is reused by the next calls with the same parent while at least
// nine tenths of the timeout remain: a collective then fails between 0.9
// and 1 times the timeout after it starts. A parent cancelled since is seen
// by the reused context as by a new one. A caller that passes a new parent
// each time gets a new context each time. The context can also be
// cancelled by a concurrent caller (see Comm.enter), so that a call that
// was overlapped fails rather than pairs with the wrong call of a peer. The
// caller holds c.mu; the returned function must be called when the
// collective ends.
//
// It also reads the clock for the call, once: c.began serves both the
// timeout's refresh and the statistics (observed), each clock read costing
// about 5% of an 8-byte all-reduce over shared memory.
func (c *Comm) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	_, hasDeadline := ctx.Deadline()
	timed := !hasDeadline && c.timeout >= 0
	c.began = clock.Since()
	if !reflect.TypeOf(ctx).Comparable() {
		var tc timeoutCtx
		tc.make(c, ctx, timed)
		return tc.ctx, tc.cancel
	}
	tc := &c.timeoutCtx
	if tc.ctx == nil || tc.parent != ctx || tc.ctx.Err() != nil || tc.timed != timed ||
		(timed && c.began-tc.made > c.timeout/10) {
		if tc.cancel != nil {
			tc.cancel()
		}
		tc.make(c, ctx, timed)
	}
	return tc.ctx, func() {}
}

// make builds the context of a call under parent: cancellable by a
// concurrent caller, and with the communicator's timeout if timed.
func (tc *timeoutCtx) make(c *Comm, parent context.Context, timed bool) {
	ctx, interrupt := context.WithCancelCause(parent)
	c.eng.cancel.Store(&interrupt)
	// A concurrent caller that came after enter but before the Store found
	// no call to interrupt: this one is it. (enter records the misuse, then
	// loads cancel; between the two orders one side sees the other.)
	if m := c.eng.misuse.Load(); m != nil {
		interrupt(*m)
	}
	tc.parent, tc.timed, tc.ctx, tc.cancel = parent, timed, ctx, func() { interrupt(nil) }
	if timed {
		tc.made = c.began
		var cancel context.CancelFunc
		tc.ctx, cancel = context.WithDeadlineCause(ctx, clock.Base().Add(c.began+c.timeout), c.timeoutCause())
		tc.cancel = func() { cancel(); interrupt(nil) }
	}
}

// timeoutCause is the error a timed-out collective reports.
func (c *Comm) timeoutCause() error {
	if c.timeoutErr == nil {
		c.timeoutErr = fmt.Errorf("collective exceeded the communicator timeout of %v: a peer is stuck or dead (raise Options.Timeout if the data is just large)", c.timeout)
	}
	return c.timeoutErr
}

// timeoutCtx is the reused timeout context of withTimeout.
type timeoutCtx struct {
	parent context.Context
	timed  bool          // with the communicator's timeout
	made   time.Duration // when, on the clock of Comm.began
	ctx    context.Context
	cancel context.CancelFunc
}
