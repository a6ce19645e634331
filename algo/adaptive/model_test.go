package adaptive_test

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/collkit/collkit/algo/adaptive"
)

// cost is a synthetic algorithm on loopback TCP: latency per step and bus
// bandwidth as this machine measured them at 4 ranks (issue 16), with
// halving-doubling's own terms for its recursive doubling.
type cost struct {
	name              string
	shape             adaptive.Shape
	latUS, busGBs     float64
	smallUS, smallGBs float64 // halving-doubling up to Shape.SmallBytes
}

var costs = []cost{
	{name: "ring", shape: adaptive.Ring, latUS: 110, busGBs: 1.9},
	{name: "tree", shape: adaptive.Tree, latUS: 75, busGBs: 0.75},
	{name: "halvingdoubling", shape: adaptive.HalvingDoubling, latUS: 150, busGBs: 1.2, smallUS: 85, smallGBs: 0.22},
}

// shapeAt is the shape a band starting at bytes is modelled with.
func shapeAt(sh adaptive.Shape, bytes int64) adaptive.Shape {
	if sh.Small != nil && bytes <= sh.SmallBytes {
		return *sh.Small
	}
	return sh
}

// us is the noise-free time of an all-reduce of bytes over n ranks.
func (c cost) us(bytes int64, n int) float64 {
	lat, bw := c.latUS, c.busGBs
	if c.shape.Small != nil && bytes <= c.shape.SmallBytes {
		lat, bw = c.smallUS, c.smallGBs
	}
	sh := shapeAt(c.shape, bytes)
	return lat*sh.Steps(n) + float64(bytes)*sh.Factor(n)/(bw*1e3)
}

// sweepSizes are tune's sizes: 8 B to 1 MiB, doubling.
func sweepSizes() []int64 {
	var s []int64
	for b := int64(8); b <= 1<<20; b *= 2 {
		s = append(s, b)
	}
	return s
}

// sweep is what tune measures: every algorithm at every size, each time
// off by up to jitter either way (seeded).
type sweep map[string]map[int64]float64

func measure(n int, jitter float64, seed uint64) sweep {
	r := rand.New(rand.NewPCG(seed, 16))
	m := sweep{}
	for _, c := range costs {
		m[c.name] = map[int64]float64{}
		for _, b := range sweepSizes() {
			m[c.name][b] = c.us(b, n) * (1 + jitter*(2*r.Float64()-1))
		}
	}
	return m
}

func (m sweep) samples(algo string) []adaptive.Sample {
	var s []adaptive.Sample
	for _, b := range sweepSizes() {
		s = append(s, adaptive.Sample{Bytes: b, TimeUS: m[algo][b]})
	}
	return s
}

// tuned is adaptive with the model fitted to m, as collbench tune makes it.
func (m sweep) tuned(n int) adaptive.Config {
	table := &adaptive.Table{Schema: adaptive.Schema}
	for _, c := range costs {
		table.Entries = append(table.Entries, adaptive.Entry{Transport: "tcp", Ranks: n, Algorithm: c.name,
			Fits: adaptive.FitSamples(c.shape, n, m.samples(c.name))})
	}
	return adaptive.Config{Table: table, Transport: "tcp"}
}

func (m sweep) fastest(bytes int64) float64 {
	best := math.Inf(1)
	for _, times := range m {
		best = min(best, times[bytes])
	}
	return best
}

// checkChoices fails unless, at every measured size, tuned adaptive picks an
// algorithm whose time in judge is within 1.1x of the fastest there.
func checkChoices(t *testing.T, n int, fitted, judge sweep) {
	t.Helper()
	cfg := fitted.tuned(n)
	for _, b := range sweepSizes() {
		a, _ := cfg.Choose(b, n)
		if got, best := judge[a.Name][b], judge.fastest(b); got > 1.1*best {
			t.Errorf("%d ranks, %d bytes: chose %s, measured %.0f us, %.2fx the fastest (%.0f us)", n, b, a.Name, got, got/best, best)
		}
	}
}

// At every measured size tuned adaptive's choice is within 1.1x of the
// fastest measured, on sweeps with realistic noise; between measured sizes
// it is within 1.15x of the fastest in truth.
func TestTunedChoicesFollowMeasurements(t *testing.T) {
	for _, n := range []int{2, 3, 4, 8} {
		for seed := range uint64(8) {
			m := measure(n, 0.07, seed)
			checkChoices(t, n, m, m)
			cfg := m.tuned(n)
			for _, b := range sweepSizes() {
				mid := b + b/2
				a, _ := cfg.Choose(mid, n)
				best := math.Inf(1)
				for _, c := range costs {
					best = min(best, c.us(mid, n))
				}
				for _, c := range costs {
					if c.name == a.Name && c.us(mid, n) > 1.15*best {
						t.Errorf("%d ranks, %d bytes (between measured sizes): chose %s, %.2fx the fastest", n, mid, a.Name, c.us(mid, n)/best)
					}
				}
			}
		}
	}
}

