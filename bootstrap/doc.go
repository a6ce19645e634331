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
// Each rank then registers who it is (rank, world size, job id, host, pid)
// and waits until every rank has: the store turns away a process of another
// job, stops the whole rendezvous with an error on every rank when ranks
// disagree on the world size or two processes claim one rank, and can say
// which ranks are missing, which RendezvousWith logs while it waits and
// names when its context ends (see register.go).
// The server answers a Get when the key is set, so ranks wait on the server,
// not in a polling loop.
//
// MemStore is the same Store inside one process, for tests and for ranks run
// as goroutines. ConnectLocal connects a whole job of a transport's ranks
// through one, as goroutines of this process. Exchange and Barrier build the usual "every rank publishes,
// then reads everyone's" step on any Store; GetMany and Watch wait for
// several keys at once (all of them, or each as it comes), through the
// store's own MultiGetter or Watcher where it has one (etcd watches the
// keys' common prefix once).
package bootstrap
