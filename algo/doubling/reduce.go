package doubling

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
// divides by the number of ranks once. In round k (from the lowest up) a
// member whose part of the pattern is reduced sends its partial result to
// its partner, which reduces it (lower ranks as the left operand) and sends
// back a header; the other pairs exchange headers. The ranks that sent
// their partial before the last round keep exchanging headers, so that
// they too hear from every rank before they return.
func Reduce(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte, root int) error {
	s := newShape(t)
	if err := checkRoot("reduce", s, root); err != nil {
		return err
	}
	dt, op := h.DType, h.Op
	if es := dt.Size(); es == 0 || !op.Valid() || len(send)%es != 0 {
		return fmt.Errorf("doubling: reduce: invalid dtype %v, op %v or length %d", dt, op, len(send))
	}
	r := s.r
	if r == root && len(recv) != len(send) {
		return fmt.Errorf("doubling: reduce: root %d: recv is %d bytes but send is %d; they must be the same size", root, len(recv), len(send))
	}
	h.Root = int32(root)
	if s.n == 1 {
		if !pipeline.SameBuffer(send, recv) {
			copy(recv, send)
		}
		reduce.Finish(dt, op, recv, 1)
		return nil
	}
	m := msgs{t: t, h: h, coll: "reduce"}
	if s.g < 0 {
		if err := m.send(ctx, kindFold, r+1, send); err != nil {
			return err
		}
		if err := m.recv(ctx, kindUnfold, r+1, when(r == root, recv)); err != nil {
			return err
		}
		if r == root {
			reduce.Finish(dt, op, recv, s.n)
		}
		return nil
	}
	v := s.g ^ s.member(root)
	// acc is this rank's partial result; a rank that receives none before
	// it sends (a leaf) sends send itself.
	acc, in := send, []byte(nil)
	if leaf := !s.folded() && s.held(v) == 0; !leaf {
		if acc = recv; r != root {
			a := pipeline.Stage(len(send))
			defer pipeline.Release(a)
			acc = *a
		}
		if !pipeline.SameBuffer(acc, send) {
			copy(acc, send)
		}
		st := pipeline.Stage(len(send))
		defer pipeline.Release(st)
		in = *st
	}
	if s.folded() {
		if err := m.recv(ctx, kindFold, r-1, in); err != nil {
			return err
		}
		m.reduce(acc, in, acc)
	}
	for k := range s.rounds {
		bit := 1 << k
		q := s.g ^ bit
		var out, from []byte
		if v&(bit-1) == 0 { // a partial result moves towards the root
			out, from = when(v&bit != 0, acc), when(v&bit == 0, in)
		}
		if err := m.exchange(ctx, s, k, q, out, from); err != nil {
			return err
		}
		if from != nil {
			if q < s.g {
				m.reduce(acc, in, acc)
			} else {
				m.reduce(acc, acc, in)
			}
		}
	}
	if r == root {
		reduce.Finish(dt, op, acc, s.n)
	}
	if s.folded() {
		return m.send(ctx, kindUnfold, r-1, when(r-1 == root, acc))
	}
	return nil
}

// reduce sets dst to a op b.
func (m *msgs) reduce(dst, a, b []byte) {
	done := pipeline.Span(m.t, "reduce", m.h.Step)
	reduce.ReduceTo(m.h.DType, m.h.Op, dst, a, b)
	done()
}
