package bench

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// CompareOptions sets how strict Compare is.
type CompareOptions struct {
	// Tolerance is the slow-down allowed before a size counts as regressed,
	// as a fraction: 0.10 allows 10%. Zero means 0.10.
	Tolerance float64
	// Alpha is the significance level of the one-sided Mann-Whitney U test
	// on the per-iteration samples. Zero means 0.01.
	Alpha float64
}

func (o CompareOptions) withDefaults() CompareOptions {
	if o.Tolerance == 0 {
		o.Tolerance = 0.10
	}
	if o.Alpha == 0 {
		o.Alpha = 0.01
	}
	return o
}

// SizeDiff is the evidence for one size of one combination, out of place.
type SizeDiff struct {
	Combination          string  // Report.Label plus dtype and op
	Bytes                int64   //
	BaseP50US, NewP50US  float64 // median iteration (mean for v1 files)
	BaseMinUS, NewMinUS  float64 // fastest iteration (0 for v1 files)
	BaseBusBW, NewBusBW  float64 // bus bandwidth at the median time, GB/s
	Slowdown             float64 // NewP50US/BaseP50US - 1
	MinSlowdown          float64 // NewMinUS/BaseMinUS - 1 (0 without minimums)
	P                    float64 // one-sided Mann-Whitney p that new is slower; -1 without samples
	BaseSamples, Samples int     // samples on each side
	Regressed, Improved  bool
	Why                  string // the rule that decided, in words
}

// Comparison is the result of Compare.
type Comparison struct {
	Options CompareOptions
	Diffs   []SizeDiff
	// AvgBusBW holds each combination's average busbw: [base, new].
	AvgBusBW map[string][2]float64
	// NotCompared lists what only one side has, with why, so that a gate
	// never passes on what it did not look at.
	NotCompared []Skip
	// Notes are differences that do not stop a comparison but qualify it.
	Notes []string
}

// Skip is a combination, or one size of one, that Compare could not
// compare.
type Skip struct {
	What string // the combination (Report.Label, dtype, op), with the size when only the size is missing
	Why  string
}

// Regressions counts the sizes that regressed.
func (c Comparison) Regressions() int {
	n := 0
	for _, d := range c.Diffs {
		if d.Regressed {
			n++
		}
	}
	return n
}

// combination identifies a report's row for matching base and new results.
func combination(r Report, row Row) string {
	v := row.DType + "/" + row.Op
	if row.Root >= 0 {
		v += fmt.Sprintf("/root%d", row.Root)
	}
	return r.Label() + " " + v
}

// Compare decides, size by size, whether cur is slower than base. A size
// with per-iteration samples on both sides regressed only when all three
// hold, so that a noisy machine does not cry wolf:
//
//   - its median time is more than Tolerance slower,
//   - its fastest iteration is more than Tolerance slower too (interference
//     from other processes inflates the median and the tail, not the best
//     case; a slower code path moves them all), and
//   - a one-sided Mann-Whitney U test says the new times are larger with
//     p < Alpha.
//
// Without samples (schema v1 files, or runs without KeepSamples) a size
// regressed when its typical time is more than Tolerance slower, and its
// fastest iteration too when both sides have one.
// Busbw and latency are the same test: busbw at a size is bytes over time.
// Combinations and sizes that only one side has are listed in NotCompared
// with the reason.
func Compare(base, cur File, opts CompareOptions) Comparison {
	opts = opts.withDefaults()
	c := Comparison{Options: opts, AvgBusBW: map[string][2]float64{}}
	type side struct {
		report Report
		rows   map[int64]Row
		sizes  []int64
	}
	index := func(f File) (map[string]*side, []string) {
		m, order := map[string]*side{}, []string(nil)
		for _, r := range f.Reports {
			for _, row := range r.Rows {
				combo := combination(r, row)
				sd := m[combo]
				if sd == nil {
					sd = &side{report: r, rows: map[int64]Row{}}
					m[combo] = sd
					order = append(order, combo)
				}
				if _, dup := sd.rows[row.Bytes]; !dup {
					sd.sizes = append(sd.sizes, row.Bytes)
				}
				sd.rows[row.Bytes] = row
			}
		}
		return m, order
	}
	baseSide, baseOrder := index(base)
	newSide, newOrder := index(cur)
	for _, combo := range baseOrder {
		b, n := baseSide[combo], newSide[combo]
		if n == nil {
			c.NotCompared = append(c.NotCompared, Skip{combo, "only in the baseline" + nearest(b.report, cur.Reports, "the new results")})
			continue
		}
		c.AvgBusBW[combo] = [2]float64{b.report.AvgBusBW, n.report.AvgBusBW}
		if bt, nt := b.report.rankTime(), n.report.rankTime(); bt != nt {
			c.Notes = append(c.Notes, fmt.Sprintf("%s: the time column is -a %d in the baseline and -a %d in the new results, so avg busbw differs in meaning; sizes are judged on per-iteration times, which do not depend on -a",
				combo, bt.NCCL(), nt.NCCL()))
		}
		for _, size := range b.sizes {
			nr, ok := n.rows[size]
			if !ok {
				c.NotCompared = append(c.NotCompared, Skip{fmt.Sprintf("%s %d B", combo, size), "size only in the baseline"})
				continue
			}
			c.Diffs = append(c.Diffs, diffSize(combo, b.rows[size], nr, opts))
		}
		for _, size := range n.sizes {
			if _, ok := b.rows[size]; !ok {
				c.NotCompared = append(c.NotCompared, Skip{fmt.Sprintf("%s %d B", combo, size), "size only in the new results"})
			}
		}
	}
	for _, combo := range newOrder {
		if baseSide[combo] == nil {
			c.NotCompared = append(c.NotCompared, Skip{combo, "only in the new results" + nearest(newSide[combo].report, base.Reports, "the baseline")})
		}
	}
	return c
}

