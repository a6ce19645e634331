package bootstrap_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/collkit/collkit/bootstrap"
)

// Three ranks, run as goroutines, publish their addresses through a MemStore
// and each learns everyone's.
func ExampleExchange() {
	store := bootstrap.NewMemStore()
	ctx := context.Background()
	const size = 3
	addrs := make([][][]byte, size)
	var wg sync.WaitGroup
	for rank := range size {
		wg.Go(func() {
			me := fmt.Sprintf("10.0.0.%d:5000", rank+1)
			all, err := bootstrap.Exchange(ctx, store, "addr", rank, size, []byte(me))
			if err != nil {
				panic(err)
			}
			addrs[rank] = all
		})
	}
	wg.Wait()
	for r, a := range addrs[2] {
		fmt.Printf("rank 2 sees rank %d at %s\n", r, a)
	}
	// Output:
	// rank 2 sees rank 0 at 10.0.0.1:5000
	// rank 2 sees rank 1 at 10.0.0.2:5000
	// rank 2 sees rank 2 at 10.0.0.3:5000
}

// A process reads its place in the job from the variables a launcher sets.
func ExampleFromEnv() {
	vars := map[string]string{"RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "node0"}
	env, err := bootstrap.FromEnv(func(k string) string { return vars[k] })
	if err != nil {
		panic(err)
	}
	fmt.Println(env.Rank, env.Size, env.StoreAddr(), env.Source)
	// Output: 1 4 node0:29500 pytorch
}
