package dissemination

import (
	"context"
	"fmt"

	"github.com/collkit/collkit/algo/pipeline"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
)

// AllGather gathers every rank's send, all of the same length, into recv on
// every rank, block k from rank k; send may be recv's own block (in place).
// It is Bruck's all-gather on the pattern: a rank collects the blocks of
// the ranks just below it, r-c+1 .. r, and in round k (c = 2^k) receives
// from r-2^k the min(2^k, n-2^k) blocks that rank has collected last,
// sending its own to r+2^k. It takes ceil(log2 n) rounds, against the
// ring's n-1, and sends each link the same n-1 blocks in all; the blocks
// are collected in a staging buffer and copied into place at the end.
func AllGather(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error {
	p := newPattern(t, "allgather")
	n, r, bs := p.n, p.r, len(send)
	if len(recv) != n*bs {
		return fmt.Errorf("dissemination: allgather: rank %d: recv is %d bytes but %d ranks send %d bytes each (%d bytes)", r, len(recv), n, bs, n*bs)
	}
	own := recv[r*bs : (r+1)*bs]
	if !pipeline.SameBuffer(own, send) {
		copy(own, send)
	}
	if n == 1 {
		return nil
	}
	// Position q of the staging buffer holds the block of rank r+1+q, so
	// this rank's own is last and every round's blocks are contiguous.
	st := pipeline.Stage(max(n*bs, 1))
	defer pipeline.Release(st)
	held := st.B[:n*bs]
	copy(held[(n-1)*bs:], send)
	c := 1
	for k, s := 0, 1; s < n; k, s = k+1, 2*s {
		m := min(s, n-s)
		h.Step = uint32(k)
		out := held[(n-m)*bs:]
		in := held[(n-c-m)*bs : (n-c)*bs]
		if err := p.exchange(ctx, h, k, s, out, in); err != nil {
			return err
		}
		c += m
	}
	for q := range n - 1 {
		b := (r + 1 + q) % n
		copy(recv[b*bs:(b+1)*bs], held[q*bs:(q+1)*bs])
	}
	return nil
}

// ReduceScatter reduces send, n blocks of recv's length, over all ranks of
// t with h.DType and h.Op, and leaves block r of the result in recv on rank
// r; recv may be send's own block (in place). Position j of a staging
// buffer starts with this rank's contribution to block r+j. In round k
// (s = 2^k) the positions left are the multiples of s: those with bit k
// set (j mod 2s = s) go, packed into one message, to rank r+s, and the
// same positions come in from r-s, where they hold partials for the blocks
// at this rank's positions j-s, into which they are reduced. After
// ceil(log2 n) rounds position 0, block r, holds every rank's
// contribution. Each link carries n-1 blocks in all, as on the ring, in
// ceil(log2 n) messages instead of n-1. For Avg each rank divides its
// block by n once.
func ReduceScatter(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error {
	p := newPattern(t, "reducescatter")
	n, r, bs := p.n, p.r, len(recv)
	dt, op := h.DType, h.Op
	if es := dt.Size(); es == 0 || !op.Valid() || bs%es != 0 {
		return fmt.Errorf("dissemination: reducescatter: invalid dtype %v, op %v or length %d", dt, op, bs)
	}
	if len(send) != n*bs {
		return fmt.Errorf("dissemination: reducescatter: rank %d: send is %d bytes but must hold %d blocks of recv's %d bytes (%d bytes)", r, len(send), n, bs, n*bs)
	}
	if n == 1 {
		if !pipeline.SameBuffer(send, recv) {
			copy(recv, send)
		}
		reduce.Finish(dt, op, recv, n)
		return nil
	}
	st := pipeline.Stage(max(n*bs, 1))
	defer pipeline.Release(st)
	part := st.B[:n*bs]
	for j := range n {
		b := (r + j) % n
		copy(part[j*bs:(j+1)*bs], send[b*bs:(b+1)*bs])
	}
	half := n / 2 // the most positions that leave in one round
	out := pipeline.Stage(max(half*bs, 1))
	defer pipeline.Release(out)
	in := pipeline.Stage(max(half*bs, 1))
	defer pipeline.Release(in)
	for k, s := 0, 1; s < n; k, s = k+1, 2*s {
		m := 0
		for j := s; j < n; j += 2 * s {
			m += copy(out.B[m:], part[j*bs:(j+1)*bs])
		}
		h.Step = uint32(k)
		if err := p.exchange(ctx, h, k, s, out.B[:m], in.B[:m]); err != nil {
			return err
		}
		done := pipeline.Span(t, "reduce", h.Step)
		for i, j := 0, s; j < n; i, j = i+1, j+2*s {
			// The partial that came in covers ranks below this one: it is
			// the left operand, as in Reduce.
			acc := part[(j-s)*bs : (j-s+1)*bs]
			reduce.ReduceTo(dt, op, acc, in.B[i*bs:(i+1)*bs], acc)
		}
		done()
	}
	copy(recv, part[:bs])
	reduce.Finish(dt, op, recv, n)
	return nil
}
