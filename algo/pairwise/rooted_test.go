package pairwise_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/pairwise"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/verify"
)

// testRooted scatters (gather false) or gathers from every root in turn
// and checks every element that arrives, and that what was sent is left
// as it was. The root works in place (its block inside its whole array)
// when the case says so.
func testRooted(t *testing.T, world algotest.World, sizes, counts []int, hide, gather bool) {
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
					coll := transport.CollScatter
					if gather {
						coll = transport.CollGather
					}
					h := transport.Header{Seq: seq, Count: uint64(n * count), DType: dt, Coll: coll}
					all := make([]byte, n*count*es)
					verify.Fill(dt, reduce.Sum, all, seq, root)
					err := algotest.OnEveryRank(ts, func(ctx context.Context, r int, tr transport.Transport) error {
						if hide {
							tr = unbuffered{tr}
						}
						mine := all[r*count*es : (r+1)*count*es]
						if gather {
							return checkGather(ctx, tr, h, all, mine, r, root, inPlace)
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
						if w := verify.Wrong(dt, recv, mine); w > 0 {
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

// checkGather runs rank r's part of a gather of all, whose block r it
// sends, and checks what the root receives and that send is unchanged.
func checkGather(ctx context.Context, tr transport.Transport, h transport.Header, all, mine []byte, r, root int, inPlace bool) error {
	send := append([]byte(nil), mine...)
	var recv []byte
	if r == root {
		recv = algotest.Poisoned(len(all))
		if inPlace {
			send = recv[r*len(mine) : (r+1)*len(mine)]
			copy(send, mine)
		}
	}
	if err := pairwise.Gather(ctx, tr, h, send, recv, root); err != nil {
		return err
	}
	if w := verify.Wrong(h.DType, send, mine); w > 0 {
		return fmt.Errorf("rank %d: %d elements of send changed", r, w)
	}
	if r == root {
		if w := verify.Wrong(h.DType, recv, all); w > 0 {
			return fmt.Errorf("root %d: %d of %d elements wrong", r, w, len(all)/h.DType.Size())
		}
	}
	return nil
}

func TestScatterMem(t *testing.T) {
	testRooted(t, algotest.MemWorld, []int{1, 2, 3, 4, 5, 8}, []int{0, 1, 5, 999}, false, false)
}

func TestScatterMemUnbuffered(t *testing.T) {
	testRooted(t, algotest.MemWorld, []int{2, 5}, []int{1, 999}, true, false)
}

func TestScatterTCP(t *testing.T) {
	testRooted(t, algotest.TCPWorld, []int{3, 4}, []int{1, 70001}, false, false)
}

func TestGatherMem(t *testing.T) {
	testRooted(t, algotest.MemWorld, []int{1, 2, 3, 4, 5, 8}, []int{0, 1, 5, 999}, false, true)
}

func TestGatherMemUnbuffered(t *testing.T) {
	testRooted(t, algotest.MemWorld, []int{2, 5}, []int{1, 999}, true, true)
}

func TestGatherTCP(t *testing.T) {
	testRooted(t, algotest.TCPWorld, []int{3, 4}, []int{1, 70001}, false, true)
}

// Ranks that disagree on the root or the size all fail the call, and one
// of them at least names the mismatch, wherever the odd rank sits: every
// rank exchanges a header with every other.
func TestRootedDisagreementFailsEveryRank(t *testing.T) {
	const es = 4
	for _, kind := range []string{"root", "count", "empty", "gather root", "gather count", "gather empty"} {
		for n := 2; n <= 6; n++ {
			for odd := range n {
				what := fmt.Sprintf("%s differs on rank %d of %d", kind, odd, n)
				algotest.MismatchFailsEveryRank(t, what, algotest.MemWorld(t, n), func(ctx context.Context, r int, tr transport.Transport) error {
					mismatch, gather := strings.CutPrefix(kind, "gather ")
					root, count := algotest.Disagreeing(mismatch, n, r == odd)
					h := transport.Header{Seq: 1, Coll: transport.CollScatter, Count: uint64(n * count), DType: reduce.Float32}
					if gather {
						h.Coll = transport.CollGather
						return pairwise.Gather(ctx, tr, h, make([]byte, count*es), make([]byte, n*count*es), root)
					}
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
	h.Coll = transport.CollGather
	if err := pairwise.Gather(ctx, ts[0], h, make([]byte, 4), make([]byte, 12), 3); err == nil {
		t.Error("gather to root 3 of 3 ranks: no error")
	}
	if err := pairwise.Gather(ctx, ts[0], h, make([]byte, 4), make([]byte, 8), 0); err == nil {
		t.Error("root's recv of 2 blocks for 3 ranks: no error")
	}
}
