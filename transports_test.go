package collkit

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/tcp"
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

// Options.TCPCongestion reaches the tcp transport: a name the kernel does
// not have fails ConnectStore on every rank, saying which names it allows,
// and "reno" connects.
func TestTCPCongestionOption(t *testing.T) {
	const n = 2
	connectAll := func(cc string) ([]*Comm, []error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		store := bootstrap.NewMemStore()
		cs, errs := make([]*Comm, n), make([]error, n)
		var wg sync.WaitGroup
		for r := range n {
			wg.Go(func() {
				cs[r], errs[r] = ConnectStore(ctx, bootstrap.Env{Rank: r, Size: n, JobID: "cc"}, store, Options{TCPCongestion: cc})
			})
		}
		wg.Wait()
		for _, c := range cs {
			if c != nil {
				t.Cleanup(func() { c.Close() })
			}
		}
		return cs, errs
	}
	_, errs := connectAll("no-such-control")
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), `"no-such-control"`) || !strings.Contains(err.Error(), "may set") {
			t.Errorf("rank %d: %v, want an error naming the control and what may be set", r, err)
		}
	}
	cs, errs := connectAll("reno")
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for r, c := range cs {
		tr, ok := c.base.(*tcp.Transport)
		if !ok || tr.Congestion() != "reno" {
			t.Errorf("rank %d: transport %T does not run reno", r, c.base)
		}
	}
}
