package doubling

import (
	"context"
	"fmt"

	"github.com/collkit/collkit/algo/pipeline"
	"github.com/collkit/collkit/transport"
)

// Gather collects every rank's send, all of the same length, into recv on
// rank root, block k from rank k. recv is only used at the root, where it
// holds n blocks; other ranks may pass nil. In round k (from the lowest up)
// a member whose part of the pattern is gathered sends the blocks of that
// part, a contiguous run of ranks, to its partner, which sends back a
// header; the other pairs exchange headers. The root receives every block
// straight into its place in recv.
func Gather(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte, root int) error {
	s := newShape(t)
	if err := checkRoot("gather", s, root); err != nil {
		return err
	}
	bs, r := len(send), s.r
	if r == root && len(recv) != s.n*bs {
		return fmt.Errorf("doubling: gather: root %d: recv is %d bytes but %d ranks send %d bytes each (%d bytes)", root, len(recv), s.n, bs, s.n*bs)
	}
	h.Root = int32(root)
	if s.n == 1 {
		if !pipeline.SameBuffer(send, recv) {
			copy(recv, send)
		}
		return nil
	}
	m := msgs{t: t, h: h, coll: "gather"}
	if s.g < 0 {
		if err := m.send(ctx, kindFold, r+1, send); err != nil {
			return err
		}
		return m.recv(ctx, kindUnfold, r+1, when(r == root, recv))
	}
	v := s.g ^ s.member(root)
	lo, hi := s.span(s.g, s.held(v))
	buf := recv // the root's member holds all of it
	if r != root {
		st := pipeline.Stage((hi - lo) * bs)
		defer pipeline.Release(st)
		buf = *st
	}
	// block is the part of buf that ranks [a, b) stand for.
	block := func(a, b int) []byte { return buf[(a-lo)*bs : (b-lo)*bs] }
	if mine := block(r, r+1); !pipeline.SameBuffer(mine, send) {
		copy(mine, send)
	}
	if s.folded() {
		if err := m.recv(ctx, kindFold, r-1, block(r-1, r)); err != nil {
			return err
		}
	}
	for k := range s.rounds {
		bit := 1 << k
		q := s.g ^ bit
		var out, in []byte
		if v&(bit-1) == 0 { // a gathered part moves towards the root
			if v&bit != 0 {
				out = block(s.span(s.g, k))
			} else {
				in = block(s.span(q, k))
			}
		}
		if err := m.exchange(ctx, s, k, q, out, in); err != nil {
			return err
		}
	}
	if s.folded() {
		return m.send(ctx, kindUnfold, r-1, when(r-1 == root, buf))
	}
	return nil
}

// Scatter sends block k of send on rank root to recv on rank k; every recv
// has the same length and send (used only at the root; others may pass
// nil) holds n such blocks. It is Gather run backwards: in round k (from
// the highest down) a member that holds a part of the pattern sends its
// partner the blocks of the partner's half, and gets a header back; the
// other pairs exchange headers.
func Scatter(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte, root int) error {
	s := newShape(t)
	if err := checkRoot("scatter", s, root); err != nil {
		return err
	}
	bs, r := len(recv), s.r
	if r == root && len(send) != s.n*bs {
		return fmt.Errorf("doubling: scatter: root %d: send is %d bytes but %d ranks receive %d bytes each (%d bytes)", root, len(send), s.n, bs, s.n*bs)
	}
	h.Root = int32(root)
	if s.n == 1 {
		if !pipeline.SameBuffer(send, recv) {
			copy(recv, send)
		}
		return nil
	}
	m := msgs{t: t, h: h, coll: "scatter"}
	if s.g < 0 {
		if err := m.send(ctx, kindFold, r+1, when(r == root, send)); err != nil {
			return err
		}
		if r == root {
			if mine := send[r*bs : (r+1)*bs]; !pipeline.SameBuffer(mine, recv) {
				copy(recv, mine)
			}
		}
		return m.recv(ctx, kindUnfold, r+1, when(r != root, recv))
	}
	v := s.g ^ s.member(root)
	lo, hi := s.span(s.g, s.held(v))
	buf := send // the root holds all of it
	if r != root {
		st := pipeline.Stage((hi - lo) * bs)
		defer pipeline.Release(st)
		buf = *st
	}
	block := func(a, b int) []byte { return buf[(a-lo)*bs : (b-lo)*bs] }
	if s.folded() {
		if err := m.recv(ctx, kindFold, r-1, when(r-1 == root, buf)); err != nil {
			return err
		}
	}
	for k := s.rounds - 1; k >= 0; k-- {
		bit := 1 << k
		q := s.g ^ bit
		var out, in []byte
		if v&(bit-1) == 0 { // a holder hands its partner the partner's half
			if v&bit == 0 {
				out = block(s.span(q, k))
			} else {
				in = block(s.span(s.g, k))
			}
		}
		if err := m.exchange(ctx, s, k, q, out, in); err != nil {
			return err
		}
	}
	if mine := block(r, r+1); !pipeline.SameBuffer(mine, recv) {
		copy(recv, mine)
	}
	if s.folded() {
		return m.send(ctx, kindUnfold, r-1, when(r-1 != root, block(r-1, r)))
	}
	return nil
}
