//go:build !rdma

package rdma

import (
	"context"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/transport"
)

var _ transport.Transport = (*Transport)(nil)

// Built reports whether this build has the UCX transport (the rdma tag).
const Built = false

// Transport is the UCX transport; this build lacks it (no rdma tag), so
// New returns ErrNotBuilt and no Transport can be made.
type Transport struct{ cfg Config }

// New returns ErrNotBuilt: rebuild with -tags rdma and libucx-dev installed.
func New(cfg Config) (*Transport, error) {
	return nil, ErrNotBuilt
}

// Connect returns ErrNotBuilt.
func (t *Transport) Connect(ctx context.Context, store bootstrap.Store) error { return ErrNotBuilt }

// Send returns ErrNotBuilt.
func (t *Transport) Send(ctx context.Context, peer int, h transport.Header, p []byte) error {
	return ErrNotBuilt
}

// Recv returns ErrNotBuilt.
func (t *Transport) Recv(ctx context.Context, peer int, h transport.Header, p []byte) error {
	return ErrNotBuilt
}

// Rank is the rank the Transport was configured with.
func (t *Transport) Rank() int { return t.cfg.Rank }

// Size is the world size the Transport was configured with.
func (t *Transport) Size() int { return t.cfg.Size }

// Close does nothing.
func (t *Transport) Close() error { return nil }
