package bench_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/transport"
)

// BenchmarkAllReduce times float32 sum all-reduce between ranks in one
// process, for each algorithm, transport, world size and message size. The
// names are benchstat-friendly; busbw is reported as a metric.
func BenchmarkAllReduce(b *testing.B) {
	for _, w := range algotest.BenchWorlds() {
		for _, algo := range collkit.Algorithms() {
			for _, n := range []int{2, 4} {
				for _, size := range []int{8, 4 << 10, 1 << 20, 16 << 20} {
					name := fmt.Sprintf("transport=%s/algo=%s/ranks=%d/bytes=%d", w.Name, algo, n, size)
					b.Run(name, func(b *testing.B) { benchAllReduce(b, w.World, algo, n, size) })
				}
			}
		}
	}
}

// benchAllReduce times Comm.AllReduce with algo through algotest's
// harness; each Comm makes its own headers, so the harness's are unused.
func benchAllReduce(b *testing.B, world algotest.World, algo string, n, size int) {
	ts := world(b, n)
	comms := make([]*collkit.Comm, n)
	for r, t := range ts {
		c, err := collkit.New(t, collkit.Options{Algorithm: algo})
		if err != nil {
			b.Fatal(err)
		}
		comms[r] = c
	}
	algotest.BenchAllReduce(b, ts, func(ctx context.Context, t transport.Transport, _ transport.Header, send, recv []byte) error {
		return comms[t.Rank()].AllReduce(ctx, collkit.Float32, collkit.Sum, send, recv)
	}, size)
}
