package ring

import (
	"context"
	"fmt"
	"sync"

	"github.com/collkit/collkit/algo/dissemination"
	"github.com/collkit/collkit/algo/pipeline"
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
// written, and the scratch comes from a pool.
//
// Each of the n-1 steps sends one block to the right neighbour and receives
// and reduces one from the left, pipelined in segments.
func (c Config) ReduceScatter(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte, counts []int) error {
	n, r := t.Size(), t.Rank()
	es := h.DType.Size()
	if es == 0 || !h.Op.Valid() {
		return fmt.Errorf("ring: reduce-scatter: invalid dtype %v or op %v", h.DType, h.Op)
	}
	off, err := offsets("reduce-scatter", n, r, es, counts, len(send), len(recv), "send", "recv")
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
	inPlace := len(recv) > 0 && &recv[0] == &send[off[r]]
	work := send
	if !inPlace {
		scratch := getScratch(len(send))
		defer putScratch(scratch)
		work = *scratch
	}
	b := blockRing{n: n, r: r, seg: c.segBytes(es), first: r - 1, off: off, staged: true}
	return b.run(ctx, t, h, c, len(send), &reduceScatter{b: b, send: send, work: work, recv: recv})
}

// reduceScatter is what a reduce-scatter does with the blocks of a
// blockRing: rank r first sends block r-1, so that the block it receives
// at the last step is its own.
type reduceScatter struct {
	b                blockRing
	send, work, recv []byte // work holds partial results at send's offsets
}

func (x *reduceScatter) source(s int) []byte {
	if s == 0 {
		return x.send
	}
	return x.work
}

func (x *reduceScatter) receive(ctx context.Context, t transport.Transport, h transport.Header, s, k, lo, hi int, stage []byte) error {
	in := stage[:hi-lo]
	if err := t.Recv(ctx, x.b.left(), h, in); err != nil {
		return err
	}
	defer pipeline.Span(t, "reduce", h.Step)()
	if k != x.b.r {
		reduce.ReduceTo(h.DType, h.Op, x.work[lo:hi], x.send[lo:hi], in)
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
// every block, with the total at the end.
func offsets(coll string, n, r, es int, counts []int, whole, part int, wholeName, partName string) ([]int, error) {
	if len(counts) != n {
		return nil, fmt.Errorf("ring: %s: %d counts for %d ranks; pass one element count per rank", coll, len(counts), n)
	}
	off := make([]int, n+1)
	for k, c := range counts {
		if c < 0 {
			return nil, fmt.Errorf("ring: %s: counts[%d] is %d; counts cannot be negative", coll, k, c)
		}
		off[k+1] = off[k] + c*es
	}
	if whole != off[n] {
		return nil, fmt.Errorf("ring: %s: %s is %d bytes but counts add up to %d elements of %d bytes (%d bytes)",
			coll, wholeName, whole, off[n]/es, es, off[n])
	}
	if part != counts[r]*es {
		return nil, fmt.Errorf("ring: %s: rank %d: %s is %d bytes but counts[%d] is %d elements of %d bytes (%d bytes)",
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
}

// blockOps is what a collective does with the blocks: where step s sends
// from and what receiving one segment means.
type blockOps interface {
	source(s int) []byte
	receive(ctx context.Context, t transport.Transport, h transport.Header, s, k, lo, hi int, stage []byte) error
}

func (b blockRing) left() int  { return (b.r - 1 + b.n) % b.n }
func (b blockRing) right() int { return (b.r + 1) % b.n }

func (b blockRing) steps() int { return b.n - 1 }

func (b blockRing) sendBlock(s int) int { return ((b.first-s)%b.n + b.n) % b.n }
func (b blockRing) recvBlock(s int) int { return ((b.first-s-1)%b.n + b.n) % b.n }

// segments calls fn for every segment of block k, numbering them from *msg.
func (b blockRing) segments(k int, msg *uint32, fn func(lo, hi int, step uint32) error) error {
	lo, hi := b.off[k], b.off[k+1]
	for off := lo; off < hi; off += b.seg {
		if err := fn(off, min(off+b.seg, hi), *msg); err != nil {
			return err
		}
		*msg++
	}
	return nil
}

// run runs the collective: on one goroutine when the transport buffers all
// total bytes a rank can have in flight and they are few, otherwise with a
// sender goroutine so that both directions overlap.
func (b blockRing) run(ctx context.Context, t transport.Transport, h transport.Header, c Config, total int, x blockOps) error {
	if bt, ok := t.(transport.Buffered); ok && total <= c.eagerBytes() && total <= bt.SendBuffer() {
		return b.sequential(ctx, t, h, x)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready := pipeline.NewProgress()
	sendErr := make(chan error, 1)
	go func() {
		err := b.sendAll(ctx, t, h, x, ready)
		if err != nil {
			cancel() // unblock the receiver
		}
		sendErr <- err
	}()
	recvErr := b.recvAll(ctx, t, h, x, ready)
	if recvErr != nil {
		cancel() // unblock the sender
	}
	if err := <-sendErr; err != nil && (recvErr == nil || pipeline.Canceled(recvErr)) {
		return err
	}
	return recvErr
}

func (b blockRing) sendAll(ctx context.Context, t transport.Transport, h transport.Header, x blockOps, ready *pipeline.Progress) error {
	var msg uint32
	var forwarded int64
	for s := range b.steps() {
		src := x.source(s)
		err := b.segments(b.sendBlock(s), &msg, func(lo, hi int, step uint32) error {
			if s > 0 {
				forwarded++
				if err := ready.Wait(ctx, forwarded); err != nil {
					return err
				}
			}
			h.Step = step
			return t.Send(ctx, b.right(), h, src[lo:hi])
		})
		if err != nil {
			return fmt.Errorf("ring step %d/%d: %w", s, b.steps(), err)
		}
	}
	return nil
}

func (b blockRing) recvAll(ctx context.Context, t transport.Transport, h transport.Header, x blockOps, ready *pipeline.Progress) error {
	var stage []byte
	if b.staged {
		st := pipeline.Stage(b.seg)
		defer pipeline.Release(st)
		stage = *st
	}
	var msg uint32
	for s := range b.steps() {
		k := b.recvBlock(s)
		err := b.segments(k, &msg, func(lo, hi int, step uint32) error {
			h.Step = step
			if err := x.receive(ctx, t, h, s, k, lo, hi, stage); err != nil {
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
func (b blockRing) sequential(ctx context.Context, t transport.Transport, h transport.Header, x blockOps) error {
	var stage []byte
	if b.staged {
		st := pipeline.Stage(b.seg)
		defer pipeline.Release(st)
		stage = *st
	}
	var sent, received uint32
	for s := range b.steps() {
		src := x.source(s)
		err := b.segments(b.sendBlock(s), &sent, func(lo, hi int, step uint32) error {
			h.Step = step
			return t.Send(ctx, b.right(), h, src[lo:hi])
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

// scratches holds whole-buffer scratch space for out-of-place
// reduce-scatters, apart from the segment-sized stages.
var scratches sync.Pool

func getScratch(n int) *[]byte {
	if b, ok := scratches.Get().(*[]byte); ok && cap(*b) >= n {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n)
	return &b
}

func putScratch(b *[]byte) { scratches.Put(b) }
