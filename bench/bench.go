package bench

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/verify"
)

// Config describes a sweep. Every rank must use the same Config.
type Config struct {
	MinBytes, MaxBytes int64 // sizes swept, in bytes
	StepFactor         int64 // each size is the last times this; zero means 2
	// StepBytes, when positive, makes the sweep additive instead: each
	// size is the last plus StepBytes (nccl-tests -i). StepFactor is then
	// unused.
	StepBytes int64
	// Iters is the number of timed iterations per size. Zero means
	// adaptive when MinTime is positive (see MinTime), else 20.
	Iters int
	// MinTime, when Iters is zero, keeps each size iterating until the
	// timed iterations add up to at least this long on rank 0, between
	// MinIters and MaxIters iterations. Rank 0 decides and every rank
	// follows, so all ranks run the same count.
	MinTime time.Duration
	// MinIters is the fewest iterations MinTime allows. Zero means 5.
	MinIters int
	// MaxIters caps MinTime's iterations (and the samples kept per size).
	// Zero means 1000.
	MaxIters int
	// KeepSamples stores every iteration's time in the rows
	// (Measurement.SamplesUS) for later comparison.
	KeepSamples bool
	Warmup      int // untimed iterations before timing
	Check       int // checked iterations per size (0 skips the check)
	DType       reduce.DType
	Op          reduce.Op
	Seed        uint64 // seeds the checked inputs
	// Device puts the buffers in GPU memory of the Comm's NCCL transport,
	// as nccl-tests does: the timed iterations copy nothing to or from the
	// host; the checked ones copy inputs to the GPU and results back.
	// False means host memory ([]byte), which NCCL stages through the GPU.
	Device bool
	// Group, when above 1, makes each iteration that many all-reduces of
	// the size, issued as one Comm.Group (fused into one buffer, as
	// Horovod's tensor fusion does) unless NoFusion issues them one by one.
	// Times and bandwidths are then for the whole group.
	Group    int
	NoFusion bool
	// PerOperation, with Group above 1, reports times per all-reduce of the
	// group, as nccl-tests -m does, instead of per group; bandwidths are
	// the same either way.
	PerOperation bool
	// RankTime is how the ranks' mean times become the time column
	// (nccl-tests -a). The zero value is the slowest rank's.
	RankTime RankTime
	// SkipIters leaves this many leading timed iterations out of the
	// per-iteration statistics (nccl-tests -K); the time column keeps them.
	SkipIters int
	// Sync is what a rank does after each timed iteration (nccl-tests
	// -z). The zero value is nothing: the next call starts as soon as this
	// rank's returns.
	Sync Sync
}

// Sync is what each rank does between timed iterations.
type Sync int

const (
	// SyncNone starts the next iteration when this rank's call returns:
	// collkit's collectives block until this rank's part is done, which is
	// nccl-tests -z 2.
	SyncNone Sync = iota
	// SyncBarrier adds a barrier after each iteration, inside its time
	// (nccl-tests -z 1).
	SyncBarrier
	// SyncBarrierUntimed adds a barrier after each iteration, outside its
	// time (nccl-tests -z 3).
	SyncBarrierUntimed
)

// SyncFromNCCL maps nccl-tests' -z number to a Sync. -z 0 (launch without
// waiting) has no counterpart: collkit's collectives return when done.
func SyncFromNCCL(z int) (Sync, error) {
	switch z {
	case 1:
		return SyncBarrier, nil
	case 2:
		return SyncNone, nil
	case 3:
		return SyncBarrierUntimed, nil
	case 0:
		return 0, fmt.Errorf("-z 0: collkit's collectives block until this rank's part is done, so there is no non-blocking mode; -z 2 (the default here) is what runs, -z 1 and -z 3 add a barrier after each iteration")
	}
	return 0, fmt.Errorf("-z %d: want 1 (barrier after each iteration, timed), 2 (no barrier, the default) or 3 (barrier, not timed), as nccl-tests' --blocking", z)
}

// NCCL is the -z number nccl-tests gives this choice.
func (s Sync) NCCL() int { return [...]int{2, 1, 3}[s] }

