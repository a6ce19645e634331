package collkit_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/transport/mem"
)

// run starts one goroutine per rank of an in-memory job of n ranks.
func run(n int, fn func(comm *collkit.Comm)) {
	net := mem.NewNetwork(n, mem.Config{})
	defer net.Close()
	var wg sync.WaitGroup
	for _, t := range net.Transports() {
		wg.Go(func() {
			comm, err := collkit.New(t, collkit.Options{})
			if err != nil {
				panic(err)
			}
			defer comm.Close()
			fn(comm)
		})
	}
	wg.Wait()
}

// Rank 2 broadcasts its parameters; rank 0 then gathers one value from each
// rank.
func ExampleBroadcast() {
	ctx := context.Background()
	run(3, func(comm *collkit.Comm) {
		params := make([]float32, 2)
		if comm.Rank() == 2 {
			params = []float32{0.5, 1.5}
		}
		if err := collkit.Broadcast(ctx, comm, params, 2); err != nil {
			panic(err)
		}
		var all []int32
		if comm.Rank() == 0 {
			all = make([]int32, comm.Size())
		}
		if err := collkit.Gather(ctx, comm, []int32{int32(10 * comm.Rank())}, all, 0); err != nil {
			panic(err)
		}
		if comm.Rank() == 0 {
			fmt.Println(params, all)
		}
	})
	// Output: [0.5 1.5] [0 10 20]
}

// A group of many small all-reduces runs as one fused all-reduce.
func ExampleComm_Group() {
	ctx := context.Background()
	run(4, func(comm *collkit.Comm) {
		grads := make([][]float32, 100)
		g := comm.Group()
		for i := range grads {
			grads[i] = []float32{float32(i), 1}
			collkit.GroupAllReduce(g, grads[i], grads[i], collkit.Sum)
		}
		if err := g.Run(ctx); err != nil {
			panic(err)
		}
		if comm.Rank() == 0 {
			fmt.Println(grads[0], grads[99])
		}
	})
	// Output: [0 4] [396 4]
}

// Eight ranks form a 2 x 2 x 2 mesh; each tensor-parallel pair sums its own
// ranks.
func ExampleComm_Mesh() {
	ctx := context.Background()
	var mu sync.Mutex
	sums := map[int]int64{}
	run(8, func(comm *collkit.Comm) {
		m, err := comm.Mesh(ctx, 2, 2, 2)
		if err != nil {
			panic(err)
		}
		defer m.Close()
		x := []int64{int64(comm.Rank())}
		if err := collkit.AllReduce(ctx, m.TP, x, x, collkit.Sum); err != nil {
			panic(err)
		}
		mu.Lock()
		sums[comm.Rank()] = x[0]
		mu.Unlock()
	})
	fmt.Println(sums[0], sums[1], sums[2], sums[7])
	// Output: 1 1 5 13
}

// bfloat16 gradients all-reduce as a []collkit.BF16, converted from and to
// float32 with rounding to nearest even.
func ExampleBF16() {
	ctx := context.Background()
	run(4, func(comm *collkit.Comm) {
		grads := []collkit.BF16{collkit.ToBF16(0.1), collkit.ToBF16(float32(comm.Rank()))}
		if err := collkit.AllReduce(ctx, comm, grads, grads, collkit.Sum); err != nil {
			panic(err)
		}
		if comm.Rank() == 0 {
			fmt.Println(grads, grads[0].Float32())
		}
	})
	// Output: [0.4 6] 0.40039062
}

// trainStep is the README's "Other collectives" snippet: one step of a
// training job of 8 ranks.
func trainStep(ctx context.Context, comm *collkit.Comm, params, grads []float32, tokens, routed []int32, layers [][]float32) error {
	// Broadcast, AllToAll; also Reduce, AllGather, ReduceScatter, Gather,
	// Scatter, Barrier and Send/Recv.
	if err := collkit.Broadcast(ctx, comm, params, 0); err != nil {
		return err
	}
	if err := collkit.AllToAll(ctx, comm, tokens, routed); err != nil {
		return err
	}

	// A group, like ncclGroupStart/End: its all-reduces are fused into one
	// buffer per dtype and op.
	g := comm.Group()
	for _, layer := range layers {
		collkit.GroupAllReduce(g, layer, layer, collkit.Sum)
	}
	if err := g.Run(ctx); err != nil {
		return err
	}

	// Data x tensor x pipeline parallel groups, 2 x 2 x 2: three Split
	// sub-communicators.
	m, err := comm.Mesh(ctx, 2, 2, 2)
	if err != nil {
		return err
	}
	defer m.Close()
	return collkit.AllReduce(ctx, m.DP, grads, grads, collkit.Avg)
}

// One training step on 8 ranks: rank 0's parameters reach every rank, each
// rank sends token k to rank k, two layers' gradients are summed in one
// fused all-reduce, and the data-parallel pair of ranks 0 and 2 averages.
func Example_trainStep() {
	ctx := context.Background()
	run(8, func(comm *collkit.Comm) {
		r := comm.Rank()
		params := []float32{0, 0}
		if r == 0 {
			params = []float32{0.5, 1.5}
		}
		tokens := make([]int32, 8)
		for k := range tokens {
			tokens[k] = int32(10*r + k) // token k goes to rank k
		}
		routed := make([]int32, 8)
		layers := [][]float32{{1, 2}, {3}}
		grads := []float32{float32(r)}
		if err := trainStep(ctx, comm, params, grads, tokens, routed, layers); err != nil {
			panic(err)
		}
		if r == 0 {
			fmt.Println(params, routed, layers, grads)
		}
	})
	// Output: [0.5 1.5] [0 10 20 30 40 50 60 70] [[8 16] [24]] [1]
}
