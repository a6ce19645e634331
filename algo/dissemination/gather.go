package dissemination

import (
	"context"
	"fmt"
	"math/bits"

	"github.com/collkit/collkit/algo/pipeline"
	"github.com/collkit/collkit/internal/bufpool"
	"github.com/collkit/collkit/transport"
)

// Gather collects every rank's send, all of the same length, into recv on
// rank root, block k from rank k. recv is only used at the root, where it
// holds n blocks; other ranks may pass nil. It runs as Reduce does, the
// blocks taking the place of the partial results: in round k each rank u
// with u mod 2^(k+1) = 2^k (u = root - r mod n) sends the blocks it has
// gathered, those of ranks r-2^k+1 to r (mod n), to rank r+2^k; every
// other message of the round is a header. The root receives the blocks
// straight into their places in recv, except a run that wraps past rank
// n-1, which it copies in two parts.
func Gather(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte, root int) error {
	p := newPattern(t, "gather")
	if err := p.checkRoot(root); err != nil {
		return err
	}
	n, r, bs := p.n, p.r, len(send)
	if r == root && len(recv) != n*bs {
		return fmt.Errorf("dissemination: gather: root %d: recv is %d bytes but %d ranks send %d bytes each (%d bytes)", root, len(recv), n, bs, n*bs)
	}
	h.Root = int32(root)
	u := (root - r + n) % n
	// This rank gathers the blocks of ranks r-size+1 .. r (mod n): at the
	// root all of them, elsewhere its subtree. A non-root keeps them in a
	// staging buffer in that order, its own block last.
	size := n
	if u != 0 {
		size = min(1<<bits.TrailingZeros(uint(u)), n-u)
	}
	buf := recv
	var wrap *bufpool.Buffer // the root's staging for the one run that wraps past rank n-1
	defer func() {
		if wrap != nil {
			pipeline.Release(wrap)
		}
	}()
	switch {
	case r != root && size == 1:
		buf = send // a leaf sends its own block and gathers nothing
	case r != root:
		st := pipeline.Stage(size * bs)
		defer pipeline.Release(st)
		buf = st.B
		copy(buf[(size-1)*bs:], send)
	case !pipeline.SameBuffer(recv[r*bs:(r+1)*bs], send):
		copy(recv[r*bs:], send)
	}
	for k, s := 0, 1; s < p.n; k, s = k+1, 2*s {
		h.Step = uint32(k)
		var out, in []byte
		if u%(2*s) == s {
			out = buf // everything gathered: size = s or the rest
		}
		first, m := 0, 0 // the run of ranks received, from rank r-s-m+1
		if u%(2*s) == 0 && u+s < n {
			m = min(s, n-u-s)
			first = (r - s - m + 1 + 2*n) % n
			switch {
			case r != root:
				in = buf[(size-s-m)*bs : (size-s)*bs]
			case first+m <= n:
				in = recv[first*bs : (first+m)*bs]
			default:
				wrap = pipeline.Stage(m * bs)
				in = wrap.B
			}
		}
		if err := p.exchange(ctx, h, k, s, out, in); err != nil {
			return err
		}
		if r == root && m > 0 && first+m > n {
			tail := copy(recv[first*bs:], in)
			copy(recv, in[tail:])
		}
	}
	return nil
}

// Scatter sends block k of send on rank root to recv on rank k; every recv
// has the same length and send (used only at the root; others may pass
// nil) holds n such blocks. It runs as Broadcast does, each holder sending
// only the blocks of the ranks it serves: numbering ranks from the root
// (v = r - root mod n), in round k rank v < 2^k sends v + 2^k the blocks of
// every v' = v + 2^k mod 2^(k+1), packed, and every other message of the
// round is a header.
func Scatter(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte, root int) error {
	p := newPattern(t, "scatter")
	if err := p.checkRoot(root); err != nil {
		return err
	}
	n, r, bs := p.n, p.r, len(recv)
	if r == root && len(send) != n*bs {
		return fmt.Errorf("dissemination: scatter: root %d: send is %d bytes but %d ranks receive %d bytes each (%d bytes)", root, len(send), n, bs, n*bs)
	}
	h.Root = int32(root)
	v := (r - root + n) % n
	// A rank other than the root receives, in round highbit(v), the blocks
	// of v, v + stride, v + 2*stride, ... (stride = 2^(highbit(v)+1)), in
	// that order; the root holds them all (stride 1), in send.
	stride, held := 1, n
	var buf []byte
	if v != 0 {
		stride = 2 << (bits.Len(uint(v)) - 1)
		held = (n - v + stride - 1) / stride
		buf = recv // it keeps only its own block
		if held > 1 {
			st := pipeline.Stage(held * bs)
			defer pipeline.Release(st)
			buf = st.B
		}
	}
	// block is the block of v + x (x a multiple of stride) in what this
	// rank holds.
	block := func(x int) []byte {
		if v == 0 {
			a := (root + x) % n
			return send[a*bs : (a+1)*bs]
		}
		i := x / stride
		return buf[i*bs : (i+1)*bs]
	}
	// The most blocks this rank sends at once: the root about half of
	// them in the first round, the others fewer in later rounds.
	most := 0
	for s := 1; s < n; s *= 2 {
		if v < s && v+s < n {
			most = max(most, (n-v-s+2*s-1)/(2*s))
		}
	}
	pack := pipeline.Stage(max(most*bs, 1))
	defer pipeline.Release(pack)
	for k, s := 0, 1; s < p.n; k, s = k+1, 2*s {
		h.Step = uint32(k)
		var out, in []byte
		if v < s && v+s < n {
			m := 0
			for x := s; v+x < n; x += 2 * s {
				m += copy(pack.B[m:], block(x))
			}
			out = pack.B[:m]
		}
		if s <= v && v < 2*s {
			in = buf
		}
		if err := p.exchange(ctx, h, k, s, out, in); err != nil {
			return err
		}
	}
	if mine := block(0); !pipeline.SameBuffer(mine, recv) {
		copy(recv, mine)
	}
	return nil
}
