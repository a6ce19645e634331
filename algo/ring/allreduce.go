package ring

import (
	"cmp"
	"context"
	"fmt"
	"sync"

	"github.com/collkit/collkit/algo/dissemination"
	"github.com/collkit/collkit/algo/pipeline"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
)

// DefaultSegmentBytes is the pipelining unit when Config.SegmentBytes is zero:
// large enough that per-message costs vanish, small enough to stay in cache
// between receive and reduce. Over loopback TCP on 2 cores (2026-11-24,
// cubic, alternating runs) 1 MiB took 0.8-0.9x 256 KiB's time for 4 and 16
// MiB all-reduces at 2 and 4 ranks; over shared memory it was within 10%
// either way.
const DefaultSegmentBytes = 1 << 20

// Config tunes the ring. The zero value is ready to use.
type Config struct {
	// SegmentBytes is the largest message the ring sends; chunks are cut into
	// segments of this size and pipelined. Zero means DefaultSegmentBytes.
	SegmentBytes int
	// EagerBytes is the largest buffer run on one goroutine (send, then
	// receive) over transports that buffer it (transport.Buffered); larger
	// ones use a sender goroutine so sending and receiving overlap. Zero
	// means DefaultEagerBytes; negative disables the one-goroutine path.
	EagerBytes int
}

// DefaultEagerBytes is the default Config.EagerBytes. Up to it, sending a
// whole chunk and then receiving one on a single goroutine beats handing
// segments between a sender and a receiver goroutine: measured over loopback
// TCP with 2 and 4 ranks on 2 cores, 1 MiB all-reduce busbw rose 10-20%
// going from 64 KiB to 1 MiB here, while 4 MiB was no better.
const DefaultEagerBytes = 1 << 20

func (c Config) eagerBytes() int { return cmp.Or(c.EagerBytes, DefaultEagerBytes) }

