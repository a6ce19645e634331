package pipeline

import (
	"context"
	"math"
	"sync"

	"github.com/collkit/collkit/transport"
)

// Exchange sends out to rank to and receives the message of rank from into
// in, both framed by h; either may be empty (a message of header only), and
// to and from may be the same peer. When t buffers out (Eager) it sends and
// then receives on this goroutine, which cannot deadlock: the send
// completes whatever the peer does. Otherwise the send runs on a goroutine
// of its own while this one receives, so that two ranks that both send
// large messages (ranks that disagree on the root, say) meet each other's
// header instead of waiting on each other's send.
func Exchange(ctx context.Context, t transport.Transport, h transport.Header, to int, out []byte, from int, in []byte) error {
	if Eager(t, len(out), math.MaxInt) {
		if err := t.Send(ctx, to, h, out); err != nil {
			return err
		}
		return t.Recv(ctx, from, h, in)
	}
	s := sends.Get().(*send)
	s.t, s.h, s.to, s.out = t, h, to, out
	crew := StartCrew(ctx)
	crew.Go(s)
	err := crew.Wait(t.Recv(crew.Context(), from, h, in))
	crew.Release()
	*s = send{}
	sends.Put(s)
	return err
}

// send is the sending half of an Exchange, as a crew's Job.
type send struct {
	t   transport.Transport
	h   transport.Header
	to  int
	out []byte
}

func (s *send) Run(ctx context.Context) error { return s.t.Send(ctx, s.to, s.h, s.out) }

var sends = sync.Pool{New: func() any { return new(send) }}
