package bench_test

import (
	"context"
	"sync"
	"testing"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/bench"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/mem"
)

// Every collective of the benchmark runs and checks clean on 3 ranks, with
// a root that is not rank 0, sizes not divisible by the ranks, and a size
// past the tree threshold.
func TestRunCollective(t *testing.T) {
	const n = 3
	cfg := bench.Config{MinBytes: 4, MaxBytes: 256 << 10, StepFactor: 32, Iters: 2, Warmup: 1, Check: 1,
		DType: reduce.Float32, Op: reduce.Max, Seed: 3}
	for _, coll := range bench.Collectives() {
		t.Run(coll, func(t *testing.T) {
			rows := onRanks(t, n, func(c *collkit.Comm) ([]bench.Row, error) {
				return bench.RunCollective(context.Background(), c, coll, cfg, 2, nil)
			})
			barrier := coll == "barrier" // no data: one row of 0 bytes
			if want := len(cfg.Sizes()); barrier && len(rows[0]) != 1 || !barrier && len(rows[0]) != want {
				t.Fatalf("%d rows, want %d (1 for the barrier)", len(rows[0]), want)
			}
			for _, row := range rows[0] {
				if w := row.OutOfPlace.Wrong + row.InPlace.Wrong; w != 0 || !row.OutOfPlace.Checked || !row.InPlace.Checked {
					t.Errorf("%d bytes: %d wrong elements, checked %v and %v", row.Bytes, w, row.OutOfPlace.Checked, row.InPlace.Checked)
				}
				if row.OutOfPlace.TimeUS <= 0 || (row.OutOfPlace.BusBW <= 0) != barrier || barrier && row.Bytes != 0 {
					t.Errorf("%d bytes: time %v us, busbw %v", row.Bytes, row.OutOfPlace.TimeUS, row.OutOfPlace.BusBW)
				}
			}
		})
	}
}

func TestBusFactor(t *testing.T) {
	for coll, want := range map[string]float64{"allreduce": 1.5, "allgather": 0.75, "reducescatter": 0.75,
		"alltoall": 0.75, "gather": 0.75, "scatter": 0.75, "broadcast": 1, "reduce": 1, "sendrecv": 1, "barrier": 1} {
		if got := bench.BusFactor(coll, 4); got != want {
			t.Errorf("%s on 4 ranks: bus factor %v, want %v", coll, got, want)
		}
	}
}

// A group of all-reduces, fused and one by one, checks clean on 3 ranks and
// says what ran.
func TestRunGroup(t *testing.T) {
	const n = 3
	for _, noFusion := range []bool{false, true} {
		cfg := bench.Config{MinBytes: 12, MaxBytes: 12 << 10, StepFactor: 32, Iters: 2, Warmup: 1, Check: 2,
			DType: reduce.Int32, Op: reduce.Sum, Seed: 5, Group: 7, NoFusion: noFusion}
		rows := onRanks(t, n, func(c *collkit.Comm) ([]bench.Row, error) {
			return bench.Run(context.Background(), c, cfg, nil)
		})
		for _, row := range rows[0] {
			if w := row.OutOfPlace.Wrong + row.InPlace.Wrong; w != 0 {
				t.Errorf("nofusion=%v, %d bytes: %d wrong elements", noFusion, row.Bytes, w)
			}
			if fused := row.Algorithm == "7 fused: ring"; fused == noFusion {
				t.Errorf("nofusion=%v: algorithm column %q", noFusion, row.Algorithm)
			}
		}
	}
	if _, err := bench.Run(context.Background(), nil, bench.Config{MinBytes: 1 << 30, MaxBytes: 1 << 30, Group: 2, DType: reduce.Float32}, nil); err == nil {
		t.Fatal("a 2 GiB group was accepted")
	}
}

// onRanks runs fn on n communicators over a fresh in-memory network, one
// goroutine each, fails the test on any rank's error, and returns every
// rank's rows.
func onRanks(t *testing.T, n int, fn func(c *collkit.Comm) ([]bench.Row, error)) [][]bench.Row {
	t.Helper()
	return onWrapped(t, n, func(tr transport.Transport) transport.Transport { return tr }, fn)
}

// onWrapped is onRanks with every rank's transport wrapped by wrap.
func onWrapped(t *testing.T, n int, wrap func(transport.Transport) transport.Transport, fn func(c *collkit.Comm) ([]bench.Row, error)) [][]bench.Row {
	t.Helper()
	net := mem.NewNetwork(n, mem.Config{})
	defer net.Close()
	rows := make([][]bench.Row, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, tr := range net.Transports() {
		wg.Go(func() {
			c, err := collkit.New(wrap(tr), collkit.Options{})
			if err != nil {
				errs[r] = err
				return
			}
			rows[r], errs[r] = fn(c)
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return rows
}
