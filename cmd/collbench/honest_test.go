package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/bench"
)

// run runs collbench and fails the test unless it exits 0.
func runOK(t *testing.T, args ...string) string {
	t.Helper()
	stdout, stderr, code := collbench(t, nil, args...)
	if code != 0 {
		t.Fatalf("collbench %v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, stdout, stderr)
	}
	return stdout
}

// The run header has the parameters and every rank's host, pid and
// device; the time column is the one -a asks for, named in the header and
// the same in the JSON; -c 0 prints N/A, not a count of zero; the JSON
// keeps statistics, not samples, unless asked.
func TestHeaderTimeColumnAndNA(t *testing.T) {
	jsonPath := filepath.Join(t.TempDir(), "r.json")
	out := runOK(t, "--np", "2", "-b", "8", "-e", "64", "-f", "8", "-n", "3", "-w", "0", "-c", "0", "-a", "1", "--json", jsonPath)
	for _, want := range []string{"# nThread 1 nGpus 1 minBytes 8 maxBytes 64 step: 8(factor) warmup iters: 0 iters: 3 agg iters: 1 validation: 0",
		"# Using devices", "averaged over ranks (-a 1)", "# Out of bounds values : N/A (not checked: -c 0)"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if n := len(regexp.MustCompile(`(?m)^#  Rank +\d+ Pid +\d+ on +\S+ device cpu`).FindAllString(out, -1)); n != 2 {
		t.Errorf("%d rank lines, want 2:\n%s", n, out)
	}
	if regexp.MustCompile(`(?m)^ +8 .* 0 +[0-9.]+ `).MatchString(out) || !strings.Contains(out, "N/A") {
		t.Errorf("unchecked rows must say N/A:\n%s", out)
	}
	f, err := bench.ReadJSONFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	r := f.Reports[0]
	raw, _ := os.ReadFile(jsonPath)
	if r.RankTime != "avg" || r.Checked() || strings.Contains(string(raw), "samples_us") {
		t.Fatalf("report: rank_time %q, checked %v, samples in the file: %v", r.RankTime, r.Checked(), strings.Contains(string(raw), "samples_us"))
	}
	for _, row := range r.Rows {
		m := row.OutOfPlace
		if m.TimeUS != m.RankAvgUS || !(m.RankMinUS <= m.RankAvgUS && m.RankAvgUS <= m.RankMaxUS) || m.Checked {
			t.Errorf("%d B: time %g, ranks avg %g min %g max %g, checked %v", row.Bytes, m.TimeUS, m.RankAvgUS, m.RankMinUS, m.RankMaxUS, m.Checked)
		}
	}

	// With --samples the file has every iteration.
	out = runOK(t, "--np", "2", "-b", "8", "-e", "8", "-n", "3", "-w", "0", "--json", jsonPath, "--samples")
	if f, err = bench.ReadJSONFile(jsonPath); err != nil || len(f.Reports[0].Rows[0].OutOfPlace.SamplesUS) != 3 {
		t.Fatalf("--samples: %v, %+v", err, f.Reports[0].Rows[0].OutOfPlace)
	}

	// Another rank count has nothing in common: compare says why and
	// fails instead of passing on nothing.
	other := f
	other.Reports = []bench.Report{f.Reports[0]}
	other.Reports[0].Ranks = 4
	otherPath := filepath.Join(t.TempDir(), "np4.json")
	if err := bench.WriteFile(otherPath, other); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := collbench(t, nil, "compare", otherPath, jsonPath)
	if code != 1 || !strings.Contains(stdout, "only in the baseline (closest in the new results: allreduce/ring/shm/2r, with 2 ranks, not 4)") ||
		!strings.Contains(stdout, "NOTHING COMPARED") || !strings.Contains(stderr, "nothing in common") {
		t.Fatalf("compare np 4 with np 2: exit %d\n%s\n%s", code, stdout, stderr)
	}
}

// -d, -o and -r take lists or all, and -N repeats the sweep: one report
// for each, told apart in the summary.
func TestVariantsAndCycles(t *testing.T) {
	jsonPath := filepath.Join(t.TempDir(), "v.json")
	out := runOK(t, "--np", "3", "--coll", "reduce", "-d", "float32,int32", "-o", "sum,max", "-r", "all", "-N", "2",
		"-b", "96", "-e", "96", "-n", "1", "-w", "0", "--json", jsonPath)
	f, err := bench.ReadJSONFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Reports) != 2*2*3*2 {
		t.Fatalf("%d reports, want 24 (2 dtypes x 2 ops x 3 roots x 2 cycles)", len(f.Reports))
	}
	seen := map[string]bool{}
	for _, r := range f.Reports {
		row := r.Rows[0]
		seen[row.DType+"/"+row.Op+"/"+string(rune('0'+row.Root))+"/"+string(rune('0'+r.Cycle))] = true
		if !r.Checked() || r.Wrong != 0 {
			t.Errorf("%s %s: checked %v, %d wrong", r.Label(), r.Variant(), r.Checked(), r.Wrong)
		}
	}
	if len(seen) != 24 {
		t.Errorf("%d distinct dtype/op/root/cycle, want 24", len(seen))
	}
	if !strings.Contains(out, "float32/max/root2 cycle 2") {
		t.Errorf("the summary does not tell the sweeps apart:\n%s", out)
	}
}

// OSU's flags: -m MIN:MAX, --iterations, -x, -f (avg, min and max over
// ranks) and -c.
func TestOSUFlags(t *testing.T) {
	jsonPath := filepath.Join(t.TempDir(), "osu.json")
	out := runOK(t, "--np", "2", "-m", "8:64", "--iterations", "3", "-x", "1", "-f", "-c", "--json", jsonPath)
	if !strings.Contains(out, "ranks (out-of-place)") || !strings.Contains(out, "averaged over ranks, the fastest rank's, the slowest rank's") {
		t.Errorf("-f: no ranks avg/min/max columns:\n%s", out)
	}
	f, err := bench.ReadJSONFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	r := f.Reports[0]
	if len(r.Rows) != 4 || r.Rows[0].Bytes != 8 || r.Rows[3].Bytes != 64 || r.Iters != 3 || r.Warmup != 1 || !r.Checked() {
		t.Fatalf("%d rows from %d to %d B, iters %d, warmup %d, checked %v; want 8..64, 3, 1, checked",
			len(r.Rows), r.Rows[0].Bytes, r.Rows[len(r.Rows)-1].Bytes, r.Iters, r.Warmup, r.Checked())
	}
}

// nccl-tests' -m N: N all-reduces per iteration in one group, times per
// all-reduce.
func TestAggIters(t *testing.T) {
	jsonPath := filepath.Join(t.TempDir(), "m.json")
	out := runOK(t, "--np", "2", "-m", "4", "-b", "1K", "-e", "1K", "-n", "3", "-w", "0", "--json", jsonPath)
	f, err := bench.ReadJSONFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	r := f.Reports[0]
	m := r.Rows[0].OutOfPlace
	if r.Group != 4 || !r.PerOperation || !strings.Contains(out, "agg iters: 4") || !strings.Contains(out, "divided by 4: per all-reduce") {
		t.Fatalf("group %d, per operation %v:\n%s", r.Group, r.PerOperation, out)
	}
	if got := float64(r.Rows[0].Bytes) / m.TimeUS / 1e3; got < m.AlgBW*0.999 || got > m.AlgBW*1.001 {
		t.Errorf("algbw %g, want one all-reduce's bytes over the per-operation time, %g", m.AlgBW, got)
	}
}

// hierarchical on one host runs shared memory only, and says so.
func TestHierarchicalSaysWhatRan(t *testing.T) {
	if err := collkit.TransportAvailable("shm"); err != nil {
		t.Skipf("no shared memory here: %v", err)
	}
	jsonPath := filepath.Join(t.TempDir(), "h.json")
	out := runOK(t, "--np", "2", "--algo", "hierarchical,ring", "--nodes", "1", "-b", "8", "-e", "8", "-n", "2", "-w", "0", "--json", jsonPath)
	f, err := bench.ReadJSONFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	h := f.Reports[0]
	if h.Algorithm != "hierarchical" || h.IntraTransport != "shm" || h.InterTransport != "" || h.Nodes != 1 {
		t.Fatalf("hierarchical report: intra %q inter %q nodes %d", h.IntraTransport, h.InterTransport, h.Nodes)
	}
	if !strings.Contains(out, "allreduce/hierarchical/intra=shm,inter=none/2r") || !strings.Contains(out, "transport intra=shm,inter=none") {
		t.Errorf("labels do not say shared memory ran:\n%s", out)
	}
}
