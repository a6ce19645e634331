package tree_test

import (
	"testing"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/tree"
)

// The table over shared memory, where Send blocks once a ring is full.
func TestAllReduceShm(t *testing.T) {
	algotest.AllReduceWith(t, tree.AllReduce, algotest.ShmWorld, algotest.Options{
		Sizes:  []int{2, 3, 4, 5, 8},
		Counts: []int{0, 1, 7, 1000, 65537},
	})
}