// Issue 16: a tuned model picked tree at 64 bytes at 4 ranks although its
// own data had halving-doubling faster. Tree's samples are noisy (this
// machine's, load 5-9 on 2 cores); halving-doubling's 128-byte sample is a
// preemption, 10x its neighbours. The old fit refit that band through the
// origin and predicted 635 us for halving-doubling at 64 bytes, measured
// at 175, and chose tree (306). The spike itself is judged by what the
// size measured without it: a rerun does not repeat a preemption.
func TestSpikeDoesNotHandSizeToSlowerAlgorithm(t *testing.T) {
	sizes := []int64{8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536}
	measured := sweep{
		"ring":            {},
		"tree":            {},
		"halvingdoubling": {},
	}
	for algo, times := range map[string][]float64{
		"ring":            {498, 816, 763, 720, 634, 596, 693, 658, 796, 804, 751, 867, 989, 1119},
		"tree":            {324, 342, 365, 306, 317, 250, 325, 323, 233, 345, 358, 397, 514, 738},
		"halvingdoubling": {317, 202, 189, 175, 151, 152, 167, 230, 189, 252, 211, 295, 485, 737},
	} {
		for i, b := range sizes {
			measured[algo][b] = times[i]
		}
	}
	table := &adaptive.Table{Schema: adaptive.Schema}
	for _, c := range costs {
		var s []adaptive.Sample
		for _, b := range sizes {
			us := measured[c.name][b]
			if c.name == "halvingdoubling" && b == 128 {
				us *= 10
			}
			s = append(s, adaptive.Sample{Bytes: b, TimeUS: us})
		}
		table.Entries = append(table.Entries, adaptive.Entry{Transport: "tcp", Ranks: 4, Algorithm: c.name,
			Fits: adaptive.FitSamples(c.shape, 4, s)})
	}
	cfg := adaptive.Config{Table: table, Transport: "tcp"}
	for _, b := range sizes {
		a, _ := cfg.Choose(b, 4)
		if got, best := measured[a.Name][b], measured.fastest(b); got > 1.1*best {
			t.Errorf("%d bytes: chose %s, measured %.0f us, %.2fx the fastest (%.0f us)", b, a.Name, got, got/best, best)
		}
	}
}

// A noise bump that makes a sweep fall (a later size measured faster than
// an earlier one) moves neither the choice at the bump nor at its
// neighbours.
func TestNonMonotoneBump(t *testing.T) {
	m := measure(4, 0.05, 1)
	m["halvingdoubling"][512] *= 1.4 // above 1 KiB's and 2 KiB's time
	m["tree"][128<<10] *= 1.7        // above 256 KiB's time
	m["ring"][64] *= 1.3
	if m["halvingdoubling"][512] <= m["halvingdoubling"][2048] || m["tree"][128<<10] <= m["tree"][256<<10] {
		t.Fatal("the bumps do not make the sweep fall")
	}
	checkChoices(t, 4, m, m)
}

// single is adaptive that knows only algorithm c, with fits, so that Choose
// returns c's modelled time.
func single(c cost, n int, fits []adaptive.Fit) adaptive.Config {
	return adaptive.Config{
		Algorithms: []adaptive.Algorithm{{Name: c.name, Shape: c.shape}},
		Table:      &adaptive.Table{Entries: []adaptive.Entry{{Transport: "tcp", Ranks: n, Algorithm: c.name, Fits: fits}}},
		Transport:  "tcp",
	}
}

