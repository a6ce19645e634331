package ring_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/collkit/collkit/algo/algotest"

	"github.com/collkit/collkit/algo/ring"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/verify"
)

// layouts are the per-rank element counts the block collectives are tested
// with: even, uneven with zeros, one rank holding everything, blocks spanning
// many segments, and (when big) past the one-goroutine threshold.
func layouts(n int, big bool) map[string][]int {
	even, uneven, one, long := make([]int, n), make([]int, n), make([]int, n), make([]int, n)
	for k := range n {
		even[k] = 3
		uneven[k] = (k*7 + 3) % 5
		long[k] = 997 + 13*k
	}
	one[n/2] = 1001
	l := map[string][]int{"even": even, "uneven": uneven, "one": one, "long": long, "empty": make([]int, n)}
	if big {
		b := make([]int, n)
		for k := range n {
			b[k] = 30011 - 7*k + 5000*(k%2)
		}
		l["big"] = b
	}
	return l
}

func sum(counts []int) int {
	s := 0
	for _, c := range counts {
		s += c
	}
	return s
}

type rsOptions struct {
	sizes  []int
	dtypes []reduce.DType
	ops    []reduce.Op
	only   []string // layouts; nil means all
	big    bool     // add a layout past the one-goroutine threshold
}

// testReduceScatter checks every rank's block against the exact all-reduce
// of package verify.
func testReduceScatter(t *testing.T, c ring.Config, world func(testing.TB, int) []transport.Transport, o rsOptions) {
	if o.sizes == nil {
		o.sizes = []int{1, 2, 3, 4, 5, 6, 7, 8}
	}
	if o.dtypes == nil {
		o.dtypes = reduce.DTypes
	}
	if o.ops == nil {
		o.ops = reduce.Ops
	}
	for _, n := range o.sizes {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			ts := world(t, n)
			var seq uint64
			for name, counts := range layouts(n, o.big) {
				if o.only != nil && !contains(o.only, name) {
					continue
				}
				for _, dt := range o.dtypes {
					for _, op := range o.ops {
						for _, inPlace := range []bool{false, true} {
							seq++
							if err := reduceScatterOnce(c, ts, seq, dt, op, counts, inPlace); err != nil {
								t.Fatalf("%s counts %v %v %v inPlace=%v: %v", name, counts, dt, op, inPlace, err)
							}
						}
					}
				}
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func reduceScatterOnce(c ring.Config, ts []transport.Transport, seq uint64, dt reduce.DType, op reduce.Op, counts []int, inPlace bool) error {
	n, es := len(ts), dt.Size()
	total := sum(counts)
	want := make([]byte, total*es)
	verify.Expect(dt, op, want, seq, n)
	h := transport.Header{Seq: seq, Count: uint64(total), Root: -1, Coll: transport.CollReduceScatter, DType: dt, Op: op}
	return algotest.OnEveryRank(ts, func(ctx context.Context, r int, tr transport.Transport) error {
		send := make([]byte, total*es)
		verify.Fill(dt, op, send, seq, r)
		orig := append([]byte(nil), send...)
		lo := sum(counts[:r]) * es
		hi := lo + counts[r]*es
		recv := send[lo:hi]
		if !inPlace {
			recv = algotest.Poisoned(hi - lo)
		}
		if err := c.ReduceScatter(ctx, tr, h, send, recv, counts); err != nil {
			return err
		}
		if w := verify.Wrong(dt, recv, want[lo:hi]); w > 0 {
			return fmt.Errorf("%d of %d elements wrong", w, counts[r])
		}
		if !inPlace && string(send) != string(orig) {
			return fmt.Errorf("out-of-place reduce-scatter wrote to send")
		}
		return nil
	})
}

func TestReduceScatterMem(t *testing.T) {
	testReduceScatter(t, ring.Config{}, algotest.MemWorld, rsOptions{})
}

// The pipelined path (a sender goroutine), with segments small enough that
// blocks span several of them.
func TestReduceScatterMemPipelined(t *testing.T) {
	testReduceScatter(t, ring.Config{SegmentBytes: 40, EagerBytes: -1}, algotest.MemWorld, rsOptions{
		dtypes: []reduce.DType{reduce.Float32, reduce.Uint8, reduce.Float16},
		ops:    []reduce.Op{reduce.Sum, reduce.Avg, reduce.Max},
	})
}

func TestReduceScatterTCP(t *testing.T) {
	testReduceScatter(t, ring.Config{SegmentBytes: 1 << 10}, algotest.TCPWorld, rsOptions{
		sizes:  []int{2, 3, 5},
		dtypes: []reduce.DType{reduce.Float32, reduce.Int64},
		ops:    []reduce.Op{reduce.Sum, reduce.Avg},
		big:    true,
	})
}

func TestReduceScatterArguments(t *testing.T) {
	ts := algotest.MemWorld(t, 2)
	h := transport.Header{Coll: transport.CollReduceScatter, DType: reduce.Float32, Op: reduce.Sum}
	ctx := context.Background()
	cases := []struct {
		send, recv int
		counts     []int
		want       string
	}{
		{8, 4, []int{1}, "1 counts for 2 ranks"},
		{8, 4, []int{1, -1}, "counts[1] is -1"},
		{12, 4, []int{1, 1}, "send is 12 bytes but counts add up to 2 elements"},
		{8, 8, []int{1, 1}, "rank 0: recv is 8 bytes but counts[0] is 1"},
	}
	for _, c := range cases {
		err := ring.ReduceScatter(ctx, ts[0], h, make([]byte, c.send), make([]byte, c.recv), c.counts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("send %d recv %d counts %v: got %v, want an error containing %q", c.send, c.recv, c.counts, err, c.want)
		}
	}
	bad := h
	bad.Op = 0
	if err := ring.ReduceScatter(ctx, ts[0], bad, nil, nil, []int{0, 0}); err == nil {
		t.Error("no error for an invalid op")
	}
}

// Ranks that disagree on counts get an error, not a hang.
func TestReduceScatterCountsDisagree(t *testing.T) {
	ts := algotest.MemWorld(t, 3)
	h := transport.Header{Coll: transport.CollReduceScatter, DType: reduce.Int32, Op: reduce.Sum}
	err := algotest.OnEveryRank(ts, func(ctx context.Context, r int, tr transport.Transport) error {
		counts := []int{2, 2, 2}
		if r == 1 {
			counts = []int{3, 2, 1}
		}
		return ring.ReduceScatter(ctx, tr, h, make([]byte, 24), make([]byte, counts[r]*4), counts)
	})
	if !errors.Is(err, transport.ErrMismatch) {
		t.Fatalf("got %v, want a mismatch error", err)
	}
}
