package bench_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/bench"
	"github.com/collkit/collkit/transport"
)

// world connects n ranks in this process over the named transport.
func world(b *testing.B, name string, n int) []transport.Transport {
	switch name {
	case "mem":
		return algotest.MemWorld(b, n)
	case "tcp":
		return algotest.TCPWorld(b, n)
	}
	b.Fatalf("unknown transport %q", name)
	return nil
}

// BenchmarkAllReduce times float32 sum all-reduce between ranks in one
// process, for each algorithm, transport, world size and message size. The
// names are benchstat-friendly; busbw is reported as a metric.
func BenchmarkAllReduce(b *testing.B) {
	for _, tr := range []string{"mem", "tcp"} {
		for _, algo := range collkit.Algorithms() {
			for _, n := range []int{2, 4} {
				for _, size := range []int{8, 4 << 10, 1 << 20, 16 << 20} {
					name := fmt.Sprintf("transport=%s/algo=%s/ranks=%d/bytes=%d", tr, algo, n, size)
					b.Run(name, func(b *testing.B) { benchAllReduce(b, tr, algo, n, size) })
				}
			}
		}
	}
}

func benchAllReduce(b *testing.B, tr, algo string, n, size int) {
	comms := make([]*collkit.Comm, n)
	for r, t := range world(b, tr, n) {
		c, err := collkit.New(t, collkit.Options{Algorithm: algo})
		if err != nil {
			b.Fatal(err)
		}
		comms[r] = c
	}
	bufs := make([][]float32, n)
	for r := range bufs {
		bufs[r] = make([]float32, size/4)
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r, c := range comms {
		wg.Go(func() {
			for range b.N {
				if err := collkit.AllReduce(context.Background(), c, bufs[r], bufs[r], collkit.Sum); err != nil {
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
	b.ReportMetric(float64(size)/sec/1e9*bench.AllReduceBusFactor(n), "busbw-GB/s")
}
