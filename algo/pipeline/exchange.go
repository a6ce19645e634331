package pipeline

import (
	"context"
	"math"

	"github.com/collkit/collkit/transport"
)

// Exchange sends out to peer and receives the peer's message of the same
// step into in, both framed by h; either may be empty (a message of
// header only). When t buffers out (Eager) it sends and then receives on
// this goroutine, which cannot deadlock: the send completes whatever the
// peer does. Otherwise the send runs on a goroutine of its own while this
// one receives, so that two peers that both send large messages (ranks that
// disagree on the root, say) meet each other's header instead of waiting
// on each other's send.
func Exchange(ctx context.Context, t transport.Transport, peer int, h transport.Header, out, in []byte) error {
	if Eager(t, len(out), math.MaxInt) {
		if err := t.Send(ctx, peer, h, out); err != nil {
			return err
		}
		return t.Recv(ctx, peer, h, in)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sent := make(chan error, 1)
	go func() {
		err := t.Send(ctx, peer, h, out)
		if err != nil {
			cancel() // unblock the receive
		}
		sent <- err
	}()
	err := t.Recv(ctx, peer, h, in)
	if err != nil {
		cancel() // unblock the send
	}
	if serr := <-sent; serr != nil && (err == nil || Canceled(err)) {
		return serr
	}
	return err
}
