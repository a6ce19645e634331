package tracing

import (
	"context"
	"time"

	"github.com/collkit/collkit/transport"
)

// Transport records a span for every Send and Recv of the transport it
// wraps. A receive's span includes the wait for the message to arrive.
type Transport struct {
	transport.Transport
	rec *Recorder
}

var _ transport.Transport = (*Transport)(nil)

// Wrap returns t recording into rec.
func Wrap(t transport.Transport, rec *Recorder) *Transport { return &Transport{Transport: t, rec: rec} }

// Send sends and records a "send" span.
func (t *Transport) Send(ctx context.Context, peer int, h transport.Header, p []byte) error {
	start := time.Now()
	err := t.Transport.Send(ctx, peer, h, p)
	t.rec.Add(TrackSend, "send", start, time.Since(start), "peer", peer, "bytes", len(p), "seq", h.Seq, "step", h.Step, "failed", err != nil)
	return err
}

// Recv receives and records a "recv" span.
func (t *Transport) Recv(ctx context.Context, peer int, h transport.Header, p []byte) error {
	start := time.Now()
	err := t.Transport.Recv(ctx, peer, h, p)
	t.rec.Add(TrackRecv, "recv", start, time.Since(start), "peer", peer, "bytes", len(p), "seq", h.Seq, "step", h.Step, "failed", err != nil)
	return err
}

// Span records local work (a reduction) of a collective's message step on
// the compute track.
func (t *Transport) Span(name string, step uint32) (end func()) {
	start := time.Now()
	return func() { t.rec.Add(TrackCompute, name, start, time.Since(start), "step", step) }
}

// Unwrap returns the traced transport, where its other capabilities are.
func (t *Transport) Unwrap() transport.Transport { return t.Transport }

// SendBuffer passes the wrapped transport's buffering on (0 when it has
// none), so algorithms keep their paths.
func (t *Transport) SendBuffer() int {
	if b, ok := t.Transport.(transport.Buffered); ok {
		return b.SendBuffer()
	}
	return 0
}
