package collkit_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/mem"
)

// starAllReduce is an all-reduce for a few ranks and small buffers: every
// rank sends its buffer to rank 0, which reduces them in rank order and
// sends the result back. Its messages carry the header it gets, with its
// own steps, so ranks that disagree fail instead of mixing data.
func starAllReduce(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error {
	copy(recv, send)
	if t.Rank() != 0 {
		h.Step = 0
		if err := t.Send(ctx, 0, h, recv); err != nil {
			return err
		}
		h.Step = 1
		return t.Recv(ctx, 0, h, recv)
	}
	in := make([]byte, len(recv))
	h.Step = 0
	for peer := 1; peer < t.Size(); peer++ {
		if err := t.Recv(ctx, peer, h, in); err != nil {
			return err
		}
		reduce.Reduce(h.DType, h.Op, recv, in)
	}
	reduce.Finish(h.DType, h.Op, recv, t.Size()) // Avg divides here
	h.Step = 1
	for peer := 1; peer < t.Size(); peer++ {
		if err := t.Send(ctx, peer, h, recv); err != nil {
			return err
		}
	}
	return nil
}

// Register the algorithm once, before any communicator names it; every
// program of a job registers the same names. An algorithm that needs the
// communicator's settings (its nodes, a tuning table) implements
// collkit.Algorithm's Prepare instead of being a plain function.
func init() {
	collkit.RegisterAlgorithm("star", collkit.AllReduceFunc(starAllReduce))
}

// Three ranks pick the registered algorithm by name, as they would pick
// "ring"; collbench's --algo accepts it too.
func ExampleRegisterAlgorithm() {
	net := mem.NewNetwork(3, mem.Config{})
	defer net.Close()
	var wg sync.WaitGroup
	for rank, t := range net.Transports() {
		wg.Go(func() {
			comm, err := collkit.New(t, collkit.Options{Algorithm: "star"})
			if err != nil {
				panic(err)
			}
			defer comm.Close()
			x := []float32{float32(rank), 1.5}
			if err := collkit.AllReduce(context.Background(), comm, x, x, collkit.Avg); err != nil {
				panic(err)
			}
			if rank == 0 {
				fmt.Println(comm.Algorithm(), x)
			}
		})
	}
	wg.Wait()
	// Output: star [1 1.5]
}
