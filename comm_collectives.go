package collkit

import (
	"context"
	"fmt"
	"slices"

	"github.com/collkit/collkit/algo/dissemination"
	"github.com/collkit/collkit/algo/pairwise"
	"github.com/collkit/collkit/algo/ring"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
)

// Element is the set of Go types the typed wrappers (AllReduce, Broadcast,
// ...) accept: one per DType, with F16 and BF16 for float16 and bfloat16.
type Element interface {
	float32 | float64 | int32 | int64 | uint8 | F16 | BF16
}

// DefaultTreeBytes is the message size up to which broadcast, reduce,
// all-gather, reduce-scatter and all-to-all use the dissemination pattern
// (algo/dissemination), which needs ceil(log2 n) steps like a binomial
// tree, rather than the pipelined ring or the pairwise exchange, which
// take n-1 steps and overlap them. For all-gather, reduce-scatter and
// all-to-all the size is the whole array (recv, send and send).
const DefaultTreeBytes = 64 << 10

// DefaultBroadcastTreeBytes is the size up to which Broadcast between
// ranks on more than one host sends the whole buffer down the dissemination
// pattern's binomial tree rather than along the pipelined chain; between
// ranks that all share one host the tree serves every size. The chain moves
// each byte once per link, where the tree's root sends log2(n) copies of the
// buffer: that matters where links are the limit, between hosts. On one
// host every copy costs the same cores either way, and the tree takes
// log2(n) steps to the chain's n-1 plus agreeing on the call first: measured
// over loopback TCP on 2 cores (2026-11-24, cubic, alternating runs), the
// tree took 0.5-0.8x the chain's time from 512 KiB to 64 MiB at 4 ranks and
// 0.55-0.8x from 1 to 64 MiB at 8 ranks. Between hosts the threshold is
// where the two met over loopback before (with bbr): it is not measured
// across hosts.
const DefaultBroadcastTreeBytes = 4 << 20

// directBlockBytes is the block size (one rank's part) from which Scatter
// sends every block straight from the root (pairwise.Scatter), and Gather
// straight to it (pairwise.Gather), rather than down or up the
// dissemination pattern's tree, which passes half the blocks on and so
// moves more bytes, one round after another. Measured for Scatter
// over loopback TCP on 2 cores (2026-11-25, alternating runs, out of place
// and in place): at 4 ranks 1 MiB took 207-291 us straight against 326-359
// down the tree (Open MPI 246-281) and 512 KiB 169-223 against 241-273; at
// 8 ranks 4 MiB took 911-993 against 1915-1943 and 1 MiB about the same
// either way, while 128 KiB (16 KiB blocks) took 378-415 straight against
// 244-269: the pairwise exchange's n(n-1) headers cost more than a tree's
// n log2(n) there.
const directBlockBytes = 128 << 10

// Algorithm ids sent in the headers of the collectives other than
// all-reduce, so that ranks that picked different algorithms for the same
// call get a mismatch error instead of a hang.
const (
	algoBinomial uint8 = iota + 1 // no longer run; the id stays taken
	algoRing
	algoPairwise
	algoDissemination
	algoDirect
)

// collAlgorithmName names the algorithm ids of the collectives other than
// all-reduce, for statistics and traces.
func collAlgorithmName(id uint8) string {
	switch id {
	case algoBinomial:
		return "binomial"
	case algoRing:
		return "ring"
	case algoPairwise:
		return "pairwise"
	case algoDissemination:
		return "dissemination"
	case algoDirect:
		return "direct"
	}
	return "-"
}

// collFunc runs a collective's algorithm over t.
type collFunc = func(ctx context.Context, t transport.Transport, h transport.Header) error

// runBySize runs small, over the dissemination pattern, when the
// collective moves at most c.treeBytes, and large, with algorithm algo,
// above.
func (c *Comm) runBySize(ctx context.Context, bytes int, h transport.Header, smallName, largeName string, algo uint8, small, large collFunc) error {
	if bytes <= c.treeBytes {
		return c.runColl(ctx, smallName, h, small)
	}
	h.Algo = algo
	return c.runColl(ctx, largeName, h, large)
}

