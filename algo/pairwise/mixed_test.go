package pairwise_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/pairwise"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/verify"
)

// In place or not, and buffered or not, is each rank's own choice: ranks
// that choose differently in one all-to-all still exchange the right
// blocks.
func TestAllToAllMixed(t *testing.T) {
	const count = 1001
	dt := reduce.Int32
	for _, n := range []int{4, 5} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			ts := algotest.MemWorld(t, n)
			h := transport.Header{Seq: 1, Count: uint64(n * count), DType: dt}
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r, tr := range ts {
				inPlace, hide := r%2 == 0, r%3 == 1
				if hide {
					tr = unbuffered{tr}
				}
				wg.Go(func() {
					send := make([]byte, n*count*4)
					verify.Fill(dt, reduce.Sum, send, 7, r)
					recv := send
					if !inPlace {
						recv = make([]byte, len(send))
					}
					if errs[r] = pairwise.AllToAll(context.Background(), tr, h, send, recv); errs[r] != nil {
						return
					}
					for k := range n {
						want := make([]byte, n*count*4)
						verify.Fill(dt, reduce.Sum, want, 7, k)
						if w := verify.Wrong(dt, recv[k*count*4:(k+1)*count*4], want[r*count*4:(r+1)*count*4]); w > 0 {
							errs[r] = fmt.Errorf("rank %d (in place %v, buffered %v): block from %d: %d wrong", r, inPlace, !hide, k, w)
						}
					}
				})
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
		})
	}
}
