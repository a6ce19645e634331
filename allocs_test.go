package collkit_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/algo/algotest"
)

// allocSizes are the sizes of the whole array (as collbench counts it) the
// allocation test runs each collective at: a few elements (the
// one-goroutine paths), 1 MiB (the largest one-goroutine ring, the other
// algorithms pipelined) and 16 MiB (everything pipelined).
var allocSizes = []int{12, 1 << 20, 16 << 20}

// allocRuns is how many calls an allocation count averages over, after as
// many to warm the pools up.
const allocRuns = 2

// Every collective, all-reduce with every algorithm, allocates nothing per
// call on any rank once warm: over mem, tcp and shm, from a few bytes to
// 16 MiB, three ranks (an odd number; hierarchical sees nodes of two and
// one). Counts are of the whole process, summed over the ranks; the ranks
// run on goroutines that live across calls, so the test itself adds none.
// COLLKIT_ALLOCS_TABLE=1 prints every count; -short keeps 16 MiB to mem.
func TestAllocs(t *testing.T) {
	if raceDetector {
		t.Skip("the race detector allocates, and makes sync.Pool drop buffers")
	}
	const n = 3
	table := os.Getenv("COLLKIT_ALLOCS_TABLE") != ""
	var rows []string
	for _, w := range []struct {
		name  string
		world algotest.World
	}{{"mem", algotest.MemWorld}, {"tcp", algotest.TCPWorld}, {"shm", algotest.ShmWorld}} {
		t.Run(w.name, func(t *testing.T) {
			cs := make([]*collkit.Comm, n)
			for r, tr := range w.world(t, n) {
				c, err := collkit.New(tr, collkit.Options{Transport: w.name, SimulatedNodes: 2})
				if err != nil {
					t.Fatal(err)
				}
				cs[r] = c
			}
			g := startRanks(t, cs)
			for _, size := range allocSizes {
				if testing.Short() && size > 1<<20 && w.name != "mem" {
					continue // 16 MiB over sockets and shared memory takes seconds
				}
				bufs := newAllocBuffers(n, size)
				// Collect now rather than in a count: a collection
				// empties the pools.
				runtime.GC()
				for _, coll := range allocCollectives(bufs) {
					if coll.algo != "" {
						if err := g.run(func(c *collkit.Comm) error { return c.SetAlgorithm(coll.algo) }); err != nil {
							t.Fatal(err)
						}
					}
					for range allocRuns {
						if err := g.run(coll.op); err != nil {
							t.Fatalf("%s, %d bytes: %v", coll.name, size, err)
						}
					}
					// A count that is not zero is taken again, twice, over
					// five times the calls: the pools fill up over the
					// first calls, and a long call's watch ticks start
					// goroutines now and then (time.AfterFunc: 41-68
					// allocations in 40 calls of 16 MiB pairwise over shm
					// on 3 ranks, 2026-11-29, at c68c639 and dc6c939
					// alike), but a collective that allocates does so
					// every time.
					// A count during which a call ran past
					// collkit.AskAfter (a loaded machine) is taken again
					// too, without counting as a try: the watch's asks
					// allocate.
					var a float64
					asked := false // the last count had an ask in it
					for try, counts := 0, 0; try < 3 && counts < 10; counts++ {
						var err error
						asks := collkit.WatchAsks()
						runs := allocRuns
						if counts > 0 {
							runs *= 5
						}
						a = testing.AllocsPerRun(runs, func() {
							err = errors.Join(err, g.run(coll.op))
						})
						if err != nil {
							t.Fatalf("%s, %d bytes: %v", coll.name, size, err)
						}
						if a == 0 {
							break
						}
						if asked = collkit.WatchAsks() != asks; !asked {
							try++
						}
					}
					if a != 0 && asked {
						t.Logf("%s over %s, %d bytes: every count had calls past collkit.AskAfter (a loaded machine); not counted", coll.name, w.name, size)
						a = 0
					}
					if a != 0 {
						t.Errorf("%s over %s, %d bytes: %v allocations per call (all %d ranks), want 0", coll.name, w.name, size, a, n)
					}
					rows = append(rows, fmt.Sprintf("%s\t%s\t%d\t%v", w.name, coll.name, size, a))
				}
			}
		})
	}
	if table {
		t.Logf("transport\tcollective\tbytes\tallocs/call\n%s", strings.Join(rows, "\n"))
	}
}

// allocBuffers are every rank's send and receive buffers, of the largest
// size any collective of the test needs.
type allocBuffers struct {
	n, size    int
	send, recv [][]byte
}

func newAllocBuffers(n, size int) *allocBuffers {
	b := &allocBuffers{n: n, size: size, send: make([][]byte, n), recv: make([][]byte, n)}
	for r := range n {
		b.send[r], b.recv[r] = make([]byte, size), make([]byte, size)
	}
	return b
}

// block is the bytes of one rank's block of the whole array: whole
// float32 elements, the same for every rank.
func (b *allocBuffers) block() int { return b.size / 4 / b.n * 4 }

type allocCollective struct {
	name string
	algo string // the all-reduce algorithm to switch to first, or ""
	op   func(c *collkit.Comm) error
}

