package tree_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/collkit/collkit/algo/tree"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/mem"
)

// Five ranks average a vector over the in-memory transport: tree 0 reduces
// the first half, tree 1 the second, and every rank gets the whole result.
func ExampleAllReduce() {
	const n = 5
	net := mem.NewNetwork(n, mem.Config{})
	defer net.Close()
	results := make([][]float32, n)
	var wg sync.WaitGroup
	for rank, t := range net.Transports() {
		wg.Go(func() {
			send := []float32{float32(rank), 10, float32(10 * rank)}
			recv := make([]float32, len(send))
			h := transport.Header{Seq: 1, Count: uint64(len(send)), Root: -1,
				Coll: transport.CollAllReduce, DType: reduce.Float32, Op: reduce.Avg}
			if err := tree.AllReduce(context.Background(), t, h, reduce.Bytes(send), reduce.Bytes(recv)); err != nil {
				fmt.Println(err)
				return
			}
			results[rank] = recv
		})
	}
	wg.Wait()
	fmt.Println(results[0], results[4])
	// Output: [2 10 20] [2 10 20]
}
