package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/collkit/collkit/bench"
	"github.com/collkit/collkit/bench/chart"
)

// gates are the pass/fail checks on a run's performance.
type gates struct {
	baseline  string  // --baseline: compare against this result file
	tolerance float64 // --tolerance, as a fraction
	minBW     float64 // --min-bw: floor on every combination's average busbw (GB/s); 0 is off
}

// errRegression marks a run or comparison that failed a performance gate.
var errRegression = errors.New("performance gate failed")

// addGateFlags registers the flags shared by a run and `collbench compare`.
func addGateFlags(fs *pflag.FlagSet, tolerance *string, minBW *float64) {
	fs.StringVar(tolerance, "tolerance", "10%", "regression gate: allowed slow-down per size, as 10% or 0.1")
	fs.Float64Var(minBW, "min-bw", 0, "fail when a combination's average bus bandwidth (GB/s) is below this, like NCCL_TESTS_MIN_BW")
}

// parseTolerance reads "10%" or "0.1".
func parseTolerance(s string) (float64, error) {
	t := strings.TrimSpace(s)
	scale := 1.0
	if strings.HasSuffix(t, "%") {
		t, scale = strings.TrimSpace(strings.TrimSuffix(t, "%")), 0.01
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v*scale <= 0 || v*scale >= 10 {
		return 0, fmt.Errorf("--tolerance %q: want a positive fraction or percentage such as 10%% or 0.1", s)
	}
	return v * scale, nil
}

// checkPlotPath rejects a --plot file name chart cannot write.
func checkPlotPath(path string) error {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".png", ".svg":
		return nil
	}
	return fmt.Errorf("--plot %q: the file name must end in .png or .svg", path)
}

// applyGates prints the comparison with the baseline and the floor check,
// and returns an error wrapping errRegression when one fails.
func applyGates(w io.Writer, g gates, base *bench.File, cur bench.File) error {
	var failed []string
	if base != nil {
		cmp := bench.Compare(*base, cur, bench.CompareOptions{Tolerance: g.tolerance})
		cmp.Write(w)
		if n := cmp.Regressions(); n > 0 {
			failed = append(failed, fmt.Sprintf("%d sizes slower than the baseline beyond %.3g%%", n, 100*g.tolerance))
		}
		if len(cmp.Diffs) == 0 {
			failed = append(failed, "nothing in common with the baseline to compare (the reasons are listed above); make both runs with the same ranks, transports, algorithms and sizes")
		}
	}
	if g.minBW > 0 {
		low := bench.BelowFloor(cur, g.minBW)
		for _, l := range low {
			fmt.Fprintf(w, "# below --min-bw: %s\n", l)
		}
		if len(low) > 0 {
			failed = append(failed, fmt.Sprintf("%d combinations below --min-bw %g GB/s", len(low), g.minBW))
		} else {
			fmt.Fprintf(w, "# every combination's avg busbw is at least --min-bw %g GB/s\n", g.minBW)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%w: %s (evidence above)", errRegression, strings.Join(failed, "; "))
	}
	return nil
}

// writeOutputs saves the results where the flags ask; the JSON keeps
// every iteration's time only with samples.
func writeOutputs(jsonPath, csvPath, plotPath string, f bench.File, samples bool) error {
	if jsonPath != "" {
		out := f
		if !samples {
			out = bench.WithoutSamples(f)
		}
		if err := bench.WriteFile(jsonPath, out); err != nil {
			return err
		}
	}
	if csvPath != "" {
		if err := bench.WriteCSVFile(csvPath, f); err != nil {
			return err
		}
	}
	if plotPath != "" {
		if err := chart.Save(plotPath, f.Reports); err != nil {
			return err
		}
	}
	return nil
}

// runCompare is `collbench compare BASE.json NEW.json`.
func runCompare(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("collbench compare", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	var tolerance string
	var minBW float64
	addGateFlags(fs, &tolerance, &minBW)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: collbench compare BASE.json NEW.json [flags]\n\n"+
			"Compares two collbench --json results size by size and exits 1 when NEW regressed.\n\nFlags:\n%s", fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "collbench: compare: %v (see collbench compare --help)\n", err)
		return exitUsage
	}
	if fs.NArg() != 2 {
		fmt.Fprintf(stderr, "collbench: compare: want two result files, BASE.json NEW.json, got %d arguments\n", fs.NArg())
		return exitUsage
	}
	g := gates{minBW: minBW}
	var err error
	if g.tolerance, err = parseTolerance(tolerance); err != nil {
		fmt.Fprintf(stderr, "collbench: compare: %v\n", err)
		return exitUsage
	}
	base, err := bench.ReadJSONFile(fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "collbench: compare: baseline: %v\n", err)
		return exitUsage
	}
	cur, err := bench.ReadJSONFile(fs.Arg(1))
	if err != nil {
		fmt.Fprintf(stderr, "collbench: compare: new results: %v\n", err)
		return exitUsage
	}
	fmt.Fprintf(stdout, "# baseline %s (%s, %s)\n# new      %s (%s, %s)\n", fs.Arg(0), base.Environment.Host, base.Environment.CollkitVersion,
		fs.Arg(1), cur.Environment.Host, cur.Environment.CollkitVersion)
	if err := applyGates(stdout, g, &base, cur); err != nil {
		fmt.Fprintf(stderr, "collbench: compare: %v\n", err)
		return exitFailed
	}
	return 0
}

// runPlot is `collbench plot RESULT.json... -o FILE.png`.
func runPlot(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("collbench plot", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.StringP("output", "o", "collbench.png", "image to write: .png or .svg")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: collbench plot RESULT.json... [-o FILE.png|FILE.svg]\n\n"+
			"Draws bus bandwidth and latency against message size, one line per combination, from collbench --json results.\n\nFlags:\n%s", fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "collbench: plot: %v (see collbench plot --help)\n", err)
		return exitUsage
	}
	if fs.NArg() == 0 {
		fmt.Fprintf(stderr, "collbench: plot: name at least one result file written by collbench --json\n")
		return exitUsage
	}
	if err := checkPlotPath(*out); err != nil {
		fmt.Fprintf(stderr, "collbench: plot: %v\n", strings.Replace(err.Error(), "--plot", "--output", 1))
		return exitUsage
	}
	var reports []bench.Report
	var sources []string
	for _, path := range fs.Args() {
		f, err := bench.ReadJSONFile(path)
		if err != nil {
			fmt.Fprintf(stderr, "collbench: plot: %v\n", err)
			return exitUsage
		}
		reports = append(reports, f.Reports...)
		for range f.Reports {
			sources = append(sources, path)
		}
	}
	// The same combination from two files gets the file's name in its
	// legend entry.
	if err := chart.SaveLabeled(*out, reports, bench.DistinctLabels(reports, sources)); err != nil {
		fmt.Fprintf(stderr, "collbench: plot: %v\n", err)
		return exitFailed
	}
	fmt.Fprintf(stdout, "# %d combinations from %d files drawn to %s\n", len(reports), fs.NArg(), *out)
	return 0
}
