//go:build linux

package shm_test

import (
	"testing"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport/shm"
)

// The correctness table for the native all-reduce.
func TestNativeAllReduce(t *testing.T) {
	algotest.AllReduceWith(t, algotest.Native, algotest.ShmWorld, algotest.Options{
		Sizes:  []int{1, 2, 3, 4, 5, 8},
		Counts: []int{0, 1, 7, 1000, 65537},
	})
}

// Tiny native buffers cut every buffer into many chunks, so the two halves
// alternate many times within one call and across calls.
func TestNativeAllReduceManyChunks(t *testing.T) {
	algotest.AllReduceWith(t, algotest.Native, algotest.ShmWorldWith(shm.Config{NativeBytes: 256}), algotest.Options{
		Sizes:  []int{2, 3, 5},
		Counts: []int{1, 7, 64, 4099},
		DTypes: []reduce.DType{reduce.Uint8, reduce.Float16, reduce.Float32, reduce.Float64},
	})
}
