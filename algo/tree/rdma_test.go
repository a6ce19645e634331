//go:build rdma

package tree_test

import (
	"testing"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/tree"
)

// The correctness table over the UCX transport (UCX_TLS picks tcp or sm).
func TestAllReduceRDMA(t *testing.T) {
	algotest.AllReduceWith(t, tree.AllReduce, algotest.RDMAWorld, algotest.RDMAOptions)
}