// runColl runs one collective: it checks the communicator, numbers the call,
// applies the timeout and makes a failure fatal to the communicator. The
// caller holds c.mu.
func (c *Comm) runColl(ctx context.Context, what string, h transport.Header, fn func(context.Context, transport.Transport, transport.Header) error) error {
	if err := c.usable(); err != nil {
		return err
	}
	h.Seq = c.seq
	c.seq++
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	err := c.observed(h.Coll.String(), collAlgorithmName(h.Algo), h, int(h.Count)*max(h.DType.Size(), 1), func(t transport.Transport) error { return fn(ctx, t, h) })
	if err != nil {
		shape := "" // a barrier moves no data
		if h.DType.Valid() {
			shape = fmt.Sprintf(" (%d x %v)", h.Count, h.DType)
		}
		return c.fail(fmt.Errorf("collkit: rank %d: %s #%d%s: %w", c.Rank(), what, h.Seq, shape, explain(ctx, err)))
	}
	return nil
}

// locked runs fn under c.mu.
func (c *Comm) locked(fn func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fn()
}

// badArg formats an argument error of a call on this rank.
func (c *Comm) badArg(what, format string, args ...any) error {
	return fmt.Errorf("collkit: rank %d: %s: %w: %s", c.Rank(), what, ErrBadArgument, fmt.Sprintf(format, args...))
}

// checkDType checks dt and that each buffer is whole elements of it.
func (c *Comm) checkDType(what string, dt DType, bufs ...[]byte) error {
	if !dt.Valid() {
		return c.badArg(what, "data type %v", dt)
	}
	for _, b := range bufs {
		if len(b)%dt.Size() != 0 {
			return c.badArg(what, "buffer of %d bytes is not a whole number of %v elements (%d bytes each)", len(b), dt, dt.Size())
		}
	}
	return nil
}

func (c *Comm) checkRoot(what string, root int) error {
	if root < 0 || root >= c.Size() {
		return c.badArg(what, "root %d is not a rank of this communicator (0 to %d)", root, c.Size()-1)
	}
	return nil
}

func header(coll transport.Coll, dt DType, op Op, count int, root int, algo uint8) transport.Header {
	return transport.Header{Coll: coll, DType: dt, Op: op, Count: uint64(count), Root: int32(root), Algo: algo}
}

// Broadcast copies buf on rank root into buf on every rank. Every rank
// passes a buffer of the same length. Buffers up to
// DefaultBroadcastTreeBytes, and all buffers when every rank is on one
// host, go down the dissemination pattern's binomial tree
// (algo/dissemination); larger ones between hosts go along a pipelined
// chain after the ranks have agreed on the call (dissemination.Agree).
// Either way no rank returns before every rank has called Broadcast with
// the same length, dtype and root: ranks that disagree all get an error
// from this call.
func (c *Comm) Broadcast(ctx context.Context, dt DType, buf []byte, root int) error {
	run, err := c.broadcastOp(dt, buf, root)
	return c.call(ctx, nameBroadcast, run, err)
}

// BroadcastAsync starts a Broadcast and returns at once (see Work).
func (c *Comm) BroadcastAsync(ctx context.Context, dt DType, buf []byte, root int) *Work {
	run, err := c.broadcastOp(dt, buf, root)
	return c.start(ctx, nameBroadcast, run, err)
}

func (c *Comm) broadcastOp(dt DType, buf []byte, root int) (operation, error) {
	const what = "broadcast"
	if err := c.checkDType(what, dt, buf); err != nil {
		return operation{}, err
	}
	if err := c.checkRoot(what, root); err != nil {
		return operation{}, err
	}
	return operation{kind: opBroadcast, dt: dt, recv: buf, root: root}, nil
}

func (c *Comm) broadcast(ctx context.Context, dt DType, buf []byte, root int) error {
	h := header(transport.CollBroadcast, dt, 0, len(buf)/dt.Size(), root, algoDissemination)
	if c.broadcastTree(int64(len(buf))) {
		return c.runColl(ctx, "broadcast (dissemination)", h,
			func(ctx context.Context, t transport.Transport, h transport.Header) error {
				return dissemination.Broadcast(ctx, t, h, buf, root)
			})
	}
	h.Algo = algoRing
	return c.runColl(ctx, "broadcast (chain)", h,
		func(ctx context.Context, t transport.Transport, h transport.Header) error {
			// The chain's root only sends, and the others hear only from
			// the rank before them: agree on the call first (log2(n)
			// rounds of headers, little beside the data).
			if err := dissemination.Agree(ctx, t, h); err != nil {
				return err
			}
			return ring.Broadcast(ctx, t, h, buf, root)
		})
}

