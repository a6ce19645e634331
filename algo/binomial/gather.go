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
	tr, err := newTree("gather", t, root)
	if err != nil {
		return err
	}
	bs := len(send)
	if tr.v == 0 && len(recv) != tr.n*bs {
		return fmt.Errorf("binomial: gather: root %d: recv is %d bytes but %d ranks send %d bytes each (%d bytes)", root, len(recv), tr.n, bs, tr.n*bs)
	}
	h.Root = int32(root)
	kids, sizes := tr.children()
	mine := 1
	for _, s := range sizes {
		mine += s
	}
	// buf holds blocks v .. v+mine-1 in root-relative order. The root of
	// rank 0 can gather straight into recv.
	var buf []byte
	switch {
	case tr.v == 0 && root == 0:
		buf = recv
	default:
		b := pipeline.Stage(mine * bs)
		defer pipeline.Release(b)
		buf = *b
	}
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
	tr, err := newTree("scatter", t, root)
	if err != nil {
		return err
	}
	bs := len(recv)
	if tr.v == 0 && len(send) != tr.n*bs {
		return fmt.Errorf("binomial: scatter: root %d: send is %d bytes but %d ranks receive %d bytes each (%d bytes)", root, len(send), tr.n, bs, tr.n*bs)
	}
	h.Root = int32(root)
	kids, sizes := tr.children()
	mine := 1
	for _, s := range sizes {
		mine += s
	}
	var buf []byte
	switch {
	case tr.v == 0 && root == 0:
		buf = send
	default:
		b := pipeline.Stage(mine * bs)
		defer pipeline.Release(b)
		buf = *b
	}
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
