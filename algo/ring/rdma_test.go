//go:build rdma

package ring_test

import (
	"testing"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/ring"
	"github.com/collkit/collkit/reduce"
)

// The correctness tables over the UCX transport (UCX_TLS picks tcp or sm).

func TestAllReduceRDMA(t *testing.T) {
	algotest.AllReduceWith(t, ring.AllReduce, algotest.RDMAWorld, algotest.RDMAOptions)
}

func TestAllGatherRDMA(t *testing.T) {
	testAllGather(t, ring.Config{SegmentBytes: 1 << 10}, algotest.RDMAWorld, []int{2, 3, 5}, true)
}

func TestBroadcastRDMA(t *testing.T) {
	testBroadcast(t, ring.Config{SegmentBytes: 64 << 10}, algotest.RDMAWorld, []int{2, 3, 4}, []int{0, 13, 1 << 20})
}

func TestReduceScatterRDMA(t *testing.T) {
	testReduceScatter(t, ring.Config{SegmentBytes: 1 << 10}, algotest.RDMAWorld, rsOptions{
		sizes:  []int{2, 3, 5},
		dtypes: []reduce.DType{reduce.Float32, reduce.Int64},
		ops:    []reduce.Op{reduce.Sum, reduce.Avg},
		big:    true,
	})
}