// BroadcastAlgorithm names what a Broadcast of bytes runs, as Stats
// names it: "dissemination" (the binomial tree) or "ring" (package ring's
// pipelined chain).
func (c *Comm) BroadcastAlgorithm(bytes int64) string {
	if c.broadcastTree(bytes) {
		return "dissemination"
	}
	return "ring"
}

// broadcastTree reports whether a broadcast of n bytes goes down the tree:
// up to bcastBytes, or any size when every rank is on one host (see
// DefaultBroadcastTreeBytes).
func (c *Comm) broadcastTree(n int64) bool {
	return n <= int64(c.bcastBytes) || c.bcastBytes >= 0 && !slices.ContainsFunc(c.nodes, func(k int) bool { return k != c.nodes[0] })
}

// Reduce reduces send over all ranks with op into recv on rank root. recv
// is written only at the root, where it has send's length and may be send
// itself (in place); other ranks may pass nil. Small buffers are reduced
// over the dissemination pattern (algo/dissemination), large ones along a
// pipelined chain to the root (package ring's Reduce) after the ranks have
// agreed on the call (dissemination.Agree); either way every rank hears
// from every rank before it returns, so ranks that disagree on the call all
// get an error from it.
func (c *Comm) Reduce(ctx context.Context, dt DType, op Op, send, recv []byte, root int) error {
	run, err := c.reduceOp(dt, op, send, recv, root)
	return c.call(ctx, nameReduce, run, err)
}

// ReduceAsync starts a Reduce and returns at once (see Work).
func (c *Comm) ReduceAsync(ctx context.Context, dt DType, op Op, send, recv []byte, root int) *Work {
	run, err := c.reduceOp(dt, op, send, recv, root)
	return c.start(ctx, nameReduce, run, err)
}

func (c *Comm) reduceOp(dt DType, op Op, send, recv []byte, root int) (operation, error) {
	const what = "reduce"
	if err := c.checkDType(what, dt, send); err != nil {
		return operation{}, err
	}
	if !op.Valid() {
		return operation{}, c.badArg(what, "reduction op %v", op)
	}
	if err := c.checkRoot(what, root); err != nil {
		return operation{}, err
	}
	if (c.Rank() == root || recv != nil) && len(recv) != len(send) {
		return operation{}, c.badArg(what, "send buffer is %d bytes but recv buffer is %d; they must be the same size (non-root ranks may pass a nil recv)", len(send), len(recv))
	}
	return operation{kind: opReduce, dt: dt, op: op, send: send, recv: recv, root: root}, nil
}

func (c *Comm) reduce(ctx context.Context, dt DType, op Op, send, recv []byte, root int) error {
	h := header(transport.CollReduce, dt, op, len(send)/dt.Size(), root, algoDissemination)
	return c.runBySize(ctx, len(send), h, "reduce (dissemination)", "reduce (chain)", algoRing,
		func(ctx context.Context, t transport.Transport, h transport.Header) error {
			return dissemination.Reduce(ctx, t, h, send, recv, root)
		},
		func(ctx context.Context, t transport.Transport, h transport.Header) error {
			// The chain's first rank only sends: agree on the call first,
			// as the broadcast's chain does.
			if err := dissemination.Agree(ctx, t, h); err != nil {
				return err
			}
			return ring.Reduce(ctx, t, h, send, recv, root)
		})
}

// AllGather gathers every rank's send, all of the same length, into recv on
// every rank: recv holds Size() blocks, block k from rank k. send may be
// recv's own block (in place). Up to DefaultTreeBytes of recv it runs
// Bruck's all-gather on the dissemination pattern (algo/dissemination:
// ceil(log2 n) rounds), above that a pairwise exchange (algo/pairwise: n-1
// steps, each rank's block sent straight to every other rank).
func (c *Comm) AllGather(ctx context.Context, dt DType, send, recv []byte) error {
	run, err := c.allGatherOp(dt, send, recv)
	return c.call(ctx, nameAllGather, run, err)
}

// AllGatherAsync starts a AllGather and returns at once (see Work).
func (c *Comm) AllGatherAsync(ctx context.Context, dt DType, send, recv []byte) *Work {
	run, err := c.allGatherOp(dt, send, recv)
	return c.start(ctx, nameAllGather, run, err)
}

