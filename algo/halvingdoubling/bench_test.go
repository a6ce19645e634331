package halvingdoubling_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/halvingdoubling"
	"github.com/collkit/collkit/algo/ring"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
)

// BenchmarkAllReduce times in-place float32 sum all-reduce between ranks of
// one process, against the ring in the same run, for each transport, world
// size and message size. ns/op is the latency of one all-reduce; busbw is
// nccl-tests' bus bandwidth, bytes/time x 2(n-1)/n, in GB/s.
//
//	go test -run NONE -bench AllReduce -benchtime 200x ./algo/halvingdoubling/
func BenchmarkAllReduce(b *testing.B) {
	algos := []struct {
		name string
		fn   algotest.AllReduceFunc
	}{
		{"halvingdoubling", halvingdoubling.AllReduce},
		{"ring", ring.AllReduce},
	}
	worlds := []struct {
		name string
		fn   algotest.World
	}{
		{"mem", algotest.MemWorld},
		{"tcp", algotest.TCPWorld},
	}
	for _, w := range worlds {
		for _, n := range []int{2, 3, 4} {
			for _, size := range []int{8, 4 << 10, 64 << 10, 1 << 20, 16 << 20} {
				for _, a := range algos {
					name := fmt.Sprintf("transport=%s/ranks=%d/bytes=%d/algo=%s", w.name, n, size, a.name)
					b.Run(name, func(b *testing.B) { benchAllReduce(b, w.fn, a.fn, n, size) })
				}
			}
		}
	}
}

func benchAllReduce(b *testing.B, world algotest.World, fn algotest.AllReduceFunc, n, size int) {
	ts := world(b, n)
	bufs := make([][]byte, n)
	for r := range bufs {
		bufs[r] = reduce.Bytes(make([]float32, size/4))
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, t := range ts {
		wg.Go(func() {
			for i := range b.N {
				h := transport.Header{Seq: uint64(i + 1), Count: uint64(size / 4), Root: -1,
					Coll: transport.CollAllReduce, DType: reduce.Float32, Op: reduce.Sum}
				if err := fn(context.Background(), t, h, bufs[r], bufs[r]); err != nil {
					errs[r] = err
					for _, t := range ts {
						t.Close() // unblock the other ranks
					}
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

// BenchmarkCrossover times the two sub-algorithms on the sizes around
// DefaultDoublingMaxBytes, to place it for a machine and transport:
//
//	go test -run NONE -bench Crossover ./algo/halvingdoubling/
func BenchmarkCrossover(b *testing.B) {
	subs := []struct {
		name string
		cfg  halvingdoubling.Config
	}{
		{"doubling", doublingOnly},
		{"rabenseifner", rabenseifnerOnly},
	}
	for _, w := range []struct {
		name string
		fn   algotest.World
	}{{"mem", algotest.MemWorld}, {"tcp", algotest.TCPWorld}} {
		for _, n := range []int{4, 8} {
			for _, size := range []int{4 << 10, 16 << 10, 32 << 10, 64 << 10, 256 << 10} {
				for _, s := range subs {
					name := fmt.Sprintf("transport=%s/ranks=%d/bytes=%d/algo=%s", w.name, n, size, s.name)
					b.Run(name, func(b *testing.B) { benchAllReduce(b, w.fn, s.cfg.AllReduce, n, size) })
				}
			}
		}
	}
}
