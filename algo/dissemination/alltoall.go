package dissemination

import (
	"context"
	"fmt"

	"github.com/collkit/collkit/algo/pipeline"
	"github.com/collkit/collkit/transport"
)

// AllToAll sends block k of send to rank k and receives rank k's block for
// this rank into block k of recv, on every rank of t; send and recv hold n
// blocks of equal size, and recv may be send (in place). It is Bruck's
// all-to-all on the pattern: position j of a staging buffer starts with
// the block for rank r+j, and in round k every block whose position has
// bit k set moves 2^k ranks on, packed into one message to r+2^k, while the
// same positions come in from r-2^k. After ceil(log2 n) rounds position j
// holds rank r-j's block for this rank. Each round moves about half the
// blocks, so a rank sends about n/2 log2 n blocks against the pairwise
// exchange's n-1, in log2 n messages against n-1: for small blocks, whose
// cost is the messages, not the bytes.
func AllToAll(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error {
	p := newPattern(t, "alltoall")
	n, r := p.n, p.r
	if len(send) != len(recv) || len(send)%n != 0 {
		return fmt.Errorf("dissemination: alltoall: rank %d: send is %d bytes and recv %d; both must hold %d equal blocks", r, len(send), len(recv), n)
	}
	bs := len(send) / n
	if n == 1 {
		if !pipeline.SameBuffer(send, recv) {
			copy(recv, send)
		}
		return nil
	}
	st := pipeline.Stage(max(n*bs, 1))
	defer pipeline.Release(st)
	held := st.B[:n*bs]
	for j := range n {
		b := (r + j) % n
		copy(held[j*bs:(j+1)*bs], send[b*bs:(b+1)*bs])
	}
	half := (n + 1) / 2 // the most positions with one bit set
	out := pipeline.Stage(max(half*bs, 1))
	defer pipeline.Release(out)
	in := pipeline.Stage(max(half*bs, 1))
	defer pipeline.Release(in)
	for k, s := 0, 1; s < n; k, s = k+1, 2*s {
		m := 0
		for j := s; j < n; j++ {
			if j&s != 0 {
				m += copy(out.B[m:], held[j*bs:(j+1)*bs])
			}
		}
		h.Step = uint32(k)
		if err := p.exchange(ctx, h, k, s, out.B[:m], in.B[:m]); err != nil {
			return err
		}
		m = 0
		for j := s; j < n; j++ {
			if j&s != 0 {
				m += copy(held[j*bs:(j+1)*bs], in.B[m:m+bs])
			}
		}
	}
	for j := range n {
		b := (r - j + n) % n
		copy(recv[b*bs:(b+1)*bs], held[j*bs:(j+1)*bs])
	}
	return nil
}