// Fits of noisy sweeps are monotone in size everywhere, never negative,
// with no bandwidth above 3x the best measured, and latencies that do not
// jump between neighbouring bands.
func TestFitsAreMonotoneAndPlausible(t *testing.T) {
	sweeps := map[string]sweep{"clean": measure(4, 0, 0)}
	for seed := range uint64(6) {
		m := measure(4, 0.1, seed)
		m["ring"][4096] *= 1.6 // a bump
		m["tree"][1<<20] *= 2  // a spike at the last size
		m["halvingdoubling"][16] *= 0.7
		sweeps["noisy "+string(rune('0'+seed))] = m
	}
	for name, m := range sweeps {
		for _, c := range costs {
			samples := m.samples(c.name)
			fits := adaptive.FitSamples(c.shape, 4, samples)
			if len(fits) != len(samples) {
				t.Fatalf("%s %s: %d fits of %d sizes", name, c.name, len(fits), len(samples))
			}
			// Bytes per microsecond of the buffer: the best average any
			// size measured.
			best := 0.0
			for _, s := range samples {
				best = max(best, float64(s.Bytes)/s.TimeUS)
			}
			for i, f := range fits {
				sh := shapeAt(c.shape, f.MinBytes)
				algbw := f.BandwidthGBs * 1e3 / sh.Factor(4)
				if !(f.LatencyUS >= 0) || math.IsInf(f.LatencyUS, 0) || !(algbw > 0) || algbw > 3*best {
					t.Errorf("%s %s band %d: latency %v us/step, bandwidth %v GB/s (%.0f B/us of buffer, best measured %.0f)",
						name, c.name, f.MinBytes, f.LatencyUS, f.BandwidthGBs, algbw, best)
				}
				if i == 0 {
					continue
				}
				// Total latency, so that halving-doubling's change of
				// shape does not count as a jump.
				prev := fits[i-1].LatencyUS * shapeAt(c.shape, fits[i-1].MinBytes).Steps(4)
				lat := f.LatencyUS * sh.Steps(4)
				if lat < prev-1e-9 || lat > 2.5*prev && !(c.shape.Small != nil && f.MinBytes == 2*c.shape.SmallBytes) {
					t.Errorf("%s %s: latency %.0f us below %d bytes, %.0f us above", name, c.name, prev, f.MinBytes, lat)
				}
			}
			// Every size up to 4 MiB in steps of about 1%, and each
			// measured size with its neighbours.
			var sizes []int64
			for b := int64(1); b <= 4<<20; b += 1 + b/97 {
				sizes = append(sizes, b)
			}
			for _, s := range samples {
				sizes = append(sizes, s.Bytes-1, s.Bytes, s.Bytes+1)
			}
			slices.Sort(sizes)
			cfg := single(c, 4, fits)
			prev := 0.0
			for _, b := range sizes {
				_, us := cfg.Choose(b, 4)
				if us < prev {
					t.Fatalf("%s %s: %d bytes modelled at %.6f us, less than a smaller size's %.6f", name, c.name, b, us, prev)
				}
				prev = us
			}
			for _, s := range samples {
				if _, us := cfg.Choose(s.Bytes, 4); us <= 0 {
					t.Fatalf("%s %s: %d bytes modelled at %v us", name, c.name, s.Bytes, us)
				}
			}
		}
	}
	// Without noise the fit gives the costs back (to 0.1%: halving-
	// doubling's latency below its smallest size's bytes is not measured).
	for _, c := range costs {
		fits := adaptive.FitSamples(c.shape, 4, sweeps["clean"].samples(c.name))
		cfg := single(c, 4, fits)
		for _, b := range []int64{8, 100, 1000, 40 << 10, 100 << 10, 1 << 20, 3 << 20} {
			if c.shape.Small != nil && b > c.shape.SmallBytes && b < 2*c.shape.SmallBytes {
				continue // the switch of methods lies between two measured sizes
			}
			if _, us := cfg.Choose(b, 4); math.Abs(us-c.us(b, 4)) > 1e-3*c.us(b, 4) {
				t.Errorf("clean %s: %d bytes modelled at %.3f us, costs %.3f", c.name, b, us, c.us(b, 4))
			}
		}
	}
}

// Samples of one size are pooled, unusable ones dropped; one sample gives
// one band that reproduces it, with a finite bandwidth.
func TestFitSamplesEdges(t *testing.T) {
	if fits := adaptive.FitSamples(adaptive.Ring, 4, []adaptive.Sample{{Bytes: 64, TimeUS: 0}, {Bytes: 8, TimeUS: math.NaN()}}); fits != nil {
		t.Fatalf("fits of no usable sample: %+v", fits)
	}
	one := adaptive.FitSamples(adaptive.Ring, 4, []adaptive.Sample{{Bytes: 1024, TimeUS: 100}})
	if len(one) != 1 || one[0].MinBytes != 0 || one[0].MaxBytes != 0 || one[0].BandwidthGBs > 100 {
		t.Fatalf("fit of one sample: %+v", one)
	}
	c := cost{name: "ring", shape: adaptive.Ring}
	if _, us := single(c, 4, one).Choose(1024, 4); math.Abs(us-100) > 1e-9 {
		t.Errorf("one sample of 100 us modelled at %v", us)
	}
	pooled := adaptive.FitSamples(adaptive.Ring, 4, []adaptive.Sample{{Bytes: 8, TimeUS: 100}, {Bytes: 8, TimeUS: 100}, {Bytes: 16, TimeUS: 110}, {Bytes: 8, TimeUS: -1}})
	if len(pooled) != 2 {
		t.Fatalf("3 samples of 2 sizes gave %d bands", len(pooled))
	}
}

// A tuning file written before this fit (schema v1, a band between every
// two sizes, 1e6 GB/s where a band fell) still loads and chooses.
func TestLoadsOldFits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.json")
	old := `{"schema": "collkit.tuning/v1", "created": "2025-01-01T00:00:00Z", "entries": [
  {"transport": "tcp", "ranks": 4, "algorithm": "ring", "fits": [
    {"min_bytes": 0, "max_bytes": 16, "latency_us_per_step": 30, "bandwidth_gbs": 3.77e-05},
    {"min_bytes": 16, "max_bytes": 0, "latency_us_per_step": 145, "bandwidth_gbs": 1000000}],
   "samples": [{"bytes": 8, "time_us": 498}, {"bytes": 16, "time_us": 816}, {"bytes": 32, "time_us": 763}]}]}`
	if err := os.WriteFile(path, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	table, err := adaptive.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := adaptive.Config{Table: table, Transport: "tcp"}
	if a, us := cfg.Choose(8, 4); a.Name == "" || !(us > 0) {
		t.Fatalf("old file: Choose(8) = %q, %v us", a.Name, us)
	}
}