func (c *Comm) allGatherOp(dt DType, send, recv []byte) (operation, error) {
	const what = "allgather"
	if err := c.checkDType(what, dt, send, recv); err != nil {
		return operation{}, err
	}
	n := c.Size()
	if len(recv) != n*len(send) {
		return operation{}, c.badArg(what, "recv is %d bytes but %d ranks send %d bytes each; recv must hold %d bytes", len(recv), n, len(send), n*len(send))
	}
	return operation{kind: opAllGather, dt: dt, send: send, recv: recv}, nil
}

func (c *Comm) allGather(ctx context.Context, dt DType, send, recv []byte) error {
	h := header(transport.CollAllGather, dt, 0, len(recv)/dt.Size(), -1, algoDissemination)
	return c.runBySize(ctx, len(recv), h, "allgather (dissemination)", "allgather (pairwise)", algoPairwise,
		func(ctx context.Context, t transport.Transport, h transport.Header) error {
			return dissemination.AllGather(ctx, t, h, send, recv)
		},
		func(ctx context.Context, t transport.Transport, h transport.Header) error {
			return pairwise.AllGather(ctx, t, h, send, recv)
		})
}

// evenCounts is n copies of count, in memory the communicator reuses. The
// caller holds c.mu.
func (c *Comm) evenCounts(count int) []int {
	if c.counts == nil {
		c.counts = make([]int, c.Size())
	}
	for i := range c.counts {
		c.counts[i] = count
	}
	return c.counts
}

// ReduceScatter reduces send over all ranks with op and leaves block r of
// the result in recv on rank r: send holds Size() blocks of recv's length.
// recv may be send's own block (in place; send's other blocks then hold
// partial results afterwards). Up to DefaultTreeBytes of send it runs a
// Bruck all-to-all that reduces as the blocks meet (algo/dissemination:
// ceil(log2 n) rounds), above that a pipelined ring (n-1 steps).
func (c *Comm) ReduceScatter(ctx context.Context, dt DType, op Op, send, recv []byte) error {
	run, err := c.reduceScatterOp(dt, op, send, recv)
	return c.call(ctx, nameReduceScatter, run, err)
}

// ReduceScatterAsync starts a ReduceScatter and returns at once (see Work).
func (c *Comm) ReduceScatterAsync(ctx context.Context, dt DType, op Op, send, recv []byte) *Work {
	run, err := c.reduceScatterOp(dt, op, send, recv)
	return c.start(ctx, nameReduceScatter, run, err)
}

func (c *Comm) reduceScatterOp(dt DType, op Op, send, recv []byte) (operation, error) {
	const what = "reducescatter"
	if err := c.checkDType(what, dt, send, recv); err != nil {
		return operation{}, err
	}
	if !op.Valid() {
		return operation{}, c.badArg(what, "reduction op %v", op)
	}
	n := c.Size()
	if len(send) != n*len(recv) {
		return operation{}, c.badArg(what, "send is %d bytes but must hold %d blocks of recv's %d bytes (%d bytes)", len(send), n, len(recv), n*len(recv))
	}
	return operation{kind: opReduceScatter, dt: dt, op: op, send: send, recv: recv}, nil
}

func (c *Comm) reduceScatter(ctx context.Context, dt DType, op Op, send, recv []byte) error {
	h := header(transport.CollReduceScatter, dt, op, len(send)/dt.Size(), -1, algoDissemination)
	return c.runBySize(ctx, len(send), h, "reducescatter (dissemination)", "reducescatter", algoRing,
		func(ctx context.Context, t transport.Transport, h transport.Header) error {
			return dissemination.ReduceScatter(ctx, t, h, send, recv)
		},
		func(ctx context.Context, t transport.Transport, h transport.Header) error {
			return ring.ReduceScatter(ctx, t, h, send, recv, c.evenCounts(len(recv)/dt.Size()))
		})
}

// Gather collects every rank's send, all of the same length, into recv on
// rank root, block k from rank k. recv is used only at the root, where it
// holds Size() blocks; other ranks may pass nil. Blocks under 128 KiB
// reach the root over the dissemination pattern (algo/dissemination), as
// up a binomial tree; larger ones go straight to the root in a pairwise
// exchange of headers (algo/pairwise). Either way every rank hears from
// every rank before it returns, so ranks that disagree all get an error.
func (c *Comm) Gather(ctx context.Context, dt DType, send, recv []byte, root int) error {
	run, err := c.gatherOp(dt, send, recv, root)
	return c.call(ctx, nameGather, run, err)
}

