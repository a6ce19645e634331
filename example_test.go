package collkit_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/transport/mem"
)

// Four ranks in one process, connected by the in-memory transport, sum a
// vector in place. Real programs get their Comm from collkit.FromEnv.
func ExampleAllReduce() {
	net := mem.NewNetwork(4, mem.Config{})
	defer net.Close()
	results := make([][]float32, 4)
	var wg sync.WaitGroup
	for rank, t := range net.Transports() {
		wg.Go(func() {
			comm, err := collkit.New(t, collkit.Options{Algorithm: "ring"})
			if err != nil {
				panic(err)
			}
			defer comm.Close()
			x := []float32{float32(rank), 1, 2}
			if err := collkit.AllReduce(context.Background(), comm, x, x, collkit.Sum); err != nil {
				panic(err)
			}
			results[rank] = x
		})
	}
	wg.Wait()
	fmt.Println(results[0], results[3])
	// Output: [6 4 8] [6 4 8]
}
