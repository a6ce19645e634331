package collkit

import (
	"context"
	"errors"
	"testing"

	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/mem"
)

// nativeOne is a one-rank transport with native collectives that records
// what it was asked: it checks that Comm hands all-reduce over.
type nativeOne struct {
	transport.Transport
	calls int
	h     transport.Header
	algo  string
}

func (n *nativeOne) AllReduce(_ context.Context, h transport.Header, send, recv []byte) error {
	n.calls++
	n.h = h
	copy(recv, send)
	return nil
}
func (n *nativeOne) Broadcast(context.Context, transport.Header, []byte, []byte) error { return nil }
func (n *nativeOne) Reduce(context.Context, transport.Header, []byte, []byte) error    { return nil }
func (n *nativeOne) AllGather(context.Context, transport.Header, []byte, []byte) error { return nil }
func (n *nativeOne) ReduceScatter(context.Context, transport.Header, []byte, []byte) error {
	return nil
}
func (n *nativeOne) Algorithm() string { return n.algo }

func TestCommUsesNativeCollectives(t *testing.T) {
	tr := &nativeOne{Transport: mem.NewNetwork(1, mem.Config{}).Transport(0), algo: "tree"}
	c, err := New(tr, Options{Algorithm: "tree"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	checkHandedOver(t, c, tr)
	if err := c.SetAlgorithm("ring"); !errors.Is(err, ErrBadArgument) {
		t.Errorf("switching a tree-created NCCL communicator to ring: %v, want ErrBadArgument", err)
	}
	if err := c.SetAlgorithm("halvingdoubling"); !errors.Is(err, ErrBadArgument) {
		t.Errorf("halvingdoubling over native collectives: %v, want ErrBadArgument", err)
	}
}

// TestCommNativeCollectivesDefault: with no algorithm named, a transport
// with native collectives gets ring, which it runs itself, not "native",
// which such a transport does not take by name.
func TestCommNativeCollectivesDefault(t *testing.T) {
	tr := &nativeOne{Transport: mem.NewNetwork(1, mem.Config{}).Transport(0)}
	c, err := New(tr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.Algorithm(); got != "ring" {
		t.Errorf("default algorithm %q, want ring", got)
	}
	checkHandedOver(t, c, tr)
}

// checkHandedOver all-reduces through c and checks that tr ran it, with
// the header of the call, and that its result came back.
func checkHandedOver(t *testing.T, c *Comm, tr *nativeOne) {
	t.Helper()
	send := []float32{1, -2.5, 3}
	recv := make([]float32, len(send))
	if err := AllReduce(context.Background(), c, send, recv, Max); err != nil {
		t.Fatal(err)
	}
	if tr.calls != 1 || tr.h.DType != Float32 || tr.h.Op != Max || tr.h.Count != 3 || tr.h.Coll != transport.CollAllReduce {
		t.Errorf("native all-reduce called %d times with %v", tr.calls, tr.h)
	}
	for i := range send {
		if recv[i] != send[i] {
			t.Errorf("recv[%d] = %v, want %v", i, recv[i], send[i])
		}
	}
}
