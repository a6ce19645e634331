package hierarchical_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/hierarchical"
	"github.com/collkit/collkit/algo/ring"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/mem"
)

// withNodes is an algotest.AllReduceFunc running c with the Nodes that
// nodes gives for the world's size.
func withNodes(c hierarchical.Config, nodes func(n int) []int) algotest.AllReduceFunc {
	return func(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error {
		c := c
		c.Nodes = nodes(t.Size())
		return c.AllReduce(ctx, t, h, send, recv)
	}
}

// Layouts of n ranks into nodes.
func pairs(n int) []int { // nodes of 2 (the last of 1 for odd n)
	nodes := make([]int, n)
	for r := range nodes {
		nodes[r] = r / 2
	}
	return nodes
}

func thirds(n int) []int { // three nodes of uneven sizes for most n
	nodes := make([]int, n)
	for r := range nodes {
		nodes[r] = r * 3 / n
	}
	return nodes
}

func interleaved(n int) []int { // two nodes, arbitrary ids, ranks alternating
	nodes := make([]int, n)
	for r := range nodes {
		nodes[r] = 100 + 7*(r%2)
	}
	return nodes
}

// Nodes of two ranks: 2x2, 3x2, 4x2 take the three phases, odd sizes the
// leaders' path, 1 and 2 ranks are a single node.
func TestAllReduceMemPairs(t *testing.T) {
	algotest.AllReduceWith(t, withNodes(hierarchical.Config{}, pairs), algotest.MemWorld, algotest.Options{
		Counts: []int{0, 1, 2, 3, 7, 13, 1000, 4099},
	})
	// Shards of more than one ring segment, on both paths.
	algotest.AllReduceWith(t, withNodes(hierarchical.Config{}, pairs), algotest.MemWorld, algotest.Options{
		Sizes:  []int{4, 5, 8},
		Counts: []int{65537},
	})
}

// Uneven nodes ({2,1,1}, {2,2,1}, {3,2,2}, {3,3,2}), one rank per node
// (n=2, 3) and even ones (n=6).
func TestAllReduceMemThirds(t *testing.T) {
	algotest.AllReduceWith(t, withNodes(hierarchical.Config{}, thirds), algotest.MemWorld, algotest.Options{
		Sizes:  []int{2, 3, 4, 5, 7, 8},
		Counts: []int{0, 1, 2, 7, 1000, 4099},
	})
}

// Nodes that are not runs of consecutive ranks, with arbitrary ids: two
// nodes of 2, 3 and 4 ranks, and of 3 and 2.
func TestAllReduceMemInterleaved(t *testing.T) {
	algotest.AllReduceWith(t, withNodes(hierarchical.Config{}, interleaved), algotest.MemWorld, algotest.Options{
		Sizes:  []int{4, 5, 6, 8},
		Counts: []int{0, 1, 3, 7, 1000, 4099},
	})
}

// Ring named explicitly at both levels, with tiny segments and no
// one-goroutine path, so that every phase pipelines.
func TestAllReduceMemExplicitRing(t *testing.T) {
	rc := ring.Config{SegmentBytes: 40, EagerBytes: -1}
	c := hierarchical.Config{Intra: rc.AllReduce, Inter: rc.AllReduce, Ring: rc}
	algotest.AllReduceWith(t, withNodes(c, pairs), algotest.MemWorld, algotest.Options{
		Sizes:  []int{3, 4, 6},
		Counts: []int{0, 1, 5, 17, 100, 1001},
	})
	algotest.AllReduceWith(t, withNodes(c, thirds), algotest.MemWorld, algotest.Options{
		Sizes:  []int{5, 7},
		Counts: []int{1, 17, 1001},
	})
}

// Each level over its own transport: one network per node and one per
// local rank, as shared memory inside a node and a NIC per rank would be.
func TestAllReduceMemLevelTransports(t *testing.T) {
	for _, nodes := range [][]int{{0, 0, 1, 1, 2, 2}, {0, 0, 0, 1, 1, 2}} {
		t.Run(fmt.Sprint(nodes), func(t *testing.T) {
			configs := map[transport.Transport]hierarchical.Config{}
			world := func(t testing.TB, n int) []transport.Transport {
				ts := algotest.MemWorld(t, n)
				byNode := map[int][]int{}
				for r, id := range nodes {
					byNode[id] = append(byNode[id], r)
				}
				for r := range ts {
					configs[ts[r]] = hierarchical.Config{Nodes: nodes}
				}
				maxLocal := 0
				for id := 0; id < len(byNode); id++ {
					ranks := byNode[id]
					local := algotest.MemWorld(t, len(ranks))
					for l, r := range ranks {
						c := configs[ts[r]]
						c.IntraTransport = local[l]
						configs[ts[r]] = c
					}
					maxLocal = max(maxLocal, len(ranks))
				}
				for l := range maxLocal {
					var ranks []int
					for id := 0; id < len(byNode); id++ {
						if l < len(byNode[id]) {
							ranks = append(ranks, byNode[id][l])
						}
					}
					if len(ranks) != len(byNode) {
						continue // uneven nodes: only the leaders cross
					}
					across := algotest.MemWorld(t, len(ranks))
					for k, r := range ranks {
						c := configs[ts[r]]
						c.InterTransport = across[k]
						configs[ts[r]] = c
					}
				}
				return ts
			}
			fn := func(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error {
				return configs[t].AllReduce(ctx, t, h, send, recv)
			}
			algotest.AllReduceWith(t, fn, world, algotest.Options{
				Sizes:  []int{len(nodes)},
				Counts: []int{0, 1, 7, 1000, 4099},
			})
		})
	}
}

func TestAllReduceTCP(t *testing.T) {
	for name, nodes := range map[string]func(int) []int{"pairs": pairs, "thirds": thirds} {
		t.Run(name, func(t *testing.T) {
			algotest.AllReduceWith(t, withNodes(hierarchical.Config{}, nodes), algotest.TCPWorld, algotest.Options{
				Sizes:  []int{4, 5},
				Counts: []int{0, 1, 7, 1000, 65537},
				DTypes: []reduce.DType{reduce.Float32, reduce.Int32, reduce.BFloat16},
				Ops:    []reduce.Op{reduce.Sum, reduce.Avg, reduce.Max},
			})
		})
	}
}

// killer calls kill at its transport's first send past after.
type killer struct {
	transport.Transport
	after *atomic.Int64
	kill  func()
}

func (k killer) Send(ctx context.Context, peer int, h transport.Header, p []byte) error {
	if k.after.Add(-1) == 0 {
		k.kill()
	}
	return k.Transport.Send(ctx, peer, h, p)
}

// A rank killed mid-collective: every other rank fails well before its
// deadline, given that a rank closes its transport when it fails, as a
// communicator does.
func TestRankKilled(t *testing.T) {
	for name, nodes := range map[string][]int{"2x2": {0, 0, 1, 1}, "3x2": {0, 0, 1, 1, 2, 2}, "uneven": {0, 0, 0, 1, 1, 2}} {
		for _, victim := range []int{0, 3} {
			t.Run(fmt.Sprintf("%s/kill=%d", name, victim), func(t *testing.T) {
				n := len(nodes)
				net := mem.NewNetwork(n, mem.Config{})
				defer net.Close()
				ts := net.Transports()
				// Rank 1 kills the victim at its 20th message.
				after := new(atomic.Int64)
				after.Store(20)
				ts[1] = killer{ts[1], after, func() { net.Kill(victim) }}
				c := hierarchical.Config{Nodes: nodes, Ring: ring.Config{SegmentBytes: 4 << 10}}
				const deadline = 20 * time.Second
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				defer cancel()
				h := transport.Header{Seq: 1, Coll: transport.CollAllReduce, Root: -1, DType: reduce.Float32, Op: reduce.Sum}
				start := time.Now()
				errs := make([]error, n)
				var wg sync.WaitGroup
				for r, tr := range ts {
					wg.Go(func() {
						buf := make([]byte, 1<<20)
						errs[r] = c.AllReduce(ctx, tr, h, buf, buf)
						if errs[r] != nil {
							net.Transport(r).Close()
						}
					})
				}
				wg.Wait()
				for r, err := range errs {
					switch {
					case err == nil:
						t.Errorf("rank %d: no error although rank %d was killed", r, victim)
					case errors.Is(err, context.DeadlineExceeded):
						t.Errorf("rank %d: waited for its deadline: %v", r, err)
					case !strings.Contains(err.Error(), fmt.Sprintf("hierarchical: rank %d", r)):
						t.Errorf("rank %d: error %q does not name the rank", r, err)
					}
				}
				if d := time.Since(start); d > deadline/2 {
					t.Errorf("took %v", d)
				}
			})
		}
	}
}

func TestConfigErrors(t *testing.T) {
	ts := algotest.MemWorld(t, 4)
	ctx := context.Background()
	h := transport.Header{Coll: transport.CollAllReduce, DType: reduce.Float32, Op: reduce.Sum}
	buf := make([]byte, 16)
	other := algotest.MemWorld(t, 3)
	cases := []struct {
		c    hierarchical.Config
		want string
	}{
		{hierarchical.Config{}, "rank 2: Config.Nodes is nil"},
		{hierarchical.Config{Nodes: []int{0, 0, 1}}, "rank 2: Config.Nodes has 3 entries but the transport has 4 ranks"},
		{hierarchical.Config{Nodes: []int{0, 0, 1, 1}, IntraTransport: other[0]}, "Config.IntraTransport has rank 0 of 3, but Nodes puts this rank at local rank 0 of 2"},
		{hierarchical.Config{Nodes: []int{0, 0, 1, 1}, InterTransport: other[1]}, "Config.InterTransport has rank 1 of 3, but Nodes puts this rank on node 1 of 2"},
		{hierarchical.Config{Nodes: []int{5, 5, 5, 5}, IntraTransport: other[2]}, "the intra-node transport has rank 2 of 3, but this is the only level"},
	}
	for _, c := range cases {
		err := c.c.AllReduce(ctx, ts[2], h, buf, buf)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Nodes %v: got %v, want an error containing %q", c.c.Nodes, err, c.want)
		}
	}
	bad := h
	bad.Op = 0
	if err := (hierarchical.Config{Nodes: []int{0, 0, 1, 1}}).AllReduce(ctx, ts[2], bad, buf, buf); err == nil {
		t.Error("no error for an invalid op")
	}
	if err := (hierarchical.Config{Nodes: []int{0, 0, 1, 1}}).AllReduce(ctx, ts[2], h, buf, buf[:8]); err == nil {
		t.Error("no error for buffers of different sizes")
	}
}

// A rank that averages while the others sum gets a mismatch error: the
// levels run Sum for both, but the communicator ids differ.
func TestAvgAgainstSum(t *testing.T) {
	for _, nodes := range [][]int{{0, 0, 1, 1}, {0, 0, 0, 1}} {
		ts := algotest.MemWorld(t, 4)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		errs := make([]error, 4)
		var wg sync.WaitGroup
		for r, tr := range ts {
			wg.Go(func() {
				h := transport.Header{Seq: 1, Coll: transport.CollAllReduce, Root: -1, DType: reduce.Float32, Op: reduce.Sum}
				if r == 0 {
					h.Op = reduce.Avg
				}
				buf := make([]byte, 400)
				if errs[r] = (hierarchical.Config{Nodes: nodes}).AllReduce(ctx, tr, h, buf, buf); errs[r] != nil {
					cancel()
				}
			})
		}
		wg.Wait()
		cancel()
		if err := errors.Join(errs...); !errors.Is(err, transport.ErrMismatch) {
			t.Errorf("nodes %v: got %v, want a mismatch error", nodes, err)
		}
	}
}

func TestGroupBy(t *testing.T) {
	got := hierarchical.GroupBy([]string{"b", "a", "b", "c", "a"})
	if want := []int{0, 1, 0, 2, 1}; !slices.Equal(got, want) {
		t.Errorf("GroupBy = %v, want %v", got, want)
	}
	if got := hierarchical.GroupBy(nil); len(got) != 0 {
		t.Errorf("GroupBy(nil) = %v", got)
	}
}

// A rank whose Nodes differ from the others' gets a mismatch error where
// their messages meet, not wrong data.
func TestNodesDisagree(t *testing.T) {
	ts := algotest.MemWorld(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for r, tr := range ts {
		wg.Go(func() {
			nodes := []int{0, 0, 1, 1}
			if r == 3 {
				nodes = []int{0, 1, 0, 1} // same shapes, other members
			}
			h := transport.Header{Seq: 1, Coll: transport.CollAllReduce, Root: -1, DType: reduce.Int32, Op: reduce.Sum}
			buf := make([]byte, 400)
			if errs[r] = (hierarchical.Config{Nodes: nodes}).AllReduce(ctx, tr, h, buf, buf); errs[r] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); !errors.Is(err, transport.ErrMismatch) {
		t.Errorf("got %v, want a mismatch error", err)
	}
}
