// Command allreduce averages a vector of gradients over every rank of a
// job, the way a data-parallel training step does. Start one process per
// rank with a launcher; collkit.FromEnv reads what it sets:
//
//	RANK=0 WORLD_SIZE=2 MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 allreduce   # torchrun style, one per rank
//	mpirun -np 4 allreduce                                                   # Open MPI
//	srun -n 8 allreduce                                                      # Slurm
//
// Rank r contributes r+1 to every element, so every element of the average
// over n ranks is (n+1)/2; each rank prints what it got.
package main

import (
	"context"
	"fmt"
	"log"

	"github.com/collkit/collkit"
)

func main() {
	ctx := context.Background()

	comm, err := collkit.FromEnv(ctx, collkit.Options{Algorithm: "ring"})
	if err != nil {
		log.Fatal(err) // names the rank, the variable or peer at fault, and what to do
	}
	defer comm.Close()

	grads := make([]float32, 1<<20)
	for i := range grads { // ... fill grads ...
		grads[i] = float32(comm.Rank() + 1)
	}
	if err := collkit.AllReduce(ctx, comm, grads, grads, collkit.Avg); err != nil { // in place
		log.Fatal(err)
	}

	for _, g := range grads {
		if g != grads[0] {
			log.Fatalf("rank %d: elements differ: %v and %v", comm.Rank(), grads[0], g)
		}
	}
	fmt.Printf("rank %d of %d: average %v in all %d elements\n", comm.Rank(), comm.Size(), grads[0], len(grads))
}
