package collkit

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/transport"
)

func TestTransportRegistry(t *testing.T) {
	if !slices.Contains(Transports(), "tcp") {
		t.Fatalf("Transports() = %v, want tcp among them", Transports())
	}
	if err := TransportAvailable("tcp"); err != nil {
		t.Fatalf("tcp: %v", err)
	}
	if err := TransportAvailable("carrier-pigeon"); !errors.Is(err, ErrBadArgument) {
		t.Fatalf("unknown name: %v, want ErrBadArgument", err)
	}

	// A transport whose device is missing is known but unavailable, and
	// Connect refuses it with the reason before touching the network.
	connected := false
	registerTransportForTest(t, "fake-rdma", TransportDriver{
		Available: func() error { return errors.New("not built with -tags rdma") },
		Connect: func(context.Context, bootstrap.Env, bootstrap.Store, Options) (transport.Transport, error) {
			connected = true
			return nil, errors.New("must not be called")
		}})
	if !slices.Contains(Transports(), "fake-rdma") {
		t.Fatal("a registered transport is not listed")
	}
	err := TransportAvailable("fake-rdma")
	if !errors.Is(err, ErrTransportUnavailable) || !strings.Contains(err.Error(), "not built with -tags rdma") {
		t.Fatalf("unavailable: %v, want ErrTransportUnavailable with the reason", err)
	}
	_, err = ConnectStore(context.Background(), bootstrap.Env{Rank: 0, Size: 1}, bootstrap.NewMemStore(), Options{Transport: "fake-rdma"})
	if !errors.Is(err, ErrTransportUnavailable) || connected {
		t.Fatalf("ConnectStore: %v (constructor called: %v), want ErrTransportUnavailable", err, connected)
	}
}
