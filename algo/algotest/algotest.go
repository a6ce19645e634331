package algotest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/verify"
)

// AllReduceFunc is the algorithm under test.
type AllReduceFunc func(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error

// World returns size connected transports, index = rank, cleaned up by t.
type World func(t testing.TB, size int) []transport.Transport

// Counts are the element counts of the table: empty, single, primes, and
// sizes not divisible by any world size, plus one large enough to span many
// pipeline segments.
var Counts = []int{0, 1, 2, 3, 7, 13, 64, 1000, 4099, 65537}

// Options narrows the table, for slow transports.
type Options struct {
	Sizes  []int          // world sizes; nil means 1..8
	Counts []int          // element counts; nil means Counts
	DTypes []reduce.DType // nil means all
	Ops    []reduce.Op    // nil means all
}

// AllReduce runs the correctness table for fn over transports from world.
func AllReduce(t *testing.T, fn AllReduceFunc, world World) {
	AllReduceWith(t, fn, world, Options{})
}

// AllReduceWith runs the table narrowed by opts.
func AllReduceWith(t *testing.T, fn AllReduceFunc, world World, opts Options) {
	if opts.Sizes == nil {
		opts.Sizes = []int{1, 2, 3, 4, 5, 6, 7, 8}
	}
	if opts.Counts == nil {
		opts.Counts = Counts
	}
	if opts.DTypes == nil {
		opts.DTypes = reduce.DTypes
	}
	if opts.Ops == nil {
		opts.Ops = reduce.Ops
	}
	// visit[i] numbers the table's visits to Counts[i] if it is large and
	// the race detector is on (-1 otherwise), over world sizes in order.
	visit := make([]int, len(opts.Counts))
	large := 0
	for i, count := range opts.Counts {
		visit[i] = -1
		if raceEnabled && count >= LargeCount {
			visit[i] = large
			large++
		}
	}
	for k, n := range opts.Sizes {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			ts := world(t, n)
			var seq uint64
			for d, dt := range opts.DTypes {
				for o, op := range opts.Ops {
					for i, count := range opts.Counts {
						for _, inPlace := range []bool{false, true} {
							if visit[i] >= 0 && !sampled(k*large+visit[i], d, o, len(opts.Ops), inPlace) {
								continue
							}
							seq++
							if err := runOne(fn, ts, seq, dt, op, count, inPlace); err != nil {
								t.Fatalf("%v %v count=%d inPlace=%v: %v", dt, op, count, inPlace, err)
							}
						}
					}
				}
			}
		})
	}
}

// LargeCount is where a count becomes large. The race detector makes every
// byte an all-reduce moves or checks cost several times more, and large
// counts are nearly all the bytes; under it the table runs each dtype at a
// large count with two of its op and placement combinations (of ten with
// every op), chosen by sampled. Without the race detector it runs them all.
const LargeCount = 1000

// sampled reports whether the table runs op number o of ops, in place or
// out of place, with dtype number d on its visit number v to a large count
// (the visits are numbered over world sizes, then counts): op (d+v) mod ops
// out of place and the next op in place. So every world size runs every
// large count with every dtype, out of place and in place, and any ops
// visits in a row run every dtype with every op in both placements.
func sampled(v, d, o, ops int, inPlace bool) bool {
	if inPlace {
		return o == (d+v+1)%ops
	}
	return o == (d+v)%ops
}

// runOne runs one all-reduce on every rank at once and checks every element
// of every rank's result.
func runOne(fn AllReduceFunc, ts []transport.Transport, seq uint64, dt reduce.DType, op reduce.Op, count int, inPlace bool) error {
	n := len(ts)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	want := make([]byte, count*dt.Size())
	verify.Expect(dt, op, want, seq, n)
	h := transport.Header{Seq: seq, Count: uint64(count), Root: -1, Coll: transport.CollAllReduce, DType: dt, Op: op}

	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, tr := range ts {
		wg.Go(func() {
			send := make([]byte, count*dt.Size())
			verify.Fill(dt, op, send, seq, r)
			recv := send
			if !inPlace {
				recv = Poisoned(len(send))
			}
			if err := fn(ctx, tr, h, send, recv); err != nil {
				errs[r] = fmt.Errorf("rank %d: %w", r, err)
				cancel()
				return
			}
			if w := verify.Wrong(dt, recv, want); w > 0 {
				errs[r] = fmt.Errorf("rank %d: %d of %d elements wrong", r, w, count)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// OnEveryRank runs fn on every rank of ts at once and returns every rank's
// error, naming the rank; a failing rank cancels the others' ctx.
func OnEveryRank(ts []transport.Transport, fn func(ctx context.Context, r int, t transport.Transport) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make([]error, len(ts))
	var wg sync.WaitGroup
	for r, tr := range ts {
		wg.Go(func() {
			if err := fn(ctx, r, tr); err != nil {
				errs[r] = fmt.Errorf("rank %d: %w", r, err)
				cancel()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// MismatchFailsEveryRank runs fn on every rank of ts at once, where the
// ranks disagree on the call (what says how), a failing rank cancelling
// the others' ctx as a communicator's abort would. It fails t unless every
// rank returned an error and at least one of them is the mismatch itself
// (transport.ErrMismatch), not only the cancellation that followed.
func MismatchFailsEveryRank(t testing.TB, what string, ts []transport.Transport, fn func(ctx context.Context, r int, t transport.Transport) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make([]error, len(ts))
	var wg sync.WaitGroup
	for r, tr := range ts {
		wg.Go(func() {
			if errs[r] = fn(ctx, r, tr); errs[r] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	mismatch := false
	for r, err := range errs {
		if err == nil {
			t.Errorf("%s: rank %d returned no error", what, r)
		}
		mismatch = mismatch || errors.Is(err, transport.ErrMismatch)
	}
	if !mismatch {
		t.Errorf("%s: no rank saw the mismatch: %v", what, errs)
	}
}

// Disagreeing is the root and per-rank count a rooted collective's rank
// passes in a MismatchFailsEveryRank case: root 0 and 4 elements, except on
// the odd rank, where kind "root" moves the root to rank n-1, "count" makes
// the count 5 and "empty" 0 (other kinds change neither).
func Disagreeing(kind string, n int, odd bool) (root, count int) {
	root, count = 0, 4
	if odd {
		switch kind {
		case "root":
			root = n - 1
		case "count":
			count = 5
		case "empty":
			count = 0
		}
	}
	return root, count
}
