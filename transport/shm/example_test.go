//go:build linux

package shm_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/shm"
)

// Two ranks of one process sum a vector with the native all-reduce: each
// reduces its half straight out of the other's shared buffer.
func Example() {
	ctx := context.Background()
	ts, err := shm.Local(ctx, 2, shm.Config{}) // processes would each New and Connect through a bootstrap store
	if err != nil {
		fmt.Println(err)
		return
	}
	results := make([][]float32, 2)
	var wg sync.WaitGroup
	for r, t := range ts {
		wg.Go(func() {
			defer t.Close()
			v := []float32{1, 2, 3, float32(10 * r)}
			h := transport.Header{Count: uint64(len(v)), Root: -1, Coll: transport.CollAllReduce, DType: reduce.Float32, Op: reduce.Sum}
			if err := t.AllReduce(ctx, h, reduce.Bytes(v), reduce.Bytes(v)); err != nil {
				fmt.Println(err)
			}
			results[r] = v
		})
	}
	wg.Wait()
	fmt.Println(results[0], results[1])
	// Output: [2 4 6 10] [2 4 6 10]
}
