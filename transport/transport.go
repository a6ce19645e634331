package transport

import "context"

// Transport moves framed messages between the ranks of one job.
type Transport interface {
	// Send delivers p to rank peer, framed by h (h.Len is set from len(p)).
	// It returns once p may be reused.
	Send(ctx context.Context, peer int, h Header, p []byte) error
	// Recv receives the next message from rank peer into p. The message's
	// header must equal h with h.Len = len(p); otherwise Recv returns a
	// *MismatchError and p's contents are undefined.
	Recv(ctx context.Context, peer int, h Header, p []byte) error
	// Rank is this process's rank, in [0, Size()).
	Rank() int
	// Size is the number of ranks in the job.
	Size() int
	// Close releases every connection. Blocked Send and Recv calls return
	// errors wrapping ErrClosed. Close is safe to call more than once.
	Close() error
}

// Spanner is implemented by transports that record where a collective's
// time goes (tracing.Transport). Algorithms report the work they do between
// messages, such as reductions, through it, so traces show it beside the
// sends and receives.
type Spanner interface {
	// Span starts a span named name for message step; calling the returned
	// function ends it.
	Span(name string, step uint32) (end func())
}

// Buffered is implemented by transports whose Send completes without a
// matching Recv while at most SendBuffer bytes of payload sent to that peer
// are still unreceived. Algorithms use it to send and then receive on one
// goroutine when their messages are small, saving a goroutine hand-off per
// step on the latency-critical path.
type Buffered interface {
	SendBuffer() int
}