// nearest says how others differ from r when one of them has r's
// collective and algorithm: the likely reason r found no match.
func nearest(r Report, others []Report, where string) string {
	for _, o := range others {
		if o.Collective != r.Collective || o.Algorithm != r.Algorithm {
			continue
		}
		var why []string
		if o.Ranks != r.Ranks {
			why = append(why, fmt.Sprintf("%d ranks, not %d", o.Ranks, r.Ranks))
		}
		if o.TransportsRan() != r.TransportsRan() {
			why = append(why, fmt.Sprintf("transport %s, not %s", o.TransportsRan(), r.TransportsRan()))
		}
		if o.Variant() != r.Variant() {
			why = append(why, fmt.Sprintf("%s, not %s", o.Variant(), r.Variant()))
		}
		if len(why) > 0 {
			return fmt.Sprintf(" (closest in %s: %s, with %s)", where, o.Label(), strings.Join(why, ", "))
		}
	}
	return ""
}

func diffSize(combo string, base, cur Row, opts CompareOptions) SizeDiff {
	b, n := base.OutOfPlace, cur.OutOfPlace
	d := SizeDiff{Combination: combo, Bytes: base.Bytes,
		BaseP50US: b.Typical(), NewP50US: n.Typical(), BaseMinUS: b.MinUS, NewMinUS: n.MinUS,
		BaseSamples: len(b.SamplesUS), Samples: len(n.SamplesUS), P: -1}
	d.BaseBusBW, d.NewBusBW = busBWAt(b, d.BaseP50US), busBWAt(n, d.NewP50US)
	if d.BaseP50US > 0 {
		d.Slowdown = d.NewP50US/d.BaseP50US - 1
	}
	haveMin := d.BaseMinUS > 0 && d.NewMinUS > 0
	if haveMin {
		d.MinSlowdown = d.NewMinUS/d.BaseMinUS - 1
	}
	tol := opts.Tolerance
	switch {
	case d.BaseSamples >= 5 && d.Samples >= 5:
		d.P = MannWhitneyGreater(b.SamplesUS, n.SamplesUS)
		d.Regressed = d.Slowdown > tol && d.MinSlowdown > tol && d.P < opts.Alpha
		d.Improved = d.Slowdown < -tol && d.MinSlowdown < -tol && MannWhitneyGreater(n.SamplesUS, b.SamplesUS) < opts.Alpha
		switch {
		case d.Regressed:
			d.Why = "median, minimum and U test agree"
		case d.Slowdown > tol && d.MinSlowdown <= tol:
			d.Why = "median slower, minimum not: interference"
		case d.Slowdown > tol:
			d.Why = "not significant"
		}
	case haveMin:
		d.Regressed = d.Slowdown > tol && d.MinSlowdown > tol
		d.Improved = d.Slowdown < -tol && d.MinSlowdown < -tol
		d.Why = "no samples: median and minimum"
	default:
		d.Regressed = d.Slowdown > tol
		d.Improved = d.Slowdown < -tol
		d.Why = "no samples: mean only"
	}
	return d
}