// Measurement is one timed run (out-of-place or in-place) at one size.
// Every per-iteration figure (Stats) is the slowest rank's time for that
// iteration, as nccl-tests -I computes them.
type Measurement struct {
	// TimeUS is the time column: each rank's mean time per iteration,
	// combined over ranks as Config.RankTime says (Report.RankTime).
	TimeUS float64 `json:"time_us"`
	AlgBW  float64 `json:"algbw_gbs"` // bytes / TimeUS, GB/s (1e9)
	BusBW  float64 `json:"busbw_gbs"` // algbw x the collective's bus factor
	// Wrong is the wrong elements, summed over ranks and check
	// iterations; meaningless (zero) unless Checked.
	Wrong   int64 `json:"wrong"`
	Checked bool  `json:"checked"` // the results were verified (Config.Check > 0)
	// Each rank's mean time per iteration, combined over ranks four ways:
	// the choices of RankTime (OSU's Avg, Min and Max Latency are the
	// first three).
	RankAvgUS float64 `json:"rank_avg_us"`
	RankMinUS float64 `json:"rank_min_us"`
	RankMaxUS float64 `json:"rank_max_us"`
	Rank0US   float64 `json:"rank0_us"`
	Stats
}

// scale divides every time of m by f (times per operation of a group).
func (m *Measurement) scale(f float64) {
	for _, p := range []*float64{&m.TimeUS, &m.RankAvgUS, &m.RankMinUS, &m.RankMaxUS, &m.Rank0US,
		&m.MinUS, &m.P50US, &m.P99US, &m.MaxUS} {
		*p /= f
	}
	for i := range m.SamplesUS {
		m.SamplesUS[i] /= f
	}
}

// setBandwidth sets AlgBW and BusBW for bytes moved in TimeUS.
func (m *Measurement) setBandwidth(bytes int64, busFactor float64) {
	m.AlgBW = float64(bytes) / m.TimeUS / 1e3
	m.BusBW = m.AlgBW * busFactor
}

// Row is one size of a sweep.
type Row struct {
	Bytes      int64       `json:"bytes"`
	Count      int64       `json:"count"`
	DType      string      `json:"dtype"`
	Op         string      `json:"op"`
	Root       int         `json:"root"`
	Algorithm  string      `json:"algorithm"` // what ran (adaptive's choice for its rows)
	OutOfPlace Measurement `json:"out_of_place"`
	InPlace    Measurement `json:"in_place"`
}

// Sizes lists the byte sizes of the sweep, each rounded down to whole
// elements (at least one element). Check NumSizes first: an additive sweep
// can be very long.
func (cfg Config) Sizes() []int64 {
	es := int64(cfg.DType.Size())
	step := max(cfg.StepFactor, 2)
	var sizes []int64
	for b := cfg.MinBytes; b <= cfg.MaxBytes; {
		if s := max(b/es, 1) * es; len(sizes) == 0 || s != sizes[len(sizes)-1] {
			sizes = append(sizes, s)
		}
		if b == 0 {
			break
		}
		if cfg.StepBytes > 0 {
			b += cfg.StepBytes
		} else {
			b *= step
		}
	}
	return sizes
}

// NumSizes is how many sizes the sweep has at most, counted without
// listing them.
func (cfg Config) NumSizes() int64 {
	if cfg.MaxBytes < cfg.MinBytes || cfg.MinBytes <= 0 {
		return 0
	}
	if cfg.StepBytes > 0 {
		return (cfg.MaxBytes-cfg.MinBytes)/cfg.StepBytes + 1
	}
	n := int64(0)
	for b := cfg.MinBytes; b <= cfg.MaxBytes; b *= max(cfg.StepFactor, 2) {
		n++
	}
	return n
}

// AllReduceBusFactor converts algorithm bandwidth to bus bandwidth for
// all-reduce on n ranks, as nccl-tests defines it: 2(n-1)/n.
func AllReduceBusFactor(n int) float64 { return 2 * float64(n-1) / float64(n) }

