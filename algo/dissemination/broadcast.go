package dissemination

import (
	"context"

	"github.com/collkit/collkit/transport"
)

// Broadcast copies buf from rank root into buf on every rank of t. All
// ranks pass buffers of the same length, possibly empty. It sets h.Root to
// root. Numbering ranks from the root (v = r - root mod n), in round k the
// ranks v < 2^k, which hold the data, send it to v + 2^k, as down a
// binomial tree, and every other message of the round is a header: the
// root and the ranks that forward the data hear from every rank too.
func Broadcast(ctx context.Context, t transport.Transport, h transport.Header, buf []byte, root int) error {
	p := newPattern(t, "broadcast")
	if err := p.checkRoot(root); err != nil {
		return err
	}
	h.Root = int32(root)
	v := (p.r - root + p.n) % p.n
	for k, s := 0, 1; s < p.n; k, s = k+1, 2*s {
		h.Step = uint32(k)
		out := when(v < s && v+s < p.n, buf)
		in := when(s <= v && v < 2*s, buf)
		if err := p.exchange(ctx, h, k, s, out, in); err != nil {
			return err
		}
	}
	return nil
}
