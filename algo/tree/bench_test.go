package tree_test

import (
	"fmt"
	"testing"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/ring"
	"github.com/collkit/collkit/algo/tree"
	"github.com/collkit/collkit/transport"
)

// benchWorld connects n ranks in this process over the named transport,
// closed when b's benchmark ends.
func benchWorld(b *testing.B, name string, n int) []transport.Transport {
	switch name {
	case "mem":
		return algotest.MemWorld(b, n)
	case "tcp":
		return algotest.TCPWorld(b, n)
	}
	b.Fatalf("unknown transport %q", name)
	return nil
}

// BenchmarkAllReduce times float32 sum all-reduce, in place, of the tree and
// of the ring for comparison, between ranks in this process. busbw uses the
// all-reduce factor 2(n-1)/n, as nccl-tests does, whatever the algorithm.
func BenchmarkAllReduce(b *testing.B) {
	algos := []struct {
		name string
		fn   algotest.AllReduceFunc
	}{{"tree", tree.AllReduce}, {"ring", ring.AllReduce}}
	for _, tr := range []string{"mem", "tcp"} {
		for _, n := range []int{2, 4} {
			b.Run(fmt.Sprintf("transport=%s/ranks=%d", tr, n), func(b *testing.B) {
				ts := benchWorld(b, tr, n)
				for _, size := range []int{8, 4 << 10, 1 << 20, 16 << 20} {
					for _, algo := range algos {
						b.Run(fmt.Sprintf("bytes=%d/algo=%s", size, algo.name), func(b *testing.B) {
							algotest.BenchAllReduce(b, ts, algo.fn, size)
						})
					}
				}
			})
		}
	}
}

// BenchmarkAllReduceSegmentBytes is how DefaultSegmentBytes was chosen.
func BenchmarkAllReduceSegmentBytes(b *testing.B) {
	for _, tr := range []string{"mem", "tcp"} {
		b.Run(fmt.Sprintf("transport=%s/ranks=4", tr), func(b *testing.B) {
			ts := benchWorld(b, tr, 4)
			for _, size := range []int{1 << 20, 16 << 20} {
				for _, seg := range []int{32 << 10, 64 << 10, 128 << 10, 256 << 10, 1 << 20} {
					b.Run(fmt.Sprintf("bytes=%d/seg=%d", size, seg), func(b *testing.B) {
						algotest.BenchAllReduce(b, ts, tree.Config{SegmentBytes: seg}.AllReduce, size)
					})
				}
			}
		})
	}
}
