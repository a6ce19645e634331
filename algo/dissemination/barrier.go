package dissemination

import (
	"context"

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
	return headers(ctx, t, h, 0, "barrier")
}

// Agree returns once every rank of t has called it with the same header h
// (its Step and Len aside), and fails on every rank where they differ: it
// runs the barrier's rounds, each empty message framed by h, so a rank
// receives a header unlike its own, or the abort notice of a peer that
// did, before it can have heard from every rank. Collectives that would
// otherwise finish without hearing from every rank (an empty buffer, the
// root of a pipelined broadcast) run it so that ranks that disagree on the
// count, dtype, op, root or collective fail at that call instead of
// returning.
func Agree(ctx context.Context, t transport.Transport, h transport.Header) error {
	return headers(ctx, t, h, StepAgree, "header agreement")
}

// headers runs the rounds with messages of header only, numbering them
// from step.
func headers(ctx context.Context, t transport.Transport, h transport.Header, step uint32, what string) error {
	p := newPattern(t, what)
	for k, s := 0, 1; s < p.n; k, s = k+1, 2*s {
		h.Step = step + uint32(k)
		if err := p.exchange(ctx, h, k, s, nil, nil); err != nil {
			return err
		}
	}
	return nil
}
