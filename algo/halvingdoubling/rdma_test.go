//go:build rdma

package halvingdoubling_test

import (
	"testing"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/halvingdoubling"
)

// The correctness table over the UCX transport (UCX_TLS picks tcp or sm).
func TestAllReduceRDMA(t *testing.T) {
	algotest.AllReduceWith(t, halvingdoubling.AllReduce, algotest.RDMAWorld, algotest.RDMAOptions)
}
