package tree_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/ring"
	"github.com/collkit/collkit/algo/tree"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/mem"
	"github.com/collkit/collkit/transport/tcp"
)

// benchWorld connects n ranks in this process over the named transport,
// closed when b's benchmark ends.
func benchWorld(b *testing.B, name string, n int) []transport.Transport {
	switch name {
	case "mem":
		net := mem.NewNetwork(n, mem.Config{})
		b.Cleanup(func() { net.Close() })
		return net.Transports()
	case "tcp":
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ts, err := tcp.Local(ctx, n, tcp.Config{})
		if err != nil {
			b.Fatal(err)
		}
		out := make([]transport.Transport, n)
		for i, t := range ts {
			b.Cleanup(func() { t.Close() })
			out[i] = t
		}
		return out
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
							benchAllReduce(b, ts, algo.fn, size)
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
						benchAllReduce(b, ts, tree.Config{SegmentBytes: seg}.AllReduce, size)
					})
				}
			}
		})
	}
}

var benchSeq uint64 // operation numbers stay distinct across sub-benchmarks of one world

func benchAllReduce(b *testing.B, ts []transport.Transport, fn algotest.AllReduceFunc, size int) {
	n := len(ts)
	bufs := make([][]float32, n)
	for r := range bufs {
		bufs[r] = make([]float32, size/4)
	}
	first := benchSeq
	benchSeq += uint64(b.N)
	b.SetBytes(int64(size))
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r, t := range ts {
		wg.Go(func() {
			buf := reduce.Bytes(bufs[r])
			h := transport.Header{Count: uint64(size / 4), Root: -1, Coll: transport.CollAllReduce,
				DType: reduce.Float32, Op: reduce.Sum}
			for i := range b.N {
				h.Seq = first + uint64(i)
				if err := fn(context.Background(), t, h, buf, buf); err != nil {
					errs[r] = err
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(size)/sec/1e9*2*float64(n-1)/float64(n), "busbw-GB/s")
}
