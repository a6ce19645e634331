package bench

import (
	"math"
	"os"
	"time"

	"github.com/collkit/collkit/algo/adaptive"
)

// Tune fits the adaptive algorithm's cost model to sweeps of fixed
// algorithms (out-of-place times) and returns the tuning table.
func Tune(reports []Report, transport string) *adaptive.Table {
	host, _ := os.Hostname()
	table := &adaptive.Table{Schema: adaptive.Schema, Created: time.Now().UTC(), Host: host}
	shapes := map[string]adaptive.Shape{}
	for _, a := range adaptive.WithNative(nil) {
		shapes[a.Name] = a.Shape
	}
	for _, r := range reports {
		shape, ok := shapes[r.Algorithm]
		if !ok {
			continue // not a candidate of adaptive
		}
		samples := make([]adaptive.Sample, len(r.Rows))
		for i, row := range r.Rows {
			samples[i] = adaptive.Sample{Bytes: row.Bytes, TimeUS: row.OutOfPlace.TimeUS}
		}
		table.Entries = append(table.Entries, adaptive.Entry{
			Transport: transport, Ranks: r.Ranks, Algorithm: r.Algorithm,
			Fits: adaptive.FitSamples(shape, r.Ranks, samples), Samples: samples,
		})
	}
	return table
}

// Candidates are adaptive's candidates over the named transport, as a
// communicator over it has them: shm's native all-reduce too (a Comm adds
// it over every transport with an all-reduce of its own).
func Candidates(transport string) []adaptive.Algorithm {
	if transport == "shm" {
		return adaptive.WithNative(nil)
	}
	return adaptive.Defaults()
}

// TunedChoice is what adaptive tuned with a table runs at one size of the
// sweep, against the fastest algorithm measured there.
type TunedChoice struct {
	Bytes   int64
	Chosen  string  // what adaptive runs
	Fastest string  // the algorithm measured fastest
	Ratio   float64 // Chosen's measured time over Fastest's; NaN if Chosen was not measured
}

// TunedChoices replays table over the sweeps it was fitted to: at every
// measured size, what adaptive would run and how its measured time
// compares with the fastest measured. Noise can make the two differ, as the
// model never falls with size where a noisy sweep does.
func TunedChoices(table *adaptive.Table, transport string, reports []Report) []TunedChoice {
	times := map[int64]map[string]float64{}
	var sizes []int64
	ranks := 0
	for _, r := range reports {
		ranks = r.Ranks
		for _, row := range r.Rows {
			if times[row.Bytes] == nil {
				times[row.Bytes] = map[string]float64{}
				sizes = append(sizes, row.Bytes)
			}
			times[row.Bytes][r.Algorithm] = row.OutOfPlace.TimeUS
		}
	}
	cfg := adaptive.Config{Table: table, Transport: transport, Algorithms: Candidates(transport)}
	var out []TunedChoice
	for _, b := range sizes {
		a, _ := cfg.Choose(b, ranks)
		c := TunedChoice{Bytes: b, Chosen: a.Name, Ratio: math.NaN()}
		best := math.Inf(1)
		for _, cand := range adaptive.WithNative(nil) {
			if us, ok := times[b][cand.Name]; ok && us > 0 && us < best {
				c.Fastest, best = cand.Name, us
			}
		}
		if us := times[b][a.Name]; us > 0 && c.Fastest != "" {
			c.Ratio = us / best
		}
		out = append(out, c)
	}
	return out
}
