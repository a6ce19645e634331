package bench

import "fmt"

// RankTime is how each rank's mean time per iteration becomes the one time
// of a measurement (Measurement.TimeUS, and the algbw and busbw computed
// from it): nccl-tests' -a. The zero value is the slowest rank's mean.
type RankTime int

const (
	// RankMax is the slowest rank's mean: the collective is done when
	// every rank is (nccl-tests -a 3).
	RankMax RankTime = iota
	// RankAvg is the mean over ranks (nccl-tests -a 1, its default, and
	// OSU's "Avg Latency").
	RankAvg
	// RankMin is the fastest rank's mean (nccl-tests -a 2).
	RankMin
	// Rank0 is rank 0's own mean (nccl-tests -a 0).
	Rank0
)

// RankTimeFromNCCL maps nccl-tests' -a number (0 rank 0, 1 average, 2
// minimum, 3 maximum) to a RankTime.
func RankTimeFromNCCL(a int) (RankTime, error) {
	switch a {
	case 0:
		return Rank0, nil
	case 1:
		return RankAvg, nil
	case 2:
		return RankMin, nil
	case 3:
		return RankMax, nil
	}
	return 0, fmt.Errorf("-a %d: want 0 (rank 0), 1 (average over ranks), 2 (minimum) or 3 (maximum), as nccl-tests' --average", a)
}

// NCCL is the -a number nccl-tests gives this choice.
func (t RankTime) NCCL() int { return [...]int{3, 1, 2, 0}[t] }

// String is the short name used in result files: max, avg, min or rank0.
func (t RankTime) String() string {
	switch t {
	case RankAvg:
		return "avg"
	case RankMin:
		return "min"
	case Rank0:
		return "rank0"
	}
	return "max"
}

// ParseRankTime reads String's names; empty (files before schema v3) is
// max, what those files hold.
func ParseRankTime(s string) (RankTime, error) {
	for _, t := range []RankTime{RankMax, RankAvg, RankMin, Rank0} {
		if s == t.String() {
			return t, nil
		}
	}
	if s == "" {
		return RankMax, nil
	}
	return 0, fmt.Errorf("rank time %q: want max, avg, min or rank0", s)
}

// Describe says in words what the time column is, for headers.
func (t RankTime) Describe() string {
	what := map[RankTime]string{
		RankMax: "the slowest rank's",
		RankAvg: "averaged over ranks",
		RankMin: "the fastest rank's",
		Rank0:   "rank 0's",
	}[t]
	return fmt.Sprintf("each rank's mean time per iteration, %s (-a %d)", what, t.NCCL())
}

// Short names the time column in a few words, for titles and summaries:
// "the slowest rank's mean (-a 3)".
func (t RankTime) Short() string {
	what := map[RankTime]string{
		RankMax: "the slowest rank's mean",
		RankAvg: "the mean over ranks",
		RankMin: "the fastest rank's mean",
		Rank0:   "rank 0's mean",
	}[t]
	return fmt.Sprintf("%s (-a %d)", what, t.NCCL())
}

// pick returns the time of m that t names.
func (t RankTime) pick(m Measurement) float64 {
	switch t {
	case RankAvg:
		return m.RankAvgUS
	case RankMin:
		return m.RankMinUS
	case Rank0:
		return m.Rank0US
	}
	return m.RankMaxUS
}
