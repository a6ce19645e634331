package dissemination_test

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/dissemination"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/verify"
)

// rooted runs broadcast, reduce, gather and scatter from root, in place
// where inPlace is set, and checks every element of every rank's result
// against a naive reference; send must come back unchanged.
func rooted(ctx context.Context, tr transport.Transport, r, n, root, count int, dt reduce.DType, op reduce.Op, seq uint64, inPlace bool) error {
	es := dt.Size()
	h := transport.Header{Seq: seq, Count: uint64(count), DType: dt, Op: op}

	want := algotest.Input(dt, op, count, seq, root)
	buf := algotest.Poisoned(len(want))
	if r == root {
		copy(buf, want)
	}
	h.Coll = transport.CollBroadcast
	if err := dissemination.Broadcast(ctx, tr, h, buf, root); err != nil {
		return err
	}
	if w := verify.Wrong(dt, buf, want); w > 0 {
		return fmt.Errorf("broadcast: %d of %d elements wrong", w, count)
	}

	send := algotest.Input(dt, op, count, seq, r)
	orig := append([]byte(nil), send...)
	var recv []byte
	switch {
	case r == root && inPlace:
		recv = send
	case r == root:
		recv = algotest.Poisoned(len(send))
	}
	h.Coll = transport.CollReduce
	if err := dissemination.Reduce(ctx, tr, h, send, recv, root); err != nil {
		return err
	}
	if r == root {
		verify.Expect(dt, op, want, seq, n)
		if w := verify.Wrong(dt, recv, want); w > 0 {
			return fmt.Errorf("reduce %v %v: %d of %d elements wrong", dt, op, w, count)
		}
	} else if w := verify.Wrong(dt, send, orig); w > 0 {
		return fmt.Errorf("reduce: %d elements of send changed", w)
	}

	var all []byte
	for k := range n {
		all = append(all, algotest.Input(dt, op, count, seq, k)...)
	}
	var got []byte
	mine := algotest.Input(dt, op, count, seq, r)
	if r == root {
		got = algotest.Poisoned(n * count * es)
		if inPlace { // the root's block of recv is its send
			copy(got[r*count*es:], mine)
			mine = got[r*count*es : (r+1)*count*es]
		}
	}
	h.Coll, h.Count = transport.CollGather, uint64(n*count)
	if err := dissemination.Gather(ctx, tr, h, mine, got, root); err != nil {
		return err
	}
	if r == root {
		if w := verify.Wrong(dt, got, all); w > 0 {
			return fmt.Errorf("gather: %d of %d elements wrong", w, n*count)
		}
	}

	var from []byte
	part := algotest.Poisoned(count * es)
	if r == root {
		from = append([]byte(nil), all...)
		if inPlace {
			part = from[r*count*es : (r+1)*count*es]
		}
	}
	h.Coll = transport.CollScatter
	if err := dissemination.Scatter(ctx, tr, h, from, part, root); err != nil {
		return err
	}
	if w := verify.Wrong(dt, part, all[r*count*es:(r+1)*count*es]); w > 0 {
		return fmt.Errorf("scatter: %d of %d elements wrong", w, count)
	}
	if r == root {
		if w := verify.Wrong(dt, from, all); w > 0 {
			return fmt.Errorf("scatter: %d elements of the root's send changed", w)
		}
	}
	return nil
}

func testRooted(t *testing.T, world algotest.World, sizes, counts []int, wrap func(transport.Transport) transport.Transport) {
	for _, n := range sizes {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			ts := world(t, n)
			var seq uint64
			for root := range n {
				for ci, count := range counts {
					dt := reduce.DTypes[(root+ci)%len(reduce.DTypes)]
					op := reduce.Ops[(root+2*ci)%len(reduce.Ops)]
					inPlace := (root+ci)%2 == 0
					seq++
					err := algotest.OnEveryRank(ts, func(ctx context.Context, r int, tr transport.Transport) error {
						if wrap != nil {
							tr = wrap(tr)
						}
						return rooted(ctx, tr, r, n, root, count, dt, op, seq, inPlace)
					})
					if err != nil {
						t.Fatalf("root %d, %d x %v %v, in place %v: %v", root, count, dt, op, inPlace, err)
					}
				}
			}
		})
	}
}

