package halvingdoubling_test

import (
	"fmt"
	"testing"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/halvingdoubling"
	"github.com/collkit/collkit/algo/ring"
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
	for _, w := range algotest.BenchWorlds() {
		for _, n := range []int{2, 3, 4} {
			for _, size := range []int{8, 4 << 10, 64 << 10, 1 << 20, 16 << 20} {
				for _, a := range algos {
					name := fmt.Sprintf("transport=%s/ranks=%d/bytes=%d/algo=%s", w.Name, n, size, a.name)
					b.Run(name, func(b *testing.B) { benchAllReduce(b, w.World, a.fn, n, size) })
				}
			}
		}
	}
}

func benchAllReduce(b *testing.B, world algotest.World, fn algotest.AllReduceFunc, n, size int) {
	algotest.BenchAllReduce(b, world(b, n), fn, size)
}

// BenchmarkCrossover times the two sub-algorithms on the sizes around
// DefaultDoublingMaxBytes (4 and 8 ranks) and DefaultDoublingMaxBytesPair
// (2 ranks), to place them for a machine and transport:
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
	for _, w := range algotest.BenchWorlds() {
		for _, n := range []int{2, 4, 8} {
			for _, size := range []int{4 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10} {
				for _, s := range subs {
					name := fmt.Sprintf("transport=%s/ranks=%d/bytes=%d/algo=%s", w.Name, n, size, s.name)
					b.Run(name, func(b *testing.B) { benchAllReduce(b, w.World, s.cfg.AllReduce, n, size) })
				}
			}
		}
	}
}
