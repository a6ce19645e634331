package ring

import (
	"context"
	"fmt"
	"sync"

	"github.com/collkit/collkit/algo/dissemination"
	"github.com/collkit/collkit/algo/pipeline"
	"github.com/collkit/collkit/internal/bufpool"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
)

// ReduceScatter runs a ring reduce-scatter with the default Config.
func ReduceScatter(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte, counts []int) error {
	return Config{}.ReduceScatter(ctx, t, h, send, recv, counts)
}

// ReduceScatter reduces send over all ranks of t with h.DType and h.Op and
// leaves block r of the result in recv on rank r. send holds sum(counts)
// elements laid out as one block per rank, block k having counts[k]
// elements; recv holds counts[r]. counts may be uneven and hold zeros; every
// rank passes the same counts. For Avg the block is divided by the number of
// ranks once, when complete.
//
// recv may be send's own block (in place); send's other blocks are then used
// as scratch and hold partial results afterwards. Otherwise send is not
// written, and the partial results take two blocks from a pool.
//
// Each of the n-1 steps sends one block to the right neighbour and receives
// and reduces one from the left, pipelined in segments.
func (c Config) ReduceScatter(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte, counts []int) error {
	n, r := t.Size(), t.Rank()
	es := h.DType.Size()
	if es == 0 || !h.Op.Valid() {
		return fmt.Errorf("ring: reduce-scatter: invalid dtype %v or op %v", h.DType, h.Op)
	}
	x := getBlockCall()
	defer x.release()
	off, err := offsets(x.offs[:0], "reduce-scatter", n, r, es, counts, len(send), len(recv), "send", "recv")
	x.offs = off
	if err != nil {
		return err
	}
	if n == 1 {
		if !pipeline.SameBuffer(send, recv) {
			copy(recv, send)
		}
		return nil
	}
	if len(send) == 0 {
		// Still take part, so that ranks that passed data fail here too.
		return dissemination.Agree(ctx, t, h)
	}
	x.b = blockRing{n: n, r: r, seg: c.segBytes(es), first: r - 1, off: off, staged: true}
	x.rs = reduceScatter{b: &x.b, send: send, work: send, recv: recv}
	if inPlace := len(recv) > 0 && &recv[0] == &send[off[r]]; !inPlace && n > 2 {
		// A partial result lives from the step that receives it to the
		// next, which forwards it: two slots of the largest block, used in
		// turn, hold them all (one with three ranks).
		for k := range n {
			x.rs.slot = max(x.rs.slot, off[k+1]-off[k])
		}
		x.scratch = bufpool.Get(min(2, n-2) * x.rs.slot)
		x.rs.work = x.scratch.B
		x.b.rotate = n > 3
	}
	return x.run(ctx, t, h, c, len(send), &x.rs)
}

// reduceScatter is what a reduce-scatter does with the blocks of a
// blockRing: rank r first sends block r-1, so that the block it receives
// at the last step is its own.
type reduceScatter struct {
	b          *blockRing
	send, recv []byte
	// work holds the partial results: send itself, at send's offsets, when
	// in place; otherwise slot bytes per block, the block received at step
	// s in slot s%2, which the step after forwards.
	work []byte
	slot int
}

// partial is where the partial result of block k, received at step s,
// lies: bytes [lo,hi) of the buffer.
func (x *reduceScatter) partial(s, k, lo, hi int) []byte {
	if x.slot == 0 {
		return x.work[lo:hi]
	}
	base := s%2*x.slot - x.b.off[k]
	return x.work[base+lo : base+hi]
}

func (x *reduceScatter) segment(s, k, lo, hi int) []byte {
	if s == 0 {
		return x.send[lo:hi]
	}
	return x.partial(s-1, k, lo, hi)
}

func (x *reduceScatter) receive(ctx context.Context, t transport.Transport, h transport.Header, s, k, lo, hi int, stage []byte) error {
	in := stage[:hi-lo]
	if err := t.Recv(ctx, x.b.left(), h, in); err != nil {
		return err
	}
	defer pipeline.Span(t, "reduce", h.Step)()
	if k != x.b.r {
		reduce.ReduceTo(h.DType, h.Op, x.partial(s, k, lo, hi), x.send[lo:hi], in)
		return nil
	}
	base := x.b.off[x.b.r]
	dst := x.recv[lo-base : hi-base]
	reduce.ReduceTo(h.DType, h.Op, dst, x.send[lo:hi], in)
	reduce.Finish(h.DType, h.Op, dst, x.b.n)
	return nil
}

