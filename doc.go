// Package collkit is the communicator a distributed program holds: it knows
// its rank and the job's size, owns a transport to the other ranks and runs
// collectives over it with a chosen algorithm.
//
// Create one from the environment a launcher sets (torchrun's RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT; mpirun's OMPI_COMM_WORLD_*; srun's
// SLURM_*), then call collectives:
//
//	comm, err := collkit.FromEnv(ctx, collkit.Options{})
//	if err != nil { ... }
//	defer comm.Close()
//	err = collkit.AllReduce(ctx, comm, grads, grads, collkit.Sum) // in place
//
// or build one over any transport.Transport with New (tests use the in-memory
// transport). Collectives on one Comm run one at a time, in the same order on
// every rank; the ...Async functions start them without waiting and return a
// Work to wait on, and calls from two goroutines at once fail with
// ErrConcurrentUse. An error is fatal to the communicator, as in NCCL: it closes its
// transport, so peers blocked on it fail fast instead of hanging, and every
// later call returns the first error.
//
// Besides all-reduce a Comm runs Broadcast, Reduce, AllGather, ReduceScatter,
// Gather, Scatter, AllToAll, Barrier and point-to-point Send/Recv, each with
// typed wrappers for Go slices (collkit.Broadcast(ctx, comm, xs, root)).
// Group batches operations like ncclGroupStart/End: it fuses small
// all-reduces of one dtype and op into one buffer and runs sends and
// receives concurrently. Split(color, key) makes sub-communicators that share
// the connections and run independently of each other and of their parent;
// Mesh builds the data x tensor x pipeline parallel groups of a training job.
// The typed wrappers take float16 and bfloat16 data as []F16 and []BF16.
//
// All-reduce algorithms and transports are chosen by name
// (Options.Algorithm, Options.Transport). Other packages add their own with
// RegisterAlgorithm and RegisterTransport, from an init function, as
// database/sql drivers register; the built-ins register the same way.
package collkit
