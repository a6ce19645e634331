package collkit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/shm"
)

// A call is one rank's view of a collective: which one, and its count (per
// rank, as the collective's buffers are sized), root, dtype and op.
type call struct {
	coll  string
	count int
	root  int
	dt    DType
	op    Op
}

// collNames are every collective a Comm runs.
var collNames = []string{"allreduce", "broadcast", "reduce", "allgather", "reducescatter", "gather", "scatter", "alltoall", "barrier"}

// run makes the call on c with buffers of the sizes it implies.
func (x call) run(ctx context.Context, c *Comm) error {
	n, es := c.Size(), x.dt.Size()
	buf := func(elems int) []byte { return make([]byte, elems*es) }
	atRoot := func(elems int) []byte {
		if c.Rank() == x.root {
			return buf(elems)
		}
		return nil
	}
	switch x.coll {
	case "allreduce":
		b := buf(x.count)
		return c.AllReduce(ctx, x.dt, x.op, b, b)
	case "broadcast":
		return c.Broadcast(ctx, x.dt, buf(x.count), x.root)
	case "reduce":
		return c.Reduce(ctx, x.dt, x.op, buf(x.count), atRoot(x.count), x.root)
	case "allgather":
		return c.AllGather(ctx, x.dt, buf(x.count), buf(n*x.count))
	case "reducescatter":
		return c.ReduceScatter(ctx, x.dt, x.op, buf(n*x.count), buf(x.count))
	case "gather":
		return c.Gather(ctx, x.dt, buf(x.count), atRoot(n*x.count), x.root)
	case "scatter":
		return c.Scatter(ctx, x.dt, atRoot(n*x.count), buf(x.count), x.root)
	case "alltoall":
		return c.AllToAll(ctx, x.dt, buf(n*x.count), buf(n*x.count))
	case "barrier":
		return c.Barrier(ctx)
	}
	panic("unknown collective " + x.coll)
}

func (x call) rooted() bool {
	return x.coll == "broadcast" || x.coll == "reduce" || x.coll == "gather" || x.coll == "scatter"
}

func (x call) reduces() bool {
	return x.coll == "allreduce" || x.coll == "reduce" || x.coll == "reducescatter"
}

// disagreement is a call that every rank but one makes, and the odd rank's.
type disagreement struct {
	name      string
	most, odd call
}

// disagreements lists, for collective coll with count elements, every way
// one rank can disagree with the others: its count (one more, none while
// the others pass some, some while the others pass none), its root, dtype
// and op where the collective has them, and the collective itself (every
// other one, or with one set only the next in collNames).
func disagreements(coll string, count, n int, one bool) []disagreement {
	base := call{coll: coll, count: count, dt: Float32, op: Sum}
	with := func(name string, most, odd call) disagreement {
		return disagreement{name: fmt.Sprintf("%s %d/%s", coll, count, name), most: most, odd: odd}
	}
	var ds []disagreement
	if coll != "barrier" {
		odd := base
		odd.count++
		ds = append(ds, with("count", base, odd))
		odd.count = 0
		ds = append(ds, with("empty vs data", base, odd))
		none := base
		none.count = 0
		ds = append(ds, with("data vs empty", none, base))
		odd = base
		odd.dt = Int32 // same size: only the header tells them apart
		ds = append(ds, with("dtype", base, odd))
	}
	if base.rooted() {
		odd := base
		odd.root = n - 1
		ds = append(ds, with("root", base, odd))
	}
	if base.reduces() {
		odd := base
		odd.op = Max
		ds = append(ds, with("op", base, odd))
	}
	next := collNames[(slices.Index(collNames, coll)+1)%len(collNames)]
	for _, other := range collNames {
		if other != coll && (!one || other == next) {
			odd := base
			odd.coll = other
			ds = append(ds, with("vs "+other, base, odd))
		}
	}
	return ds
}

// agreementTimeout is the communicators' timeout in these tests: far
// longer than a mismatch takes to fail every rank, so a rank that waits
// for it is a failure of the guarantee, not of a slow machine.
const agreementTimeout = 20 * time.Second

// checkEveryRankFails runs d on cs (the odd call on rank odd) and checks
// that every rank's call returned an error about the disagreement, the
// mismatch itself or a peer's abort notice quoting it, and not the
// timeout.
func checkEveryRankFails(t *testing.T, cs []*Comm, d disagreement, odd int) {
	t.Helper()
	errs := onEvery(cs, func(r int, c *Comm) error {
		x := d.most
		if r == odd {
			x = d.odd
		}
		return x.run(context.Background(), c)
	})
	for r, err := range errs {
		switch {
		case err == nil:
			t.Errorf("%s on rank %d of %d: rank %d returned no error", d.name, odd, len(cs), r)
		case errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "communicator timeout"):
			t.Errorf("%s on rank %d of %d: rank %d waited for the timeout: %v", d.name, odd, len(cs), r, err)
		case !aboutMismatch(err):
			t.Errorf("%s on rank %d of %d: rank %d: %v\nwant a mismatch error or an abort quoting one", d.name, odd, len(cs), r, err)
		}
	}
}

