package ring_test

import (
	"testing"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/ring"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/mem"
)

func memWorld(t testing.TB, n int) []transport.Transport {
	net := mem.NewNetwork(n, mem.Config{})
	t.Cleanup(func() { net.Close() })
	return net.Transports()
}

func TestAllReduceMem(t *testing.T) {
	algotest.AllReduce(t, ring.AllReduce, memWorld)
}

// Tiny segments force many pipelined messages per chunk, with chunks of
// different segment counts, on the same table.
func TestAllReduceMemTinySegments(t *testing.T) {
	algotest.AllReduceWith(t, ring.Config{SegmentBytes: 24}.AllReduce, memWorld, algotest.Options{
		Counts: []int{0, 1, 5, 17, 100, 1001},
	})
}
