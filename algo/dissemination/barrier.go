package dissemination

import (
	"context"
	"fmt"

	"github.com/collkit/collkit/transport"
)

// StepAgree is added to the round number in Header.Step of Agree's
// messages, so that they never pass for a barrier's or an algorithm's.
const StepAgree = 0xA9 << 24

// Barrier returns once every rank of t has called it. Each round's empty
// message is sent on a goroutine of its own unless the transport buffers
// sends (transport.Buffered), so that a transport that hands a message over
// only to a waiting receiver cannot deadlock the ring of sends.
func Barrier(ctx context.Context, t transport.Transport, h transport.Header) error {
	return rounds(ctx, t, h, 0, "dissemination barrier")
}

// Agree returns once every rank of t has called it with the same header h
// (its Step and Len aside), and fails on every rank where they differ:
// it runs the barrier's rounds, each empty message framed by h, so a rank
// receives a header unlike its own, or the abort notice of a peer that
// did, before it can have heard from every rank. Collectives that would
// otherwise finish without hearing from every rank (an empty buffer, the
// root of a broadcast) run it so that ranks that disagree on the count,
// dtype, op, root or collective fail at that call instead of returning.
func Agree(ctx context.Context, t transport.Transport, h transport.Header) error {
	return rounds(ctx, t, h, StepAgree, "header agreement")
}

// rounds runs the dissemination rounds, numbering them from step.
func rounds(ctx context.Context, t transport.Transport, h transport.Header, step uint32, what string) error {
	n, r := t.Size(), t.Rank()
	if n == 1 {
		return nil
	}
	b, ok := t.(transport.Buffered)
	buffered := ok && b.SendBuffer() > 0
	cancel := func() {}
	if !buffered {
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
	}
	for round, k := 0, 1; k < n; round, k = round+1, k*2 {
		h.Step = step + uint32(round)
		to, from := (r+k)%n, (r-k+n)%n
		var sendErr chan error
		if buffered {
			if err := t.Send(ctx, to, h, nil); err != nil {
				return fmt.Errorf("%s round %d: %w", what, round, err)
			}
		} else {
			sendErr = make(chan error, 1)
			go func() { sendErr <- t.Send(ctx, to, h, nil) }()
		}
		err := t.Recv(ctx, from, h, nil)
		if sendErr != nil {
			if err != nil {
				cancel() // unblock the sender
			}
			if serr := <-sendErr; serr != nil && err == nil {
				err = serr
			}
		}
		if err != nil {
			return fmt.Errorf("%s round %d: %w", what, round, err)
		}
	}
	return nil
}
