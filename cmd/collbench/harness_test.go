package main

import (
	"errors"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/bench"
)

func TestParseTransports(t *testing.T) {
	known := []string{"tcp", "shm", "rdma"}
	avail := func(name string) error {
		if name == "rdma" {
			return errors.New("rdma: not built with -tags rdma")
		}
		return nil
	}
	run, skipped, err := parseTransports("all", known, avail)
	if err != nil || strings.Join(run, ",") != "tcp,shm" || len(skipped) != 1 || skipped[0].name != "rdma" {
		t.Fatalf("all: run %v skipped %v err %v; want tcp,shm and rdma skipped", run, skipped, err)
	}
	run, skipped, err = parseTransports("shm, tcp,shm", known, avail)
	if err != nil || strings.Join(run, ",") != "shm,tcp" || len(skipped) != 0 {
		t.Fatalf("list: run %v skipped %v err %v", run, skipped, err)
	}
	if _, _, err := parseTransports("rdma", known, avail); err == nil || !strings.Contains(err.Error(), "not built with -tags rdma") {
		t.Fatalf("only an unavailable one: %v, want the reason", err)
	}
	if _, _, err := parseTransports("tcp,pigeon", known, avail); err == nil || !strings.Contains(err.Error(), `"pigeon"`) {
		t.Fatalf("unknown: %v", err)
	}
	if _, _, err := parseTransports("auto,tcp", known, avail); err == nil || !strings.Contains(err.Error(), "auto picks one transport and stands alone") {
		t.Fatalf("auto in a list: %v", err)
	}
}