var allSizes = []int{1, 2, 3, 4, 5, 6, 7, 8}

func TestRootedMem(t *testing.T) {
	testRooted(t, algotest.MemWorld, allSizes, []int{0, 1, 2, 3, 7, 13, 1000, 4099}, nil)
}

func TestRootedUnbuffered(t *testing.T) {
	testRooted(t, algotest.MemWorld, []int{2, 3, 6, 8}, []int{0, 1, 13}, func(tr transport.Transport) transport.Transport { return unbuffered{tr} })
}

func TestRootedTCP(t *testing.T) {
	// 20011 elements: messages larger than tcp's small-message path.
	// (TestRootedUnbuffered covers the exchanges that send on a goroutine.)
	testRooted(t, algotest.TCPWorld, []int{3, 6}, []int{0, 13, 20011}, nil)
}

// counting counts the messages a rank sends.
type counting struct {
	transport.Transport
	sent *atomic.Int64
}

func (c counting) Send(ctx context.Context, peer int, h transport.Header, p []byte) error {
	c.sent.Add(1)
	return c.Transport.Send(ctx, peer, h, p)
}

func (c counting) SendBuffer() int { return c.Transport.(transport.Buffered).SendBuffer() }

// Every rank sends one message per round, ceil(log2 n) rounds: as many as
// a binomial tree has, for every n.
func TestRounds(t *testing.T) {
	for _, n := range allSizes {
		ts := algotest.MemWorld(t, n)
		rounds := int64(bits.Len(uint(n - 1)))
		sent := make([]atomic.Int64, n)
		h := transport.Header{Seq: 1, Coll: transport.CollBroadcast, Count: 4, DType: reduce.Float32}
		err := algotest.OnEveryRank(ts, func(ctx context.Context, r int, tr transport.Transport) error {
			return dissemination.Broadcast(ctx, counting{tr, &sent[r]}, h, make([]byte, 16), n-1)
		})
		if err != nil {
			t.Fatal(err)
		}
		for r := range n {
			if got := sent[r].Load(); got != rounds {
				t.Errorf("n=%d rank %d sent %d messages, want %d", n, r, got, rounds)
			}
		}
	}
}

// Ranks that disagree on the root, the count or the collective (among the
// rooted ones and the barrier) all fail: none can finish, since a rank
// finishes only once it has heard from every rank with a header equal to
// its own. Wherever the odd rank sits, some rank sees the mismatch itself.
func TestDisagreementFailsEveryRank(t *testing.T) {
	type call func(ctx context.Context, tr transport.Transport, r, root, count int) error
	es := 4
	colls := map[string]call{
		"broadcast": func(ctx context.Context, tr transport.Transport, r, root, count int) error {
			h := transport.Header{Seq: 1, Coll: transport.CollBroadcast, Count: uint64(count), DType: reduce.Float32}
			return dissemination.Broadcast(ctx, tr, h, make([]byte, count*es), root)
		},
		"reduce": func(ctx context.Context, tr transport.Transport, r, root, count int) error {
			h := transport.Header{Seq: 1, Coll: transport.CollReduce, Count: uint64(count), DType: reduce.Float32, Op: reduce.Sum}
			return dissemination.Reduce(ctx, tr, h, make([]byte, count*es), make([]byte, count*es), root)
		},
		"gather": func(ctx context.Context, tr transport.Transport, r, root, count int) error {
			n := tr.Size()
			h := transport.Header{Seq: 1, Coll: transport.CollGather, Count: uint64(n * count), DType: reduce.Float32}
			return dissemination.Gather(ctx, tr, h, make([]byte, count*es), make([]byte, n*count*es), root)
		},
		"scatter": func(ctx context.Context, tr transport.Transport, r, root, count int) error {
			n := tr.Size()
			h := transport.Header{Seq: 1, Coll: transport.CollScatter, Count: uint64(n * count), DType: reduce.Float32}
			return dissemination.Scatter(ctx, tr, h, make([]byte, n*count*es), make([]byte, count*es), root)
		},
		"barrier": func(ctx context.Context, tr transport.Transport, r, root, count int) error {
			return dissemination.Barrier(ctx, tr, transport.Header{Seq: 1, Coll: transport.CollBarrier, Root: -1})
		},
	}
	for name, fn := range colls {
		for _, kind := range []string{"root", "count", "empty", "collective"} {
			if name == "barrier" && kind != "collective" {
				continue
			}
			for n := 2; n <= 8; n++ {
				for odd := range n {
					what := fmt.Sprintf("%s, %s differs on rank %d of %d", name, kind, odd, n)
					algotest.MismatchFailsEveryRank(t, what, algotest.MemWorld(t, n), func(ctx context.Context, r int, tr transport.Transport) error {
						root, count := algotest.Disagreeing(kind, n, r == odd)
						run := fn
						if r == odd && kind == "collective" {
							run = colls[map[string]string{"broadcast": "scatter", "scatter": "gather", "gather": "reduce", "reduce": "barrier", "barrier": "broadcast"}[name]]
						}
						return run(ctx, tr, r, root, count)
					})
				}
			}
		}
	}
}

