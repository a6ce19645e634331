package collkit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/mem"
	"github.com/collkit/collkit/verify"
)

// newComms builds one communicator per transport.
func newComms(t testing.TB, ts []transport.Transport) []*Comm {
	t.Helper()
	cs := make([]*Comm, len(ts))
	for r, tr := range ts {
		c, err := New(tr, Options{Timeout: 60 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cs[r] = c
	}
	return cs
}

// onAll runs fn on every rank at once; a failing rank's error is returned
// (the communicator's own failure handling unblocks the others).
func onAll(cs []*Comm, fn func(ctx context.Context, r int, c *Comm) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Go(func() {
			if err := fn(ctx, r, c); err != nil {
				errs[r] = fmt.Errorf("rank %d: %w", r, err)
				cancel()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func wrong(dt DType, got, want []byte) error {
	if w := verify.Wrong(dt, got, want); w > 0 {
		return fmt.Errorf("%d of %d elements wrong", w, len(want)/dt.Size())
	}
	return nil
}

// collCounts are per-rank element counts: empty, one, odd, and one past
// the tree threshold for 8-byte types.
var collCounts = []int{0, 1, 3, 131, 1031}

// testCollectives runs every collective against a naive reference: every
// dtype of dtypes, every op (rotating with the count), every root, in place
// and out of place, with the tree path and (treeBytes < 0) the ring path
// (and the pairwise scatter).
func testCollectives(t *testing.T, world algotest.World, sizes []int, counts []int, dtypes []DType) {
	for _, n := range sizes {
		for _, path := range []string{"tree", "ring"} {
			t.Run(fmt.Sprintf("n=%d/%s", n, path), func(t *testing.T) {
				cs := newComms(t, world(t, n))
				for _, c := range cs {
					if path == "ring" {
						c.treeBytes, c.bcastBytes, c.directBytes = -1, -1, 0
					}
				}
				var seed uint64
				for di, dt := range dtypes {
					for ci, count := range counts {
						op := reduce.Ops[(ci+di)%len(reduce.Ops)]
						inPlace := (ci+di)%2 == 0
						for _, cc := range collectiveCases(n, dt, op, count, inPlace) {
							seed++
							if err := onAll(cs, func(ctx context.Context, r int, c *Comm) error { return cc.run(ctx, c, r, seed) }); err != nil {
								t.Fatalf("%s %v %v count=%d inPlace=%v: %v", cc.name, dt, op, count, inPlace, err)
							}
						}
					}
				}
			})
		}
	}
}

type collCase struct {
	name string
	run  func(ctx context.Context, c *Comm, r int, seed uint64) error
}

func collectiveCases(n int, dt DType, op Op, count int, inPlace bool) []collCase {
	es := dt.Size()
	var cases []collCase
	for root := range n {
		cases = append(cases,
			collCase{fmt.Sprintf("broadcast root %d", root), func(ctx context.Context, c *Comm, r int, seed uint64) error {
				want := algotest.Input(dt, op, count, seed, root)
				buf := algotest.Poisoned(len(want))
				if r == root {
					copy(buf, want)
				}
				if err := c.Broadcast(ctx, dt, buf, root); err != nil {
					return err
				}
				return wrong(dt, buf, want)
			}},
			collCase{fmt.Sprintf("reduce root %d", root), func(ctx context.Context, c *Comm, r int, seed uint64) error {
				send := algotest.Input(dt, op, count, seed, r)
				var recv []byte
				switch {
				case r == root && inPlace:
					recv = send
				case r == root:
					recv = algotest.Poisoned(len(send))
				}
				if err := c.Reduce(ctx, dt, op, send, recv, root); err != nil {
					return err
				}
				if r != root {
					return nil
				}
				want := make([]byte, len(send))
				verify.Expect(dt, op, want, seed, n)
				return wrong(dt, recv, want)
			}},
			collCase{fmt.Sprintf("gather root %d", root), func(ctx context.Context, c *Comm, r int, seed uint64) error {
				send := algotest.Input(dt, op, count, seed, r)
				var recv []byte
				if r == root {
					recv = algotest.Poisoned(n * len(send))
				}
				if err := c.Gather(ctx, dt, send, recv, root); err != nil || r != root {
					return err
				}
				want := make([]byte, 0, len(recv))
				for k := range n {
					want = append(want, algotest.Input(dt, op, count, seed, k)...)
				}
				return wrong(dt, recv, want)
			}},
			collCase{fmt.Sprintf("scatter root %d", root), func(ctx context.Context, c *Comm, r int, seed uint64) error {
				var send []byte
				if r == root {
					send = algotest.Input(dt, op, n*count, seed, root)
				}
				recv := algotest.Poisoned(count * es)
				if err := c.Scatter(ctx, dt, send, recv, root); err != nil {
					return err
				}
				want := make([]byte, count*es)
				verify.FillFrom(dt, op, want, seed, root, r*count)
				return wrong(dt, recv, want)
			}},
		)
	}
	return append(cases,
		collCase{"allgather", func(ctx context.Context, c *Comm, r int, seed uint64) error {
			recv := algotest.Poisoned(n * count * es)
			send := recv[r*count*es : (r+1)*count*es]
			if !inPlace {
				send = make([]byte, count*es)
			}
			verify.Fill(dt, op, send, seed, r)
			if err := c.AllGather(ctx, dt, send, recv); err != nil {
				return err
			}
			want := make([]byte, 0, len(recv))
			for k := range n {
				want = append(want, algotest.Input(dt, op, count, seed, k)...)
			}
			return wrong(dt, recv, want)
		}},
		collCase{"reducescatter", func(ctx context.Context, c *Comm, r int, seed uint64) error {
			send := algotest.Input(dt, op, n*count, seed, r)
			recv := send[r*count*es : (r+1)*count*es]
			if !inPlace {
				recv = algotest.Poisoned(count * es)
			}
			if err := c.ReduceScatter(ctx, dt, op, send, recv); err != nil {
				return err
			}
			want := make([]byte, count*es)
			verify.ExpectFrom(dt, op, want, seed, n, r*count)
			return wrong(dt, recv, want)
		}},
		collCase{"alltoall", func(ctx context.Context, c *Comm, r int, seed uint64) error {
			send := algotest.Input(dt, op, n*count, seed, r)
			recv := send
			if !inPlace {
				recv = algotest.Poisoned(len(send))
			}
			if err := c.AllToAll(ctx, dt, send, recv); err != nil {
				return err
			}
			// Block r of every rank's send, made alone: each rank making
			// every rank's whole input cost n^3 blocks a call.
			want := make([]byte, len(recv))
			for k := range n {
				verify.FillFrom(dt, op, want[k*count*es:(k+1)*count*es], seed, k, r*count)
			}
			return wrong(dt, recv, want)
		}},
		collCase{"sendrecv ring", func(ctx context.Context, c *Comm, r int, seed uint64) error {
			if n == 1 {
				return nil
			}
			// Odd ranks receive first, so that blocking sends cannot
			// deadlock the ring (the last even rank sends to rank 0 only
			// after rank 0's send completed).
			to, from := (r+1)%n, (r-1+n)%n
			recv := algotest.Poisoned(count * es)
			var err error
			if r%2 == 0 {
				if err = c.Send(ctx, dt, algotest.Input(dt, op, count, seed, r), to); err == nil {
					err = c.Recv(ctx, dt, recv, from)
				}
			} else if err = c.Recv(ctx, dt, recv, from); err == nil {
				err = c.Send(ctx, dt, algotest.Input(dt, op, count, seed, r), to)
			}
			if err != nil {
				return err
			}
			return wrong(dt, recv, algotest.Input(dt, op, count, seed, from))
		}},
	)
}

func TestCollectivesMem(t *testing.T) {
	t.Parallel()
	testCollectives(t, algotest.MemWorld, []int{1, 2, 3, 4, 5, 6, 7, 8}, collCounts, reduce.DTypes)
}

// Over sockets, the sizes from 1 to 5 (one rank, powers of two, odd) and a
// dtype of each element size, float and integer: the in-memory run covers
// every size from 1 to 8 and every dtype, and this one took 90 s of the race
// suite with all eight sizes, about 15 s with every dtype.
func TestCollectivesTCP(t *testing.T) {
	t.Parallel() // mostly waiting on sockets: it overlaps with the in-memory run
	testCollectives(t, algotest.TCPWorld, []int{1, 2, 3, 4, 5}, []int{0, 3, 9001},
		[]DType{reduce.Float32, reduce.Int64, reduce.Uint8, reduce.BFloat16})
}

// Nobody leaves a barrier before everyone has entered it.
func TestBarrier(t *testing.T) {
	for _, world := range []algotest.World{algotest.MemWorld, algotest.TCPWorld} {
		for _, n := range []int{1, 2, 3, 5, 8} {
			cs := newComms(t, world(t, n))
			for round := range 20 {
				var entered atomic.Int64
				err := onAll(cs, func(ctx context.Context, r int, c *Comm) error {
					entered.Add(1)
					if err := c.Barrier(ctx); err != nil {
						return err
					}
					if got := entered.Load(); got != int64(n) {
						return fmt.Errorf("round %d: left the barrier when %d of %d ranks had entered", round, got, n)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				// Everyone has checked before the next round's increments.
				if err := onAll(cs, func(ctx context.Context, r int, c *Comm) error { return c.Barrier(ctx) }); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// Bad arguments give ErrBadArgument on the caller's rank, before anything
// is sent, and fail the communicator: the other ranks, making the right
// call, fail at it quoting the bad argument instead of waiting for rank 1.
func TestCollectiveBadArguments(t *testing.T) {
	f4, f8 := make([]byte, 4), make([]byte, 8)
	for _, tc := range []struct {
		name string
		bad  func(ctx context.Context, c *Comm) error // rank 1's call
		good func(ctx context.Context, c *Comm) error // the others'
	}{
		{"broadcast root", func(ctx context.Context, c *Comm) error { return c.Broadcast(ctx, Float32, f4, 3) },
			func(ctx context.Context, c *Comm) error { return c.Broadcast(ctx, Float32, make([]byte, 4), 0) }},
		{"broadcast dtype", func(ctx context.Context, c *Comm) error { return c.Broadcast(ctx, 0, nil, 0) },
			func(ctx context.Context, c *Comm) error { return c.Broadcast(ctx, Float32, make([]byte, 4), 0) }},
		{"broadcast partial", func(ctx context.Context, c *Comm) error { return c.Broadcast(ctx, Float32, make([]byte, 6), 0) },
			func(ctx context.Context, c *Comm) error { return c.Broadcast(ctx, Float32, make([]byte, 8), 0) }},
		{"reduce op", func(ctx context.Context, c *Comm) error { return c.Reduce(ctx, Float32, 0, f4, nil, 0) },
			func(ctx context.Context, c *Comm) error {
				return c.Reduce(ctx, Float32, Sum, make([]byte, 4), make([]byte, 4), 0)
			}},
		{"reduce root recv", func(ctx context.Context, c *Comm) error { return c.Reduce(ctx, Float32, Sum, f4, f8, 1) },
			func(ctx context.Context, c *Comm) error { return c.Reduce(ctx, Float32, Sum, make([]byte, 4), nil, 1) }},
		{"allgather", func(ctx context.Context, c *Comm) error { return c.AllGather(ctx, Float32, f4, f8) },
			func(ctx context.Context, c *Comm) error {
				return c.AllGather(ctx, Float32, make([]byte, 4), make([]byte, 12))
			}},
		{"reducescatter", func(ctx context.Context, c *Comm) error { return c.ReduceScatter(ctx, Float32, Sum, f8, f4) },
			func(ctx context.Context, c *Comm) error {
				return c.ReduceScatter(ctx, Float32, Sum, make([]byte, 12), make([]byte, 4))
			}},
		{"gather", func(ctx context.Context, c *Comm) error { return c.Gather(ctx, Float32, f4, f4, 1) },
			func(ctx context.Context, c *Comm) error { return c.Gather(ctx, Float32, make([]byte, 4), nil, 1) }},
		{"scatter", func(ctx context.Context, c *Comm) error { return c.Scatter(ctx, Float32, f4, f4, 1) },
			func(ctx context.Context, c *Comm) error { return c.Scatter(ctx, Float32, nil, make([]byte, 4), 1) }},
		{"alltoall", func(ctx context.Context, c *Comm) error { return c.AllToAll(ctx, Float32, f8, f8) },
			func(ctx context.Context, c *Comm) error {
				return c.AllToAll(ctx, Float32, make([]byte, 12), make([]byte, 12))
			}},
		{"send to self", func(ctx context.Context, c *Comm) error { return c.Send(ctx, Float32, nil, 1) },
			func(ctx context.Context, c *Comm) error { return c.Barrier(ctx) }},
		{"recv from nobody", func(ctx context.Context, c *Comm) error { return c.Recv(ctx, Float32, nil, 5) },
			func(ctx context.Context, c *Comm) error { return c.Barrier(ctx) }},
		{"group", func(ctx context.Context, c *Comm) error {
			g := c.Group()
			g.AllReduce(Float32, Sum, f4, f8)
			return g.Run(ctx)
		}, func(ctx context.Context, c *Comm) error { return c.Barrier(ctx) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := newComms(t, algotest.MemWorld(t, 3))
			errs := make([]error, len(cs))
			var wg sync.WaitGroup
			for r, c := range cs {
				wg.Go(func() {
					// Long enough that a rank waiting for the timeout shows.
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					if r == 1 {
						errs[r] = tc.bad(ctx, c)
					} else {
						errs[r] = tc.good(ctx, c)
					}
				})
			}
			wg.Wait()
			if !errors.Is(errs[1], ErrBadArgument) || !strings.Contains(errs[1].Error(), "rank 1") {
				t.Errorf("rank 1: got %v, want ErrBadArgument naming rank 1", errs[1])
			}
			for r, err := range errs {
				if r != 1 && (err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "invalid argument")) {
					t.Errorf("rank %d: got %v, want an error at the call quoting rank 1's invalid argument", r, err)
				}
			}
		})
	}
}

// A rank that closes its communicator makes the others' collectives fail
// fast, for every collective, instead of waiting for the timeout.
func TestCollectivePeerCloses(t *testing.T) {
	for _, coll := range []string{"broadcast", "reduce", "allgather", "reducescatter", "gather", "scatter", "alltoall", "barrier", "recv"} {
		cs := newComms(t, algotest.TCPWorld(t, 4))
		start := time.Now()
		err := onAll(cs, func(ctx context.Context, r int, c *Comm) error {
			if r == 3 {
				return c.Close()
			}
			const bs = 1 << 16
			var err error
			switch coll {
			case "broadcast":
				err = c.Broadcast(ctx, Uint8, make([]byte, 4*bs), 3)
			case "reduce":
				err = c.Reduce(ctx, Uint8, Sum, make([]byte, 4*bs), make([]byte, 4*bs), 0)
			case "allgather":
				err = c.AllGather(ctx, Uint8, make([]byte, bs), make([]byte, 4*bs))
			case "reducescatter":
				err = c.ReduceScatter(ctx, Uint8, Sum, make([]byte, 4*bs), make([]byte, bs))
			case "gather":
				err = c.Gather(ctx, Uint8, make([]byte, bs), make([]byte, 4*bs), 0)
			case "scatter":
				err = c.Scatter(ctx, Uint8, make([]byte, 4*bs), make([]byte, bs), 3)
			case "alltoall":
				err = c.AllToAll(ctx, Uint8, make([]byte, 4*bs), make([]byte, 4*bs))
			case "barrier":
				err = c.Barrier(ctx)
			case "recv":
				err = c.Recv(ctx, Uint8, make([]byte, bs), 3)
			}
			if err == nil {
				return fmt.Errorf("%s succeeded with rank 3 closed", coll)
			}
			if strings.Contains(err.Error(), "dtype(") { // a barrier's has no data type to name
				return fmt.Errorf("%s: the error names a data type the call does not have: %v", coll, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Fatalf("%s: took %v to fail", coll, d)
		}
	}
}

// Broadcasts above DefaultBroadcastTreeBytes go down the tree when every
// rank shares one host, and along ring's chain when the ranks span hosts
// (here simulated nodes); the statistics name what ran, and the result is
// checked on every rank.
func TestBroadcastAlgorithmFollowsHosts(t *testing.T) {
	const n, size = 4, DefaultBroadcastTreeBytes + 4<<10
	for _, tc := range []struct {
		nodes int
		want  string
	}{{1, "dissemination"}, {2, "ring"}} {
		t.Run(tc.want, func(t *testing.T) {
			net := mem.NewNetwork(n, mem.Config{})
			t.Cleanup(func() { net.Close() })
			cs := make([]*Comm, n)
			for r, tr := range net.Transports() {
				c, err := New(tr, Options{Transport: "mem", SimulatedNodes: tc.nodes})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				cs[r] = c
			}
			if got := cs[0].BroadcastAlgorithm(size); got != tc.want {
				t.Fatalf("BroadcastAlgorithm(%d) = %s with %d nodes, want %s", size, got, tc.nodes, tc.want)
			}
			if got := cs[0].BroadcastAlgorithm(DefaultBroadcastTreeBytes); got != "dissemination" {
				t.Fatalf("BroadcastAlgorithm(%d) = %s, want dissemination", DefaultBroadcastTreeBytes, got)
			}
			bufs := make([][]byte, n)
			err := onAll(cs, func(ctx context.Context, r int, c *Comm) error {
				bufs[r] = make([]byte, size)
				if r == 1 {
					for i := range bufs[r] {
						bufs[r][i] = byte(i*7 + 3)
					}
				}
				return c.Broadcast(ctx, Uint8, bufs[r], 1)
			})
			if err != nil {
				t.Fatal(err)
			}
			for r, c := range cs {
				for i, b := range bufs[r] {
					if b != byte(i*7+3) {
						t.Fatalf("rank %d: byte %d is %d, want %d", r, i, b, byte(i*7+3))
					}
				}
				rows := c.Stats()
				if len(rows) != 1 || rows[0].Collective != "broadcast" || rows[0].Algorithm != tc.want {
					t.Errorf("rank %d: statistics %+v, want one broadcast row of %s", r, rows, tc.want)
				}
			}
		})
	}
}