// offsets checks counts against the buffers of rank r (the full one of
// whole bytes and r's block of part bytes) and returns the byte offset of
// every block, with the total at the end, in dst's memory.
func offsets(dst []int, coll string, n, r, es int, counts []int, whole, part int, wholeName, partName string) ([]int, error) {
	if len(counts) != n {
		return dst, fmt.Errorf("ring: %s: %d counts for %d ranks; pass one element count per rank", coll, len(counts), n)
	}
	off := append(dst[:0], 0)
	for k, c := range counts {
		if c < 0 {
			return off, fmt.Errorf("ring: %s: counts[%d] is %d; counts cannot be negative", coll, k, c)
		}
		off = append(off, off[k]+c*es)
	}
	if whole != off[n] {
		return off, fmt.Errorf("ring: %s: %s is %d bytes but counts add up to %d elements of %d bytes (%d bytes)",
			coll, wholeName, whole, off[n]/es, es, off[n])
	}
	if part != counts[r]*es {
		return off, fmt.Errorf("ring: %s: rank %d: %s is %d bytes but counts[%d] is %d elements of %d bytes (%d bytes)",
			coll, r, partName, part, r, counts[r], es, counts[r]*es)
	}
	return off, nil
}

// segBytes is the segment size in bytes, a whole number of elements of es
// bytes.
func (c Config) segBytes(es int) int {
	return pipeline.SegmentBytes(c.SegmentBytes, DefaultSegmentBytes, es)
}

// blockRing is the shape of a ring collective over uneven blocks, one per
// rank: n-1 steps; at step s rank r sends block first-s to its right and
// receives block first-s-1 from its left. The block received at step s is
// the one sent at step s+1, which lets a segment be forwarded as soon as it
// has arrived. It generalizes plan (allreduce.go) from n even chunks to
// blocks at arbitrary offsets.
type blockRing struct {
	n, r, seg int
	first     int   // block sent at step 0
	off       []int // block k is bytes [off[k], off[k+1])
	staged    bool  // receive needs a segment of staging space
	// rotate: what step s receives overwrites what step s-2 received, so
	// a segment of step s waits until the same segment of step s-1, which
	// forwarded it, has been sent.
	rotate bool
}

// blockOps is what a collective does with the blocks: what step s sends
// of block k, and what receiving one segment means.
type blockOps interface {
	segment(s, k, lo, hi int) []byte
	receive(ctx context.Context, t transport.Transport, h transport.Header, s, k, lo, hi int, stage []byte) error
}

func (b *blockRing) left() int  { return (b.r - 1 + b.n) % b.n }
func (b *blockRing) right() int { return (b.r + 1) % b.n }

func (b *blockRing) steps() int { return b.n - 1 }

func (b *blockRing) sendBlock(s int) int { return ((b.first-s)%b.n + b.n) % b.n }
func (b *blockRing) recvBlock(s int) int { return ((b.first-s-1)%b.n + b.n) % b.n }

// segs is the number of segments of block k.
func (b *blockRing) segs(k int) int { return (b.off[k+1] - b.off[k] + b.seg - 1) / b.seg }

// segments calls fn for every segment of block k, numbering them from *msg.
func (b *blockRing) segments(k int, msg *uint32, fn func(lo, hi int, step uint32) error) error {
	lo, hi := b.off[k], b.off[k+1]
	for off := lo; off < hi; off += b.seg {
		if err := fn(off, min(off+b.seg, hi), *msg); err != nil {
			return err
		}
		*msg++
	}
	return nil
}

// blockCall is one ring collective over blocks in progress: its shape, the
// collectives' parts, the sending half as a crew's Job and the counters
// that link it with the receiving half. Calls are reused, so that a steady
// stream of them allocates nothing.
type blockCall struct {
	b       blockRing
	offs    []int // b.off's memory
	rs      reduceScatter
	ag      allGather
	scratch *bufpool.Buffer // rs.work out of place, or nil

	// The sending half.
	t     transport.Transport
	h     transport.Header
	x     blockOps
	ready pipeline.Progress // segments received
	sent  pipeline.Progress // segments sent
}

var blockCalls = sync.Pool{New: func() any { return new(blockCall) }}

func getBlockCall() *blockCall { return blockCalls.Get().(*blockCall) }

