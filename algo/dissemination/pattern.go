package dissemination

import (
	"context"
	"fmt"

	"github.com/collkit/collkit/algo/pipeline"
	"github.com/collkit/collkit/transport"
)

// pattern is one rank's place in the dissemination pattern: in round k it
// sends one message to r+2^k and receives one from r-2^k (mod n), for
// ceil(log2 n) rounds. Every rank sends and receives in every round,
// whatever the root and the count, so ranks that disagree on either still
// meet the messages of the ranks they disagree with.
type pattern struct {
	t    transport.Transport
	n, r int
	what string
}

func newPattern(t transport.Transport, what string) pattern {
	return pattern{t: t, n: t.Size(), r: t.Rank(), what: what}
}

// exchange runs round k (distance s): out goes to r+s, in comes from r-s;
// either may be empty, a message of header only. h.Step is the caller's.
func (p pattern) exchange(ctx context.Context, h transport.Header, k, s int, out, in []byte) error {
	to, from := (p.r+s)%p.n, (p.r-s+p.n)%p.n
	if err := pipeline.Exchange(ctx, p.t, h, to, out, from, in); err != nil {
		return fmt.Errorf("dissemination %s round %d (to rank %d, from rank %d): %w", p.what, k, to, from, err)
	}
	return nil
}

func (p pattern) checkRoot(root int) error {
	if root < 0 || root >= p.n {
		return fmt.Errorf("dissemination: %s: root %d is not a rank of %d (0 to %d)", p.what, root, p.n, p.n-1)
	}
	return nil
}

// when is b if cond holds, nil (a message of header only) otherwise.
func when(cond bool, b []byte) []byte {
	if cond {
		return b
	}
	return nil
}