// GatherAsync starts a Gather and returns at once (see Work).
func (c *Comm) GatherAsync(ctx context.Context, dt DType, send, recv []byte, root int) *Work {
	run, err := c.gatherOp(dt, send, recv, root)
	return c.start(ctx, nameGather, run, err)
}

func (c *Comm) gatherOp(dt DType, send, recv []byte, root int) (operation, error) {
	const what = "gather"
	if err := c.checkDType(what, dt, send, recv); err != nil {
		return operation{}, err
	}
	if err := c.checkRoot(what, root); err != nil {
		return operation{}, err
	}
	n := c.Size()
	if c.Rank() == root && len(recv) != n*len(send) {
		return operation{}, c.badArg(what, "root's recv is %d bytes but %d ranks send %d bytes each; recv must hold %d bytes", len(recv), n, len(send), n*len(send))
	}
	return operation{kind: opGather, dt: dt, send: send, recv: recv, root: root}, nil
}

func (c *Comm) gather(ctx context.Context, dt DType, send, recv []byte, root int) error {
	h := header(transport.CollGather, dt, 0, c.Size()*len(send)/dt.Size(), root, algoDissemination)
	return c.treeOrDirect(ctx, [2]string{"gather (dissemination)", "gather (pairwise)"}, h, len(send),
		func(ctx context.Context, t transport.Transport, h transport.Header) error {
			return dissemination.Gather(ctx, t, h, send, recv, root)
		},
		func(ctx context.Context, t transport.Transport, h transport.Header) error {
			return pairwise.Gather(ctx, t, h, send, recv, root)
		})
}

// Scatter sends block k of send on rank root to recv on rank k. Every recv
// has the same length; send is used only at the root, where it holds Size()
// such blocks; other ranks may pass nil. Blocks under 128 KiB go over the
// dissemination pattern (algo/dissemination) as Broadcast does, each rank
// passing on only the blocks of the ranks it serves; larger ones go
// straight from the root to their ranks in a pairwise exchange of headers
// (algo/pairwise). Either way every rank hears from every rank before it
// returns, so ranks that disagree all get an error.
func (c *Comm) Scatter(ctx context.Context, dt DType, send, recv []byte, root int) error {
	run, err := c.scatterOp(dt, send, recv, root)
	return c.call(ctx, nameScatter, run, err)
}

// ScatterAsync starts a Scatter and returns at once (see Work).
func (c *Comm) ScatterAsync(ctx context.Context, dt DType, send, recv []byte, root int) *Work {
	run, err := c.scatterOp(dt, send, recv, root)
	return c.start(ctx, nameScatter, run, err)
}

func (c *Comm) scatterOp(dt DType, send, recv []byte, root int) (operation, error) {
	const what = "scatter"
	if err := c.checkDType(what, dt, send, recv); err != nil {
		return operation{}, err
	}
	if err := c.checkRoot(what, root); err != nil {
		return operation{}, err
	}
	n := c.Size()
	if c.Rank() == root && len(send) != n*len(recv) {
		return operation{}, c.badArg(what, "root's send is %d bytes but must hold %d blocks of recv's %d bytes (%d bytes)", len(send), n, len(recv), n*len(recv))
	}
	return operation{kind: opScatter, dt: dt, send: send, recv: recv, root: root}, nil
}

// ScatterAlgorithm names what a Scatter of bytes (the root's send, every
// rank's block) runs, as Stats names it: "dissemination" (the binomial
// tree) or "pairwise" (every block straight from the root). A Gather of
// bytes (the root's recv) runs the same, up the tree or straight to the
// root.
func (c *Comm) ScatterAlgorithm(bytes int64) string {
	if c.viaTree(int(bytes / int64(c.Size()))) {
		return "dissemination"
	}
	return "pairwise"
}

// viaTree reports whether a scatter or gather of blocks of n bytes goes
// through the tree (see directBlockBytes).
func (c *Comm) viaTree(n int) bool { return n < c.directBytes }

