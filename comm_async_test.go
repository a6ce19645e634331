package collkit

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/transport"
)

// Operations started without waiting run in the order they were started,
// blocking calls taking their turn behind them, and each result is exact.
func TestAsyncOrder(t *testing.T) {
	for _, world := range []struct {
		name string
		make func(testing.TB, int) []transport.Transport
	}{{"mem", algotest.MemWorld}, {"tcp", algotest.TCPWorld}} {
		t.Run(world.name, func(t *testing.T) {
			const n, buckets = 3, 12
			cs := newComms(t, world.make(t, n))
			err := onAll(cs, func(ctx context.Context, r int, c *Comm) error {
				grads := make([][]float32, buckets)
				works := make([]*Work, 0, buckets+2)
				for b := range grads {
					// Sizes from 0 to a few pipelined chunks.
					grads[b] = make([]float32, b*b*1000)
					for i := range grads[b] {
						grads[b][i] = float32(r*100 + b + i%7)
					}
					works = append(works, AllReduceAsync(ctx, c, grads[b], grads[b], Sum))
					if b == buckets/2 {
						// A blocking call in the middle takes its turn.
						x := []int64{int64(r + 1)}
						if err := AllReduce(ctx, c, x, x, Sum); err != nil {
							return err
						}
						if want := int64(n * (n + 1) / 2); x[0] != want {
							return fmt.Errorf("blocking all-reduce between async ones: %d, want %d", x[0], want)
						}
					}
				}
				params := make([]float64, 5)
				if r == 2 {
					for i := range params {
						params[i] = float64(i) + 0.5
					}
				}
				works = append(works, BroadcastAsync(ctx, c, params, 2), c.BarrierAsync(ctx))
				for i, w := range works {
					if err := w.Wait(ctx); err != nil {
						return fmt.Errorf("work %d: %w", i, err)
					}
					if done, err := w.Test(); !done || err != nil {
						return fmt.Errorf("work %d: Test after Wait: %v, %v", i, done, err)
					}
				}
				for b, g := range grads {
					for i, v := range g {
						// sum over ranks of r*100 + b + i%7
						if want := float32(100*n*(n-1)/2 + n*(b+i%7)); v != want {
							return fmt.Errorf("bucket %d element %d: %v, want %v", b, i, v, want)
						}
					}
				}
				for i, v := range params {
					if v != float64(i)+0.5 {
						return fmt.Errorf("broadcast element %d: %v, want %v", i, v, float64(i)+0.5)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A group started without waiting runs in its turn like any operation.
func TestAsyncGroup(t *testing.T) {
	const n = 4
	cs := newComms(t, algotest.MemWorld(t, n))
	err := onAll(cs, func(ctx context.Context, r int, c *Comm) error {
		a, b := []int32{int32(r), 1}, []float64{float64(r)}
		pre := AllReduceAsync(ctx, c, a, a, Max)
		g := c.Group()
		GroupAllReduce(g, b, b, Sum)
		GroupSend(g, []int32{int32(r)}, (r+1)%n)
		got := []int32{-1}
		GroupRecv(g, got, (r+n-1)%n)
		w := g.Start(ctx)
		if err := w.Wait(ctx); err != nil {
			return err
		}
		if err := pre.Wait(ctx); err != nil {
			return err
		}
		if a[0] != n-1 || a[1] != 1 || b[0] != n*(n-1)/2 || got[0] != int32((r+n-1)%n) {
			return fmt.Errorf("got max %v, sum %v, received %v", a, b, got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A failure fails the operations queued behind it, with the first error;
// Wait with a context that ends returns while the operation goes on.
func TestAsyncFailure(t *testing.T) {
	cs := newComms(t, algotest.MemWorld(t, 2))
	ctx := context.Background()
	// Rank 1 never takes part: rank 0's first all-reduce waits for it.
	x := []float32{1}
	w1 := AllReduceAsync(ctx, cs[0], x, x, Sum)
	w2 := cs[0].BarrierAsync(ctx)
	short, cancel := context.WithCancel(ctx)
	cancel()
	if err := w1.Wait(short); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a cancelled context: %v", err)
	}
	if done, _ := w1.Test(); done {
		t.Fatal("the all-reduce finished without rank 1")
	}
	cs[1].Close()
	if err := w1.Wait(ctx); err == nil || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("all-reduce with rank 1 gone: %v, want an error naming rank 1", err)
	}
	if err := w2.Wait(ctx); !errors.Is(err, ErrAborted) {
		t.Fatalf("barrier queued behind the failure: %v, want ErrAborted", err)
	}
	// The queue's goroutine ends when nothing is pending.
	for cs[0].eng.pending.Load() != 0 {
		runtime.Gosched()
	}
}

// Two goroutines calling into one communicator at once: the second call
// fails at once with ErrConcurrentUse, the call in progress fails too (it
// may have been paired with another call on other ranks), and every rank's
// next operation fails quoting the misuse.
func TestConcurrentUse(t *testing.T) {
	const n = 3
	cs := newComms(t, algotest.MemWorld(t, n))
	ctx := context.Background()
	first := make(chan error)
	go func() {
		x := []float32{1}
		first <- AllReduce(ctx, cs[0], x, x, Sum) // waits: ranks 1 and 2 have not called
	}()
	for cs[0].eng.busy.Load() == 0 {
		runtime.Gosched()
	}
	y := []float32{2}
	if err := AllReduce(ctx, cs[0], y, y, Sum); !errors.Is(err, ErrConcurrentUse) || !strings.Contains(err.Error(), "rank 0") {
		t.Fatalf("second goroutine's call: %v, want ErrConcurrentUse naming rank 0", err)
	}
	if err := <-first; !errors.Is(err, ErrConcurrentUse) {
		t.Fatalf("call in progress: %v, want it to fail with ErrConcurrentUse", err)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r := 1; r < n; r++ {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			errs[r] = cs[r].Barrier(ctx)
		})
	}
	wg.Wait()
	for r := 1; r < n; r++ {
		if errs[r] == nil || !strings.Contains(errs[r].Error(), "two goroutines") {
			t.Errorf("rank %d's next call: %v, want an error quoting rank 0's concurrent use", r, errs[r])
		}
	}
}

// Calls made one after another from different goroutines are not
// concurrent use.
func TestSequentialCallsFromGoroutines(t *testing.T) {
	const n = 2
	cs := newComms(t, algotest.MemWorld(t, n))
	err := onAll(cs, func(ctx context.Context, r int, c *Comm) error {
		for i := range 20 {
			errc := make(chan error)
			go func() {
				x := []int32{int32(i)}
				err := AllReduce(ctx, c, x, x, Sum)
				if err == nil && x[0] != int32(n*i) {
					err = fmt.Errorf("call %d: %d, want %d", i, x[0], n*i)
				}
				errc <- err
			}()
			if err := <-errc; err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Blocking all-reduces allocate nothing for the ordering machinery.
func TestAllReduceAllocs(t *testing.T) {
	cs := newComms(t, algotest.MemWorld(t, 1))
	x := []float32{1}
	ctx := context.Background()
	if allocs := testing.AllocsPerRun(100, func() { AllReduce(ctx, cs[0], x, x, Sum) }); allocs > 0 {
		t.Errorf("%v allocations per all-reduce of one rank, want 0", allocs)
	}
}

// The scenario: two goroutines per rank make 25 all-reduces each on
// one communicator over tcp, with different data. Before ErrConcurrentUse,
// 5 of 50 calls returned the other goroutine's sums on every rank without an
// error. Now the overlap is found, every rank fails, and no call succeeds
// after the first error; the test logs how the 150 calls ended. A call that
// completed on one rank before the overlap was seen on another can still
// have been paired with the other goroutine's call there (seen once in
// three runs): no library can tell two goroutines' calls apart across
// ranks, which is why concurrent use is an error.
func TestConcurrentUseTrials(t *testing.T) {
	const n, calls = 3, 25
	cs := newComms(t, algotest.TCPWorld(t, n))
	type outcome struct{ ok, wrong, concurrent, other int }
	results := make([]outcome, n)
	lastOK, firstErr := make([]time.Time, n), make([]time.Time, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for r, c := range cs {
		for g := range 2 {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				for i := range calls {
					x := []float32{float32(g*1000 + i)} // every rank the same: the sum is n times it
					err := AllReduce(ctx, c, x, x, Sum)
					mu.Lock()
					switch {
					case err == nil && x[0] == float32(n*(g*1000+i)):
						results[r].ok++
						lastOK[r] = time.Now()
					case err == nil:
						results[r].wrong++
					case errors.Is(err, ErrConcurrentUse) || strings.Contains(err.Error(), "two goroutines"):
						results[r].concurrent++
					default:
						results[r].other++
					}
					if err != nil && firstErr[r].IsZero() {
						firstErr[r] = time.Now()
					}
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	concurrent := 0
	for r, o := range results {
		t.Logf("rank %d: %d ok, %d wrong sums, %d ErrConcurrentUse (or quoting it), %d other errors", r, o.ok, o.wrong, o.concurrent, o.other)
		concurrent += o.concurrent
		if o.other > 0 {
			t.Errorf("rank %d: %d calls failed with an error that does not name the concurrent use", r, o.other)
		}
		if !firstErr[r].IsZero() && lastOK[r].After(firstErr[r]) {
			t.Errorf("rank %d: a call succeeded after the communicator failed", r)
		}
	}
	if concurrent == 0 {
		t.Error("no call reported the concurrent use")
	}
}
