package bench

import (
	"context"
	"math"
	"runtime/debug"
	"time"

	"github.com/montanaflynn/stats"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/internal/clock"
)

// Stats summarises the per-iteration times of one measurement. Each
// iteration's time is the slowest rank's time for that iteration.
type Stats struct {
	Iters int     `json:"iters"`  // timed iterations
	MinUS float64 `json:"min_us"` // fastest iteration
	P50US float64 `json:"p50_us"` // median iteration
	P99US float64 `json:"p99_us"` // 99th percentile (linear interpolation)
	MaxUS float64 `json:"max_us"` // slowest iteration
	// CV is the coefficient of variation: sample standard deviation over
	// the mean. Zero with fewer than two iterations.
	CV float64 `json:"cv"`
	// SamplesUS holds every iteration's time when Config.KeepSamples is
	// set; `collbench compare` tests them.
	SamplesUS []float64 `json:"samples_us,omitempty"`
}

// Summarize computes the statistics of per-iteration times in microseconds
// and returns them with their mean. It keeps the samples when keep is set.
func Summarize(us []float64, keep bool) (Stats, float64) {
	if len(us) == 0 {
		return Stats{}, 0
	}
	data := stats.Float64Data(us)
	var s Stats
	s.Iters = len(us)
	s.MinUS, _ = stats.Min(data)
	s.MaxUS, _ = stats.Max(data)
	s.P50US, _ = stats.Percentile(data, 50)
	s.P99US, _ = stats.Percentile(data, 99)
	mean, _ := stats.Mean(data)
	if len(us) > 1 {
		if cv, err := stats.CoefficientOfVariation(data); err == nil && !math.IsNaN(cv) {
			s.CV = cv
		}
	}
	if keep {
		s.SamplesUS = make([]float64, len(us))
		for i, v := range us {
			s.SamplesUS[i] = math.Round(v*1000) / 1000 // ns resolution is all a clock gives
		}
	}
	return s, mean
}

// measure times calls of op (one collective) and returns its Measurement:
// the per-iteration statistics of the slowest rank per iteration, and each
// rank's mean combined over ranks every way RankTime offers, the one
// cfg.RankTime names being TimeUS (Wrong, AlgBW and BusBW are left zero).
//
// Every rank first collects its heap, as Go's testing package does before
// a benchmark: the garbage of the run's setup (connections, buffers,
// statistics) otherwise brings the first collection into the first timed
// loop, and a collection on one rank stalls them all. With 4 ranks on 2
// cores, a 16-byte broadcast's first loop had each rank's first
// collection in it (5.7-14 ms, GODEBUG=gctrace=1) and its first iteration
// took 7-18 ms: 78-98 us a call against 66-74 in the same run's second
// loop. The timed loop allocates nothing, so no collection falls in it.
// It also returns the memory the collection freed to the kernel
// (debug.FreeOSMemory) rather than leave that to Go's background
// scavenger, which did it during the first timed loops, in the time
// slices the loop's polls give up. 2 ranks over tcp, 4 B to 512 B (16
// rows a sweep, EPYC VM): the first three rows of a sweep had two or more
// iterations of 1.0-1.4 ms each in 7 of 12 (14-18 us a call against 11-12
// after, medians 11-13), while GODEBUG=scavtrace=1 showed 384-896 KiB
// scavenged in the background; returned here, none of 12 had them. The
// other rows had such iterations as often either way (3 of 52), the VM's
// own stalls: a C loop reading the clock sees them too.
func measure(ctx context.Context, c *collkit.Comm, cfg Config, op func() error) (Measurement, error) {
	debug.FreeOSMemory()
	for range cfg.Warmup {
		if err := op(); err != nil {
			return Measurement{}, err
		}
	}
	if err := barrier(ctx, c); err != nil {
		return Measurement{}, err
	}
	timed := func(us []float64, n int) ([]float64, error) {
		// One monotonic clock read per iteration, between iterations: the
		// iterations add up to the loop's time, as in the MPI benchmarks,
		// which read the clock only around the loop. The read is the time
		// column's only cost that is not the collective's, so it is the
		// cheapest monotonic clock there is (internal/clock: the CPU's
		// time-stamp counter where the kernel's clock is that counter
		// scaled: 32 ns a read against time.Since's 56 on the Xeon VM,
		// 11 against 30 on the EPYC VM under kvm-clock, where an 8-byte
		// all-reduce over shared memory takes 0.4-0.6 us).
		last := clock.Since()
		for range n {
			if err := op(); err != nil {
				return us, err
			}
			if cfg.Sync == SyncBarrier {
				if err := barrier(ctx, c); err != nil {
					return us, err
				}
			}
			now := clock.Since()
			us = append(us, float64((now-last).Nanoseconds())/1e3)
			last = now
			if cfg.Sync == SyncBarrierUntimed {
				if err := barrier(ctx, c); err != nil {
					return us, err
				}
				last = clock.Since()
			}
		}
		return us, nil
	}
	var us []float64
	var err error
	if cfg.Iters > 0 {
		us, err = timed(samples(cfg.Iters), cfg.Iters)
	} else {
		least, most := adaptiveIters(cfg)
		us, err = timedAdaptive(ctx, c, cfg, timed, samples(most), least)
	}
	if err != nil {
		return Measurement{}, err
	}
	// Two collectives at the end, not disturbing the timed loop. A maximum
	// over the vector of iteration times makes each the slowest rank's
	// time for that iteration; two more elements carry this rank's mean
	// and its negation, for the largest and the smallest mean. A sum
	// carries the means for their average, and rank 0's alone. The time
	// column is one of those, as nccl-tests and the MPI benchmarks compute
	// it (each rank's mean over the run, then combined over ranks): the
	// mean of the per-iteration maxima would be larger whenever ranks
	// stall at different iterations.
	n := len(us)
	var sum float64
	for _, v := range us {
		sum += v
	}
	mean := sum / float64(max(n, 1))
	us = append(us, mean, -mean)
	if err := collkit.AllReduce(ctx, c, us, us, collkit.Max); err != nil {
		return Measurement{}, err
	}
	sums := []float64{mean, 0}
	if c.Rank() == 0 {
		sums[1] = mean
	}
	if err := collkit.AllReduce(ctx, c, sums, sums, collkit.Sum); err != nil {
		return Measurement{}, err
	}
	var m Measurement
	// -K leaves leading iterations out of the statistics, not out of the
	// samples or the iteration count.
	m.Stats, _ = Summarize(us[min(cfg.SkipIters, max(n-1, 0)):n], false)
	if cfg.KeepSamples {
		all, _ := Summarize(us[:n], true)
		m.SamplesUS = all.SamplesUS
	}
	m.Iters = n
	m.RankMaxUS, m.RankMinUS = us[n], -us[n+1]
	m.RankAvgUS, m.Rank0US = sums[0]/float64(c.Size()), sums[1]
	m.TimeUS = cfg.RankTime.pick(m)
	return m, nil
}

