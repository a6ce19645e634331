package bench

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// noisy draws n per-iteration times around centerUS the way a shared
// machine produces them: log-normal jitter, and a fraction busy of the
// iterations slowed 1.5x to 3x by other processes.
func noisy(rng *rand.Rand, n int, centerUS, busy float64) []float64 {
	us := make([]float64, n)
	for i := range us {
		us[i] = centerUS * math.Exp(0.08*rng.NormFloat64())
		if rng.Float64() < busy {
			us[i] *= 1.5 + 1.5*rng.Float64()
		}
	}
	return us
}

var compareSizes = []int64{8, 1024, 65536, 1 << 20, 16 << 20}

// syntheticFile is a one-combination result whose size i has samples from
// draw(i, center time of size i).
func syntheticFile(draw func(i int, centerUS float64) []float64) File {
	r := Report{Collective: "allreduce", Algorithm: "ring", Transport: "tcp", Ranks: 4}
	var rows []Row
	for i, b := range compareSizes {
		center := 20 + float64(b)/1000 // 20 us + 1 GB/s
		m := Measurement{}
		m.Stats, m.TimeUS = Summarize(draw(i, center), true)
		m.AlgBW = float64(b) / m.TimeUS / 1e3
		m.BusBW = m.AlgBW * AllReduceBusFactor(4)
		rows = append(rows, Row{Bytes: b, Count: b / 4, DType: "float32", Op: "sum", Root: -1, Algorithm: "ring", OutOfPlace: m, InPlace: m})
	}
	r.Finish(rows)
	return File{Schema: SchemaVersion, Reports: []Report{r}}
}

func TestCompareCatchesRegression(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := syntheticFile(func(_ int, c float64) []float64 { return noisy(rng, 200, c, 0.1) })
	slow := syntheticFile(func(_ int, c float64) []float64 { return noisy(rng, 200, 1.3*c, 0.1) })
	cmp := Compare(base, slow, CompareOptions{Tolerance: 0.10})
	if got := cmp.Regressions(); got != len(compareSizes) {
		var b strings.Builder
		cmp.Write(&b)
		t.Fatalf("30%% slower: %d of %d sizes flagged, want all:\n%s", got, len(compareSizes), b.String())
	}
	for _, d := range cmp.Diffs {
		if d.Slowdown < 0.2 || d.Slowdown > 0.4 || d.P >= 0.01 {
			t.Errorf("%d B: slowdown %.3f p %.3g, want about 0.3 and p < 0.01", d.Bytes, d.Slowdown, d.P)
		}
	}
	var out strings.Builder
	cmp.Write(&out)
	if !strings.Contains(out.String(), "RESULT: REGRESSION: 5 of 5 sizes") || !strings.Contains(out.String(), "REGRESSED") {
		t.Errorf("report does not state the regression:\n%s", out.String())
	}
	// The other way round it is an improvement, not a regression.
	back := Compare(slow, base, CompareOptions{Tolerance: 0.10})
	if back.Regressions() != 0 || !back.Diffs[0].Improved {
		t.Errorf("faster run: %d regressions, improved=%v", back.Regressions(), back.Diffs[0].Improved)
	}
}

// Two runs drawn from the same noisy distribution must not be flagged, over
// many seeds.
func TestCompareIgnoresNoise(t *testing.T) {
	flagged := 0
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 7))
		n := 20 + int(seed%5)*40 // 20 .. 180 samples
		a := syntheticFile(func(_ int, c float64) []float64 { return noisy(rng, n, c, 0.15) })
		b := syntheticFile(func(_ int, c float64) []float64 { return noisy(rng, n, c, 0.15) })
		flagged += Compare(a, b, CompareOptions{Tolerance: 0.10}).Regressions()
	}
	if flagged != 0 {
		t.Fatalf("%d sizes flagged in 200 pairs of runs from one distribution, want 0", flagged)
	}
}

// A run on a busier machine (half the iterations slowed by other processes)
// has a slower median but the same best case: not a regression.
func TestCompareIgnoresInterference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	quiet := syntheticFile(func(_ int, c float64) []float64 { return noisy(rng, 200, c, 0.0) })
	busy := syntheticFile(func(_ int, c float64) []float64 { return noisy(rng, 200, c, 0.6) })
	cmp := Compare(quiet, busy, CompareOptions{Tolerance: 0.10})
	for _, d := range cmp.Diffs {
		if d.Slowdown <= 0.10 {
			t.Fatalf("%d B: median slowdown %.3f: the synthetic interference is too weak to test anything", d.Bytes, d.Slowdown)
		}
		if d.Regressed || !strings.Contains(d.Why, "interference") {
			t.Errorf("%d B: regressed=%v why=%q, want not regressed, blamed on interference", d.Bytes, d.Regressed, d.Why)
		}
	}
}