// busBWAt is the bus bandwidth of m's size at time us.
func busBWAt(m Measurement, us float64) float64 {
	if us <= 0 || m.TimeUS <= 0 {
		return 0
	}
	return m.BusBW * m.TimeUS / us
}

// Write prints the per-size evidence and the verdict.
func (c Comparison) Write(w io.Writer) {
	o := c.Options
	fmt.Fprintf(w, "# compare: tolerance %.3g%%; a size regressed when its median and its fastest iteration are both more than %.3g%% slower\n", 100*o.Tolerance, 100*o.Tolerance)
	fmt.Fprintf(w, "# and a one-sided Mann-Whitney U test on the per-iteration times gives p < %g (out-of-place times, slowest rank)\n", o.Alpha)
	last := ""
	for _, d := range c.Diffs {
		if d.Combination != last {
			last = d.Combination
			avg := c.AvgBusBW[d.Combination]
			fmt.Fprintf(w, "#\n# %s: avg busbw (of the time column) %s -> %s GB/s (%s)\n", d.Combination, FormatGB(avg[0]), FormatGB(avg[1]), percent(avg[1]/avg[0]-1))
			fmt.Fprintf(w, "# %10s %10s %10s %8s %10s %10s %8s %9s %9s %9s %11s  %s\n",
				"size(B)", "base p50", "new p50", "change", "base min", "new min", "change", "busbw@p50", "busbw@p50", "p", "samples", "verdict")
			fmt.Fprintf(w, "# %10s %10s %10s %8s %10s %10s %8s %9s %9s %9s %11s\n",
				"", "(us)", "(us)", "", "(us)", "(us)", "", "base", "new", "", "base/new")
		}
		verdict := "ok"
		switch {
		case d.Regressed:
			verdict = "REGRESSED"
		case d.Improved:
			verdict = "improved"
		}
		if d.Why != "" && !d.Improved {
			verdict += " (" + d.Why + ")"
		}
		p := "-"
		if d.P >= 0 {
			p = fmt.Sprintf("%.2g", d.P)
		}
		fmt.Fprintf(w, "  %10d %10.2f %10.2f %8s %10.2f %10.2f %8s %9s %9s %9s %11s  %s\n",
			d.Bytes, d.BaseP50US, d.NewP50US, percent(d.Slowdown), d.BaseMinUS, d.NewMinUS, percent(d.MinSlowdown),
			FormatGB(d.BaseBusBW), FormatGB(d.NewBusBW), p, fmt.Sprintf("%d/%d", d.BaseSamples, d.Samples), verdict)
	}
	if len(c.NotCompared) > 0 {
		fmt.Fprintf(w, "#\n# not compared (%d):\n", len(c.NotCompared))
		for _, s := range c.NotCompared {
			fmt.Fprintf(w, "#   %s: %s\n", s.What, s.Why)
		}
	}
	for _, n := range c.Notes {
		fmt.Fprintf(w, "# note: %s\n", n)
	}
	if len(c.Diffs) == 0 {
		fmt.Fprintf(w, "#\n# RESULT: NOTHING COMPARED: the two files have no combination and size in common\n")
		return
	}
	if n := c.Regressions(); n > 0 {
		fmt.Fprintf(w, "#\n# RESULT: REGRESSION: %d of %d sizes slower beyond %.3g%%\n", n, len(c.Diffs), 100*o.Tolerance)
	} else {
		fmt.Fprintf(w, "#\n# RESULT: OK: no regression beyond %.3g%% in %d sizes\n", 100*o.Tolerance, len(c.Diffs))
	}
}

func percent(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "-"
	}
	return fmt.Sprintf("%+.1f%%", 100*f)
}

// BelowFloor lists the combinations whose average bus bandwidth is below
// minBusBW GB/s, the gate nccl-tests' NCCL_TESTS_MIN_BW provides.
func BelowFloor(f File, minBusBW float64) []string {
	var low []string
	for _, r := range f.Reports {
		if r.AvgBusBW < minBusBW {
			low = append(low, fmt.Sprintf("%s: avg busbw %.4g GB/s < %.4g", r.Label(), r.AvgBusBW, minBusBW))
		}
	}
	return slices.SortedFunc(slices.Values(low), cmp.Compare)
}