func (c *Comm) scatter(ctx context.Context, dt DType, send, recv []byte, root int) error {
	h := header(transport.CollScatter, dt, 0, c.Size()*len(recv)/dt.Size(), root, algoDissemination)
	return c.treeOrDirect(ctx, [2]string{"scatter (dissemination)", "scatter (pairwise)"}, h, len(recv),
		func(ctx context.Context, t transport.Transport, h transport.Header) error {
			return dissemination.Scatter(ctx, t, h, send, recv, root)
		},
		func(ctx context.Context, t transport.Transport, h transport.Header) error {
			return pairwise.Scatter(ctx, t, h, send, recv, root)
		})
}

// treeOrDirect runs a scatter or gather of blocks of block bytes: tree
// over the dissemination pattern, or direct, each block straight between
// the root and its rank (see directBlockBytes); names are the two ways'
// names in errors (literals: a concatenation per call would allocate).
func (c *Comm) treeOrDirect(ctx context.Context, names [2]string, h transport.Header, block int, tree, direct func(context.Context, transport.Transport, transport.Header) error) error {
	if c.viaTree(block) {
		return c.runColl(ctx, names[0], h, tree)
	}
	h.Algo = algoPairwise
	return c.runColl(ctx, names[1], h, direct)
}

// AllToAll sends block k of send to rank k, and receives rank k's block
// into block k of recv, on every rank. send and recv have the same length,
// Size() equal blocks; recv may be send (in place). Up to DefaultTreeBytes
// of send it runs Bruck's all-to-all on the dissemination pattern
// (algo/dissemination: ceil(log2 n) messages, each with about half the
// blocks), above that a pairwise exchange (n-1 messages of one block).
func (c *Comm) AllToAll(ctx context.Context, dt DType, send, recv []byte) error {
	run, err := c.allToAllOp(dt, send, recv)
	return c.call(ctx, nameAllToAll, run, err)
}

// AllToAllAsync starts a AllToAll and returns at once (see Work).
func (c *Comm) AllToAllAsync(ctx context.Context, dt DType, send, recv []byte) *Work {
	run, err := c.allToAllOp(dt, send, recv)
	return c.start(ctx, nameAllToAll, run, err)
}

func (c *Comm) allToAllOp(dt DType, send, recv []byte) (operation, error) {
	const what = "alltoall"
	if err := c.checkDType(what, dt, send, recv); err != nil {
		return operation{}, err
	}
	n := c.Size()
	if len(send) != len(recv) || (len(send)/dt.Size())%n != 0 {
		return operation{}, c.badArg(what, "send is %d bytes and recv %d; both must hold %d equal blocks of whole %v elements", len(send), len(recv), n, dt)
	}
	return operation{kind: opAllToAll, dt: dt, send: send, recv: recv}, nil
}

func (c *Comm) allToAll(ctx context.Context, dt DType, send, recv []byte) error {
	h := header(transport.CollAllToAll, dt, 0, len(send)/dt.Size(), -1, algoDissemination)
	return c.runBySize(ctx, len(send), h, "alltoall (dissemination)", "alltoall", algoPairwise,
		func(ctx context.Context, t transport.Transport, h transport.Header) error {
			return dissemination.AllToAll(ctx, t, h, send, recv)
		},
		func(ctx context.Context, t transport.Transport, h transport.Header) error {
			return pairwise.AllToAll(ctx, t, h, send, recv)
		})
}

// Barrier returns once every rank has called it (dissemination barrier,
// ceil(log2 n) rounds of empty messages).
func (c *Comm) Barrier(ctx context.Context) error {
	run, err := c.barrierOp()
	return c.call(ctx, nameBarrier, run, err)
}

// BarrierAsync starts a Barrier and returns at once (see Work).
func (c *Comm) BarrierAsync(ctx context.Context) *Work {
	run, err := c.barrierOp()
	return c.start(ctx, nameBarrier, run, err)
}

func (c *Comm) barrierOp() (operation, error) { return operation{kind: opBarrier}, nil }

func (c *Comm) barrier(ctx context.Context) error {
	return c.runColl(ctx, "barrier", header(transport.CollBarrier, 0, 0, 0, -1, algoDissemination),
		func(ctx context.Context, t transport.Transport, h transport.Header) error {
			return dissemination.Barrier(ctx, t, h)
		})
}

// The typed wrappers below read and write Go slices through the byte
// methods without copying.

