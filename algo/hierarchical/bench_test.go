package hierarchical_test

import (
	"fmt"
	"testing"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/hierarchical"
	"github.com/collkit/collkit/algo/ring"
)

// BenchmarkAllReduce times float32 sum all-reduce of 4 ranks over loopback
// TCP, as 2 nodes of 2 ranks (hierarchical) and as a flat ring, in the same
// run. busbw uses the all-reduce factor 2(n-1)/n. All ranks share one host,
// so the levels have no faster links to exploit; the numbers show the
// algorithm's own cost.
func BenchmarkAllReduce(b *testing.B) {
	const n = 4
	algos := []struct {
		name string
		fn   algotest.AllReduceFunc
	}{
		{"hierarchical-2x2", hierarchical.Config{Nodes: []int{0, 0, 1, 1}}.AllReduce},
		{"ring", ring.AllReduce},
	}
	for _, size := range []int{64 << 10, 1 << 20, 16 << 20} {
		for _, algo := range algos {
			b.Run(fmt.Sprintf("transport=tcp/algo=%s/ranks=%d/bytes=%d", algo.name, n, size), func(b *testing.B) {
				algotest.BenchAllReduce(b, algotest.TCPWorld(b, n), algo.fn, size)
			})
		}
	}
}
