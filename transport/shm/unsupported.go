//go:build !linux

package shm

import (
	"context"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/transport"
)

// Transport is not available on this system: New returns ErrUnsupported.
type Transport struct{}

var _ transport.Transport = (*Transport)(nil)

// New returns ErrUnsupported.
func New(Config) (*Transport, error) { return nil, ErrUnsupported }

// Local returns ErrUnsupported.
func Local(context.Context, int, Config) ([]*Transport, error) { return nil, ErrUnsupported }

// Reclaim returns ErrUnsupported.
func Reclaim(string) ([]string, error) { return nil, ErrUnsupported }

// JobBytes is the shared memory a job takes; not on this platform.
func JobBytes(Config) (int, error) { return 0, ErrUnsupported }

// Room is the size of the segment directory; not on this platform.
func Room(string) (int64, error) { return 0, ErrUnsupported }

func (*Transport) Connect(context.Context, bootstrap.Store) error { return ErrUnsupported }
func (*Transport) Send(context.Context, int, transport.Header, []byte) error {
	return ErrUnsupported
}
func (*Transport) Recv(context.Context, int, transport.Header, []byte) error {
	return ErrUnsupported
}
func (*Transport) Rank() int    { return 0 }
func (*Transport) Size() int    { return 0 }
func (*Transport) Close() error { return nil }