func TestParseTolerance(t *testing.T) {
	for in, want := range map[string]float64{"10%": 0.10, "0.1": 0.1, " 5 %": 0.05, "150%": 1.5} {
		got, err := parseTolerance(in)
		if err != nil || got < want-1e-12 || got > want+1e-12 {
			t.Errorf("parseTolerance(%q) = %g, %v; want %g", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "-5%", "0", "0%"} {
		if _, err := parseTolerance(in); err == nil {
			t.Errorf("parseTolerance(%q): no error", in)
		}
	}
}

// The matrix run end to end: two algorithms, adaptive iterations, every
// output, then the regression gate on a copy made 30% slower.
func TestMatrixOutputsAndGate(t *testing.T) {
	dir := t.TempDir()
	jsonPath, csvPath, plotPath := filepath.Join(dir, "base.json"), filepath.Join(dir, "base.csv"), filepath.Join(dir, "base.png")
	stdout, stderr, code := collbench(t, nil, "--np", "2", "--algo", "ring,tree", "--transport", "all", "-b", "8", "-e", "64K", "-f", "32",
		"-n", "40", "-w", "1", "--json", jsonPath, "--samples", "--csv", csvPath, "--plot", plotPath)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"# Summary per combination", "allreduce/ring/tcp/2r", "allreduce/tree/tcp/2r", "# Per size", "winner", "p99"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if stderr != "" {
		t.Errorf("stderr is not a terminal, yet got:\n%s", stderr)
	}
	f, err := bench.ReadJSONFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	available := 0
	for _, tr := range collkit.Transports() {
		if collkit.TransportAvailable(tr) == nil {
			available++
		}
	}
	if len(f.Reports) != 2*available || f.Environment.Cores == 0 || f.Environment.GoVersion == "" || f.Reports[0].TransportSettings["streams"] != "1" {
		t.Fatalf("%d reports, environment %+v, settings %v", len(f.Reports), f.Environment, f.Reports[0].TransportSettings)
	}
	for _, r := range f.Reports {
		// The fit itself is checked on exact data in bench; here, three
		// latency-bound sizes on a busy machine may not fit a line, which
		// the summary reports as zeros, never as negative terms.
		if len(r.Rows) != 3 || r.FitLatencyUS < 0 || r.FitBusBW < 0 || r.BestLatencyUS <= 0 {
			t.Errorf("%s: %d rows, summary %+v", r.Label(), len(r.Rows), r.Summary)
		}
		for _, row := range r.Rows {
			m := row.OutOfPlace
			if m.Iters < 5 || m.Iters > 200 || len(m.SamplesUS) != m.Iters || !(m.MinUS <= m.P50US && m.P50US <= m.P99US && m.P99US <= m.MaxUS) {
				t.Errorf("%s %d B: iters %d, %d samples, min %g p50 %g p99 %g max %g", r.Label(), row.Bytes, m.Iters, len(m.SamplesUS), m.MinUS, m.P50US, m.P99US, m.MaxUS)
			}
		}
	}
	csvText, err := os.ReadFile(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(csvText), "\n"); lines != 1+len(f.Reports)*3*2 {
		t.Errorf("CSV has %d lines, want a header and %d", lines, len(f.Reports)*3*2)
	}
	img, err := os.Open(plotPath)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	if _, err := png.Decode(img); err != nil {
		t.Fatalf("--plot wrote no PNG: %v", err)
	}

	// Same results: no regression. 30% slower in every iteration: caught.
	slow := f
	slow.Reports = nil
	for _, r := range f.Reports {
		rows := make([]bench.Row, len(r.Rows))
		for i, row := range r.Rows {
			us := make([]float64, len(row.OutOfPlace.SamplesUS))
			for k, v := range row.OutOfPlace.SamplesUS {
				us[k] = 1.3 * v
			}
			row.OutOfPlace.Stats, row.OutOfPlace.TimeUS = bench.Summarize(us, true)
			row.OutOfPlace.BusBW /= 1.3
			rows[i] = row
		}
		r.Finish(rows)
		slow.Reports = append(slow.Reports, r)
	}
	slowPath := filepath.Join(dir, "slow.json")
	if err := bench.WriteFile(slowPath, slow); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = collbench(t, nil, "compare", jsonPath, jsonPath, "--tolerance", "10%")
	if code != 0 || !strings.Contains(stdout, "RESULT: OK") {
		t.Fatalf("compare with itself: exit %d\n%s\n%s", code, stdout, stderr)
	}
	stdout, stderr, code = collbench(t, nil, "compare", jsonPath, slowPath, "--tolerance", "10%")
	if code != 1 || !strings.Contains(stdout, "REGRESSED") || !strings.Contains(stderr, "sizes slower than the baseline") {
		t.Fatalf("compare with a 30%% slower copy: exit %d, want 1\n%s\n%s", code, stdout, stderr)
	}
	stdout, stderr, code = collbench(t, nil, "compare", jsonPath, jsonPath, "--min-bw", "1e6")
	if code != 1 || !strings.Contains(stdout, "below --min-bw") {
		t.Fatalf("--min-bw 1e6: exit %d, want 1\n%s\n%s", code, stdout, stderr)
	}
	svgPath := filepath.Join(dir, "both.svg")
	stdout, stderr, code = collbench(t, nil, "plot", jsonPath, slowPath, "-o", svgPath)
	if code != 0 {
		t.Fatalf("plot: exit %d\n%s\n%s", code, stdout, stderr)
	}
	// The same combinations from two files: each legend entry says which.
	svg, err := os.ReadFile(svgPath)
	if err != nil || !strings.Contains(string(svg), "allreduce/tree/tcp/2r "+jsonPath) || !strings.Contains(string(svg), "allreduce/tree/tcp/2r "+slowPath) {
		t.Fatalf("plot SVG (%v) lacks a legend entry per file", err)
	}
}

// --interleave measures every algorithm at each size in turn and still
// prints and saves one complete table per algorithm, checked as usual; with
// --rounds, one row (the median round's) per size.
func TestInterleave(t *testing.T) {
	jsonPath := filepath.Join(t.TempDir(), "i.json")
	stdout, stderr, code := collbench(t, nil, "--np", "2", "--algo", "ring,halvingdoubling,tree", "--interleave", "--rounds", "3",
		"-b", "8", "-e", "32K", "-f", "64", "-n", "3", "-w", "1", "--json", jsonPath)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	file, err := bench.ReadJSONFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ring", "halvingdoubling", "tree"}
	if len(file.Reports) != len(want) {
		t.Fatalf("%d reports, want %d", len(file.Reports), len(want))
	}
	for i, r := range file.Reports {
		if r.Algorithm != want[i] || len(r.Rows) != 3 {
			t.Fatalf("report %d: %s with %d rows, want %s with 3 (8 B, 512 B, 32 KiB)", i, r.Algorithm, len(r.Rows), want[i])
		}
		for j, row := range r.Rows {
			if row.Bytes != []int64{8, 512, 32768}[j] || row.OutOfPlace.Wrong != 0 || row.OutOfPlace.TimeUS <= 0 {
				t.Errorf("%s row %d: %+v", r.Algorithm, j, row)
			}
		}
	}
	if strings.Count(stdout, "# Out of bounds values : 0 OK") != 3 || !strings.Contains(stdout, "winner") {
		t.Fatalf("want three checked tables and the per-size comparison:\n%s", stdout)
	}
}
