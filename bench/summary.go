package bench

import (
	"math"

	"gonum.org/v1/gonum/stat"
)

// Summary condenses one combination's sweep into the figures people
// compare. Every figure comes from the time column (Measurement.TimeUS, out
// of place), the statistic the table, the JSON, the CSV and the plot show.
type Summary struct {
	// BestLatencyUS is the lowest out-of-place time over the sizes, the
	// small-message latency; BestLatencyBytes is the size it was seen at.
	BestLatencyUS    float64 `json:"best_latency_us"`
	BestLatencyBytes int64   `json:"best_latency_bytes"`
	// FitLatencyUS and FitAlgBW are a and b of t = a + bytes/b, fitted by
	// least squares on relative error to the out-of-place times; FitBusBW
	// is b times the collective's bus factor. All zero when there is no
	// fit: fewer than two sizes, or no positive bandwidth.
	FitLatencyUS float64 `json:"fit_latency_us"`
	FitAlgBW     float64 `json:"fit_algbw_gbs"`
	FitBusBW     float64 `json:"fit_busbw_gbs"`
	// FitNoLatency says the times grew faster than linearly with size, so
	// the line was fitted through the origin: FitAlgBW is a fit, but there
	// is no latency term (FitLatencyUS is zero and means nothing).
	FitNoLatency bool `json:"fit_no_latency,omitempty"`
}

// HasFit reports whether the sweep has a fitted bandwidth.
func (s Summary) HasFit() bool { return s.FitAlgBW > 0 }

// Typical is a measurement's typical time: the median iteration, or the
// mean for results without per-iteration statistics (schema v1).
func (m Measurement) Typical() float64 {
	if m.P50US > 0 {
		return m.P50US
	}
	return m.TimeUS
}

// SummarizeRows computes the Summary of a sweep on ranks ranks from the
// time column.
func SummarizeRows(rows []Row, ranks int) Summary {
	var s Summary
	if len(rows) == 0 {
		return s
	}
	s.BestLatencyUS = math.Inf(1)
	xs, ys, ws := make([]float64, len(rows)), make([]float64, len(rows)), make([]float64, len(rows))
	factor := 0.0
	for i, row := range rows {
		t := row.OutOfPlace.TimeUS
		if t < s.BestLatencyUS {
			s.BestLatencyUS, s.BestLatencyBytes = t, row.Bytes
		}
		if row.OutOfPlace.AlgBW > 0 && factor == 0 {
			factor = row.OutOfPlace.BusBW / row.OutOfPlace.AlgBW
		}
		xs[i], ys[i] = float64(row.Bytes), t
		if t > 0 {
			ws[i] = 1 / (t * t) // relative error: small sizes count as much as large ones
		}
	}
	if math.IsInf(s.BestLatencyUS, 1) {
		s.BestLatencyUS = 0
	}
	s.FitLatencyUS, s.FitAlgBW = FitLatencyBandwidth(xs, ys, ws)
	s.FitBusBW = s.FitAlgBW * factor
	s.FitNoLatency = s.HasFit() && s.FitLatencyUS == 0 && !fitsFreeLine(xs, ys, ws)
	return s
}

// fitsFreeLine reports whether the free weighted line has a non-negative
// intercept (FitLatencyBandwidth then keeps it).
func fitsFreeLine(bytes, timesUS, weights []float64) bool {
	a, _ := stat.LinearRegression(bytes, timesUS, weights, false)
	return a >= 0
}

// FitLatencyBandwidth fits t = a + bytes/b to times in microseconds by
// weighted least squares and returns a (us) and b (GB/s, 1e9 bytes per
// second). It returns zeros when fewer than two distinct sizes are given or
// the slope is not positive. A negative intercept (times that grow faster
// than linearly, as when small sizes sit in cache and large ones do not)
// has no meaning as a latency: the line is then fitted through the origin,
// latency zero.
func FitLatencyBandwidth(bytes, timesUS, weights []float64) (latencyUS, bandwidthGBs float64) {
	distinct := map[float64]bool{}
	for _, b := range bytes {
		distinct[b] = true
	}
	if len(distinct) < 2 {
		return 0, 0
	}
	a, slope := stat.LinearRegression(bytes, timesUS, weights, false)
	if a < 0 {
		a, slope = 0, slopeThroughOrigin(bytes, timesUS, weights)
	}
	if !(slope > 0) || math.IsNaN(a) || math.IsInf(a, 0) {
		return 0, 0
	}
	return a, 1 / slope / 1e3 // bytes per microsecond = MB/s; /1e3 = GB/s
}

// slopeThroughOrigin is the weighted least-squares slope of t = bytes*s.
func slopeThroughOrigin(bytes, timesUS, weights []float64) float64 {
	var xy, xx float64
	for i, x := range bytes {
		w := 1.0
		if weights != nil {
			w = weights[i]
		}
		xy += w * x * timesUS[i]
		xx += w * x * x
	}
	return xy / xx
}
