package collkit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/shm"
	"github.com/collkit/collkit/transport/tcp"
	"github.com/collkit/collkit/verify"
)

// tcpComms connects n communicators in this process over loopback TCP with a
// job secret.
func tcpComms(t *testing.T, n int, opts Options) []*Comm {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ts, err := tcp.Local(ctx, n, tcp.Config{Secret: []byte("reliability-test-secret")})
	if err != nil {
		t.Fatal(err)
	}
	return commsOver(t, ts, opts)
}

// commsOver makes a communicator over each of ts, closed when t ends.
func commsOver[T transport.Transport](t *testing.T, ts []T, opts Options) []*Comm {
	t.Helper()
	cs := make([]*Comm, 0, len(ts))
	t.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
	})
	for _, tr := range ts {
		c, err := New(tr, opts)
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	return cs
}

func onEvery(cs []*Comm, fn func(r int, c *Comm) error) []error {
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Go(func() { errs[r] = fn(r, c) })
	}
	wg.Wait()
	return errs
}

// aboutMismatch reports whether err tells its reader that the ranks
// disagreed: the mismatch itself, or a peer's abort notice quoting it.
func aboutMismatch(err error) bool {
	if errors.Is(err, transport.ErrMismatch) {
		return true
	}
	var ae *transport.AbortError
	return errors.As(err, &ae) && strings.Contains(ae.Reason, "does not match")
}

// shmComms connects n communicators in this process over shared memory.
func shmComms(t *testing.T, n int, opts Options) []*Comm {
	t.Helper()
	ts, err := shm.Local(context.Background(), n, shm.Config{})
	if err != nil {
		t.Skip(err)
	}
	return commsOver(t, ts, opts)
}

// Every kind of disagreement between ranks gives every rank an error that
// says so, quickly, over real sockets and over shared memory (where the
// all-reduce is native: a rank set to another algorithm sends through the
// rings what the others wait for at the barrier); no rank returns a
// result, and no rank is said to have died.
func TestMismatchEveryKind(t *testing.T) {
	for _, tr := range []struct {
		name  string
		comms func(t *testing.T, n int, opts Options) []*Comm
	}{{"tcp", tcpComms}, {"shm", shmComms}} {
		t.Run(tr.name, func(t *testing.T) { mismatchEveryKind(t, tr.comms) })
	}
}

func mismatchEveryKind(t *testing.T, comms func(t *testing.T, n int, opts Options) []*Comm) {
	const n, count = 4, 1000
	allreduce := func(dt DType, op Op, count int) func(c *Comm) error {
		return func(c *Comm) error {
			buf := make([]byte, count*dt.Size())
			return c.AllReduce(context.Background(), dt, op, buf, buf)
		}
	}
	// Above DefaultTreeBytes broadcast runs the pipelined chain, after the
	// ranks agree on the call (comm_agreement_test.go covers the small
	// path and every other collective).
	broadcast := func(root int) func(c *Comm) error {
		return func(c *Comm) error {
			buf := make([]byte, 2*DefaultTreeBytes)
			return c.Broadcast(context.Background(), Float32, buf, root)
		}
	}
	cases := []struct {
		name        string
		most, odd   func(c *Comm) error
		before      func(odd *Comm) error
		wantInError string
	}{
		{name: "size", most: allreduce(Float32, Sum, count), odd: allreduce(Float32, Sum, count+1), wantInError: "count"},
		{name: "dtype", most: allreduce(Float32, Sum, count), odd: allreduce(Int32, Sum, count), wantInError: "dtype"},
		{name: "op", most: allreduce(Float32, Sum, count), odd: allreduce(Float32, Max, count), wantInError: "op"},
		{name: "algorithm", most: allreduce(Float32, Sum, count), odd: allreduce(Float32, Sum, count),
			before: func(c *Comm) error { return c.SetAlgorithm("halvingdoubling") }, wantInError: "algorithm"},
		{name: "collective", most: allreduce(Float32, Sum, count), odd: broadcast(0), wantInError: "collective"},
		{name: "root", most: broadcast(0), odd: broadcast(1), wantInError: "root"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cs := comms(t, n, Options{Timeout: 10 * time.Second})
			const oddRank = 2
			if tc.before != nil {
				if err := tc.before(cs[oddRank]); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			errs := onEvery(cs, func(r int, c *Comm) error {
				if r == oddRank {
					return tc.odd(c)
				}
				return tc.most(c)
			})
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v to fail; the mismatch should be caught at the first message", d)
			}
			named := false
			for r, err := range errs {
				switch {
				case err == nil:
					t.Errorf("rank %d returned no error", r)
				case !aboutMismatch(err):
					t.Errorf("rank %d: %v\nwant an error about the mismatch", r, err)
				case errors.Is(err, context.DeadlineExceeded):
					t.Errorf("rank %d waited for the timeout: %v", r, err)
				case strings.Contains(err.Error(), "died"):
					t.Errorf("rank %d says a rank died; every rank lives: %v", r, err)
				}
				if err != nil && strings.Contains(err.Error(), tc.wantInError+": this rank") {
					named = true
				}
			}
			if !named {
				t.Errorf("no rank's error names the %s difference: %v", tc.wantInError, errs)
			}
			t.Logf("rank 0: %v", errs[0])
		})
	}
}

