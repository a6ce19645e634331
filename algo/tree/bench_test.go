package tree_test

import (
	"fmt"
	"testing"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/ring"
	"github.com/collkit/collkit/algo/tree"
)

// BenchmarkAllReduce times float32 sum all-reduce, in place, of the tree and
// of the ring for comparison, between ranks in this process. busbw uses the
// all-reduce factor 2(n-1)/n, as nccl-tests does, whatever the algorithm.
func BenchmarkAllReduce(b *testing.B) {
	algos := []struct {
		name string
		fn   algotest.AllReduceFunc
	}{{"tree", tree.AllReduce}, {"ring", ring.AllReduce}}
	for _, w := range algotest.BenchWorlds() {
		for _, n := range []int{2, 4} {
			b.Run(fmt.Sprintf("transport=%s/ranks=%d", w.Name, n), func(b *testing.B) {
				ts := w.World(b, n)
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
	for _, w := range algotest.BenchWorlds() {
		b.Run(fmt.Sprintf("transport=%s/ranks=4", w.Name), func(b *testing.B) {
			ts := w.World(b, 4)
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
