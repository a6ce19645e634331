package collkit

import (
	"context"
	"errors"
	"testing"

	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/mem"
)

// nativeOne is a one-rank transport with native collectives that records
// what it was asked: it checks that Comm hands all-reduce over.
type nativeOne struct {
	transport.Transport
	calls int
	dt    reduce.DType
	op    reduce.Op
	algo  string
}

func (n *nativeOne) AllReduce(_ context.Context, dt reduce.DType, op reduce.Op, send, recv []byte) error {
	n.calls++
	n.dt, n.op = dt, op
	copy(recv, send)
	return nil
}
func (n *nativeOne) Broadcast(context.Context, reduce.DType, int, []byte, []byte) error { return nil }
func (n *nativeOne) Reduce(context.Context, reduce.DType, reduce.Op, int, []byte, []byte) error {
	return nil
}
func (n *nativeOne) AllGather(context.Context, reduce.DType, []byte, []byte) error { return nil }
func (n *nativeOne) ReduceScatter(context.Context, reduce.DType, reduce.Op, []byte, []byte) error {
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
	send := []float32{1, 2, 3}
	recv := make([]float32, 3)
	if err := AllReduce(context.Background(), c, send, recv, Max); err != nil {
		t.Fatal(err)
	}
	if tr.calls != 1 || tr.dt != Float32 || tr.op != Max || recv[2] != 3 {
		t.Errorf("native all-reduce called %d times with %v %v; recv %v", tr.calls, tr.dt, tr.op, recv)
	}
	if err := c.SetAlgorithm("ring"); !errors.Is(err, ErrBadArgument) {
		t.Errorf("switching a tree-created NCCL communicator to ring: %v, want ErrBadArgument", err)
	}
	if err := c.SetAlgorithm("halvingdoubling"); !errors.Is(err, ErrBadArgument) {
		t.Errorf("halvingdoubling over native collectives: %v, want ErrBadArgument", err)
	}
}
