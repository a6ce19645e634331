package doubling_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/collkit/collkit/algo/doubling"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/mem"
)

func ExampleBroadcast() {
	// Three ranks: rank 0 folds into rank 1, which with rank 2 runs one
	// round; rank 0 gets the data back in the unfold.
	const n, root = 3, 2
	net := mem.NewNetwork(n, mem.Config{})
	defer net.Close()
	h := transport.Header{Seq: 1, Coll: transport.CollBroadcast, Count: 3, DType: reduce.Int32}

	results := make([][]int32, n)
	var wg sync.WaitGroup
	for r, t := range net.Transports() {
		wg.Go(func() {
			buf := make([]int32, 3)
			if r == root {
				buf = []int32{7, 8, 9}
			}
			if err := doubling.Broadcast(context.Background(), t, h, reduce.Bytes(buf), root); err != nil {
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
	// rank 0 [7 8 9]
	// rank 1 [7 8 9]
	// rank 2 [7 8 9]
}