// killTrials is how many ranks TestKillRandomRank kills; COLLKIT_KILL_TRIALS
// raises it.
func killTrials(t *testing.T) int { return envCount(t, "COLLKIT_KILL_TRIALS", 4) }

// envCount is the integer in the environment variable name, or def when it
// is unset: how many trials a test runs, say.
func envCount(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return n
}

// A rank whose connections vanish at a random moment of a stream of
// all-reduces (as when its process is killed) makes every survivor fail
// within the timeout with an error naming it, and leaves no goroutine
// behind.
func TestKillRandomRank(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	trials := killTrials(t)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	algos := []string{"ring", "halvingdoubling", "hierarchical", "tree"}
	const timeout = 10 * time.Second
	for trial := range trials {
		n := 3 + rng.IntN(3)
		victim, at := rng.IntN(n), rng.IntN(20)
		algo := algos[rng.IntN(len(algos))]
		elems := 1 + rng.IntN(300_000)
		if err := killTrial(t, n, victim, at, algo, elems, timeout); err != nil {
			t.Errorf("trial %d (%d ranks, %s, %d floats, rank %d killed at all-reduce %d): %v",
				trial, n, algo, elems, victim, at, err)
		}
	}
}

func killTrial(t *testing.T, n, victim, at int, algo string, elems int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ts, err := tcp.Local(ctx, n, tcp.Config{Secret: []byte("reliability-test-secret"), Streams: 2})
	if err != nil {
		return err
	}
	cs := make([]*Comm, n)
	for r, tr := range ts {
		if cs[r], err = New(tr, Options{Algorithm: algo, Timeout: timeout, SimulatedNodes: 2}); err != nil {
			return err
		}
	}
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	var killed time.Time
	var killMu sync.Mutex
	// want(i) is all-reduce i's result, made once for every rank: making
	// it is n times the work of making an input, and every rank making its
	// own was a quarter of a 300,000-float trial's CPU under -race.
	var wantMu sync.Mutex
	wants := map[int]func() []byte{}
	want := func(i int) []byte {
		wantMu.Lock()
		f := wants[i]
		if f == nil {
			f = sync.OnceValue(func() []byte {
				w := make([]byte, elems*4)
				verify.Expect(reduce.Float32, reduce.Sum, w, uint64(i+1), n)
				return w
			})
			wants[i] = f
		}
		wantMu.Unlock()
		return f()
	}
	errs := onEvery(cs, func(r int, c *Comm) error {
		send := make([]byte, elems*4)
		recv := make([]byte, elems*4)
		for i := 0; ; i++ {
			seed := uint64(i + 1)
			verify.Fill(reduce.Float32, reduce.Sum, send, seed, r)
			if r == victim && i == at {
				go func() { // the kill lands somewhere inside this all-reduce
					killMu.Lock()
					killed = time.Now()
					killMu.Unlock()
					c.t.Close()
				}()
			}
			if err := c.AllReduce(context.Background(), Float32, Sum, send, recv); err != nil {
				return err
			}
			if w := verify.Wrong(reduce.Float32, recv, want(i)); w != 0 {
				return fmt.Errorf("rank %d: %d wrong elements in all-reduce %d", r, w, i)
			}
			if i > at+1000 {
				return errors.New("still running long after the kill")
			}
		}
	})
	killMu.Lock()
	since := killed
	killMu.Unlock()
	var bad []string
	for r, err := range errs {
		if r == victim {
			continue
		}
		var fe *FailureError
		switch {
		case err == nil:
			bad = append(bad, fmt.Sprintf("rank %d: no error", r))
		case !errors.As(err, &fe):
			bad = append(bad, fmt.Sprintf("rank %d: %v is not a FailureError", r, err))
		case !slices.Contains(fe.Dead, victim) && !strings.Contains(err.Error(), fmt.Sprintf("rank %d died", victim)):
			bad = append(bad, fmt.Sprintf("rank %d does not name rank %d as dead: %v", r, victim, err))
		}
	}
	if d := time.Since(since); d > timeout {
		bad = append(bad, fmt.Sprintf("survivors took %v after the kill, timeout %v", d, timeout))
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "\n"))
	}
	return nil
}

// A timed-out call over tcp names the communicator's timeout as its cause
// every time. The socket's deadline is the context's, and the runtime may
// fire it first: before explain waited for the context, 2 of 20 such
// errors said only "context deadline exceeded".
func TestTimeoutCauseOverTCP(t *testing.T) {
	const timeout = 50 * time.Millisecond
	for i := range 20 {
		cs := tcpComms(t, 2, Options{Timeout: timeout})
		x := make([]float32, 16)
		start := time.Now()
		err := AllReduce(context.Background(), cs[0], x, x, Sum) // rank 1 takes no part
		took := time.Since(start)
		if err == nil || !strings.Contains(err.Error(), "communicator timeout of 50ms") {
			t.Fatalf("call %d: got %v, want the communicator timeout as the cause", i, err)
		}
		if limit := timeout + deadlineSlack + ProbeWindow + time.Second; took > limit {
			t.Fatalf("call %d failed after %v, over %v", i, took, limit)
		}
		for _, c := range cs {
			c.Close()
		}
	}
}
