package algotest

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
)

// benchSeq numbers the operations of every BenchAllReduce, so that they stay
// distinct across sub-benchmarks that share one world.
var benchSeq atomic.Uint64

// BenchAllReduce times fn as b's operation: an in-place float32 sum
// all-reduce of size bytes on every rank of ts at once, b.N times. It
// reports nccl-tests' bus bandwidth, bytes/time x 2(n-1)/n, in GB/s as
// busbw-GB/s. A rank that fails cancels the others and fails b. Three
// untimed calls come first, so that the pools are warm.
func BenchAllReduce(b *testing.B, ts []transport.Transport, fn AllReduceFunc, size int) {
	n := len(ts)
	bufs := make([][]byte, n)
	for r := range bufs {
		bufs[r] = reduce.Bytes(make([]float32, size/4))
	}
	// Untimed calls first, a collection and one more: the first calls fill
	// the pools and caches that the later ones reuse, and a collection in
	// the timed loop would empty the pools, so -benchmem counts the steady
	// state.
	const warmup = 3
	total := uint64(b.N + warmup)
	first := benchSeq.Add(total) - total + 1
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make([]error, n)
	calls := func(from, to int) {
		var wg sync.WaitGroup
		for r, t := range ts {
			wg.Go(func() {
				h := transport.Header{Count: uint64(size / 4), Root: -1, Coll: transport.CollAllReduce,
					DType: reduce.Float32, Op: reduce.Sum}
				for i := from; i < to && errs[r] == nil; i++ {
					h.Seq = first + uint64(i)
					if err := fn(ctx, t, h, bufs[r], bufs[r]); err != nil {
						errs[r] = err
						cancel() // the others would wait for this rank
						return
					}
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	calls(0, warmup-1)
	runtime.GC()
	calls(warmup-1, warmup)
	b.SetBytes(int64(size))
	b.ResetTimer()
	calls(warmup, warmup+b.N)
	b.StopTimer()
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(size)/sec/1e9*2*float64(n-1)/float64(n), "busbw-GB/s")
}
