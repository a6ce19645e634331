package collkit_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/transport/mem"
)

// Data-parallel training overlaps the gradient all-reduces with the
// backward pass: each layer's all-reduce starts as soon as its gradient is
// ready and runs while the next layer is computed. Operations run in the
// order they were started, on every rank; their buffers belong to them until
// Wait returns.
func ExampleAllReduceAsync() {
	net := mem.NewNetwork(2, mem.Config{})
	defer net.Close()
	var wg sync.WaitGroup
	for rank, t := range net.Transports() {
		wg.Go(func() {
			comm, err := collkit.New(t, collkit.Options{})
			if err != nil {
				panic(err)
			}
			defer comm.Close()
			ctx := context.Background()

			grads := make([][]float32, 3)
			var works []*collkit.Work
			for layer := len(grads) - 1; layer >= 0; layer-- { // backward: last layer first
				grads[layer] = []float32{float32(rank + layer), 1}
				works = append(works, collkit.AllReduceAsync(ctx, comm, grads[layer], grads[layer], collkit.Avg))
			}
			for _, w := range works {
				if err := w.Wait(ctx); err != nil {
					panic(err)
				}
			}
			if rank == 0 {
				fmt.Println(grads)
			}
		})
	}
	wg.Wait()
	// Output: [[0.5 1] [1.5 1] [2.5 1]]
}
