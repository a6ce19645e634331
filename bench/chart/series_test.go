package chart

import (
	"testing"

	"github.com/collkit/collkit/bench"
)

// The plot draws the time column and the busbw the table prints, not the
// median iteration: a row whose median is far from its mean is drawn at
// the mean.
func TestSeriesIsTheTimeColumn(t *testing.T) {
	m := bench.Measurement{TimeUS: 290, BusBW: 5.4}
	m.P50US = 95 // a few slow iterations pull the mean up
	r := bench.Report{Rows: []bench.Row{{Bytes: 1 << 20, OutOfPlace: m}}}
	bw, lat := series(r)
	if len(bw) != 1 || bw[0].Y != 5.4 || lat[0].Y != 290 {
		t.Fatalf("plotted busbw %v and time %v, want 5.4 GB/s and 290 us (the table's)", bw, lat)
	}
}
