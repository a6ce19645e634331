package adaptive

import (
	"context"
	"fmt"
	"math/bits"
	"slices"

	"github.com/collkit/collkit/algo/halvingdoubling"
	"github.com/collkit/collkit/algo/pairwise"
	"github.com/collkit/collkit/algo/ring"
	"github.com/collkit/collkit/algo/tree"
	"github.com/collkit/collkit/transport"
)

// AllReduceFunc is the shape of every all-reduce algorithm.
type AllReduceFunc func(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error

// Algorithm is a candidate: how to run it and the shape of its cost.
type Algorithm struct {
	Name string
	Run  AllReduceFunc
	Shape
}

// Ring is the shape of ring all-reduce: 2(n-1) steps, 2(n-1)/n of the data.
var Ring = Shape{
	Steps:  func(n int) float64 { return 2 * float64(n-1) },
	Factor: func(n int) float64 { return 2 * float64(n-1) / float64(n) },
}

// Tree is the shape of a pipelined double binary tree: up and down a tree of
// depth log2(n); every rank moves about the whole buffer each way.
var Tree = Shape{
	Steps:  func(n int) float64 { return 2 * log2ceil(n) },
	Factor: func(n int) float64 { return 2 },
}

// HalvingDoubling is the shape of halving-doubling: Rabenseifner's
// reduce-scatter and all-gather (2 log2 p steps over the largest power of
// two p <= n ranks), and up to halvingdoubling.DefaultDoublingMaxBytes
// recursive doubling (log2 p steps, each with the whole buffer). With n not
// a power of two, n-p ranks first hand their buffer to a partner and get
// the result back: two more steps, each with the whole buffer.
var HalvingDoubling = Shape{
	Steps:  func(n int) float64 { return 2*log2floor(n) + extra(n) },
	Factor: func(n int) float64 { p := pow2floor(n); return 2*(p-1)/p + extra(n) },
	Small: &Shape{
		Steps:  func(n int) float64 { return log2floor(n) + extra(n) },
		Factor: func(n int) float64 { return log2floor(n) + extra(n) },
	},
	SmallBytes: halvingdoubling.DefaultDoublingMaxBytes,
}

// Pairwise is the shape of the two-shot all-reduce: two rounds of n-1
// messages, 2(n-1)/n of the data per rank, as a ring's; its messages do
// not wait for each other, which the fitted latency shows.
var Pairwise = Shape{
	Steps:  func(n int) float64 { return 2 * float64(n-1) },
	Factor: func(n int) float64 { return 2 * float64(n-1) / float64(n) },
}

// Native is the shape of a transport's own all-reduce over shared memory
// (shm's): every rank copies its buffer in, and after a barrier reduces its
// 1/n slice from every rank's copy; after a second barrier every rank
// copies all slices out. Up to nativeSmallBytes one barrier, after which
// every rank reduces every rank's whole buffer.
var Native = Shape{
	Steps:  func(n int) float64 { return 2 },
	Factor: func(n int) float64 { return 2 * float64(n-1) / float64(n) },
	Small: &Shape{
		Steps:  func(n int) float64 { return 1 },
		Factor: func(n int) float64 { return float64(n - 1) },
	},
	SmallBytes: nativeSmallBytes,
}

// nativeSmallBytes is where Native's shape changes: shm.SmallNativeBytes
// (on 2 ranks; SmallNativeBytesMany on more).
const nativeSmallBytes = 4 << 10

// pow2floor is the largest power of two <= n (n >= 1), log2floor its log.
func pow2floor(n int) float64 { return float64(uint(1) << (bits.Len(uint(max(n, 1))) - 1)) }
func log2floor(n int) float64 { return float64(bits.Len(uint(max(n, 1))) - 1) }

// extra is halving-doubling's two steps for ranks beyond a power of two.
func extra(n int) float64 {
	if float64(n) == pow2floor(n) {
		return 0
	}
	return 2
}

// Config chooses among Algorithms for each call. The zero value chooses
// among Defaults() with built-in cost terms.
type Config struct {
	// Algorithms are the candidates. Nil means Defaults().
	Algorithms []Algorithm
	// Table holds measured cost terms. Nil means the built-in table (see
	// Builtin) for the transports it covers, and built-in shape terms for
	// the others. A candidate the table does not cover at a world size
	// where it covers others is not chosen there.
	Table *Table
	// Transport is the name the Table's entries are keyed by ("tcp", ...).
	Transport string
}

// Defaults are the flat all-reduce algorithms adaptive chooses among.
func Defaults() []Algorithm {
	return []Algorithm{
		{Name: "ring", Run: ring.AllReduce, Shape: Ring},
		{Name: "tree", Run: tree.AllReduce, Shape: Tree},
		{Name: "halvingdoubling", Run: halvingdoubling.AllReduce, Shape: HalvingDoubling},
		{Name: "pairwise", Run: pairwise.AllReduce, Shape: Pairwise},
	}
}

// WithNative is Defaults and, named "native", the transport's own
// all-reduce run by run: the candidates over a transport that has one
// (transport.NativeAllReducer). Choose picks it where the table measured
// it fastest, and never at a world size where the table measured the
// others but not it.
func WithNative(run AllReduceFunc) []Algorithm {
	return append(Defaults(), Algorithm{Name: "native", Run: run, Shape: Native})
}

func (c Config) algorithms() []Algorithm {
	if c.Algorithms == nil {
		return Defaults()
	}
	return c.Algorithms
}

// Choose returns the candidate the model predicts fastest for an all-reduce
// of bytes over n ranks, and that prediction in microseconds. An empty
// all-reduce gets the choice of the smallest one, so that a rank that
// passes an empty buffer where the others pass a few elements runs their
// algorithm, and they meet its header where they expect theirs.
func (c Config) Choose(bytes int64, n int) (Algorithm, float64) {
	bytes = max(bytes, 1)
	algos := c.algorithms()
	best, bestUS := 0, 0.0
	table, ranks := c.Table, n
	if table == nil {
		table, ranks = builtin, builtin.nearest(c.Transport, n)
	}
	fitted := func(a Algorithm) *Entry {
		if e := table.entry(c.Transport, ranks, a.Name); e != nil && len(e.Fits) > 0 {
			return e
		}
		return nil
	}
	// A candidate the table did not measure where it measured others is
	// left out: its shape terms say nothing next to fitted ones.
	measured := slices.ContainsFunc(algos, func(a Algorithm) bool { return fitted(a) != nil })
	found := false
	for i, a := range algos {
		f, shapeAt := defaultFit, bytes
		if e := fitted(a); e != nil {
			f = fitFor(e.Fits, bytes)
			shapeAt = f.MinBytes // the shape the band was fitted with
		} else if measured {
			continue
		}
		us := a.at(shapeAt).predict(f, n, bytes)
		if !found || us < bestUS {
			best, bestUS, found = i, us, true
		}
	}
	return algos[best], bestUS
}

// AllReduce runs the algorithm Choose picks for this call.
func (c Config) AllReduce(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error {
	a, _ := c.Choose(int64(len(send)), t.Size())
	return c.Run(ctx, a, t, h, send, recv)
}

// Run runs a, a candidate Choose returned, for a caller that chose already
// (to label the call with what runs). The header's Algo field carries the
// choice, so ranks whose tables disagree get a mismatch error rather than
// waiting on each other forever.
func (c Config) Run(ctx context.Context, a Algorithm, t transport.Transport, h transport.Header, send, recv []byte) error {
	id, err := c.id(a)
	if err != nil {
		return fmt.Errorf("adaptive: rank %d: %w", t.Rank(), err)
	}
	return run(ctx, a, id, t, h, send, recv)
}

// Bound is a candidate bound to its place among a Config's candidates
// (Bind): Run without the search for it. A plain value, so that binding
// allocates nothing: a training loop's all-reduces change size from call
// to call, and a communicator binds again at every change.
type Bound struct {
	a  Algorithm
	id uint8 // the header's Algo
}

// Bind binds a, a candidate Choose returned, for a caller that runs one
// choice many times, as a loop of all-reduces of one size does (the search
// and its string compares were a tenth of an 8-byte all-reduce over shared
// memory at 2 ranks).
func (c Config) Bind(a Algorithm) (Bound, error) {
	id, err := c.id(a)
	if err != nil {
		return Bound{}, fmt.Errorf("adaptive: %w", err)
	}
	return Bound{a, id}, nil
}

// Name is the bound candidate's name.
func (b Bound) Name() string { return b.a.Name }

// Run runs the bound candidate as Config.Run runs it.
func (b Bound) Run(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error {
	if b.a.Run == nil {
		return fmt.Errorf("adaptive: rank %d: no candidate bound; bind one that Choose returned", t.Rank())
	}
	return run(ctx, b.a, b.id, t, h, send, recv)
}

// id is the header's Algo for candidate a: its place among the candidates.
func (c Config) id(a Algorithm) (uint8, error) {
	i := slices.IndexFunc(c.algorithms(), func(b Algorithm) bool { return b.Name == a.Name })
	if i < 0 {
		return 0, fmt.Errorf("%q is not one of the candidates; run one that Choose returned", a.Name)
	}
	return 0x80 | uint8(i), nil
}

func run(ctx context.Context, a Algorithm, id uint8, t transport.Transport, h transport.Header, send, recv []byte) error {
	h.Algo = id
	if err := a.Run(ctx, t, h, send, recv); err != nil {
		return fmt.Errorf("adaptive (chose %s): %w", a.Name, err)
	}
	return nil
}
