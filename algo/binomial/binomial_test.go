package binomial_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/binomial"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/verify"
)

// testTree runs broadcast, reduce (every op), gather and scatter from every
// root against naive references.
func testTree(t *testing.T, world algotest.World, sizes, counts []int) {
	for _, n := range sizes {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			ts := world(t, n)
			var seq uint64
			for root := range n {
				for ci, count := range counts {
					dt := reduce.DTypes[(root+ci)%len(reduce.DTypes)]
					op := reduce.Ops[(root+ci)%len(reduce.Ops)]
					seq++
					es := dt.Size()
					h := transport.Header{Seq: seq, Count: uint64(count), DType: dt, Op: op}
					err := algotest.OnEveryRank(ts, func(ctx context.Context, r int, tr transport.Transport) error {
						// Broadcast.
						want := algotest.Input(dt, op, count, seq, root)
						buf := algotest.Poisoned(len(want))
						if r == root {
							copy(buf, want)
						}
						if err := binomial.Broadcast(ctx, tr, h, buf, root); err != nil {
							return err
						}
						if w := verify.Wrong(dt, buf, want); w > 0 {
							return fmt.Errorf("broadcast: %d wrong", w)
						}
						// Reduce.
						send := algotest.Input(dt, op, count, seq, r)
						recv := algotest.Poisoned(len(send))
						if err := binomial.Reduce(ctx, tr, h, send, recv, root); err != nil {
							return err
						}
						if r == root {
							verify.Expect(dt, op, want, seq, n)
							if w := verify.Wrong(dt, recv, want); w > 0 {
								return fmt.Errorf("reduce %v %v: %d wrong", dt, op, w)
							}
						}
						// Gather, then scatter the gathered array back.
						var all []byte
						for k := range n {
							all = append(all, algotest.Input(dt, op, count, seq, k)...)
						}
						var got []byte
						if r == root {
							got = algotest.Poisoned(n * count * es)
						}
						if err := binomial.Gather(ctx, tr, h, send, got, root); err != nil {
							return err
						}
						if r == root {
							if w := verify.Wrong(dt, got, all); w > 0 {
								return fmt.Errorf("gather: %d wrong", w)
							}
						}
						mine := algotest.Poisoned(count * es)
						if err := binomial.Scatter(ctx, tr, h, got, mine, root); err != nil {
							return err
						}
						if w := verify.Wrong(dt, mine, send); w > 0 {
							return fmt.Errorf("scatter: %d wrong", w)
						}
						return nil
					})
					if err != nil {
						t.Fatalf("root %d count %d: %v", root, count, err)
					}
				}
			}
		})
	}
}

func TestTreeMem(t *testing.T) {
	testTree(t, algotest.MemWorld, []int{1, 2, 3, 4, 5, 6, 7, 8}, []int{0, 1, 7, 1000})
}

func TestTreeTCP(t *testing.T) {
	testTree(t, algotest.TCPWorld, []int{3, 6}, []int{1, 70001})
}

func TestBadRoot(t *testing.T) {
	ts := algotest.MemWorld(t, 3)
	for _, root := range []int{-1, 3} {
		err := binomial.Broadcast(context.Background(), ts[0], transport.Header{}, nil, root)
		if err == nil || !strings.Contains(err.Error(), "is not a rank of 3") {
			t.Errorf("root %d: got %v", root, err)
		}
	}
	h := transport.Header{DType: reduce.Float32, Op: reduce.Sum}
	if err := binomial.Reduce(context.Background(), ts[0], h, make([]byte, 8), make([]byte, 4), 0); err == nil {
		t.Error("reduce with a short recv at the root: no error")
	}
}
