package dissemination_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/dissemination"
	"github.com/collkit/collkit/transport"
)

type unbuffered struct{ transport.Transport }

// No rank leaves a barrier before every rank has entered it.
func TestBarrier(t *testing.T) {
	for name, world := range map[string]algotest.World{"mem": algotest.MemWorld, "tcp": algotest.TCPWorld} {
		for _, hide := range []bool{false, true} {
			for _, n := range []int{1, 2, 3, 5, 6, 8} {
				ts := world(t, n)
				for round := range 10 {
					var entered atomic.Int64
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					errs := make([]error, n)
					var wg sync.WaitGroup
					for r, tr := range ts {
						if hide {
							tr = unbuffered{tr}
						}
						wg.Go(func() {
							entered.Add(1)
							h := transport.Header{Seq: uint64(round), Coll: transport.CollBarrier}
							if err := dissemination.Barrier(ctx, tr, h); err != nil {
								errs[r] = err
								cancel()
								return
							}
							if got := entered.Load(); got != int64(n) {
								errs[r] = fmt.Errorf("rank %d left when %d of %d had entered", r, got, n)
							}
						})
					}
					wg.Wait()
					cancel()
					if err := errors.Join(errs...); err != nil {
						t.Fatalf("%s n=%d unbuffered=%v round %d: %v", name, n, hide, round, err)
					}
				}
			}
		}
	}
}

// A rank that never arrives makes the others fail at their deadline, with
// the round named, instead of passing.
func TestBarrierMissingRank(t *testing.T) {
	ts := algotest.MemWorld(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := dissemination.Barrier(ctx, ts[0], transport.Header{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want a deadline error", err)
	}
}

// Agree passes when every rank brings the same header, and otherwise no
// rank passes: each would have to hear from every rank, the odd one
// included, through messages whose headers equal its own.
func TestAgree(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 5, 7, 8} {
		ts := algotest.MemWorld(t, n)
		h := transport.Header{Seq: 1, Coll: transport.CollBroadcast, Count: 4, Root: 0}
		err := algotest.OnEveryRank(ts, func(ctx context.Context, r int, tr transport.Transport) error {
			return dissemination.Agree(ctx, tr, h)
		})
		if err != nil {
			t.Fatalf("n=%d, equal headers: %v", n, err)
		}
		for odd := range n {
			if n == 1 {
				break
			}
			h.Seq++
			algotest.MismatchFailsEveryRank(t, fmt.Sprintf("n=%d, rank %d's count differs", n, odd), ts, func(ctx context.Context, r int, tr transport.Transport) error {
				h := h
				if r == odd {
					h.Count = 0
				}
				return dissemination.Agree(ctx, tr, h)
			})
		}
	}
}