// release gives x back, with nothing of the caller's left in it.
func (x *blockCall) release() {
	bufpool.Put(x.scratch)
	offs := x.offs
	x.b, x.rs, x.ag, x.scratch, x.t, x.x = blockRing{}, reduceScatter{}, allGather{}, nil, nil, nil
	x.offs = offs[:0]
	blockCalls.Put(x)
}

// run runs the collective: on one goroutine when the transport buffers all
// total bytes a rank can have in flight and they are few, otherwise with a
// sender goroutine so that both directions overlap.
func (x *blockCall) run(ctx context.Context, t transport.Transport, h transport.Header, c Config, total int, ops blockOps) error {
	b := &x.b
	if bt, ok := t.(transport.Buffered); ok && total <= c.eagerBytes() && total <= bt.SendBuffer() {
		return b.sequential(ctx, t, h, ops)
	}
	x.t, x.h, x.x = t, h, ops
	x.ready.Init()
	x.sent.Init()
	crew := pipeline.StartCrew(ctx)
	crew.Go(x)
	err := crew.Wait(b.recvAll(crew.Context(), t, h, ops, &x.ready, &x.sent))
	crew.Release()
	return err
}

// Run is the sending half: it forwards each segment as soon as the
// receiving half has it.
func (x *blockCall) Run(ctx context.Context) error {
	b := &x.b
	var msg uint32
	var forwarded int64
	for s := range b.steps() {
		k := b.sendBlock(s)
		err := b.segments(k, &msg, func(lo, hi int, step uint32) error {
			if s > 0 {
				forwarded++
				if err := x.ready.Wait(ctx, forwarded); err != nil {
					return err
				}
			}
			h := x.h
			h.Step = step
			if err := x.t.Send(ctx, b.right(), h, x.x.segment(s, k, lo, hi)); err != nil {
				return err
			}
			x.sent.Add()
			return nil
		})
		if err != nil {
			return fmt.Errorf("ring step %d/%d: %w", s, b.steps(), err)
		}
	}
	return nil
}

func (b *blockRing) recvAll(ctx context.Context, t transport.Transport, h transport.Header, x blockOps, ready, sent *pipeline.Progress) error {
	var stage *bufpool.Buffer
	if b.staged {
		stage = pipeline.Stage(b.seg)
		defer pipeline.Release(stage)
	}
	var msg uint32
	var before int64 // segments the sender sends before step s-1, for rotate
	for s := range b.steps() {
		k := b.recvBlock(s)
		var prev int64 // segments it sends at step s-1
		if s >= 2 {
			before += int64(b.segs(b.sendBlock(s - 2)))
		}
		if s >= 1 {
			prev = int64(b.segs(b.sendBlock(s - 1)))
		}
		j := int64(0)
		err := b.segments(k, &msg, func(lo, hi int, step uint32) error {
			if b.rotate && s >= 2 {
				// This segment overwrites the same bytes of what step
				// s-2 received, which the sender forwards as segment j
				// of step s-1 (all of it when that block had fewer
				// segments): wait until that is out.
				if err := sent.Wait(ctx, before+min(j+1, prev)); err != nil {
					return err
				}
			}
			j++
			h.Step = step
			var st []byte
			if stage != nil {
				st = stage.B
			}
			if err := x.receive(ctx, t, h, s, k, lo, hi, st); err != nil {
				return err
			}
			ready.Add()
			return nil
		})
		if err != nil {
			return fmt.Errorf("ring step %d/%d: %w", s, b.steps(), err)
		}
	}
	return nil
}

// sequential runs the ring on one goroutine, each step sending its whole
// block before receiving. Only safe when the link buffers everything a rank
// sends in the collective, which run checks.
func (b *blockRing) sequential(ctx context.Context, t transport.Transport, h transport.Header, x blockOps) error {
	var stage []byte
	if b.staged {
		st := pipeline.Stage(b.seg)
		defer pipeline.Release(st)
		stage = st.B
	}
	var sent, received uint32
	for s := range b.steps() {
		k := b.sendBlock(s)
		err := b.segments(k, &sent, func(lo, hi int, step uint32) error {
			h.Step = step
			return t.Send(ctx, b.right(), h, x.segment(s, k, lo, hi))
		})
		if err == nil {
			k := b.recvBlock(s)
			err = b.segments(k, &received, func(lo, hi int, step uint32) error {
				h.Step = step
				return x.receive(ctx, t, h, s, k, lo, hi, stage)
			})
		}
		if err != nil {
			return fmt.Errorf("ring step %d/%d: %w", s, b.steps(), err)
		}
	}
	return nil
}