// Broadcast copies buf on rank root into buf on every rank.
func Broadcast[T Element](ctx context.Context, c *Comm, buf []T, root int) error {
	return c.Broadcast(ctx, dtypeOf[T](), reduce.Bytes(buf), root)
}

// BroadcastAsync starts a typed Broadcast (see Comm.BroadcastAsync).
func BroadcastAsync[T Element](ctx context.Context, c *Comm, buf []T, root int) *Work {
	return c.BroadcastAsync(ctx, dtypeOf[T](), reduce.Bytes(buf), root)
}

// Reduce reduces send over all ranks with op into recv on rank root (other
// ranks may pass a nil recv).
func Reduce[T Element](ctx context.Context, c *Comm, send, recv []T, op Op, root int) error {
	return c.Reduce(ctx, dtypeOf[T](), op, reduce.Bytes(send), reduce.Bytes(recv), root)
}

// ReduceAsync starts a typed Reduce (see Comm.ReduceAsync).
func ReduceAsync[T Element](ctx context.Context, c *Comm, send, recv []T, op Op, root int) *Work {
	return c.ReduceAsync(ctx, dtypeOf[T](), op, reduce.Bytes(send), reduce.Bytes(recv), root)
}

// AllGather gathers every rank's send into recv (Size() blocks) on every rank.
func AllGather[T Element](ctx context.Context, c *Comm, send, recv []T) error {
	return c.AllGather(ctx, dtypeOf[T](), reduce.Bytes(send), reduce.Bytes(recv))
}

// AllGatherAsync starts a typed AllGather (see Comm.AllGatherAsync).
func AllGatherAsync[T Element](ctx context.Context, c *Comm, send, recv []T) *Work {
	return c.AllGatherAsync(ctx, dtypeOf[T](), reduce.Bytes(send), reduce.Bytes(recv))
}

// ReduceScatter reduces send (Size() blocks) with op and leaves rank r's
// block of the result in recv.
func ReduceScatter[T Element](ctx context.Context, c *Comm, send, recv []T, op Op) error {
	return c.ReduceScatter(ctx, dtypeOf[T](), op, reduce.Bytes(send), reduce.Bytes(recv))
}

// ReduceScatterAsync starts a typed ReduceScatter (see Comm.ReduceScatterAsync).
func ReduceScatterAsync[T Element](ctx context.Context, c *Comm, send, recv []T, op Op) *Work {
	return c.ReduceScatterAsync(ctx, dtypeOf[T](), op, reduce.Bytes(send), reduce.Bytes(recv))
}

// Gather collects every rank's send into recv on rank root.
func Gather[T Element](ctx context.Context, c *Comm, send, recv []T, root int) error {
	return c.Gather(ctx, dtypeOf[T](), reduce.Bytes(send), reduce.Bytes(recv), root)
}

// GatherAsync starts a typed Gather (see Comm.GatherAsync).
func GatherAsync[T Element](ctx context.Context, c *Comm, send, recv []T, root int) *Work {
	return c.GatherAsync(ctx, dtypeOf[T](), reduce.Bytes(send), reduce.Bytes(recv), root)
}

// Scatter sends block k of send on rank root to recv on rank k.
func Scatter[T Element](ctx context.Context, c *Comm, send, recv []T, root int) error {
	return c.Scatter(ctx, dtypeOf[T](), reduce.Bytes(send), reduce.Bytes(recv), root)
}

// ScatterAsync starts a typed Scatter (see Comm.ScatterAsync).
func ScatterAsync[T Element](ctx context.Context, c *Comm, send, recv []T, root int) *Work {
	return c.ScatterAsync(ctx, dtypeOf[T](), reduce.Bytes(send), reduce.Bytes(recv), root)
}

// AllToAll sends block k of send to rank k and receives block k of recv
// from rank k.
func AllToAll[T Element](ctx context.Context, c *Comm, send, recv []T) error {
	return c.AllToAll(ctx, dtypeOf[T](), reduce.Bytes(send), reduce.Bytes(recv))
}

// AllToAllAsync starts a typed AllToAll (see Comm.AllToAllAsync).
func AllToAllAsync[T Element](ctx context.Context, c *Comm, send, recv []T) *Work {
	return c.AllToAllAsync(ctx, dtypeOf[T](), reduce.Bytes(send), reduce.Bytes(recv))
}