// AllReduce runs a ring all-reduce with the default Config.
func AllReduce(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error {
	return Config{}.AllReduce(ctx, t, h, send, recv)
}

// AllReduce reduces send over all ranks of t into recv, with h.DType and h.Op.
// send and recv have the same length, a multiple of the element size; they may
// be the same slice (in place). h describes the operation; the ring sets Step
// and Len on each message.
func (c Config) AllReduce(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error {
	n, r := t.Size(), t.Rank()
	es, err := pipeline.CheckAllReduce(h, send, recv)
	if err != nil {
		return fmt.Errorf("ring: %w", err)
	}
	if len(send) == 0 {
		return dissemination.Agree(ctx, t, h) // an empty all-reduce still takes part
	}
	if pipeline.AllReduceAlone(n, h, send, recv) {
		return nil
	}
	// Out of place needs no initial copy: every chunk of recv is written
	// either by a reduce-scatter step (recv = send op incoming) or by the
	// all-gather, so send is read exactly once.

	seg := pipeline.SegmentBytes(c.SegmentBytes, DefaultSegmentBytes, es)
	p := plan{n: n, r: r, es: es, count: len(send) / es, seg: seg}
	if pipeline.Eager(t, len(send), c.eagerBytes()) {
		return p.sequential(ctx, t, h, send, recv)
	}

	x := pipelines.Get().(*pipelined)
	x.p, x.t, x.h, x.send, x.recv = p, t, h, send, recv
	x.ready.Init()
	crew := pipeline.StartCrew(ctx)
	crew.Go(x) // the sending half
	err = crew.Wait(p.recvAll(crew.Context(), t, h, send, recv, &x.ready))
	crew.Release()
	x.t, x.send, x.recv = nil, nil, nil
	pipelines.Put(x)
	return err
}

// pipelined is the sending half of a pipelined ring, as a crew's Job: it
// forwards each segment once the receiving half (the caller's goroutine)
// has it. It is reused from call to call.
type pipelined struct {
	p          plan
	t          transport.Transport
	h          transport.Header
	send, recv []byte
	ready      pipeline.Progress // segments received
}

func (x *pipelined) Run(ctx context.Context) error {
	return x.p.sendAll(ctx, x.t, x.h, x.send, x.recv, &x.ready)
}

var pipelines = sync.Pool{New: func() any { return new(pipelined) }}

// plan is the shape of one ring all-reduce: n chunks, one per rank, each cut
// into segments.
type plan struct {
	n, r, es, count, seg int
}

// steps is the number of ring steps: n-1 of reduce-scatter, n-1 of all-gather.
func (p plan) steps() int { return 2 * (p.n - 1) }

// chunk returns the byte range of chunk k (taken mod n).
func (p plan) chunk(k int) (lo, hi int) {
	k = ((k % p.n) + p.n) % p.n
	return k * p.count / p.n * p.es, (k + 1) * p.count / p.n * p.es
}

// sendChunk is the chunk rank r sends at step s; recvChunk the one it receives.
// The chunk sent at step s+1 is the one received at step s, which is what lets
// a segment be forwarded as soon as it has arrived.
func (p plan) sendChunk(s int) int {
	if s < p.n-1 {
		return p.r - s
	}
	return p.r + 1 - (s - (p.n - 1))
}

func (p plan) recvChunk(s int) int {
	if s < p.n-1 {
		return p.r - s - 1
	}
	return p.r - (s - (p.n - 1))
}

// segments calls fn for every segment of chunk k, numbering them from *msg.
func (p plan) segments(k int, msg *uint32, fn func(off, end int, step uint32) error) error {
	lo, hi := p.chunk(k)
	for off := lo; off < hi; off += p.seg {
		if err := fn(off, min(off+p.seg, hi), *msg); err != nil {
			return err
		}
		*msg++
	}
	return nil
}

// source is the buffer step s sends from: the input at the first step, the
// partial or final results after.
func (p plan) source(s int, send, recv []byte) []byte {
	if s == 0 {
		return send
	}
	return recv
}

// receive takes one segment of step s from the left neighbour: during the
// reduce-scatter it is reduced into recv (and finished at the last step),
// during the all-gather it lands in recv as is.
func (p plan) receive(ctx context.Context, t transport.Transport, h transport.Header, s, off, end int, send, recv, stage []byte) error {
	left := (p.r - 1 + p.n) % p.n
	if s >= p.n-1 {
		return t.Recv(ctx, left, h, recv[off:end])
	}
	// Out of place, this chunk of recv is still unwritten, so the segment
	// lands there and is reduced in place: no staging buffer in the cache.
	in := stage[:end-off]
	if !pipeline.SameBuffer(send, recv) {
		in = recv[off:end]
	}
	if err := t.Recv(ctx, left, h, in); err != nil {
		return err
	}
	done := pipeline.Span(t, "reduce", h.Step)
	reduce.ReduceTo(h.DType, h.Op, recv[off:end], send[off:end], in)
	if s == p.n-2 {
		reduce.Finish(h.DType, h.Op, recv[off:end], p.n)
	}
	done()
	return nil
}

// sendAll is the sending half of the pipelined ring: it forwards each
// segment as soon as recvAll has it.
func (p plan) sendAll(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte, ready *pipeline.Progress) error {
	right := (p.r + 1) % p.n
	var msg uint32
	var forwarded int64
	for s := range p.steps() {
		src := p.source(s, send, recv)
		err := p.segments(p.sendChunk(s), &msg, func(off, end int, step uint32) error {
			if s > 0 {
				forwarded++
				if err := ready.Wait(ctx, forwarded); err != nil {
					return err
				}
			}
			h.Step = step
			return t.Send(ctx, right, h, src[off:end])
		})
		if err != nil {
			return fmt.Errorf("ring step %d/%d: %w", s, p.steps(), err)
		}
	}
	return nil
}

// recvAll is the receiving half of the pipelined ring.
func (p plan) recvAll(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte, ready *pipeline.Progress) error {
	stage := pipeline.Stage(p.seg)
	defer pipeline.Release(stage)
	var msg uint32
	for s := range p.steps() {
		err := p.segments(p.recvChunk(s), &msg, func(off, end int, step uint32) error {
			h.Step = step
			if err := p.receive(ctx, t, h, s, off, end, send, recv, stage.B); err != nil {
				return err
			}
			ready.Add()
			return nil
		})
		if err != nil {
			return fmt.Errorf("ring step %d/%d: %w", s, p.steps(), err)
		}
	}
	return nil
}

// sequential runs the ring on one goroutine, each step sending its whole
// chunk before receiving. Only safe when the link buffers everything a rank
// sends in the collective, which the caller checks.
func (p plan) sequential(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error {
	right := (p.r + 1) % p.n
	stage := pipeline.Stage(p.seg)
	defer pipeline.Release(stage)
	var sent, received uint32
	for s := range p.steps() {
		src := p.source(s, send, recv)
		err := p.segments(p.sendChunk(s), &sent, func(off, end int, step uint32) error {
			h.Step = step
			return t.Send(ctx, right, h, src[off:end])
		})
		if err == nil {
			err = p.segments(p.recvChunk(s), &received, func(off, end int, step uint32) error {
				h.Step = step
				return p.receive(ctx, t, h, s, off, end, send, recv, stage.B)
			})
		}
		if err != nil {
			return fmt.Errorf("ring step %d/%d: %w", s, p.steps(), err)
		}
	}
	return nil
}
