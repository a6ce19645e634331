package bench

import (
	"math"
	"testing"
)

// sweepReport is a report of algo at 4 ranks measuring times at 8 B, 16 B, ...
func sweepReport(algo string, times ...float64) Report {
	r := Report{Collective: "allreduce", Algorithm: algo, Transport: "tcp", Ranks: 4}
	for i, us := range times {
		r.Rows = append(r.Rows, Row{Bytes: 8 << i, Algorithm: algo, OutOfPlace: Measurement{TimeUS: us}})
	}
	return r
}

// Tune fits every candidate of adaptive it measured, one band per size
// with a time, keeps the samples, and leaves out what adaptive does not
// choose among; no band of a sweep that never leaves latency gets an
// unmeasurable bandwidth (1e6 GB/s before). TunedChoices replays the table
// over the sweep, ring's spike at 32 bytes and halving-doubling's missing
// time at 64 included.
func TestTuneAndTunedChoices(t *testing.T) {
	reports := []Report{
		sweepReport("ring", 300, 310, 900, 320, 330),
		sweepReport("tree", 400, 410, 420, 430, 440),
		sweepReport("halvingdoubling", 100, 105, 110, 0, 120), // 0: a row without a time
		sweepReport("hierarchical", 50, 50, 50, 50, 50),
		sweepReport("adaptive", 100, 105, 110, 115, 120),
	}
	table := Tune(reports, "tcp")
	if len(table.Entries) != 3 {
		t.Fatalf("%d entries, want ring, tree and halvingdoubling (pairwise was not measured): %+v", len(table.Entries), table.Entries)
	}
	for _, e := range table.Entries {
		want := 5
		if e.Algorithm == "halvingdoubling" {
			want = 4
		}
		if e.Transport != "tcp" || e.Ranks != 4 || len(e.Samples) != 5 || len(e.Fits) != want {
			t.Errorf("%s: %s, %d ranks, %d samples, %d fits; want tcp, 4, 5, %d", e.Algorithm, e.Transport, e.Ranks, len(e.Samples), len(e.Fits), want)
		}
		for _, f := range e.Fits {
			if f.BandwidthGBs > 10 || f.LatencyUS < 0 {
				t.Errorf("%s: implausible fit %+v", e.Algorithm, f)
			}
		}
	}
	choices := TunedChoices(table, "tcp", reports[:3])
	if len(choices) != 5 {
		t.Fatalf("%d choices for 5 sizes", len(choices))
	}
	for _, c := range choices {
		if c.Chosen != "halvingdoubling" {
			t.Errorf("%d bytes: adaptive runs %s, want halvingdoubling", c.Bytes, c.Chosen)
		}
		switch {
		case c.Bytes == 64:
			if !math.IsNaN(c.Ratio) || c.Fastest != "ring" {
				t.Errorf("64 bytes, where halvingdoubling has no time: ratio %v, fastest %s; want NaN and ring", c.Ratio, c.Fastest)
			}
		case c.Ratio != 1 || c.Fastest != "halvingdoubling":
			t.Errorf("%d bytes: ratio %v to %s, want 1 to halvingdoubling", c.Bytes, c.Ratio, c.Fastest)
		}
	}
}
