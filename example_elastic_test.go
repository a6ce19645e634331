package collkit_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/bootstrap"
)

// Four ranks (goroutines here, processes in a job) meet through a store
// that outlives them all. Rank 3 dies; the others see the failure, shrink
// to a communicator of three, agree on the step to go on from, and go on.
func ExampleComm_Shrink() {
	ctx := context.Background()
	store := bootstrap.NewMemStore() // in a job: collbench's launcher or etcd hosts it
	out := make([]string, 4)
	var wg sync.WaitGroup
	for rank := range 4 {
		wg.Go(func() {
			env := bootstrap.Env{Rank: rank, Size: 4, JobID: "elastic-example"}
			comm, err := collkit.ConnectStore(ctx, env, store, collkit.Options{IntraNode: "group"})
			if err != nil {
				panic(err)
			}
			step := 0
			for step < 3 {
				if rank == 3 && step == 1 {
					comm.Close() // dies: its connections close without a word
					return
				}
				x := []int64{int64(comm.ID() + 1)}
				if err := collkit.AllReduce(ctx, comm, x, x, collkit.Sum); err != nil {
					// A peer died (or revoked): shrink to the live ranks,
					// and resume from the first step not every survivor
					// finished.
					if comm, err = comm.Shrink(ctx); err != nil {
						panic(err)
					}
					at := []int64{int64(step)}
					if err := collkit.AllReduce(ctx, comm, at, at, collkit.Min); err != nil {
						panic(err)
					}
					step = int(at[0])
					continue
				}
				out[rank] += fmt.Sprintf(" step %d: %d ranks, sum %d;", step, comm.Size(), x[0])
				step++
			}
			comm.Close()
		})
	}
	wg.Wait()
	for rank, line := range out[:3] {
		fmt.Printf("rank %d:%s\n", rank, line)
	}
	// Output:
	// rank 0: step 0: 4 ranks, sum 10; step 1: 3 ranks, sum 6; step 2: 3 ranks, sum 6;
	// rank 1: step 0: 4 ranks, sum 10; step 1: 3 ranks, sum 6; step 2: 3 ranks, sum 6;
	// rank 2: step 0: 4 ranks, sum 10; step 1: 3 ranks, sum 6; step 2: 3 ranks, sum 6;
}