// Run sweeps all-reduce over cfg's sizes on c and calls each (if not nil)
// with every finished row, on every rank. The returned rows hold the slowest
// rank's times and the wrong counts of all ranks.
func Run(ctx context.Context, c *collkit.Comm, cfg Config, each func(Row)) ([]Row, error) {
	if cfg.Iters == 0 && cfg.MinTime <= 0 {
		cfg.Iters = 20
	}
	if cfg.Group > 1 {
		return runGroup(ctx, c, cfg, each)
	}
	if cfg.Device {
		return RunCollective(ctx, c, "allreduce", cfg, 0, each)
	}
	sizes := cfg.Sizes()
	if len(sizes) == 0 {
		return nil, nil
	}
	// A rank holds its send and receive buffers and nothing else of the
	// size: results are checked against expected values made a few KiB at
	// a time.
	maxBytes := sizes[len(sizes)-1]
	send, recv := make([]byte, maxBytes), make([]byte, maxBytes)
	verify.Fill(cfg.DType, cfg.Op, send, cfg.Seed, c.Rank())
	copy(recv, send)

	var rows []Row
	for _, size := range sizes {
		row := Row{Bytes: size, Count: size / int64(cfg.DType.Size()), DType: cfg.DType.String(), Op: cfg.Op.String(), Root: -1,
			Algorithm: c.Choose(size)}
		s, r := send[:size], recv[:size]
		var err error
		if row.OutOfPlace, err = measure(ctx, c, cfg, allReduce(ctx, c, cfg, s, r)); err != nil {
			return rows, err
		}
		if row.InPlace, err = measure(ctx, c, cfg, allReduce(ctx, c, cfg, r, r)); err != nil {
			return rows, err
		}
		if cfg.Check > 0 {
			if row.OutOfPlace.Wrong, row.InPlace.Wrong, err = check(ctx, c, cfg, s, r); err != nil {
				return rows, err
			}
			row.OutOfPlace.Checked, row.InPlace.Checked = true, true
		}
		for _, m := range []*Measurement{&row.OutOfPlace, &row.InPlace} {
			m.setBandwidth(size, AllReduceBusFactor(c.Size()))
		}
		rows = append(rows, row)
		if each != nil {
			each(row)
		}
	}
	return rows, nil
}

// check runs cfg.Check verified iterations out of place and in place and
// returns the wrong elements summed over ranks.
func check(ctx context.Context, c *collkit.Comm, cfg Config, send, recv []byte) (outWrong, inWrong int64, err error) {
	var wrong [2]int64
	for it := range cfg.Check {
		seed := cfg.Seed + uint64(it) + 1
		verify.Fill(cfg.DType, cfg.Op, send, seed, c.Rank())
		poison(recv)
		if err := c.AllReduce(ctx, cfg.DType, cfg.Op, send, recv); err != nil {
			return 0, 0, err
		}
		wrong[0] += int64(verify.WrongExpect(cfg.DType, cfg.Op, recv, seed, c.Size(), 0))

		verify.Fill(cfg.DType, cfg.Op, recv, seed, c.Rank())
		if err := c.AllReduce(ctx, cfg.DType, cfg.Op, recv, recv); err != nil {
			return 0, 0, err
		}
		wrong[1] += int64(verify.WrongExpect(cfg.DType, cfg.Op, recv, seed, c.Size(), 0))
	}
	if err := collkit.AllReduce(ctx, c, wrong[:], wrong[:], collkit.Sum); err != nil {
		return 0, 0, err
	}
	return wrong[0], wrong[1], nil
}

// poison fills an output buffer with a pattern no correct result has
// everywhere, so a collective that writes nothing is caught.
func poison(b []byte) {
	for i := range b {
		b[i] = 0xA5
	}
}

func barrier(ctx context.Context, c *collkit.Comm) error {
	var one [1]int32
	return collkit.AllReduce(ctx, c, one[:], one[:], collkit.Sum)
}

// AvgBusBW is the mean out-of-place bus bandwidth over rows, the figure
// nccl-tests prints as "Avg bus bandwidth".
func AvgBusBW(rows []Row) float64 {
	if len(rows) == 0 {
		return 0
	}
	var s float64
	for _, r := range rows {
		s += r.OutOfPlace.BusBW
	}
	return s / float64(len(rows))
}

// Wrong is the total of wrong elements over rows.
func Wrong(rows []Row) int64 {
	var w int64
	for _, r := range rows {
		w += r.OutOfPlace.Wrong + r.InPlace.Wrong
	}
	return w
}

// FormatGB prints a bandwidth like nccl-tests: two decimals, "inf" guarded.
func FormatGB(v float64) string {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

// allReduce is one timed all-reduce of send into recv.
func allReduce(ctx context.Context, c *collkit.Comm, cfg Config, send, recv []byte) func() error {
	return func() error { return c.AllReduce(ctx, cfg.DType, cfg.Op, send, recv) }
}
