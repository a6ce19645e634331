package dissemination

import (
	"context"
	"fmt"

	"github.com/collkit/collkit/algo/pipeline"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
)

// Reduce reduces send over all ranks of t with h.DType and h.Op into recv
// on rank root. recv is only written at the root, where it has send's
// length and may be send itself; other ranks may pass nil. For Avg the root
// divides by the number of ranks once. Numbering ranks towards the root
// (u = root - r mod n), in round k each u with u mod 2^(k+1) = 2^k sends
// its partial result to u - 2^k, which reduces it into its own, as up a
// binomial tree; every other message of the round is a header, so that
// the ranks that sent their partial early hear from every rank too.
func Reduce(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte, root int) error {
	p := newPattern(t, "reduce")
	if err := p.checkRoot(root); err != nil {
		return err
	}
	dt, op := h.DType, h.Op
	if es := dt.Size(); es == 0 || !op.Valid() || len(send)%es != 0 {
		return fmt.Errorf("dissemination: reduce: invalid dtype %v, op %v or length %d", dt, op, len(send))
	}
	n, r := p.n, p.r
	if r == root && len(recv) != len(send) {
		return fmt.Errorf("dissemination: reduce: root %d: recv is %d bytes but send is %d; they must be the same size", root, len(recv), len(send))
	}
	h.Root = int32(root)
	u := (root - r + n) % n
	receives := false // a partial result comes in before this rank's goes out
	for s := 1; s < n && u%(2*s) == 0; s *= 2 {
		receives = receives || u+s < n
	}
	acc, in := send, []byte(nil) // a rank that receives nothing sends send itself
	if receives || r == root {
		if acc = recv; r != root {
			a := pipeline.Stage(len(send))
			defer pipeline.Release(a)
			acc = a.B
		}
		if !pipeline.SameBuffer(acc, send) {
			copy(acc, send)
		}
		st := pipeline.Stage(len(send))
		defer pipeline.Release(st)
		in = st.B
	}
	for k, s := 0, 1; s < p.n; k, s = k+1, 2*s {
		h.Step = uint32(k)
		gets := u%(2*s) == 0 && u+s < n
		if err := p.exchange(ctx, h, k, s, when(u%(2*s) == s, acc), when(gets, in)); err != nil {
			return err
		}
		if gets {
			// The partial that came in covers the ranks just below this
			// one's (mod n): it is the left operand.
			done := pipeline.Span(t, "reduce", h.Step)
			reduce.ReduceTo(dt, op, acc, in, acc)
			done()
		}
	}
	if r == root {
		reduce.Finish(dt, op, acc, n)
	}
	return nil
}
