package doubling

import (
	"context"

	"github.com/collkit/collkit/transport"
)

// Broadcast copies buf from rank root into buf on every rank of t. All
// ranks pass buffers of the same length, possibly empty. It sets h.Root
// to root. In round k (from the highest down) the members whose part of
// the pattern already holds the data send it to their partners, which send
// back a header; the other pairs exchange headers.
func Broadcast(ctx context.Context, t transport.Transport, h transport.Header, buf []byte, root int) error {
	s := newShape(t)
	if err := checkRoot("broadcast", s, root); err != nil {
		return err
	}
	h.Root = int32(root)
	if s.n == 1 {
		return nil
	}
	m := msgs{t: t, h: h, coll: "broadcast"}
	r := s.r
	if s.g < 0 {
		if err := m.send(ctx, kindFold, r+1, when(r == root, buf)); err != nil {
			return err
		}
		return m.recv(ctx, kindUnfold, r+1, when(r != root, buf))
	}
	if s.folded() {
		if err := m.recv(ctx, kindFold, r-1, when(r-1 == root, buf)); err != nil {
			return err
		}
	}
	v := s.g ^ s.member(root)
	for k := s.rounds - 1; k >= 0; k-- {
		bit := 1 << k
		var out, in []byte
		if v&(bit-1) == 0 { // a holder (bit k clear) and the member it serves
			out, in = when(v&bit == 0, buf), when(v&bit != 0, buf)
		}
		if err := m.exchange(ctx, s, k, s.g^bit, out, in); err != nil {
			return err
		}
	}
	if s.folded() {
		return m.send(ctx, kindUnfold, r-1, when(r-1 != root, buf))
	}
	return nil
}
