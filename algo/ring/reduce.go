package ring

import (
	"context"
	"fmt"
	"sync"

	"github.com/collkit/collkit/algo/pipeline"
	"github.com/collkit/collkit/transport"
)

// gatherStep numbers the messages that carry reduced blocks to the root,
// apart from the segments of the reduce-scatter before them.
const gatherStep = 1 << 31

// Reduce runs a ring reduce with the default Config.
func Reduce(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte, root int) error {
	return Config{}.Reduce(ctx, t, h, send, recv, root)
}

// Reduce reduces send over all ranks of t with h.DType and h.Op into recv
// on rank root (Rabenseifner's reduce): a ring reduce-scatter leaves block k
// of the result on rank k, and every rank then sends its block to the root.
// Each rank sends about (n-1)/n of the buffer, and the root receives as much
// again, instead of the log2(n) whole buffers of a tree. recv is only written
// at the root, where it has send's length and may be send itself; other
// ranks may pass nil. It sets h.Root to root.
func (c Config) Reduce(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte, root int) error {
	n, r := t.Size(), t.Rank()
	if root < 0 || root >= n {
		return fmt.Errorf("ring: reduce: root %d is not a rank of %d (0 to %d)", root, n, n-1)
	}
	es := h.DType.Size()
	if es == 0 || !h.Op.Valid() || len(send)%es != 0 {
		return fmt.Errorf("ring: reduce: invalid dtype %v, op %v or length %d", h.DType, h.Op, len(send))
	}
	if r == root && len(recv) != len(send) {
		return fmt.Errorf("ring: reduce: root %d: recv is %d bytes but send is %d; they must be the same size", root, len(recv), len(send))
	}
	h.Root = int32(root)
	count := len(send) / es
	ints := getInts(2*n + 1)
	defer putInts(ints)
	counts, off := (*ints)[:n], (*ints)[n:]
	off[0] = 0
	for k := range n {
		counts[k] = count / n
		if k < count%n {
			counts[k]++
		}
		off[k+1] = off[k] + counts[k]*es
	}
	if r == root {
		mine := recv[off[r]:off[r+1]]
		src := send
		if pipeline.SameBuffer(send, recv) {
			src = recv // in place: reduce-scatter in place on the root's block
		}
		if err := c.ReduceScatter(ctx, t, h, src, mine, counts); err != nil {
			return err
		}
		h.Step = gatherStep
		for k := range n {
			if k != r && counts[k] > 0 {
				if err := t.Recv(ctx, k, h, recv[off[k]:off[k+1]]); err != nil {
					return fmt.Errorf("ring reduce: gather at root: %w", err)
				}
			}
		}
		return nil
	}
	st := pipeline.Stage(counts[r] * es)
	defer pipeline.Release(st)
	if err := c.ReduceScatter(ctx, t, h, send, st.B, counts); err != nil {
		return err
	}
	if counts[r] == 0 {
		return nil
	}
	h.Step = gatherStep
	if err := t.Send(ctx, root, h, st.B); err != nil {
		return fmt.Errorf("ring reduce: gather at root: %w", err)
	}
	return nil
}

// intPool holds the counts and offsets of reduces between calls.
var intPool sync.Pool

func getInts(n int) *[]int {
	if p, ok := intPool.Get().(*[]int); ok && cap(*p) >= n {
		*p = (*p)[:n]
		return p
	}
	p := make([]int, n)
	return &p
}

func putInts(p *[]int) { intPool.Put(p) }
