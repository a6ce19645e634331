//go:build rdma

package hierarchical_test

import (
	"testing"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/hierarchical"
	"github.com/collkit/collkit/reduce"
)

// The correctness table over the UCX transport (UCX_TLS picks tcp or sm).
func TestAllReduceRDMA(t *testing.T) {
	for name, nodes := range map[string]func(int) []int{"pairs": pairs, "thirds": thirds} {
		t.Run(name, func(t *testing.T) {
			algotest.AllReduceWith(t, withNodes(hierarchical.Config{}, nodes), algotest.RDMAWorld, algotest.Options{
				Sizes:  []int{4, 5},
				Counts: []int{0, 1, 7, 1000, 65537},
				DTypes: []reduce.DType{reduce.Float32, reduce.Int32, reduce.BFloat16},
				Ops:    []reduce.Op{reduce.Sum, reduce.Avg, reduce.Max},
			})
		})
	}
}