// The guarantee: a count, root, dtype, op or collective mismatch between
// ranks, empty buffers included, fails every rank at that call, for every
// collective, whichever rank is the odd one, over the in-memory transport.
// Counts cover the small paths and (for broadcast and reduce) the
// pipelined ones above DefaultTreeBytes.
func TestDisagreementFailsEveryRankMem(t *testing.T) {
	for _, n := range []int{2, 3, 4, 5} {
		for _, coll := range collNames {
			for _, count := range []int{4, DefaultTreeBytes/4 + 1} {
				if count > 4 && coll != "broadcast" && coll != "reduce" {
					continue
				}
				for _, d := range disagreements(coll, count, n, false) {
					t.Run(fmt.Sprintf("n=%d/%s", n, d.name), func(t *testing.T) {
						for odd := range n {
							net := algotest.MemWorld(t, n)
							cs := make([]*Comm, n)
							for r, tr := range net {
								c, err := New(tr, Options{Timeout: agreementTimeout, NoStats: true})
								if err != nil {
									t.Fatal(err)
								}
								cs[r] = c
							}
							checkEveryRankFails(t, cs, d, odd)
							for _, c := range cs {
								c.Close()
							}
						}
					})
				}
			}
		}
	}
}

// The same over real sockets, for every collective and kind of
// disagreement (against one other collective each), with the odd rank in
// the middle of four.
func TestDisagreementFailsEveryRankTCP(t *testing.T) {
	t.Parallel() // mostly waiting on sockets
	const n, odd = 4, 2
	for _, coll := range collNames {
		for _, d := range disagreements(coll, 4, n, true) {
			t.Run(d.name, func(t *testing.T) {
				checkEveryRankFails(t, tcpComms(t, n, Options{Timeout: agreementTimeout}), d, odd)
			})
		}
	}
	// The pipelined paths: the chain broadcast agrees first, the ring
	// reduce hears from everyone in its reduce-scatter.
	for _, coll := range []string{"broadcast", "reduce"} {
		for _, d := range disagreements(coll, DefaultTreeBytes/4+1, n, true)[:5] {
			t.Run(d.name, func(t *testing.T) {
				checkEveryRankFails(t, tcpComms(t, n, Options{Timeout: agreementTimeout}), d, odd)
			})
		}
	}
}

// Under every all-reduce algorithm, an all-reduce that disagrees with the
// others', an empty one included, fails every rank at the call; so does
// another collective against it. Against the tree and hierarchical
// all-reduces, whose first messages go to tree or node neighbours, the
// other collective's messages may reach only ranks that wait on someone
// else: the call watch (WatchPeriod) finds them there.
func TestAllReduceDisagreementEveryAlgorithm(t *testing.T) {
	for _, algo := range []string{"ring", "tree", "halvingdoubling", "hierarchical", "adaptive"} {
		for _, n := range []int{3, 4, 5} {
			for _, d := range disagreements("allreduce", 4, n, false) {
				asks := (algo == "tree" || algo == "hierarchical") && d.odd.coll != "allreduce"
				for odd := range n {
					if asks && (n != 4 || odd%3 != 0) {
						continue // found by asking the peers after AskAfter: two cases each
					}
					net := algotest.MemWorld(t, n)
					cs := make([]*Comm, n)
					for r, tr := range net {
						c, err := New(tr, Options{Algorithm: algo, SimulatedNodes: 2, Timeout: agreementTimeout, NoStats: true})
						if err != nil {
							t.Fatal(err)
						}
						cs[r] = c
					}
					named := d
					named.name = algo + " " + d.name
					checkEveryRankFails(t, cs, named, odd)
					for _, c := range cs {
						c.Close()
					}
				}
			}
		}
	}
}

// The same over sockets and shared memory: a different collective against
// the tree and hierarchical all-reduces (found by Peek over tcp, or by
// asking the peers) and against shared memory's native all-reduce (Peek
// into the rings) fails every rank at the call.
func TestOtherCollectiveAgainstAllReduceSockets(t *testing.T) {
	t.Parallel() // mostly waiting
	const n = 4
	allreduce := call{coll: "allreduce", count: 4, dt: Float32, op: Sum}
	for _, other := range []string{"allgather", "barrier", "scatter"} {
		d := disagreement{name: "allreduce vs " + other, most: allreduce, odd: allreduce}
		d.odd.coll = other
		for _, algo := range []string{"tree", "hierarchical"} {
			t.Run("tcp/"+algo+"/"+other, func(t *testing.T) {
				checkEveryRankFails(t, tcpComms(t, n, Options{Algorithm: algo, SimulatedNodes: 2, Timeout: agreementTimeout}), d, 1)
			})
		}
		t.Run("shm/native/"+other, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ts, err := shm.Local(ctx, n, shm.Config{})
			if err != nil {
				t.Fatal(err)
			}
			cs := make([]*Comm, n)
			for r, tr := range ts {
				if cs[r], err = New(tr, Options{Timeout: agreementTimeout, NoStats: true}); err != nil {
					t.Fatal(err)
				}
				defer cs[r].Close()
			}
			if cs[0].Algorithm() != "native" {
				t.Fatalf("algorithm %q over shm, want native", cs[0].Algorithm())
			}
			checkEveryRankFails(t, cs, d, 2)
		})
	}
}

