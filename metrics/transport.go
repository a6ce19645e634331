package metrics

import (
	"context"
	"sync/atomic"

	"github.com/collkit/collkit/transport"
)

// Counting is a transport that counts the payload bytes of every message
// that goes through it, in both directions.
type Counting struct {
	transport.Transport
	sent, received atomic.Int64
}

var _ transport.Transport = (*Counting)(nil)

// Count wraps t.
func Count(t transport.Transport) *Counting { return &Counting{Transport: t} }

// Send counts p once it is sent.
func (c *Counting) Send(ctx context.Context, peer int, h transport.Header, p []byte) error {
	err := c.Transport.Send(ctx, peer, h, p)
	if err == nil {
		c.sent.Add(int64(len(p)))
	}
	return err
}

// Recv counts p once it is received.
func (c *Counting) Recv(ctx context.Context, peer int, h transport.Header, p []byte) error {
	err := c.Transport.Recv(ctx, peer, h, p)
	if err == nil {
		c.received.Add(int64(len(p)))
	}
	return err
}

// Unwrap returns the transport c counts, where its other capabilities are.
func (c *Counting) Unwrap() transport.Transport { return c.Transport }

// Totals returns the bytes counted so far.
func (c *Counting) Totals() Bytes {
	return Bytes{Sent: c.sent.Load(), Received: c.received.Load()}
}

// SendBuffer passes the wrapped transport's buffering on, so algorithms
// keep their fast paths.
func (c *Counting) SendBuffer() int {
	if b, ok := c.Transport.(transport.Buffered); ok {
		return b.SendBuffer()
	}
	return 0
}
