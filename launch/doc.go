// Package launch starts the ranks of a job as local processes, the way
// `mpirun -np N` or `torchrun --nproc-per-node N` does on one machine.
//
// The launcher hosts the job's bootstrap store itself and gives every child
// the PyTorch-style variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT) plus COLLKIT_STORE_EXTERNAL=1, a fresh COLLKIT_JOB_ID and a
// fresh random COLLKIT_SECRET, so the children rendezvous without racing for
// a port and only they can reach the store or join the mesh. When one rank fails, the
// others get a grace period to notice and exit on their own, then are killed:
// a launch never leaves processes behind.
//
//	err := launch.Run(ctx, launch.Config{N: 4, Args: os.Args[1:]})
//
// Start returns the running Job instead of waiting for it, for a launcher
// that manages an elastic job itself: Job.Kill kills one process with
// SIGKILL, Job.Spawn starts a process that enters the running job through
// collkit.Join (it finds the store with JoinEnv), and the store lives until
// Job.Close, whichever processes die.
package launch
