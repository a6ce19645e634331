package ring_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/ring"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/verify"
)

// testAllGather checks that every rank ends with every rank's block, for
// dtypes of each element size.
func testAllGather(t *testing.T, c ring.Config, world func(testing.TB, int) []transport.Transport, sizes []int, big bool) {
	for _, n := range sizes {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			ts := world(t, n)
			var seq uint64
			for name, counts := range layouts(n, big) {
				for _, dt := range []reduce.DType{reduce.Uint8, reduce.BFloat16, reduce.Float32, reduce.Int64} {
					for _, inPlace := range []bool{false, true} {
						seq++
						if err := allGatherOnce(c, ts, seq, dt, counts, inPlace); err != nil {
							t.Fatalf("%s counts %v %v inPlace=%v: %v", name, counts, dt, inPlace, err)
						}
					}
				}
			}
		})
	}
}

func allGatherOnce(c ring.Config, ts []transport.Transport, seq uint64, dt reduce.DType, counts []int, inPlace bool) error {
	es := dt.Size()
	total := sum(counts)
	want := make([]byte, total*es)
	for k := range counts {
		lo := sum(counts[:k]) * es
		verify.Fill(dt, reduce.Sum, want[lo:lo+counts[k]*es], seq, k)
	}
	h := transport.Header{Seq: seq, Count: uint64(total), Root: -1, Coll: transport.CollAllGather, DType: dt}
	return algotest.OnEveryRank(ts, func(ctx context.Context, r int, tr transport.Transport) error {
		recv := algotest.Poisoned(total * es)
		lo := sum(counts[:r]) * es
		send := recv[lo : lo+counts[r]*es]
		if !inPlace {
			send = make([]byte, counts[r]*es)
		}
		verify.Fill(dt, reduce.Sum, send, seq, r)
		if err := c.AllGather(ctx, tr, h, send, recv, counts); err != nil {
			return err
		}
		if w := verify.Wrong(dt, recv, want); w > 0 {
			return fmt.Errorf("%d of %d elements wrong", w, total)
		}
		return nil
	})
}

func TestAllGatherMem(t *testing.T) {
	testAllGather(t, ring.Config{}, algotest.MemWorld, []int{1, 2, 3, 4, 5, 6, 7, 8}, false)
}

func TestAllGatherMemPipelined(t *testing.T) {
	testAllGather(t, ring.Config{SegmentBytes: 40, EagerBytes: -1}, algotest.MemWorld, []int{1, 2, 3, 4, 5, 6, 7, 8}, false)
}

func TestAllGatherTCP(t *testing.T) {
	testAllGather(t, ring.Config{SegmentBytes: 1 << 10}, algotest.TCPWorld, []int{2, 3, 5}, true)
}

func TestAllGatherArguments(t *testing.T) {
	ts := algotest.MemWorld(t, 2)
	h := transport.Header{Coll: transport.CollAllGather, DType: reduce.Float32}
	ctx := context.Background()
	err := ring.AllGather(ctx, ts[1], h, make([]byte, 4), make([]byte, 8), []int{1, 2})
	if err == nil || !strings.Contains(err.Error(), "recv is 8 bytes but counts add up to 3 elements") {
		t.Errorf("got %v, want an error about recv's size", err)
	}
	err = ring.AllGather(ctx, ts[1], h, make([]byte, 4), make([]byte, 12), []int{1, 2})
	if err == nil || !strings.Contains(err.Error(), "rank 1: send is 4 bytes but counts[1] is 2") {
		t.Errorf("got %v, want an error about send's size", err)
	}
	h.DType = 0
	if err := ring.AllGather(ctx, ts[1], h, nil, nil, []int{0, 0}); err == nil {
		t.Error("no error for an invalid dtype")
	}
}

// A rank that dies fails the others instead of hanging them, given that
// every rank closes its transport on an error, as a communicator does.
func TestAllGatherPeerDies(t *testing.T) {
	const n, count = 4, 50000
	ts := algotest.MemWorld(t, n)
	counts := []int{count, count, count, count}
	h := transport.Header{Coll: transport.CollAllGather, DType: reduce.Uint8}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, tr := range ts {
		wg.Go(func() {
			if r == 2 {
				tr.Close()
			}
			errs[r] = ring.Config{SegmentBytes: 1 << 10}.AllGather(ctx, tr, h, make([]byte, count), make([]byte, n*count), counts)
			if errs[r] != nil {
				tr.Close()
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("rank %d: got %v, want an error about the closed rank before the deadline", r, err)
		}
	}
}
