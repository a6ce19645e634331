package binomial

import (
	"context"
	"fmt"

	"github.com/collkit/collkit/algo/pipeline"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
)

// tree is this rank's place in the binomial tree rooted at root.
type tree struct {
	n, r, root int
	v          int // rank relative to the root
}

func newTree(coll string, t transport.Transport, root int) (tree, error) {
	n, r := t.Size(), t.Rank()
	if root < 0 || root >= n {
		return tree{}, fmt.Errorf("binomial: %s: root %d is not a rank of %d (0 to %d)", coll, root, n, n-1)
	}
	return tree{n: n, r: r, root: root, v: (r - root + n) % n}, nil
}

// abs turns a relative rank into a rank of the transport.
func (t tree) abs(v int) int { return (v + t.root) % t.n }

// parentMask is the lowest set bit of v (the round in which v receives), or
// the first power of two >= n at the root.
func (t tree) parentMask() int {
	mask := 1
	for mask < t.n {
		if t.v&mask != 0 {
			return mask
		}
		mask <<= 1
	}
	return mask
}

// children lists the relative ranks v sends to, last round first, with the
// number of ranks in each child's subtree.
func (t tree) children() (kids, sizes []int) {
	for mask := t.parentMask() >> 1; mask > 0; mask >>= 1 {
		if c := t.v + mask; c < t.n {
			kids = append(kids, c)
			sizes = append(sizes, min(mask, t.n-c))
		}
	}
	return kids, sizes
}

// Broadcast copies buf from rank root to buf on every rank of t, in
// ceil(log2 n) rounds. All ranks pass buffers of the same length. It sets
// h.Root to root, so ranks that disagree on the root get a mismatch error.
func Broadcast(ctx context.Context, t transport.Transport, h transport.Header, buf []byte, root int) error {
	tr, err := newTree("broadcast", t, root)
	if err != nil {
		return err
	}
	h.Root = int32(root)
	if tr.n == 1 {
		return nil
	}
	if tr.v != 0 {
		p := tr.abs(tr.v - tr.parentMask())
		if err := t.Recv(ctx, p, h, buf); err != nil {
			return fmt.Errorf("binomial broadcast: %w", err)
		}
	}
	kids, _ := tr.children()
	for _, c := range kids {
		if err := t.Send(ctx, tr.abs(c), h, buf); err != nil {
			return fmt.Errorf("binomial broadcast: %w", err)
		}
	}
	return nil
}

// Reduce reduces send over all ranks of t with h.DType and h.Op into recv
// on rank root, in ceil(log2 n) rounds. recv is only written at the root,
// where it has send's length and may be send itself; other ranks may pass
// nil. For Avg the root divides by the number of ranks once. Each rank
// reduces its children's partial results into a pooled accumulator (the
// root's is recv) and sends it to its parent.
func Reduce(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte, root int) error {
	tr, err := newTree("reduce", t, root)
	if err != nil {
		return err
	}
	if es := h.DType.Size(); es == 0 || !h.Op.Valid() || len(send)%es != 0 {
		return fmt.Errorf("binomial: reduce: invalid dtype %v, op %v or length %d", h.DType, h.Op, len(send))
	}
	if tr.v == 0 && len(recv) != len(send) {
		return fmt.Errorf("binomial: reduce: root %d: recv is %d bytes but send is %d; they must be the same size", root, len(recv), len(send))
	}
	h.Root = int32(root)
	acc := recv
	if tr.v != 0 {
		a := pipeline.Stage(len(send))
		defer pipeline.Release(a)
		acc = *a
	}
	if !pipeline.SameBuffer(acc, send) {
		copy(acc, send)
	}
	kids, _ := tr.children()
	if len(kids) > 0 {
		st := pipeline.Stage(len(send))
		defer pipeline.Release(st)
		// Children in the order they finish: the smallest subtree first.
		for i := len(kids) - 1; i >= 0; i-- {
			if err := t.Recv(ctx, tr.abs(kids[i]), h, *st); err != nil {
				return fmt.Errorf("binomial reduce: %w", err)
			}
			done := pipeline.Span(t, "reduce", h.Step)
			reduce.Reduce(h.DType, h.Op, acc, *st)
			done()
		}
	}
	if tr.v == 0 {
		reduce.Finish(h.DType, h.Op, acc, tr.n)
		return nil
	}
	if err := t.Send(ctx, tr.abs(tr.v-tr.parentMask()), h, acc); err != nil {
		return fmt.Errorf("binomial reduce: %w", err)
	}
	return nil
}
