package doubling

import (
	"context"
	"fmt"
	"math/bits"

	"github.com/collkit/collkit/algo/pipeline"
	"github.com/collkit/collkit/transport"
)

// shape is one rank's place in the pattern of n ranks. The first 2*rem
// ranks pair up, (2i, 2i+1): the even one folds into the odd one, which
// stands for both in a group of p members, p the largest power of two not
// above n. Group member g is rank 2g+1 for g < rem and g+rem after; it
// stands for ranks first(g) to first(g+1)-1, so an aligned block of
// members stands for a contiguous run of ranks.
type shape struct {
	n, r   int
	p, rem int
	rounds int // log2(p)
	g      int // this rank's member, or -1 for a rank that folds out
}

func newShape(t transport.Transport) shape {
	n, r := t.Size(), t.Rank()
	p := 1 << (bits.Len(uint(n)) - 1)
	s := shape{n: n, r: r, p: p, rem: n - p, rounds: bits.Len(uint(p)) - 1, g: -1}
	if r >= 2*s.rem || r%2 == 1 {
		s.g = s.member(r)
	}
	return s
}

// real is the rank of group member g.
func (s shape) real(g int) int {
	if g < s.rem {
		return 2*g + 1
	}
	return g + s.rem
}

// first is the lowest rank member g stands for; first(p) is n.
func (s shape) first(g int) int {
	if g < s.rem {
		return 2 * g
	}
	return g + s.rem
}

// member is the group member that stands for rank r.
func (s shape) member(r int) int {
	if r < 2*s.rem {
		return r / 2
	}
	return r - s.rem
}

// folded reports whether this rank has a partner folded into it.
func (s shape) folded() bool { return s.g >= 0 && s.r < 2*s.rem }

// held is how many rounds this rank gathers (or, run backwards, scatters)
// before it sends its part on: the trailing zeros of v, its member
// relative to the root's (v = g XOR gr), and all rounds for the root's
// member. The aligned block of 2^held members from g's is what it ever
// holds.
func (s shape) held(v int) int {
	if v == 0 {
		return s.rounds
	}
	return bits.TrailingZeros(uint(v))
}

// span is the run of ranks [lo, hi) that the aligned block of 2^k members
// holding member g stands for.
func (s shape) span(g, k int) (lo, hi int) {
	a := g &^ (1<<k - 1)
	return s.first(a), s.first(a + 1<<k)
}

// Message kinds, the top byte of Header.Step.
const (
	kindFold   = 1
	kindRound  = 2
	kindUnfold = 3
)

func stepID(kind, round int) uint32 { return uint32(kind)<<24 | uint32(round) }

// msgs sends and receives one collective's messages, naming the phase of
// any that fails.
type msgs struct {
	t    transport.Transport
	h    transport.Header
	coll string
}

func (m *msgs) fail(kind, round, peer int, err error) error {
	phase := "fold"
	switch kind {
	case kindRound:
		phase = fmt.Sprintf("round %d", round)
	case kindUnfold:
		phase = "unfold"
	}
	return fmt.Errorf("doubling %s: %s with rank %d: %w", m.coll, phase, peer, err)
}

// exchange runs round k with member q: out goes to it and in comes from it
// (either may be empty: a message of header only).
func (m *msgs) exchange(ctx context.Context, s shape, k, q int, out, in []byte) error {
	h := m.h
	h.Step = stepID(kindRound, k)
	peer := s.real(q)
	if err := pipeline.Exchange(ctx, m.t, peer, h, out, in); err != nil {
		return m.fail(kindRound, k, peer, err)
	}
	return nil
}

func (m *msgs) send(ctx context.Context, kind, peer int, p []byte) error {
	h := m.h
	h.Step = stepID(kind, 0)
	if err := m.t.Send(ctx, peer, h, p); err != nil {
		return m.fail(kind, 0, peer, err)
	}
	return nil
}

func (m *msgs) recv(ctx context.Context, kind, peer int, p []byte) error {
	h := m.h
	h.Step = stepID(kind, 0)
	if err := m.t.Recv(ctx, peer, h, p); err != nil {
		return m.fail(kind, 0, peer, err)
	}
	return nil
}

func checkRoot(coll string, s shape, root int) error {
	if root < 0 || root >= s.n {
		return fmt.Errorf("doubling: %s: root %d is not a rank of %d (0 to %d)", coll, root, s.n, s.n-1)
	}
	return nil
}

// when is p if cond holds, nil (a message of header only) otherwise.
func when(cond bool, p []byte) []byte {
	if cond {
		return p
	}
	return nil
}
