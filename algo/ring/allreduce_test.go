package ring_test

import (
	"context"
	"testing"
	"time"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/ring"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/mem"
	"github.com/collkit/collkit/transport/tcp"
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

func tcpWorld(t testing.TB, n int) []transport.Transport {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ts, err := tcp.Local(ctx, n, tcp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]transport.Transport, n)
	for i, tr := range ts {
		t.Cleanup(func() { tr.Close() })
		out[i] = tr
	}
	return out
}

// The same table over real loopback sockets.
func TestAllReduceTCP(t *testing.T) {
	algotest.AllReduceWith(t, ring.AllReduce, tcpWorld, algotest.Options{
		Counts: []int{0, 1, 7, 1000, 65537},
	})
}