func allocCollectives(b *allocBuffers) []allocCollective {
	ctx := context.Background()
	f32, sum := collkit.Float32, collkit.Sum
	bs, whole := b.block(), b.block()*b.n
	var list []allocCollective
	for _, algo := range []string{"ring", "tree", "halvingdoubling", "hierarchical", "adaptive", "native", "pairwise"} {
		list = append(list, allocCollective{"allreduce " + algo, algo, func(c *collkit.Comm) error {
			r := c.Rank()
			return c.AllReduce(ctx, f32, sum, b.send[r], b.recv[r])
		}})
	}
	list = append(list,
		allocCollective{"allreduce in place", "ring", func(c *collkit.Comm) error {
			r := c.Rank()
			return c.AllReduce(ctx, f32, sum, b.recv[r], b.recv[r])
		}},
		allocCollective{"broadcast", "", func(c *collkit.Comm) error {
			return c.Broadcast(ctx, f32, b.recv[c.Rank()], 1)
		}},
		allocCollective{"reduce", "", func(c *collkit.Comm) error {
			r := c.Rank()
			return c.Reduce(ctx, f32, sum, b.send[r], b.recv[r], 1)
		}},
		allocCollective{"allgather", "", func(c *collkit.Comm) error {
			r := c.Rank()
			return c.AllGather(ctx, f32, b.send[r][:bs], b.recv[r][:whole])
		}},
		allocCollective{"reducescatter", "", func(c *collkit.Comm) error {
			r := c.Rank()
			return c.ReduceScatter(ctx, f32, sum, b.send[r][:whole], b.recv[r][:bs])
		}},
		allocCollective{"reducescatter in place", "", func(c *collkit.Comm) error {
			r := c.Rank()
			return c.ReduceScatter(ctx, f32, sum, b.recv[r][:whole], b.recv[r][r*bs:(r+1)*bs])
		}},
		allocCollective{"gather", "", func(c *collkit.Comm) error {
			r := c.Rank()
			return c.Gather(ctx, f32, b.send[r][:bs], b.recv[r][:whole], 1)
		}},
		allocCollective{"scatter", "", func(c *collkit.Comm) error {
			r := c.Rank()
			return c.Scatter(ctx, f32, b.send[r][:whole], b.recv[r][:bs], 1)
		}},
		allocCollective{"alltoall", "", func(c *collkit.Comm) error {
			r := c.Rank()
			return c.AllToAll(ctx, f32, b.send[r][:whole], b.recv[r][:whole])
		}},
		allocCollective{"alltoall in place", "", func(c *collkit.Comm) error {
			r := c.Rank()
			return c.AllToAll(ctx, f32, b.recv[r][:whole], b.recv[r][:whole])
		}},
		allocCollective{"barrier", "", func(c *collkit.Comm) error { return c.Barrier(ctx) }},
		allocCollective{"send/recv", "", func(c *collkit.Comm) error {
			switch c.Rank() {
			case 0:
				return c.Send(ctx, f32, b.send[0], 1)
			case 1:
				return c.Recv(ctx, f32, b.recv[1], 0)
			}
			return nil
		}},
	)
	return list
}

// allocRanks runs a function on every rank at once, each on a goroutine
// that lives as long as the test, so that a run allocates nothing itself.
type allocRanks struct {
	cs    []*collkit.Comm
	start []chan func(*collkit.Comm) error
	done  chan error
}

func startRanks(t *testing.T, cs []*collkit.Comm) *allocRanks {
	g := &allocRanks{cs: cs, start: make([]chan func(*collkit.Comm) error, len(cs)), done: make(chan error, len(cs))}
	for r := range cs {
		g.start[r] = make(chan func(*collkit.Comm) error)
		go func() {
			for op := range g.start[r] {
				g.done <- op(cs[r])
			}
		}()
	}
	t.Cleanup(func() {
		for r, c := range cs {
			close(g.start[r])
			c.Close()
		}
	})
	return g
}

// run runs op on every rank and returns the ranks' errors.
func (g *allocRanks) run(op func(*collkit.Comm) error) error {
	for _, s := range g.start {
		s <- op
	}
	var err error
	for range g.start {
		if e := <-g.done; e != nil && err == nil {
			err = e
		}
	}
	return err
}

// Adaptive allocates nothing when the size changes from call to call, as
// a training loop's gradient buckets do: every call chooses again (its
// last choice is for the other size) and binds what it chose.
func TestAllocsAdaptiveAlternating(t *testing.T) {
	if raceDetector {
		t.Skip("the race detector allocates")
	}
	const n = 2
	cs := make([]*collkit.Comm, n)
	for r, tr := range algotest.MemWorld(t, n) {
		c, err := collkit.New(tr, collkit.Options{Algorithm: "adaptive"})
		if err != nil {
			t.Fatal(err)
		}
		cs[r] = c
	}
	g := startRanks(t, cs)
	small, large := make([][]float32, n), make([][]float32, n)
	for r := range n {
		small[r], large[r] = make([]float32, 2), make([]float32, 4096)
	}
	rank := func(c *collkit.Comm) int { return c.Rank() }
	two := func(c *collkit.Comm) error {
		ctx, r := context.Background(), rank(c)
		return errors.Join(collkit.AllReduce(ctx, c, small[r], small[r], collkit.Sum),
			collkit.AllReduce(ctx, c, large[r], large[r], collkit.Sum))
	}
	var err error
	for range 3 { // warm the pools
		err = errors.Join(err, g.run(two))
	}
	a := testing.AllocsPerRun(allocRuns, func() { err = errors.Join(err, g.run(two)) })
	if err != nil {
		t.Fatal(err)
	}
	if a != 0 {
		t.Errorf("two all-reduces of 8 B and 16 KiB in turn: %v allocations (both ranks), want 0", a)
	}
}