// WarmUp runs 8-byte all-reduces on c until rank 0 has spent d in them,
// before a run's first measurement. A fresh Go process runs its first few
// milliseconds of collectives slower than the rest: the runtime's sysmon
// thread starts out waking every 20 us and backs off to 10 ms only after
// about 50 such wake-ups with the process busy (parked, it sleeps and
// keeps its pace), and on a VM each of those wake-ups preempts the rank on
// its core. Measured on a 2-core VM, 2 ranks, 8-byte all-reduce: the
// first 700-800 iterations took 7-9 us against 4 us for all that followed,
// so a first timed loop of 1000 iterations came out at 5.7-12 us, and the
// same loop after 2000 warm-up iterations at 4.0; a bare Go exchange of 8
// bytes had 51 voluntary and 50 involuntary context switches in its first
// 1000 iterations, 3 and 3 in the next 1000. A per-size warm-up of a few
// iterations (nccl-tests' 5) does not reach that far. Rank 0's clock decides, and each all-reduce
// carries its verdict, so every rank stops after the same one.
func WarmUp(ctx context.Context, c *collkit.Comm, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	start, stop := time.Now(), []int64{0}
	for stop[0] == 0 {
		if c.Rank() == 0 && time.Since(start) >= d {
			stop[0] = 1
		}
		if err := collkit.AllReduce(ctx, c, stop, stop, collkit.Max); err != nil {
			return err
		}
	}
	return nil
}

// samples returns room for n samples, empty, every page of it written:
// growing the slice inside the timed loop fell into the next iteration's
// time (4 ranks on 2 cores, 16 KiB: 200-250 us at iterations 21, 41, 81,
// 161, 337 and 673 of every run). Growing it between adaptive batches,
// where the new array's pages fault in as they are first written (12 us a
// page on the EPYC VM), delayed whichever rank grew last, and the others'
// first iteration of the batch waited for it (2 ranks over shm, 8 B: 2-44
// us at iterations 5, 55 and 605, where the rest took 0.5; 0.5-0.7 since).
// clear writes the pages that make may leave untouched (memory the kernel
// gave zeroed), so that no append in the loop meets one.
func samples(n int) []float64 {
	us := make([]float64, n)
	clear(us)
	return us[:0]
}

// adaptiveIters returns the least and the most iterations of an adaptive
// measurement: cfg.MinIters and cfg.MaxIters, 5 and 1000 when unset.
func adaptiveIters(cfg Config) (least, most int) {
	least, most = cfg.MinIters, cfg.MaxIters
	if least <= 0 {
		least = 5
	}
	if most <= 0 {
		most = 1000
	}
	return min(least, most), most
}

// timedAdaptive runs batches of timed iterations until rank 0 has spent
// cfg.MinTime in them (within minIters..cap(us)), appending to us. After
// each batch rank 0 sizes the next one and every rank learns it through an
// all-reduce (Max over rank 0's count and everyone else's zero), so all
// ranks stop after the same iteration.
func timedAdaptive(ctx context.Context, c *collkit.Comm, cfg Config, timed func([]float64, int) ([]float64, error), us []float64, minIters int) ([]float64, error) {
	var spent float64 // microseconds in timed iterations on this rank
	for batch := int64(minIters); batch > 0; {
		start := len(us)
		var err error
		if us, err = timed(us, int(batch)); err != nil {
			return us, err
		}
		for _, v := range us[start:] {
			spent += v
		}
		next := []int64{0}
		if c.Rank() == 0 {
			next[0] = int64(nextBatch(len(us), spent, cfg.MinTime, cap(us)))
		}
		if err := collkit.AllReduce(ctx, c, next, next, collkit.Max); err != nil {
			return us, err
		}
		batch = next[0]
	}
	return us, nil
}

// nextBatch sizes the next batch: enough iterations to reach minTime at the
// pace so far (plus a fifth), growing at most tenfold, never past maxIters;
// zero when done.
func nextBatch(done int, spentUS float64, minTime time.Duration, maxIters int) int {
	want := float64(minTime.Microseconds())
	if done >= maxIters || spentUS >= want || done == 0 {
		return 0
	}
	perIter := spentUS / float64(done)
	n := math.Ceil((want - spentUS) / max(perIter, 1e-3) * 1.2)
	return max(1, int(min(n, float64(10*done), float64(maxIters-done))))
}
