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
// later call returns the first error; the job goes on with Shrink (below).
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
// With the nccl transport the same Comm also runs collectives on GPU
// memory, with no copy to the host: AllReduceDevice, BroadcastDevice,
// ReduceDevice, AllGatherDevice, ReduceScatterDevice, ExchangeDevice (one
// NCCL group of sends and receives), SendDevice, RecvDevice and
// DeviceGroup (several of them in one NCCL group) take DeviceBuffers, from nccl.Alloc or wrapping a pointer another CUDA library
// gave (pointer, length, device). Over a transport that moves host memory
// only they return an error wrapping ErrHostMemoryOnly.
//
// A communicator made through a store (Connect, FromEnv, ConnectStore) is
// elastic. Revoke ends it on every rank at once, as MPI_Comm_revoke does.
// After a failure or a revoke the surviving ranks call Shrink and get a
// communicator of the next generation over exactly the live ranks,
// renumbered in their old order; a new process calls Join, and the members
// admit it with Grow when JoinersWaiting (a collective, so all agree) says
// one waits. The members of each generation are decided by one agreement
// round through the store: every process that takes part publishes that it
// is alive and whom it saw die, waits for the others (up to
// Options.ElasticWait for one nobody saw die), and proposes those it heard
// from with the store's Create, where the first proposal wins. So all
// survivors agree on the members even when another rank dies meanwhile, and
// a rank that was only slow is told ErrExcluded rather than starting a world
// of its own; the new transport connects all or nothing (one verdict,
// again through Create), and a member that died after the decision makes
// the members run the next round without it. Over NCCL the next
// communicator is made from the previous one with ncclCommShrink or
// ncclCommGrow where every member's NCCL has them, and anew otherwise (not
// yet run on a GPU). See comm_elastic.go for the guarantees in full. The store must outlive the ranks: collbench's launcher
// hosts it, or an etcd cluster does.
//
// All-reduce algorithms and transports are chosen by name
// (Options.Algorithm, Options.Transport). Other packages add their own with
// RegisterAlgorithm and RegisterTransport, from an init function, as
// database/sql drivers register; the built-ins register the same way.
package collkit
