package dissemination_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/collkit/collkit/algo/dissemination"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/mem"
)

func ExampleBroadcast() {
	// Three ranks, two rounds: in round 0 the root sends to rank 0 (the
	// next rank, mod 3), in round 1 rank 0 sends to rank 1; every other
	// message is a header, so the root too hears from every rank.
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
			if err := dissemination.Broadcast(context.Background(), t, h, reduce.Bytes(buf), root); err != nil {
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
