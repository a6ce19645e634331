//go:build linux

package shm_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/collkit/collkit/algo/ring"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/shm"
)

// BenchmarkAllReduce times float32 sum all-reduce between ranks of this
// process: the native all-reduce and the ring over the rings.
func BenchmarkAllReduce(b *testing.B) {
	for _, algo := range []string{"native", "ring"} {
		for _, n := range []int{2, 4} {
			for _, size := range []int{8, 64 << 10, 256 << 10, 512 << 10, 1 << 20, 16 << 20} {
				b.Run(fmt.Sprintf("algo=%s/ranks=%d/bytes=%d", algo, n, size), func(b *testing.B) {
					benchAllReduce(b, algo, n, size)
				})
			}
		}
	}
}

func benchAllReduce(b *testing.B, algo string, n, size int) {
	ts := world(shm.Config{})(b, n)
	bufs := make([][]byte, n)
	for r := range bufs {
		bufs[r] = make([]byte, size, max(size, 4096)) // no two ranks on one cache line
	}
	h := transport.Header{Count: uint64(size / 4), Root: -1, Coll: transport.CollAllReduce, DType: reduce.Float32, Op: reduce.Sum}
	b.SetBytes(int64(size))
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r, t := range ts {
		wg.Go(func() {
			ctx := context.Background()
			h := h // each rank's own: a shared one would bounce between cores
			for i := range b.N {
				h.Seq = uint64(i)
				var err error
				if algo == "native" {
					err = t.(transport.NativeAllReducer).AllReduce(ctx, h, bufs[r], bufs[r])
				} else {
					err = ring.AllReduce(ctx, t, h, bufs[r], bufs[r])
				}
				if err != nil {
					errs[r] = err
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
