package group_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/collkit/collkit/algo/ring"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/group"
	"github.com/collkit/collkit/transport/mem"
)

// Four ranks split into two groups, the even and the odd ranks, which run
// their own all-reduce at the same time over the parent's connections: the
// groups have no pair of ranks in common.
func Example() {
	net := mem.NewNetwork(4, mem.Config{})
	defer net.Close()
	groups := [][]int{{0, 2}, {3, 1}} // group rank order need not be parent order
	h := transport.Header{Seq: 1, Coll: transport.CollAllReduce, Count: 1, Root: -1, DType: reduce.Int32, Op: reduce.Sum}

	sums := make([]int32, 4)
	var wg sync.WaitGroup
	for parent := range 4 {
		wg.Go(func() {
			ranks := groups[parent%2]
			g, err := group.New(net.Transport(parent), ranks, uint32(1+parent%2))
			if err != nil {
				fmt.Println(err)
				return
			}
			defer g.Close()
			buf := []int32{int32(10 * parent)}
			if err := ring.AllReduce(context.Background(), g, h, reduce.Bytes(buf), reduce.Bytes(buf)); err != nil {
				fmt.Println(err)
				return
			}
			sums[parent] = buf[0]
		})
	}
	wg.Wait()
	for parent, s := range sums {
		fmt.Printf("parent rank %d: sum of its group = %d\n", parent, s)
	}
	// Output:
	// parent rank 0: sum of its group = 20
	// parent rank 1: sum of its group = 40
	// parent rank 2: sum of its group = 20
	// parent rank 3: sum of its group = 40
}
