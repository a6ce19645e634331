package hierarchical_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/hierarchical"
	"github.com/collkit/collkit/algo/ring"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
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
		fn   func(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error
	}{
		{"hierarchical-2x2", hierarchical.Config{Nodes: []int{0, 0, 1, 1}}.AllReduce},
		{"ring", ring.AllReduce},
	}
	for _, size := range []int{64 << 10, 1 << 20, 16 << 20} {
		for _, algo := range algos {
			b.Run(fmt.Sprintf("transport=tcp/algo=%s/ranks=%d/bytes=%d", algo.name, n, size), func(b *testing.B) {
				ts := algotest.TCPWorld(b, n)
				bufs := make([][]byte, n)
				for r := range bufs {
					bufs[r] = make([]byte, size)
				}
				h := transport.Header{Coll: transport.CollAllReduce, Count: uint64(size / 4), Root: -1, DType: reduce.Float32, Op: reduce.Sum}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				b.SetBytes(int64(size))
				b.ResetTimer()
				errs := make([]error, n)
				var wg sync.WaitGroup
				for r, t := range ts {
					wg.Go(func() {
						h := h
						for i := range b.N {
							h.Seq = uint64(i + 1)
							if err := algo.fn(ctx, t, h, bufs[r], bufs[r]); err != nil {
								errs[r] = err
								cancel() // the others would wait for this rank
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
				b.ReportMetric(float64(size)/sec/1e9*2*(n-1)/n, "busbw-GB/s")
			})
		}
	}
}
