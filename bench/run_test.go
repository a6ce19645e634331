package bench_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/bench"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport/mem"
)

// Every rank of an adaptive run stops after the same iteration and reports
// the same per-iteration statistics (the slowest rank's), with no wrong
// element.
func TestRunAdaptiveAgrees(t *testing.T) {
	const n = 3
	net := mem.NewNetwork(n, mem.Config{})
	t.Cleanup(func() { net.Close() })
	cfg := bench.Config{MinBytes: 8, MaxBytes: 4096, StepFactor: 8, MinTime: 2 * time.Millisecond, MinIters: 3, MaxIters: 50,
		KeepSamples: true, Warmup: 1, Check: 1, DType: reduce.Float32, Op: reduce.Sum, Seed: 3}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows := make([][]bench.Row, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, tr := range net.Transports() {
		c, err := collkit.New(tr, collkit.Options{})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { rows[r], errs[r] = bench.Run(ctx, c, cfg, nil) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if len(rows[0]) != 4 { // 8, 64, 512, 4096
		t.Fatalf("%d rows, want 4", len(rows[0]))
	}
	for i, row := range rows[0] {
		m := row.OutOfPlace
		if m.Iters < 3 || m.Iters > 50 || len(m.SamplesUS) != m.Iters || m.Wrong != 0 || row.InPlace.Wrong != 0 {
			t.Errorf("%d B: iters %d, %d samples, wrong %d/%d", row.Bytes, m.Iters, len(m.SamplesUS), m.Wrong, row.InPlace.Wrong)
		}
		var sum float64
		for _, v := range m.SamplesUS {
			sum += v
		}
		// Rank 0 stops once its own times reach MinTime; the slowest rank's
		// per-iteration times add up to at least that, unless the cap hit.
		if m.Iters < 50 && sum < 2000 {
			t.Errorf("%d B: %d iterations add up to %.0f us, want at least the 2 ms min time", row.Bytes, m.Iters, sum)
		}
		for r := 1; r < n; r++ {
			o := rows[r][i].OutOfPlace
			if o.Iters != m.Iters || o.P50US != m.P50US || o.MaxUS != m.MaxUS {
				t.Errorf("%d B: rank %d has iters %d p50 %g max %g, rank 0 %d %g %g", row.Bytes, r, o.Iters, o.P50US, o.MaxUS, m.Iters, m.P50US, m.MaxUS)
			}
		}
	}
}

// WarmUp runs all-reduces until rank 0's time is up, every rank stops
// after the same one, and a zero duration runs none.
func TestWarmUp(t *testing.T) {
	const n = 3
	for _, d := range []time.Duration{0, 20 * time.Millisecond} {
		ops := make([]uint64, n)
		start := time.Now()
		onRanks(t, n, func(c *collkit.Comm) ([]bench.Row, error) {
			err := bench.WarmUp(context.Background(), c, d)
			for _, row := range c.Stats() {
				ops[c.Rank()] += row.Ops
			}
			return nil, err
		})
		if took := time.Since(start); took < d {
			t.Errorf("WarmUp(%v) returned after %v", d, took)
		}
		if (d == 0) != (ops[0] == 0) || ops[1] != ops[0] || ops[2] != ops[0] {
			t.Errorf("WarmUp(%v): collectives per rank %v, want as many on every rank, none only for 0", d, ops)
		}
	}
}
