// Package bootstrap gets the ranks of a job in touch with each other before
// any transport exists: it reads who each process is from the launcher's
// environment, and gives the ranks a small key-value Store through which
// they swap addresses and ids.
//
// A rank typically does
//
//	env, err := bootstrap.FromEnv(os.Getenv)   // RANK/WORLD_SIZE, mpirun, srun, ...
//	store, closer, err := bootstrap.Rendezvous(ctx, env)
//	defer closer.Close()
//	// hand store to a transport's Connect, e.g. tcp.Transport.Connect
//
// Rendezvous starts the store Server on rank 0 at MASTER_ADDR:MASTER_PORT
// (or uses the one a launcher hosts, COLLKIT_STORE_EXTERNAL=1) and connects
// every rank to it with Dial, which waits and retries until the server is up.
// The server answers a Get when the key is set, so ranks wait on the server,
// not in a polling loop.
//
// MemStore is the same Store inside one process, for tests and for ranks run
// as goroutines. ConnectLocal connects a whole job of a transport's ranks
// through one, as goroutines of this process. Exchange and Barrier build the usual "every rank publishes,
// then reads everyone's" step on any Store.
package bootstrap
