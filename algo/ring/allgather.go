package ring

import (
	"context"
	"fmt"

	"github.com/collkit/collkit/algo/dissemination"
	"github.com/collkit/collkit/algo/pipeline"
	"github.com/collkit/collkit/transport"
)

// AllGather runs a ring all-gather with the default Config.
func AllGather(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte, counts []int) error {
	return Config{}.AllGather(ctx, t, h, send, recv, counts)
}

// AllGather gathers every rank's send into recv on all ranks of t: rank k
// contributes counts[k] elements of h.DType, and recv holds sum(counts)
// elements, the blocks in rank order. counts may be uneven and hold zeros;
// every rank passes the same counts. send may be recv's block r (in place);
// otherwise it must not overlap recv.
//
// Each of the n-1 steps forwards one block to the right neighbour and
// receives one from the left, pipelined in segments.
func (c Config) AllGather(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte, counts []int) error {
	n, r := t.Size(), t.Rank()
	es := h.DType.Size()
	if es == 0 {
		return fmt.Errorf("ring: all-gather: invalid dtype %v", h.DType)
	}
	x := getBlockCall()
	defer x.release()
	off, err := offsets(x.offs[:0], "all-gather", n, r, es, counts, len(recv), len(send), "recv", "send")
	x.offs = off
	if err != nil {
		return err
	}
	if mine := recv[off[r]:off[r+1]]; !pipeline.SameBuffer(send, mine) {
		copy(mine, send)
	}
	if len(recv) == 0 {
		// Still take part, so that ranks that passed data fail here too.
		return dissemination.Agree(ctx, t, h)
	}
	if n == 1 {
		return nil
	}
	x.b = blockRing{n: n, r: r, seg: c.segBytes(es), first: r, off: off}
	x.ag = allGather{b: &x.b, recv: recv}
	return x.run(ctx, t, h, c, len(recv), &x.ag)
}

// allGather is what an all-gather does with the blocks of a blockRing: rank
// r first sends its own block and forwards every other block as it arrives.
type allGather struct {
	b    *blockRing
	recv []byte
}

func (x *allGather) segment(_, _, lo, hi int) []byte { return x.recv[lo:hi] }

func (x *allGather) receive(ctx context.Context, t transport.Transport, h transport.Header, _, _, lo, hi int, _ []byte) error {
	return t.Recv(ctx, x.b.left(), h, x.recv[lo:hi])
}
