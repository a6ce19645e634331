//go:build rdma

package adaptive_test

import (
	"testing"

	"github.com/collkit/collkit/algo/adaptive"
	"github.com/collkit/collkit/algo/algotest"
)

// The correctness table over the UCX transport (UCX_TLS picks tcp or sm).
func TestAllReduceRDMA(t *testing.T) {
	algotest.AllReduceWith(t, adaptive.Config{}.AllReduce, algotest.RDMAWorld, algotest.RDMAOptions)
}
