package pairwise_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/pairwise"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/verify"
)

// unbuffered hides a transport's Buffered capability, forcing the
// two-goroutine path.
type unbuffered struct{ transport.Transport }

// rankCase is one rank's part of one case of a table: it runs the
// collective on tr and checks its own result.
type rankCase func(ctx context.Context, tr transport.Transport, h transport.Header, r, n, count int, inPlace bool) error

// eachCase runs fn on every rank for every world size, count (elements per
// block, of a dtype that changes from case to case) and placement, failing
// with every rank's error.
func eachCase(t *testing.T, world algotest.World, sizes, counts []int, hide bool, coll transport.Coll, fn rankCase) {
	for _, n := range sizes {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			ts := world(t, n)
			var seq uint64
			for ci, count := range counts {
				for _, inPlace := range []bool{false, true} {
					seq++
					dt := reduce.DTypes[(ci+n)%len(reduce.DTypes)]
					h := transport.Header{Seq: seq, Count: uint64(n * count), DType: dt, Coll: coll}
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					errs := make([]error, n)
					var wg sync.WaitGroup
					for r, tr := range ts {
						if hide {
							tr = unbuffered{tr}
						}
						wg.Go(func() {
							if errs[r] = fn(ctx, tr, h, r, n, count, inPlace); errs[r] != nil {
								cancel()
							}
						})
					}
					wg.Wait()
					cancel()
					if err := errors.Join(errs...); err != nil {
						t.Fatalf("count %d inPlace %v: %v", count, inPlace, err)
					}
				}
			}
		})
	}
}

func testAllToAll(t *testing.T, world algotest.World, sizes, counts []int, hide bool) {
	eachCase(t, world, sizes, counts, hide, transport.CollAllToAll, func(ctx context.Context, tr transport.Transport, h transport.Header, r, n, count int, inPlace bool) error {
		dt, es := h.DType, h.DType.Size()
		send := make([]byte, n*count*es)
		verify.Fill(dt, reduce.Sum, send, h.Seq, r)
		recv := send
		if !inPlace {
			recv = make([]byte, len(send))
		}
		if err := pairwise.AllToAll(ctx, tr, h, send, recv); err != nil {
			return err
		}
		for k := range n {
			want := make([]byte, n*count*es)
			verify.Fill(dt, reduce.Sum, want, h.Seq, k)
			if w := verify.Wrong(dt, recv[k*count*es:(k+1)*count*es], want[r*count*es:(r+1)*count*es]); w > 0 {
				return fmt.Errorf("rank %d: block from %d: %d wrong", r, k, w)
			}
		}
		return nil
	})
}

func TestAllToAllMem(t *testing.T) {
	testAllToAll(t, algotest.MemWorld, []int{1, 2, 3, 4, 5, 6, 7, 8}, []int{0, 1, 5, 999}, false)
}

func TestAllToAllMemUnbuffered(t *testing.T) {
	testAllToAll(t, algotest.MemWorld, []int{2, 5, 8}, []int{1, 999}, true)
}

func TestAllToAllTCP(t *testing.T) {
	testAllToAll(t, algotest.TCPWorld, []int{3, 4}, []int{1, 300001}, false)
}

func TestAllToAllBadSizes(t *testing.T) {
	ts := algotest.MemWorld(t, 3)
	if err := pairwise.AllToAll(context.Background(), ts[0], transport.Header{}, make([]byte, 4), make([]byte, 4)); err == nil {
		t.Error("4 bytes in 3 blocks: no error")
	}
}
