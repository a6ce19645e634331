package halvingdoubling_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/collkit/collkit/algo/halvingdoubling"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/mem"
)

func Example() {
	// Three ranks, not a power of two: rank 0 folds into rank 1, and ranks 1
	// and 2 run the power-of-two algorithm.
	const n = 3
	net := mem.NewNetwork(n, mem.Config{})
	defer net.Close()
	h := transport.Header{Seq: 1, Coll: transport.CollAllReduce, Root: -1, Count: 4, DType: reduce.Float32, Op: reduce.Sum}

	results := make([][]float32, n)
	var wg sync.WaitGroup
	for r, t := range net.Transports() {
		wg.Go(func() {
			buf := []float32{1, 2, 3, float32(r)}
			b := reduce.Bytes(buf)
			if err := halvingdoubling.AllReduce(context.Background(), t, h, b, b); err != nil {
				fmt.Println(err)
				return
			}
			results[r] = buf
		})
	}
	wg.Wait()
	for r, res := range results {
		fmt.Println("rank", r, res)
	}
	// Output:
	// rank 0 [3 6 9 3]
	// rank 1 [3 6 9 3]
	// rank 2 [3 6 9 3]
}