func TestCompareWithoutSamples(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	base := syntheticFile(func(_ int, c float64) []float64 { return noisy(rng, 50, c, 0) })
	slow := syntheticFile(func(_ int, c float64) []float64 { return noisy(rng, 50, 1.5*c, 0) })
	// A v1 file knows only the mean time.
	for _, f := range []*File{&base, &slow} {
		f.Schema = SchemaV1
		for i := range f.Reports[0].Rows {
			f.Reports[0].Rows[i].OutOfPlace.Stats = Stats{}
		}
	}
	cmp := Compare(base, slow, CompareOptions{})
	if cmp.Regressions() != len(compareSizes) || cmp.Diffs[0].P != -1 || !strings.Contains(cmp.Diffs[0].Why, "mean only") {
		t.Fatalf("v1 50%% slower: %d regressions, first %+v", cmp.Regressions(), cmp.Diffs[0])
	}
	if Compare(base, base, CompareOptions{}).Regressions() != 0 {
		t.Fatal("a file compared with itself regressed")
	}
}

// What only one side has is listed with why, both ways round, and a
// comparison with nothing in common says so instead of passing.
func TestCompareReportsWhatItCouldNotCompare(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	base := syntheticFile(func(_ int, c float64) []float64 { return noisy(rng, 10, c, 0) })
	cur := syntheticFile(func(_ int, c float64) []float64 { return noisy(rng, 10, c, 0) })
	cur.Reports[0].Rows = cur.Reports[0].Rows[:2]
	extra := base.Reports[0]
	extra.Algorithm = "tree"
	cur.Reports = append(cur.Reports, extra)
	cmp := Compare(base, cur, CompareOptions{})
	var whys []string
	for _, s := range cmp.NotCompared {
		whys = append(whys, s.What+": "+s.Why)
	}
	all := strings.Join(whys, "\n")
	if len(cmp.Diffs) != 2 || len(cmp.NotCompared) != 4 || !strings.Contains(all, "65536 B: size only in the baseline") ||
		!strings.Contains(all, "allreduce/tree/tcp/4r float32/sum: only in the new results") {
		t.Fatalf("diffs %d, not compared:\n%s\nwant 2 diffs, the 3 larger sizes and tree", len(cmp.Diffs), all)
	}
	var out strings.Builder
	cmp.Write(&out)
	if !strings.Contains(out.String(), "# not compared (4):") {
		t.Errorf("report does not list what was not compared:\n%s", out.String())
	}

	// Made at 2 ranks, run at 4: nothing in common, and the reason named.
	other := syntheticFile(func(_ int, c float64) []float64 { return noisy(rng, 10, c, 0) })
	other.Reports[0].Ranks = 2
	cmp = Compare(other, base, CompareOptions{})
	out.Reset()
	cmp.Write(&out)
	if len(cmp.Diffs) != 0 || !strings.Contains(out.String(), "4 ranks, not 2") || !strings.Contains(out.String(), "RESULT: NOTHING COMPARED") {
		t.Fatalf("2 ranks against 4:\n%s", out.String())
	}
}

// A baseline timed with another -a is compared, with a note: per-iteration
// times do not depend on it, the average busbw does.
func TestCompareNotesRankTime(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	base := syntheticFile(func(_ int, c float64) []float64 { return noisy(rng, 10, c, 0) })
	cur := syntheticFile(func(_ int, c float64) []float64 { return noisy(rng, 10, c, 0) })
	cur.Reports[0].RankTime = RankAvg.String()
	cmp := Compare(base, cur, CompareOptions{})
	if len(cmp.Diffs) != len(compareSizes) || len(cmp.Notes) != 1 || !strings.Contains(cmp.Notes[0], "-a 3 in the baseline and -a 1") {
		t.Fatalf("diffs %d, notes %q", len(cmp.Diffs), cmp.Notes)
	}
}

func TestMannWhitneyGreater(t *testing.T) {
	a := []float64{1, 2, 3, 4, 5}
	b := []float64{6, 7, 8, 9, 10}
	// Exact p for complete separation of 5 and 5 is 1/252 = 0.004; the
	// corrected normal approximation gives 0.006.
	if p := MannWhitneyGreater(a, b); p < 0.003 || p > 0.008 {
		t.Errorf("separated: p = %g, want about 0.006", p)
	}
	if p := MannWhitneyGreater(b, a); p < 0.99 {
		t.Errorf("reversed: p = %g, want near 1", p)
	}
	if p := MannWhitneyGreater(a, a); p < 0.4 {
		t.Errorf("identical: p = %g, want about 0.5", p)
	}
	if p := MannWhitneyGreater([]float64{3, 3, 3}, []float64{3, 3}); p != 1 {
		t.Errorf("all tied: p = %g, want 1", p)
	}
	if p := MannWhitneyGreater(nil, b); p != 1 {
		t.Errorf("empty: p = %g, want 1", p)
	}
}

func TestBelowFloor(t *testing.T) {
	f := File{Reports: []Report{
		{Collective: "allreduce", Algorithm: "ring", Transport: "tcp", Ranks: 2, AvgBusBW: 1.5},
		{Collective: "allreduce", Algorithm: "tree", Transport: "tcp", Ranks: 2, AvgBusBW: 0.5},
	}}
	low := BelowFloor(f, 1.0)
	if len(low) != 1 || !strings.Contains(low[0], "allreduce/tree/tcp/2r") {
		t.Fatalf("below 1 GB/s: %v, want only tree", low)
	}
	if len(BelowFloor(f, 0.1)) != 0 {
		t.Fatal("nothing is below 0.1 GB/s")
	}
}
