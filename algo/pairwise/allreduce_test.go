package pairwise_test

import (
	"context"
	"testing"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/pairwise"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
)

// The correctness table: every world size 1-8, every dtype and op, counts
// that leave blocks empty or uneven, in place and out of place; every rank
// sends every block before it receives (the mem transport buffers all).
func TestAllReduceMem(t *testing.T) {
	algotest.AllReduce(t, pairwise.AllReduce, algotest.MemWorld)
}

// The sender-goroutine path, where a round's sends and receives overlap.
func TestAllReduceMemUnbuffered(t *testing.T) {
	algotest.AllReduceWith(t, func(ctx context.Context, tr transport.Transport, h transport.Header, send, recv []byte) error {
		return pairwise.AllReduce(ctx, unbuffered{tr}, h, send, recv)
	}, algotest.MemWorld, algotest.Options{
		Sizes:  []int{2, 3, 5, 8},
		Counts: []int{0, 1, 3, 1000, 65537},
		DTypes: []reduce.DType{reduce.Float32, reduce.Int64, reduce.BFloat16},
	})
}

// Over real loopback sockets, where a send may block.
func TestAllReduceTCP(t *testing.T) {
	algotest.AllReduceWith(t, pairwise.AllReduce, algotest.TCPWorld, algotest.Options{
		Sizes:  []int{2, 3, 4, 5},
		Counts: []int{0, 1, 7, 1000, 65537},
		DTypes: []reduce.DType{reduce.Float32, reduce.Float64, reduce.Int32},
	})
}

// Over shared memory, where a send blocks once the peer's ring is full.
func TestAllReduceShm(t *testing.T) {
	algotest.AllReduceWith(t, pairwise.AllReduce, algotest.ShmWorld, algotest.Options{
		Sizes:  []int{2, 3, 5},
		Counts: []int{0, 7, 1000, 300001},
		DTypes: []reduce.DType{reduce.Float32, reduce.Float64},
		Ops:    []reduce.Op{reduce.Sum, reduce.Avg},
	})
}