func TestBadArguments(t *testing.T) {
	ts := algotest.MemWorld(t, 3)
	ctx := context.Background()
	h := transport.Header{DType: reduce.Float32, Op: reduce.Sum}
	for name, err := range map[string]error{
		"broadcast root -1":  dissemination.Broadcast(ctx, ts[0], h, nil, -1),
		"reduce root 3":      dissemination.Reduce(ctx, ts[0], h, nil, nil, 3),
		"reduce short recv":  dissemination.Reduce(ctx, ts[0], h, make([]byte, 8), make([]byte, 4), 0),
		"reduce bad op":      dissemination.Reduce(ctx, ts[0], transport.Header{DType: reduce.Float32}, nil, nil, 0),
		"gather short recv":  dissemination.Gather(ctx, ts[0], h, make([]byte, 4), make([]byte, 8), 0),
		"scatter short send": dissemination.Scatter(ctx, ts[0], h, make([]byte, 8), make([]byte, 4), 0),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// A steady stream of small rooted collectives must not allocate: staging
// buffers are pooled and every exchange runs on the calling goroutine.
func TestNoAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop buffers")
	}
	const n, count = 5, 256
	ts := algotest.MemWorld(t, n)
	var seq uint64
	round := func(run bool) func() {
		return func() {
			seq++
			var wg sync.WaitGroup
			for r, tr := range ts {
				wg.Go(func() {
					if !run {
						return
					}
					ctx := context.Background()
					h := transport.Header{Seq: seq, Count: count, DType: reduce.Float32, Op: reduce.Sum}
					buf := bufs[r]
					errs[r] = errors.Join(
						dissemination.Broadcast(ctx, tr, h, buf[:count*4], 1),
						dissemination.Reduce(ctx, tr, h, buf[:count*4], buf[count*4:2*count*4], 1),
						dissemination.Gather(ctx, tr, h, buf[:count*4], buf[count*4:], 1),
						dissemination.Scatter(ctx, tr, h, buf[count*4:], buf[:count*4], 1))
				})
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
		}
	}
	round(true)()
	harness := testing.AllocsPerRun(20, round(false))
	total := testing.AllocsPerRun(20, round(true))
	if total > harness {
		t.Errorf("%.1f allocations per round of four rooted collectives on %d ranks beyond the harness's %.1f", total-harness, n, harness)
	}
}

var (
	bufs = func() [][]byte {
		b := make([][]byte, 5)
		for r := range b {
			b[r] = make([]byte, (5+1)*256*4)
		}
		return b
	}()
	errs = make([]error, 5)
)
