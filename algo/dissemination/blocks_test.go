package dissemination_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/dissemination"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/verify"
)

// blocks runs all-gather, reduce-scatter and all-to-all with count
// elements per block, in place where inPlace is set, and checks every
// element of every rank's result against a naive reference.
func blocks(ctx context.Context, tr transport.Transport, r, n, count int, dt reduce.DType, op reduce.Op, seq uint64, inPlace bool) error {
	es := dt.Size()
	bs := count * es

	recv := algotest.Poisoned(n * bs)
	send := recv[r*bs : (r+1)*bs]
	if !inPlace {
		send = make([]byte, bs)
	}
	verify.Fill(dt, op, send, seq, r)
	h := transport.Header{Seq: seq, Coll: transport.CollAllGather, Count: uint64(n * count), DType: dt, Root: -1}
	if err := dissemination.AllGather(ctx, tr, h, send, recv); err != nil {
		return err
	}
	var all []byte
	for k := range n {
		all = append(all, algotest.Input(dt, op, count, seq, k)...)
	}
	if w := verify.Wrong(dt, recv, all); w > 0 {
		return fmt.Errorf("allgather: %d of %d elements wrong", w, n*count)
	}

	full := algotest.Input(dt, op, n*count, seq, r)
	orig := append([]byte(nil), full...)
	part := full[r*bs : (r+1)*bs]
	if !inPlace {
		part = algotest.Poisoned(bs)
	}
	h = transport.Header{Seq: seq, Coll: transport.CollReduceScatter, Count: uint64(n * count), DType: dt, Op: op, Root: -1}
	if err := dissemination.ReduceScatter(ctx, tr, h, full, part); err != nil {
		return err
	}
	want := make([]byte, bs)
	verify.ExpectFrom(dt, op, want, seq, n, r*count)
	if w := verify.Wrong(dt, part, want); w > 0 {
		return fmt.Errorf("reducescatter %v %v: %d of %d elements wrong", dt, op, w, count)
	}
	if !inPlace {
		if w := verify.Wrong(dt, full, orig); w > 0 {
			return fmt.Errorf("reducescatter: %d elements of send changed", w)
		}
	}

	a2a := algotest.Input(dt, op, n*count, seq, r)
	out := a2a
	if !inPlace {
		out = algotest.Poisoned(len(a2a))
	}
	h = transport.Header{Seq: seq, Coll: transport.CollAllToAll, Count: uint64(n * count), DType: dt, Root: -1}
	if err := dissemination.AllToAll(ctx, tr, h, a2a, out); err != nil {
		return err
	}
	// Block k comes from rank k: its elements r*count.. of rank k's input.
	want = make([]byte, n*bs)
	for k := range n {
		verify.FillFrom(dt, op, want[k*bs:(k+1)*bs], seq, k, r*count)
	}
	if w := verify.Wrong(dt, out, want); w > 0 {
		return fmt.Errorf("alltoall: %d of %d elements wrong", w, n*count)
	}
	return nil
}

func testBlocks(t *testing.T, world algotest.World, sizes, counts []int) {
	for _, n := range sizes {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			ts := world(t, n)
			var seq uint64
			for di, dt := range reduce.DTypes {
				for ci, count := range counts {
					op := reduce.Ops[(di+ci)%len(reduce.Ops)]
					for _, inPlace := range []bool{false, true} {
						seq++
						err := algotest.OnEveryRank(ts, func(ctx context.Context, r int, tr transport.Transport) error {
							return blocks(ctx, tr, r, n, count, dt, op, seq, inPlace)
						})
						if err != nil {
							t.Fatalf("%v %v count %d in place %v: %v", dt, op, count, inPlace, err)
						}
					}
				}
			}
		})
	}
}

func TestBlocksMem(t *testing.T) {
	testBlocks(t, algotest.MemWorld, []int{1, 2, 3, 4, 5, 6, 7, 8, 9}, []int{0, 1, 2, 7, 131, 1031})
}

func TestBlocksTCP(t *testing.T) {
	testBlocks(t, algotest.TCPWorld, []int{1, 2, 3, 4, 5, 8}, []int{0, 1, 13, 1031})
}

// Every element of a rank's result comes from the right rank: a mistake
// in the rotation that moves whole blocks would pass the checks above
// only if the inputs of different ranks were equal, which they are not.
func TestBlockInputsDiffer(t *testing.T) {
	a := algotest.Input(reduce.Int32, reduce.Sum, 8, 3, 0)
	b := algotest.Input(reduce.Int32, reduce.Sum, 8, 3, 1)
	if verify.Wrong(reduce.Int32, a, b) == 0 {
		t.Fatal("ranks 0 and 1 have the same input: the block tests could not tell them apart")
	}
}
