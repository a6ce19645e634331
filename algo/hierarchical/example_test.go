package hierarchical_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/collkit/collkit/algo/hierarchical"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/mem"
)

// Four ranks on two hosts average a buffer: each host reduce-scatters it,
// the two halves cross between the hosts at once, and each host gathers
// the result.
func Example() {
	hosts := []string{"gpu-a", "gpu-a", "gpu-b", "gpu-b"}
	c := hierarchical.Config{Nodes: hierarchical.GroupBy(hosts)}
	fmt.Println("nodes:", c.Nodes)

	net := mem.NewNetwork(len(hosts), mem.Config{})
	defer net.Close()
	h := transport.Header{Seq: 1, Coll: transport.CollAllReduce, Count: 4, Root: -1, DType: reduce.Float32, Op: reduce.Avg}
	out := make([][]float32, len(hosts))
	var wg sync.WaitGroup
	for r, t := range net.Transports() {
		wg.Go(func() {
			buf := []float32{float32(r), 10 * float32(r), 1, -float32(r)}
			if err := c.AllReduce(context.Background(), t, h, reduce.Bytes(buf), reduce.Bytes(buf)); err != nil {
				fmt.Println(err)
				return
			}
			out[r] = buf
		})
	}
	wg.Wait()
	for r, buf := range out {
		fmt.Printf("rank %d on %s: %v\n", r, hosts[r], buf)
	}
	// Output:
	// nodes: [0 0 1 1]
	// rank 0 on gpu-a: [1.5 15 1 -1.5]
	// rank 1 on gpu-a: [1.5 15 1 -1.5]
	// rank 2 on gpu-b: [1.5 15 1 -1.5]
	// rank 3 on gpu-b: [1.5 15 1 -1.5]
}
