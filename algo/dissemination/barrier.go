package dissemination

import (
	"context"
	"fmt"

	"github.com/collkit/collkit/transport"
)

// Barrier returns once every rank of t has called it. Each round's empty
// message is sent on a goroutine of its own unless the transport buffers
// sends (transport.Buffered), so that a transport that hands a message over
// only to a waiting receiver cannot deadlock the ring of sends.
func Barrier(ctx context.Context, t transport.Transport, h transport.Header) error {
	n, r := t.Size(), t.Rank()
	b, ok := t.(transport.Buffered)
	buffered := ok && b.SendBuffer() > 0
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for round, k := 0, 1; k < n; round, k = round+1, k*2 {
		h.Step = uint32(round)
		to, from := (r+k)%n, (r-k+n)%n
		var sendErr chan error
		if buffered {
			if err := t.Send(ctx, to, h, nil); err != nil {
				return fmt.Errorf("dissemination barrier round %d: %w", round, err)
			}
		} else {
			sendErr = make(chan error, 1)
			go func() { sendErr <- t.Send(ctx, to, h, nil) }()
		}
		err := t.Recv(ctx, from, h, nil)
		if err != nil {
			cancel() // unblock the sender
		}
		if sendErr != nil {
			if serr := <-sendErr; serr != nil && err == nil {
				err = serr
			}
		}
		if err != nil {
			return fmt.Errorf("dissemination barrier round %d: %w", round, err)
		}
	}
	return nil
}
