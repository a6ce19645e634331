package collkit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/mem"
)

// comms builds n communicators over a fresh in-memory network.
func comms(t *testing.T, n int, cfg mem.Config, opts collkit.Options) ([]*collkit.Comm, *mem.Network) {
	t.Helper()
	net := mem.NewNetwork(n, cfg)
	t.Cleanup(func() { net.Close() })
	cs := make([]*collkit.Comm, n)
	for r, tr := range net.Transports() {
		c, err := collkit.New(tr, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cs[r] = c
	}
	return cs, net
}

// each runs fn on every rank concurrently and returns the ranks' errors.
func each(cs []*collkit.Comm, fn func(rank int, c *collkit.Comm) error) []error {
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Go(func() { errs[r] = fn(r, c) })
	}
	wg.Wait()
	return errs
}

func TestAllReduceTyped(t *testing.T) {
	cs, _ := comms(t, 3, mem.Config{}, collkit.Options{})
	errs := each(cs, func(r int, c *collkit.Comm) error {
		send := []int64{int64(r), 10, -int64(r)}
		recv := make([]int64, 3)
		if err := collkit.AllReduce(context.Background(), c, send, recv, collkit.Max); err != nil {
			return err
		}
		if recv[0] != 2 || recv[1] != 10 || recv[2] != 0 {
			t.Errorf("rank %d: max = %v, want [2 10 0]", r, recv)
		}
		return nil
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestBadArguments(t *testing.T) {
	cs, _ := comms(t, 1, mem.Config{}, collkit.Options{})
	c := cs[0]
	ctx := context.Background()
	cases := map[string]error{
		"length mismatch":    c.AllReduce(ctx, collkit.Float32, collkit.Sum, make([]byte, 8), make([]byte, 4)),
		"not whole elements": c.AllReduce(ctx, collkit.Float32, collkit.Sum, make([]byte, 6), make([]byte, 6)),
		"bad dtype":          c.AllReduce(ctx, 0, collkit.Sum, nil, nil),
		"bad op":             c.AllReduce(ctx, collkit.Float32, 99, nil, nil),
	}
	for name, err := range cases {
		if !errors.Is(err, collkit.ErrBadArgument) || !strings.Contains(err.Error(), "rank 0") {
			t.Errorf("%s: got %v, want ErrBadArgument naming rank 0", name, err)
		}
	}
	// A bad argument fails the communicator, so that no peer waits for
	// this rank: later calls quote it.
	x := []float32{1}
	if err := collkit.AllReduce(ctx, c, x, x, collkit.Sum); !errors.Is(err, collkit.ErrAborted) || !errors.Is(err, collkit.ErrBadArgument) {
		t.Fatalf("after bad arguments: %v, want ErrAborted quoting the first bad argument", err)
	}
	if _, err := collkit.New(cs[0].Transport(), collkit.Options{Algorithm: "bogus"}); !errors.Is(err, collkit.ErrBadArgument) {
		t.Fatalf("unknown algorithm: got %v", err)
	}
}

// Ranks that disagree on the count get an error on every rank, not a hang
// and not wrong data, and the communicator stays failed afterwards.
func TestMismatchFailsEveryRank(t *testing.T) {
	cs, _ := comms(t, 4, mem.Config{}, collkit.Options{Timeout: 10 * time.Second})
	errs := each(cs, func(r int, c *collkit.Comm) error {
		n := 1000
		if r == 2 {
			n = 1001
		}
		x := make([]float32, n)
		return collkit.AllReduce(context.Background(), c, x, x, collkit.Sum)
	})
	mismatches := 0
	for r, err := range errs {
		if err == nil {
			t.Fatalf("rank %d: no error", r)
		}
		if errors.Is(err, transport.ErrMismatch) {
			mismatches++
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("rank %d waited for the timeout instead of failing fast: %v", r, err)
		}
	}
	if mismatches == 0 {
		t.Fatalf("no rank reported the mismatch: %v", errs)
	}
	x := []float32{1}
	if err := collkit.AllReduce(context.Background(), cs[0], x, x, collkit.Sum); !errors.Is(err, collkit.ErrAborted) {
		t.Fatalf("after a failure: got %v, want ErrAborted", err)
	}
}

// A message that never arrives becomes an error within the timeout.
func TestTimeout(t *testing.T) {
	cs, _ := comms(t, 2, mem.Config{Drop: 1, Seed: 1}, collkit.Options{Timeout: 200 * time.Millisecond})
	start := time.Now()
	errs := each(cs, func(r int, c *collkit.Comm) error {
		x := []float32{1, 2, 3, 4}
		return collkit.AllReduce(context.Background(), c, x, x, collkit.Sum)
	})
	timeouts := 0
	for r, err := range errs {
		if err == nil {
			t.Fatalf("rank %d: no error though every message was dropped", r)
		}
		if strings.Contains(err.Error(), "communicator timeout") {
			timeouts++
		}
	}
	// The first rank to time out aborts, so the other may see it leave first.
	if timeouts == 0 {
		t.Fatalf("no rank reported the timeout: %v", errs)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v with a 200ms timeout", d)
	}
}

// The timeout context made for a cancellable parent is reused by later calls
// with that parent (no timer per call), yet a parent cancelled since still
// stops the next call, and the communicator's timeout still applies.
func TestTimeoutReusedUnderCancellableParent(t *testing.T) {
	// A timeout long enough that no call of the 100 nears it on a loaded
	// machine.
	cs, _ := comms(t, 2, mem.Config{}, collkit.Options{Timeout: 2 * time.Second})
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Rank 1 takes part in 100 calls and then stops; rank 0 makes one more.
	errs := each(cs, func(r int, c *collkit.Comm) error {
		x := []float32{1}
		for i := range 100 {
			if err := collkit.AllReduce(parent, c, x, x, collkit.Sum); err != nil {
				return fmt.Errorf("call %d: %w", i, err)
			}
		}
		if r == 0 {
			start := time.Now()
			err := collkit.AllReduce(parent, c, x, x, collkit.Sum)
			if err == nil || !strings.Contains(err.Error(), "communicator timeout") {
				return fmt.Errorf("the 101st call, which rank 1 never joins: got %v, want the communicator timeout", err)
			}
			if d := time.Since(start); d > 10*time.Second {
				return fmt.Errorf("the 101st call failed after %v with a 2s timeout", d)
			}
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}

	cs, _ = comms(t, 2, mem.Config{}, collkit.Options{})
	errs = each(cs, func(r int, c *collkit.Comm) error {
		x := []float32{1}
		return collkit.AllReduce(parent, c, x, x, collkit.Sum)
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d, before the cancel: %v", r, err)
		}
	}
	cancel() // after both ranks' calls: cancelling while rank 1's ran failed it
	x := []float32{1}
	if err := collkit.AllReduce(parent, cs[0], x, x, collkit.Sum); !errors.Is(err, context.Canceled) {
		t.Fatalf("after the parent was cancelled: got %v, want context.Canceled", err)
	}

	// A new timer context per call would allocate.
	one, _ := comms(t, 1, mem.Config{}, collkit.Options{NoStats: true})
	live, stop := context.WithCancel(context.Background())
	defer stop()
	if a := testing.AllocsPerRun(100, func() { collkit.AllReduce(live, one[0], x, x, collkit.Sum) }); a != 0 {
		t.Errorf("a 1-rank all-reduce under a cancellable parent makes %v allocations, want 0 (the timeout context reused)", a)
	}
}

// A killed rank becomes an error naming it on the survivors.
func TestDeadPeer(t *testing.T) {
	cs, net := comms(t, 3, mem.Config{}, collkit.Options{Timeout: 10 * time.Second})
	net.Kill(1)
	errs := each(cs, func(r int, c *collkit.Comm) error {
		x := make([]float64, 100)
		return collkit.AllReduce(context.Background(), c, x, x, collkit.Sum)
	})
	for r, err := range errs {
		if err == nil {
			t.Fatalf("rank %d: no error with rank 1 dead", r)
		}
		if r != 1 && !errors.Is(err, transport.ErrPeerGone) {
			t.Errorf("rank %d: got %v, want ErrPeerGone", r, err)
		}
	}
}
