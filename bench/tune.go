package bench

import (
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
	for _, a := range adaptive.Defaults() {
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
