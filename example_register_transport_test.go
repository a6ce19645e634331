package collkit_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/mem"
)

// inProcess hands out the transports of in-process jobs: the ranks of one
// job (one bootstrap store) share a mem.Network.
var inProcess struct {
	sync.Mutex
	jobs map[bootstrap.Store]*inProcessJob
}

type inProcessJob struct {
	net   *mem.Network
	taken int
}

// connectInProcess is the transport's Connect: it gets the rank's place in
// the job (env), the job's bootstrap store, through which real transports
// exchange addresses, and the communicator's Options.
func connectInProcess(ctx context.Context, env bootstrap.Env, store bootstrap.Store, opts collkit.Options) (transport.Transport, error) {
	inProcess.Lock()
	defer inProcess.Unlock()
	job := inProcess.jobs[store]
	if job == nil {
		job = &inProcessJob{net: mem.NewNetwork(env.Size, mem.Config{})}
		inProcess.jobs[store] = job
	}
	if job.taken++; job.taken == env.Size {
		delete(inProcess.jobs, store) // every rank has its transport
	}
	return job.net.Transports()[env.Rank], nil
}

// Register the transport once, before any communicator names it. A
// transport that cannot run everywhere (a build tag, a device) also sets
// Available, which collbench uses to skip it with the reason.
func init() {
	inProcess.jobs = map[bootstrap.Store]*inProcessJob{}
	collkit.RegisterTransport("inprocess", collkit.TransportDriver{Connect: connectInProcess})
}

// Options.Transport names the registered transport; FromEnv, Connect and
// ConnectStore build it for each rank, and collbench's --transport accepts
// it. Here three ranks meet through an in-memory store instead of the one
// FromEnv starts.
func ExampleRegisterTransport() {
	ctx := context.Background()
	store := bootstrap.NewMemStore()
	sums := make([][]int64, 3)
	var wg sync.WaitGroup
	for rank := range 3 {
		wg.Go(func() {
			env := bootstrap.Env{Rank: rank, Size: 3, JobID: "example"}
			comm, err := collkit.ConnectStore(ctx, env, store, collkit.Options{
				Transport: "inprocess",
				IntraNode: "group", // no shared memory beside it inside the node
			})
			if err != nil {
				panic(err)
			}
			defer comm.Close()
			x := []int64{int64(rank), 10}
			if err := collkit.AllReduce(ctx, comm, x, x, collkit.Sum); err != nil {
				panic(err)
			}
			sums[rank] = x
		})
	}
	wg.Wait()
	fmt.Println(sums)
	// Output: [[3 30] [3 30] [3 30]]
}
