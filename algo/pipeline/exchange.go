package pipeline

import (
	"context"
	"math"

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
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sent := make(chan error, 1)
	go func() {
		err := t.Send(ctx, to, h, out)
		if err != nil {
			cancel() // unblock the receive
		}
		sent <- err
	}()
	err := t.Recv(ctx, from, h, in)
	if err != nil {
		cancel() // unblock the send
	}
	if serr := <-sent; serr != nil && (err == nil || Canceled(err)) {
		return serr
	}
	return err
}
