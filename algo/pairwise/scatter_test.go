package pairwise_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/pairwise"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/verify"
)

// testScatter scatters from every root in turn and checks every element
// that every rank receives, and that the root's send is left as it was.
// The root works in place (recv inside send) when the case says so.
func testScatter(t *testing.T, world algotest.World, sizes, counts []int, hide bool) {
	for _, n := range sizes {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			ts := world(t, n)
			var seq uint64
			for root := range n {
				for ci, count := range counts {
					seq++
					dt := reduce.DTypes[(root+ci)%len(reduce.DTypes)]
					es := dt.Size()
					inPlace := (root+ci)%2 == 0
					h := transport.Header{Seq: seq, Count: uint64(n * count), DType: dt, Coll: transport.CollScatter}
					all := make([]byte, n*count*es)
					verify.Fill(dt, reduce.Sum, all, seq, root)
					err := algotest.OnEveryRank(ts, func(ctx context.Context, r int, tr transport.Transport) error {
						if hide {
							tr = unbuffered{tr}
						}
						var send []byte
						recv := algotest.Poisoned(count * es)
						if r == root {
							send = append([]byte(nil), all...)
							if inPlace {
								recv = send[r*count*es : (r+1)*count*es]
							}
						}
						if err := pairwise.Scatter(ctx, tr, h, send, recv, root); err != nil {
							return err
						}
						if w := verify.Wrong(dt, recv, all[r*count*es:(r+1)*count*es]); w > 0 {
							return fmt.Errorf("rank %d: %d of %d elements wrong", r, w, count)
						}
						if r == root {
							if w := verify.Wrong(dt, send, all); w > 0 {
								return fmt.Errorf("root %d: %d elements of send changed", r, w)
							}
						}
						return nil
					})
					if err != nil {
						t.Fatalf("root %d, %d x %v, in place %v: %v", root, count, dt, inPlace, err)
					}
				}
			}
		})
	}
}

func TestScatterMem(t *testing.T) {
	testScatter(t, algotest.MemWorld, []int{1, 2, 3, 4, 5, 8}, []int{0, 1, 5, 999}, false)
}

func TestScatterMemUnbuffered(t *testing.T) {
	testScatter(t, algotest.MemWorld, []int{2, 5}, []int{1, 999}, true)
}

func TestScatterTCP(t *testing.T) {
	testScatter(t, algotest.TCPWorld, []int{3, 4}, []int{1, 70001}, false)
}

// Ranks that disagree on the root or the size all fail the call, and one
// of them at least names the mismatch, wherever the odd rank sits: every
// rank exchanges a header with every other.
func TestScatterDisagreementFailsEveryRank(t *testing.T) {
	const es = 4
	for _, kind := range []string{"root", "count", "empty"} {
		for n := 2; n <= 6; n++ {
			for odd := range n {
				what := fmt.Sprintf("%s differs on rank %d of %d", kind, odd, n)
				algotest.MismatchFailsEveryRank(t, what, algotest.MemWorld(t, n), func(ctx context.Context, r int, tr transport.Transport) error {
					root, count := 0, 4
					if r == odd {
						switch kind {
						case "root":
							root = n - 1
						case "count":
							count = 5
						case "empty":
							count = 0
						}
					}
					h := transport.Header{Seq: 1, Coll: transport.CollScatter, Count: uint64(n * count), DType: reduce.Float32}
					return pairwise.Scatter(ctx, tr, h, make([]byte, n*count*es), make([]byte, count*es), root)
				})
			}
		}
	}
}

func TestScatterBadArguments(t *testing.T) {
	ts := algotest.MemWorld(t, 3)
	h := transport.Header{Coll: transport.CollScatter, DType: reduce.Float32, Count: 3}
	ctx := context.Background()
	if err := pairwise.Scatter(ctx, ts[0], h, make([]byte, 12), make([]byte, 4), 3); err == nil {
		t.Error("root 3 of 3 ranks: no error")
	}
	if err := pairwise.Scatter(ctx, ts[0], h, make([]byte, 8), make([]byte, 4), 0); err == nil {
		t.Error("root's send of 2 blocks for 3 ranks: no error")
	}
}