// The failures measured before this guarantee: rank 0's empty all-reduce
// returned at once while ranks 1 and 2 waited for the timeout; ranks that
// disagreed on a broadcast's root all returned, with different data.
func TestMeasuredDisagreements(t *testing.T) {
	for _, world := range []struct {
		name  string
		comms func(t *testing.T, n int) []*Comm
	}{
		{"mem", func(t *testing.T, n int) []*Comm { return newComms(t, algotest.MemWorld(t, n)) }},
		{"tcp", func(t *testing.T, n int) []*Comm { return tcpComms(t, n, Options{Timeout: agreementTimeout}) }},
	} {
		t.Run(world.name, func(t *testing.T) {
			empty := disagreement{name: "empty all-reduce on rank 0",
				most: call{coll: "allreduce", count: 4, dt: Float32, op: Sum}, odd: call{coll: "allreduce", dt: Float32, op: Sum}}
			checkEveryRankFails(t, world.comms(t, 3), empty, 0)
			for odd := range 4 {
				root := disagreement{name: "broadcast root",
					most: call{coll: "broadcast", count: 4, dt: Float32}, odd: call{coll: "broadcast", count: 4, dt: Float32, root: 1 + odd%3}}
				checkEveryRankFails(t, world.comms(t, 4), root, odd)
			}
		})
	}
}

// A communicator that agreed on a call stays usable: empty calls of every
// collective pass on every rank and leave the sequence in step.
func TestEmptyCallsAgree(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5} {
		cs := newComms(t, algotest.MemWorld(t, n))
		for _, coll := range collNames {
			x := call{coll: coll, dt: Float32, op: Sum}
			if err := onAll(cs, func(ctx context.Context, r int, c *Comm) error { return x.run(ctx, c) }); err != nil {
				t.Fatalf("n=%d, empty %s: %v", n, coll, err)
			}
		}
		x := call{coll: "allreduce", count: 3, dt: Float32, op: Sum}
		if err := onAll(cs, func(ctx context.Context, r int, c *Comm) error { return x.run(ctx, c) }); err != nil {
			t.Fatalf("n=%d, an all-reduce after the empty calls: %v", n, err)
		}
	}
}

// Send and Recv that disagree: the receiver fails at its call. A Send that
// the transport takes without the receiver (tcp: into the socket buffers;
// mem: always) has returned by then, and the sender learns of the mismatch
// at its next call; a Send too large for the buffers waits for the
// receiver, and fails itself, quoting the receiver's error.
func TestSendRecvDisagreement(t *testing.T) {
	for _, tc := range []struct {
		name       string
		comms      func(t *testing.T) []*Comm
		bytes      int
		senderNow  bool // the Send itself fails
		senderNext bool // else its next call
	}{
		{"mem", func(t *testing.T) []*Comm { return newComms(t, algotest.MemWorld(t, 2)) }, 64, false, true},
		{"tcp small", func(t *testing.T) []*Comm { return tcpComms(t, 2, Options{Timeout: agreementTimeout}) }, 64, false, true},
		{"tcp large", func(t *testing.T) []*Comm { return tcpComms(t, 2, Options{Timeout: agreementTimeout}) }, 64 << 20, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := tc.comms(t)
			errs := onEvery(cs, func(r int, c *Comm) error {
				ctx := context.Background()
				if r == 0 {
					return c.Send(ctx, Uint8, make([]byte, tc.bytes), 1)
				}
				return c.Recv(ctx, Uint8, make([]byte, tc.bytes+1), 0)
			})
			if !errors.Is(errs[1], transport.ErrMismatch) {
				t.Errorf("receiver: got %v, want a mismatch", errs[1])
			}
			sendErr := errs[0]
			if tc.senderNow && !aboutMismatch(sendErr) {
				t.Errorf("sender of %d bytes: got %v, want the receiver's abort quoting its mismatch", tc.bytes, sendErr)
			}
			if !tc.senderNow {
				if sendErr != nil {
					t.Errorf("sender of %d bytes: got %v; the transport took the message, so the Send should have returned", tc.bytes, sendErr)
				}
				// Its next call quotes the receiver's abort.
				sendErr = cs[0].Barrier(context.Background())
			}
			if tc.senderNext && !aboutMismatch(sendErr) {
				t.Errorf("sender's next call: got %v, want the receiver's abort quoting its mismatch", sendErr)
			}
		})
	}
}
