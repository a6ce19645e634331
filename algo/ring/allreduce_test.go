package ring_test

import (
	"testing"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/ring"
)

func TestAllReduceMem(t *testing.T) {
	algotest.AllReduce(t, ring.AllReduce, algotest.MemWorld)
}

// Tiny segments force many pipelined messages per chunk, with chunks of
// different segment counts, on the same table.
func TestAllReduceMemTinySegments(t *testing.T) {
	algotest.AllReduceWith(t, ring.Config{SegmentBytes: 24}.AllReduce, algotest.MemWorld, algotest.Options{
		Counts: []int{0, 1, 5, 17, 100, 1001},
	})
}

// The pipelined path (a sender goroutine) on small data, which the
// one-goroutine path would otherwise take.
func TestAllReduceMemPipelined(t *testing.T) {
	algotest.AllReduceWith(t, ring.Config{SegmentBytes: 40, EagerBytes: -1}.AllReduce, algotest.MemWorld, algotest.Options{
		Counts: []int{0, 1, 5, 17, 100, 1001},
	})
}

// The same table over real loopback sockets.
func TestAllReduceTCP(t *testing.T) {
	algotest.AllReduceWith(t, ring.AllReduce, algotest.TCPWorld, algotest.Options{
		Counts: []int{0, 1, 7, 1000, 65537},
	})
}
