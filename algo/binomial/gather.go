package binomial

import (
	"context"
	"fmt"

	"github.com/collkit/collkit/algo/pipeline"
	"github.com/collkit/collkit/transport"
)

// Gather collects every rank's send, all of the same length, into recv on
// rank root, block k coming from rank k. recv is only used at the root,
// where it holds n blocks; other ranks may pass nil. A rank gathers its
// subtree's blocks (contiguous in root-relative order) and sends them to its
// parent in one message, so the root receives ceil(log2 n) messages.
func Gather(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte, root int) error {
	bs := len(send)
	tr, st, err := newSubtree("gather", t, root, recv, "recv", "send", bs)
	if err != nil {
		return err
	}
	defer st.release()
	h.Root = int32(root)
	kids, sizes, buf := st.kids, st.sizes, st.buf
	copy(buf[:bs], send)
	for i := len(kids) - 1; i >= 0; i-- {
		lo := (kids[i] - tr.v) * bs
		if err := t.Recv(ctx, tr.abs(kids[i]), h, buf[lo:lo+sizes[i]*bs]); err != nil {
			return fmt.Errorf("binomial gather: %w", err)
		}
	}
	if tr.v != 0 {
		if err := t.Send(ctx, tr.abs(tr.v-tr.parentMask()), h, buf); err != nil {
			return fmt.Errorf("binomial gather: %w", err)
		}
		return nil
	}
	if root != 0 {
		// Relative block j belongs to rank (j+root) mod n.
		copy(recv[root*bs:], buf[:(tr.n-root)*bs])
		copy(recv[:root*bs], buf[(tr.n-root)*bs:])
	}
	return nil
}

// Scatter sends block k of send on rank root to recv on rank k; every recv
// has the same length and send (used only at the root; others may pass nil)
// holds n such blocks. It is Gather run backwards: each rank receives its
// subtree's blocks from its parent in one message and passes each child its
// part.
func Scatter(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte, root int) error {
	bs := len(recv)
	tr, st, err := newSubtree("scatter", t, root, send, "send", "receive", bs)
	if err != nil {
		return err
	}
	defer st.release()
	h.Root = int32(root)
	kids, sizes, buf := st.kids, st.sizes, st.buf
	if tr.v == 0 && root != 0 {
		copy(buf, send[root*bs:])
		copy(buf[(tr.n-root)*bs:], send[:root*bs])
	}
	if tr.v != 0 {
		if err := t.Recv(ctx, tr.abs(tr.v-tr.parentMask()), h, buf); err != nil {
			return fmt.Errorf("binomial scatter: %w", err)
		}
	}
	for i, c := range kids {
		lo := (c - tr.v) * bs
		if err := t.Send(ctx, tr.abs(c), h, buf[lo:lo+sizes[i]*bs]); err != nil {
			return fmt.Errorf("binomial scatter: %w", err)
		}
	}
	if !pipeline.SameBuffer(recv, buf[:bs]) {
		copy(recv, buf[:bs])
	}
	return nil
}

// subtree is what one rank of a gather or scatter holds: its children
// (relative ranks, last round first) with the sizes of their subtrees, and
// buf, the blocks of its own subtree, v .. v+mine-1 in root-relative order.
type subtree struct {
	kids, sizes []int
	buf         []byte
	stage       *[]byte // buf's pooled storage; nil when buf is the root's own
}

// newSubtree checks the arguments of a gather or scatter (coll) whose root
// holds full, n blocks of bs bytes (fullName; the other ranks verb bs bytes
// each) and returns rank t.Rank()'s tree and subtree. When rank 0 is the
// root, buf is full itself, so that nothing is copied there. Give buf back
// with release.
func newSubtree(coll string, t transport.Transport, root int, full []byte, fullName, verb string, bs int) (tree, subtree, error) {
	tr, err := newTree(coll, t, root)
	if err != nil {
		return tree{}, subtree{}, err
	}
	if tr.v == 0 && len(full) != tr.n*bs {
		return tree{}, subtree{}, fmt.Errorf("binomial: %s: root %d: %s is %d bytes but %d ranks %s %d bytes each (%d bytes)",
			coll, root, fullName, len(full), tr.n, verb, bs, tr.n*bs)
	}
	var st subtree
	st.kids, st.sizes = tr.children()
	if tr.v == 0 && root == 0 {
		st.buf = full
		return tr, st, nil
	}
	mine := 1
	for _, s := range st.sizes {
		mine += s
	}
	st.stage = pipeline.Stage(mine * bs)
	st.buf = *st.stage
	return tr, st, nil
}

func (st subtree) release() {
	if st.stage != nil {
		pipeline.Release(st.stage)
	}
}
