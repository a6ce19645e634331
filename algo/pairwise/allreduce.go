package pairwise

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

// AllReduce reduces send over all ranks of t into recv (which may be send)
// in two rounds of pairwise exchange (a "two-shot" all-reduce): the buffer
// is cut into n blocks of whole elements; rank r sends block k to rank k,
// reduces the blocks it receives into its own block r, in the order r,
// r-1, r-2, ... (so block r has one rounding on every rank), and then
// sends its reduced block to every rank, as AllGather does. Each rank
// sends and receives 2(n-1)/n of the buffer, as in a ring, but in 2 rounds
// of n-1 independent messages rather than 2(n-1) steps each waiting for
// the last: with more ranks than cores, a ring's steps queue behind each
// other. Over a transport that buffers a block (transport.Buffered),
// every message of a round goes out before the round's first receive;
// otherwise a sender goroutine sends while this one receives.
func AllReduce(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error {
	n, r := t.Size(), t.Rank()
	es, err := pipeline.CheckAllReduce(h, send, recv)
	if err != nil {
		return fmt.Errorf("pairwise: all-reduce: rank %d: %w", r, err)
	}
	if len(send) == 0 {
		return dissemination.Agree(ctx, t, h) // an empty all-reduce still takes part
	}
	if pipeline.AllReduceAlone(n, h, send, recv) {
		return nil
	}
	x := twoShots.Get().(*twoShot)
	defer x.release()
	*x = twoShot{t: t, h: h, n: n, r: r, es: es, count: len(send) / es, send: send, recv: recv}
	lo, hi := x.block(r)
	b, ok := t.(transport.Buffered)
	x.eager = ok && x.blockBytes() <= b.SendBuffer()
	scratch := bufpool.Get(x.blockBytes())
	defer bufpool.Put(scratch)
	x.scratch = scratch.B[:hi-lo]
	// Round 1 scatters the blocks and reduces the own one; round 2 sends
	// it to every rank. In place, the blocks that arrive in round 2
	// overwrite send's, which round 1 finished sending.
	if err := x.round(ctx, 0); err != nil {
		return err
	}
	reduce.Finish(h.DType, h.Op, recv[lo:hi], n)
	return x.round(ctx, n-1)
}

// twoShot is one pairwise all-reduce on one rank; as a crew's Job, it
// sends the current round's messages. They are reused from call to call.
type twoShot struct {
	t          transport.Transport
	h          transport.Header
	n, r, es   int
	count      int
	send, recv []byte
	scratch    []byte // round 1 receives into it
	eager      bool
	base       int // the step before the current round's first: 0 or n-1
}

var twoShots = sync.Pool{New: func() any { return new(twoShot) }}

// release gives x back, with nothing of the caller's left in it.
func (x *twoShot) release() {
	*x = twoShot{}
	twoShots.Put(x)
}

// block is the byte range of block k: elements [k*count/n, (k+1)*count/n).
func (x *twoShot) block(k int) (lo, hi int) {
	return k * x.count / x.n * x.es, (k + 1) * x.count / x.n * x.es
}

func (x *twoShot) blockBytes() int { return (x.count/x.n + 1) * x.es }

// round runs steps 1 to n-1 of the round after step base: step s sends to
// rank r+s and receives from rank r-s.
func (x *twoShot) round(ctx context.Context, base int) error {
	x.base = base
	if x.eager {
		if err := x.Run(ctx); err != nil {
			return err
		}
		for s := 1; s < x.n; s++ {
			if err := x.recvStep(ctx, s); err != nil {
				return err
			}
		}
		return nil
	}
	crew := pipeline.StartCrew(ctx)
	crew.Go(x)
	var err error
	for s := 1; s < x.n && err == nil; s++ {
		err = x.recvStep(crew.Context(), s)
	}
	err = crew.Wait(err)
	crew.Release()
	return err
}

// Run sends the current round's messages: block r+s of send to rank r+s
// in round 1, the reduced block r to every rank in round 2.
func (x *twoShot) Run(ctx context.Context) error {
	for s := 1; s < x.n; s++ {
		to := (x.r + s) % x.n
		var out []byte
		if x.base == 0 {
			lo, hi := x.block(to)
			out = x.send[lo:hi]
		} else {
			lo, hi := x.block(x.r)
			out = x.recv[lo:hi]
		}
		h := x.h
		h.Step = uint32(x.base + s)
		if err := x.t.Send(ctx, to, h, out); err != nil {
			return fmt.Errorf("pairwise all-reduce step %d/%d: %w", x.base+s, 2*(x.n-1), err)
		}
	}
	return nil
}

// recvStep receives step s's message of the current round from rank r-s:
// in round 1 its share of block r, reduced into recv's block r; in round 2
// its reduced block, into recv.
func (x *twoShot) recvStep(ctx context.Context, s int) error {
	from := (x.r - s + x.n) % x.n
	h := x.h
	h.Step = uint32(x.base + s)
	into := x.scratch
	if x.base > 0 {
		lo, hi := x.block(from)
		into = x.recv[lo:hi]
	}
	if err := x.t.Recv(ctx, from, h, into); err != nil {
		return fmt.Errorf("pairwise all-reduce step %d/%d: %w", x.base+s, 2*(x.n-1), err)
	}
	if x.base == 0 {
		// Block r of recv is send's plus what arrived; out of place, the
		// first step reads send's block where it is rather than after a
		// copy into recv (2 ranks, 4 MiB over tcp: the copy was a tenth
		// of the call).
		lo, hi := x.block(x.r)
		own := x.recv[lo:hi]
		if s == 1 {
			own = x.send[lo:hi]
		}
		reduce.ReduceTo(h.DType, h.Op, x.recv[lo:hi], own, into)
	}
	return nil
}
