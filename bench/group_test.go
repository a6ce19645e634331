package bench_test

import (
	"context"
	"sync"
	"testing"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/algo/algotest"
)

// BenchmarkGroupedAllReduce times 100 all-reduces of 4 KiB float32 on 4
// ranks over TCP, issued one by one and as one group (fused into a single
// 400 KiB all-reduce). One op is the whole batch of 100; compare the two
// ns/op figures (issue 4's target: grouped at least 5x faster):
//
//	go test -run '^$' -bench GroupedAllReduce -count 5 ./bench/ | tee group.txt
func BenchmarkGroupedAllReduce(b *testing.B) {
	const n, tensors, floats = 4, 100, 1024
	for _, mode := range []string{"onebyone", "grouped"} {
		b.Run("transport=tcp/ranks=4/mode="+mode, func(b *testing.B) {
			comms := make([]*collkit.Comm, n)
			for r, t := range algotest.TCPWorld(b, n) {
				c, err := collkit.New(t, collkit.Options{})
				if err != nil {
					b.Fatal(err)
				}
				comms[r] = c
			}
			bufs := make([][][]float32, n)
			for r := range bufs {
				bufs[r] = make([][]float32, tensors)
				for i := range bufs[r] {
					bufs[r][i] = make([]float32, floats)
				}
			}
			b.SetBytes(tensors * floats * 4)
			b.ResetTimer()
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r, c := range comms {
				wg.Go(func() {
					ctx := context.Background()
					for range b.N {
						if mode == "grouped" {
							g := c.Group()
							for _, buf := range bufs[r] {
								collkit.GroupAllReduce(g, buf, buf, collkit.Sum)
							}
							if errs[r] = g.Run(ctx); errs[r] != nil {
								return
							}
							continue
						}
						for _, buf := range bufs[r] {
							if errs[r] = collkit.AllReduce(ctx, c, buf, buf, collkit.Sum); errs[r] != nil {
								return
							}
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
		})
	}
}
