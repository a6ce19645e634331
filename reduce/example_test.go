package reduce_test

import (
	"fmt"

	"github.com/collkit/collkit/reduce"
)

// Three ranks contribute a buffer each; the sum is accumulated in place and
// Finish turns it into the average.
func ExampleReduce() {
	ranks := [][]float32{
		{1, 2, 3, 4},
		{10, 20, 30, 40},
		{100, 200, 300, 400},
	}
	acc := append([]float32(nil), ranks[0]...)
	for _, r := range ranks[1:] {
		reduce.Reduce(reduce.Float32, reduce.Avg, reduce.Bytes(acc), reduce.Bytes(r))
	}
	fmt.Println("sum:", acc)
	reduce.Finish(reduce.Float32, reduce.Avg, reduce.Bytes(acc), len(ranks))
	fmt.Println("avg:", acc)

	// dst = a op b, here the element-wise maximum of two int32 buffers.
	a, b, dst := []int32{1, -5, 7}, []int32{3, -9, 2}, make([]int32, 3)
	reduce.ReduceTo(reduce.Int32, reduce.Max, reduce.Bytes(dst), reduce.Bytes(a), reduce.Bytes(b))
	fmt.Println("max:", dst)
	// Output:
	// sum: [111 222 333 444]
	// avg: [37 74 111 148]
	// max: [3 -5 7]
}
