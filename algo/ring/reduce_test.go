package ring_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/ring"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/verify"
)

// testReduce reduces to every root, in place and not, and checks the root's
// result against the exact all-reduce.
func testReduce(t *testing.T, c ring.Config, world algotest.World, sizes, counts []int) {
	for _, n := range sizes {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			ts := world(t, n)
			var seq uint64
			for root := range n {
				for ci, count := range counts {
					for _, inPlace := range []bool{false, true} {
						seq++
						dt := reduce.DTypes[(root+ci)%len(reduce.DTypes)]
						op := reduce.Ops[(root+ci+n)%len(reduce.Ops)]
						h := transport.Header{Seq: seq, Count: uint64(count), Coll: transport.CollReduce, DType: dt, Op: op}
						err := algotest.OnEveryRank(ts, func(ctx context.Context, r int, tr transport.Transport) error {
							send := make([]byte, count*dt.Size())
							verify.Fill(dt, op, send, seq, r)
							var recv []byte
							if r == root {
								recv = algotest.Poisoned(len(send))
								if inPlace {
									recv = send
								}
							}
							if err := c.Reduce(ctx, tr, h, send, recv, root); err != nil || r != root {
								return err
							}
							want := make([]byte, len(send))
							verify.Expect(dt, op, want, seq, n)
							if w := verify.Wrong(dt, recv, want); w > 0 {
								return fmt.Errorf("%v %v: %d of %d wrong", dt, op, w, count)
							}
							return nil
						})
						if err != nil {
							t.Fatalf("root %d count %d inPlace %v: %v", root, count, inPlace, err)
						}
					}
				}
			}
		})
	}
}

func TestReduceMem(t *testing.T) {
	testReduce(t, ring.Config{SegmentBytes: 64, EagerBytes: -1}, algotest.MemWorld, []int{1, 2, 3, 4, 5, 6, 7, 8}, []int{0, 1, 5, 1001})
}

func TestReduceTCP(t *testing.T) {
	testReduce(t, ring.Config{}, algotest.TCPWorld, []int{3, 5}, []int{2, 200003})
}

func TestReduceBadRoot(t *testing.T) {
	ts := algotest.MemWorld(t, 2)
	h := transport.Header{DType: reduce.Float32, Op: reduce.Sum}
	if err := ring.Reduce(context.Background(), ts[0], h, nil, nil, 2); err == nil {
		t.Error("root 2 of 2: no error")
	}
}
