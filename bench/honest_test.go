package bench

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport/mem"
)

// measureOnRanks runs measure on n in-memory ranks, rank r's operation
// taking about (1+4r) ms, and returns every rank's Measurement.
func measureOnRanks(t *testing.T, n int, cfg Config) []Measurement {
	t.Helper()
	net := mem.NewNetwork(n, mem.Config{})
	defer net.Close()
	ms := make([]Measurement, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, tr := range net.Transports() {
		wg.Go(func() {
			c, err := collkit.New(tr, collkit.Options{})
			if err != nil {
				errs[r] = err
				return
			}
			// The work being timed, not a wait for something.
			work := func() error { time.Sleep(time.Duration(1+4*r) * time.Millisecond); return nil }
			ms[r], errs[r] = measure(context.Background(), c, cfg, work)
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return ms
}

// Each rank's mean is combined over ranks four ways, nccl-tests' -a picks
// the time column among them, every rank gets the same figures, and the
// per-iteration statistics are the slowest rank's (here rank 2's 9 ms).
func TestMeasureRankTime(t *testing.T) {
	for _, rt := range []RankTime{RankMax, RankAvg, RankMin, Rank0} {
		ms := measureOnRanks(t, 3, Config{Iters: 3, RankTime: rt})
		m := ms[0]
		if !(m.RankMinUS < m.RankAvgUS && m.RankAvgUS < m.RankMaxUS) || m.Rank0US != m.RankMinUS {
			t.Fatalf("%v: min %g avg %g max %g rank0 %g: want min < avg < max, rank 0 the fastest", rt, m.RankMinUS, m.RankAvgUS, m.RankMaxUS, m.Rank0US)
		}
		if m.TimeUS != rt.pick(m) {
			t.Errorf("%v: time column %g, want %g", rt, m.TimeUS, rt.pick(m))
		}
		if m.RankMinUS < 1000 || m.RankMaxUS < 9000 || m.MinUS < 9000 {
			t.Errorf("%v: fastest rank %g us, slowest %g us, per-iteration minimum %g: want at least 1 ms, 9 ms and 9 ms", rt, m.RankMinUS, m.RankMaxUS, m.MinUS)
		}
		for r := range ms {
			if ms[r].TimeUS != m.TimeUS || ms[r].P50US != m.P50US {
				t.Errorf("%v: rank %d has time %g p50 %g, rank 0 %g %g", rt, r, ms[r].TimeUS, ms[r].P50US, m.TimeUS, m.P50US)
			}
		}
	}
}

// -z 1 and -z 3 run a barrier after each iteration; with -z 3 it is left
// out of the iteration's time, so the fast rank's mean is its own work
// (1 ms), while with -z 1 it also waits for the slowest (9 ms).
func TestMeasureSync(t *testing.T) {
	timed := measureOnRanks(t, 3, Config{Iters: 3, Sync: SyncBarrier})
	untimed := measureOnRanks(t, 3, Config{Iters: 3, Sync: SyncBarrierUntimed})
	if timed[0].RankMinUS < 9000 {
		t.Errorf("-z 1: fastest rank's mean %g us, want at least the slowest rank's 9 ms", timed[0].RankMinUS)
	}
	if untimed[0].RankMinUS > timed[0].RankMinUS/2 {
		t.Errorf("-z 3: fastest rank's mean %g us, want its own 1 ms, well below -z 1's %g", untimed[0].RankMinUS, timed[0].RankMinUS)
	}
	for z, want := range map[int]Sync{1: SyncBarrier, 2: SyncNone, 3: SyncBarrierUntimed} {
		if got, err := SyncFromNCCL(z); err != nil || got != want || got.NCCL() != z {
			t.Errorf("-z %d: %v %v", z, got, err)
		}
	}
	if _, err := SyncFromNCCL(0); err == nil || !strings.Contains(err.Error(), "block") {
		t.Errorf("-z 0: %v, want why it cannot apply", err)
	}
}

// -K leaves leading iterations out of the statistics, not out of the
// samples.
func TestMeasureSkipIters(t *testing.T) {
	ms := measureOnRanks(t, 2, Config{Iters: 4, SkipIters: 3, KeepSamples: true})
	if m := ms[0]; m.Iters != 4 || len(m.SamplesUS) != 4 || m.MinUS != m.MaxUS {
		t.Fatalf("iters %d, %d samples, min %g max %g: want 4, 4 and one iteration's statistics", m.Iters, len(m.SamplesUS), m.MinUS, m.MaxUS)
	}
}

func TestRankTimeFromNCCL(t *testing.T) {
	for a, want := range map[int]RankTime{0: Rank0, 1: RankAvg, 2: RankMin, 3: RankMax} {
		got, err := RankTimeFromNCCL(a)
		if err != nil || got != want || got.NCCL() != a {
			t.Errorf("-a %d: %v %v", a, got, err)
		}
		if back, err := ParseRankTime(got.String()); err != nil || back != got {
			t.Errorf("%v: parsed back as %v %v", got, back, err)
		}
	}
	if _, err := RankTimeFromNCCL(4); err == nil {
		t.Error("-a 4 accepted")
	}
}

// nccl-tests' -i: sizes in fixed steps, counted before they are listed.
func TestSizesStepBytes(t *testing.T) {
	cfg := Config{MinBytes: 1000, MaxBytes: 4000, StepBytes: 1000, DType: reduce.Float32}
	if got := cfg.Sizes(); len(got) != 4 || got[0] != 1000 || got[3] != 4000 || cfg.NumSizes() != 4 {
		t.Fatalf("sizes %v, count %d", got, cfg.NumSizes())
	}
	huge := Config{MinBytes: 8, MaxBytes: 64 << 20, StepBytes: 1000, DType: reduce.Float32}
	if n := huge.NumSizes(); n != (64<<20-8)/1000+1 {
		t.Fatalf("count %d", n)
	}
	factor := Config{MinBytes: 8, MaxBytes: 64 << 20, StepFactor: 2, DType: reduce.Float32}
	if n := factor.NumSizes(); n != 24 || int(n) != len(factor.Sizes()) {
		t.Fatalf("factor count %d, %d sizes", n, len(factor.Sizes()))
	}
}

// Nothing checked: the table, the footer and the CSV say N/A, never "0".
func TestUncheckedIsNA(t *testing.T) {
	r := Report{Collective: "allreduce", Algorithm: "ring", Transport: "tcp", Ranks: 2, Check: 0}
	m := Measurement{TimeUS: 5, AlgBW: 1, BusBW: 1}
	r.Finish([]Row{{Bytes: 8, Count: 2, DType: "float32", Op: "sum", Root: -1, Algorithm: "ring", OutOfPlace: m, InPlace: m}})
	var b strings.Builder
	r.WriteHeader(&b, TableStyle{})
	WriteRow(&b, r.Rows[0], TableStyle{})
	r.WriteFooter(&b)
	out := b.String()
	if !strings.Contains(out, "N/A") || strings.Contains(out, ": 0 OK") || !strings.Contains(out, "Out of bounds values : N/A") {
		t.Fatalf("unchecked run:\n%s", out)
	}
	var csv strings.Builder
	if err := WriteCSV(&csv, File{Schema: SchemaVersion, Reports: []Report{r}}); err != nil {
		t.Fatal(err)
	}
	if line := strings.Split(csv.String(), "\n")[1]; !strings.Contains(line, ",,false,") {
		t.Errorf("CSV line %q: want an empty wrong column and checked false", line)
	}
	r.Rows[0].OutOfPlace.Checked, r.Rows[0].InPlace.Checked = true, true
	b.Reset()
	WriteRow(&b, r.Rows[0], TableStyle{})
	r.WriteFooter(&b)
	if strings.Contains(b.String(), "N/A") || !strings.Contains(b.String(), ": 0 OK") {
		t.Errorf("checked run:\n%s", b.String())
	}
}

// The header names the time column's statistic and the per-iteration
// columns', and the optional columns come and go with the style.
func TestHeaderNamesStatistics(t *testing.T) {
	r := Report{Collective: "allreduce", Algorithm: "ring", Transport: "tcp", Ranks: 4, Check: 1, RankTime: RankAvg.String()}
	var b strings.Builder
	r.WriteHeader(&b, TableStyle{RankSpread: true})
	if out := b.String(); !strings.Contains(out, "time: each rank's mean time per iteration, averaged over ranks (-a 1)") ||
		!strings.Contains(out, "slowest rank's time in each iteration") || !strings.Contains(out, "ranks (out-of-place)") {
		t.Errorf("header:\n%s", out)
	}
	b.Reset()
	r.WriteHeader(&b, TableStyle{NoPerIteration: true})
	if strings.Contains(b.String(), "p99") || strings.Contains(b.String(), "per-iteration") {
		t.Errorf("-I 0 header still has per-iteration columns:\n%s", b.String())
	}
}

// Summary figures come from the time column; a sweep whose times grow
// faster than linearly has a bandwidth fit but no latency term.
func TestSummaryFromTimeColumn(t *testing.T) {
	var rows []Row
	for i, b := range []int64{8, 256, 8192} {
		us := []float64{0.9, 120, 4000}[i]
		m := Measurement{TimeUS: us, Stats: Stats{P50US: us / 3}, AlgBW: float64(b) / us / 1e3}
		m.BusBW = m.AlgBW
		rows = append(rows, Row{Bytes: b, OutOfPlace: m})
	}
	s := SummarizeRows(rows, 2)
	if s.BestLatencyUS != 0.9 || !s.HasFit() || !s.FitNoLatency {
		t.Fatalf("summary %+v: want best 0.9 us (the time column, not the median) and a fit without latency", s)
	}
	if s := SummarizeRows(rows[:1], 2); s.HasFit() || s.FitNoLatency {
		t.Fatalf("one size: %+v, want no fit", s)
	}
}

// Labels repeat only when nothing tells reports apart.
func TestDistinctLabels(t *testing.T) {
	row := func(dt, op string) []Row { return []Row{{Bytes: 8, DType: dt, Op: op, Root: -1}} }
	rs := []Report{
		{Collective: "allreduce", Algorithm: "ring", Transport: "tcp", Ranks: 4, Rows: row("float32", "sum")},
		{Collective: "allreduce", Algorithm: "ring", Transport: "tcp", Ranks: 4, Rows: row("float16", "sum")},
		{Collective: "allreduce", Algorithm: "tree", Transport: "tcp", Ranks: 4, Rows: row("float32", "sum")},
		{Collective: "allreduce", Algorithm: "hierarchical", Transport: "tcp", Ranks: 4, IntraTransport: "shm", InterTransport: "tcp", Rows: row("float32", "sum")},
	}
	got := DistinctLabels(rs, nil)
	want := []string{"allreduce/ring/tcp/4r float32/sum", "allreduce/ring/tcp/4r float16/sum", "allreduce/tree/tcp/4r",
		"allreduce/hierarchical/intra=shm,inter=tcp/4r"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("labels %q, want %q", got, want)
	}
	same := DistinctLabels([]Report{rs[0], rs[0], rs[0]}, []string{"a.json", "b.json", "b.json"})
	if same[0] == same[1] || same[1] == same[2] || !strings.HasSuffix(same[0], "a.json") {
		t.Errorf("three runs of one combination: %q", same)
	}
}

// The memory a rank's sweep holds, at the largest size.
func TestBufferBytes(t *testing.T) {
	cfg := Config{MinBytes: 8, MaxBytes: 1 << 30, DType: reduce.Float32, Check: 1}
	if got := BufferBytes("allreduce", cfg, 4); got != 3<<30 {
		t.Errorf("all-reduce of 1 GiB, checked: %d bytes, want 3 GiB (send, receive, expected)", got)
	}
	cfg.Check = 0
	if got := BufferBytes("allreduce", cfg, 4); got != 2<<30 {
		t.Errorf("unchecked: %d bytes, want 2 GiB", got)
	}
	cfg.Group = 4
	if got := BufferBytes("allreduce", cfg, 4); got != 8<<30 {
		t.Errorf("a group of 4: %d bytes, want 8 GiB", got)
	}
}

// A v2 file reads as what it was: the slowest rank's mean, checked when
// its report says so.
func TestReadV2(t *testing.T) {
	v2 := `{"schema":"collkit.bench/v2","reports":[{"collective":"allreduce","algorithm":"ring","transport":"tcp","ranks":4,"check":1,
	  "rows":[{"bytes":8,"count":2,"dtype":"float32","op":"sum","root":-1,"algorithm":"ring",
	  "out_of_place":{"time_us":12.5,"algbw_gbs":0.00064,"busbw_gbs":0.00096,"wrong":0,"p50_us":11},"in_place":{"time_us":13,"wrong":0}}]}]}`
	path := filepath.Join(t.TempDir(), "v2.json")
	if err := os.WriteFile(path, []byte(v2), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := ReadJSONFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := f.Reports[0]
	if m := r.Rows[0].OutOfPlace; r.RankTime != "max" || m.RankMaxUS != 12.5 || !m.Checked || !r.Checked() {
		t.Fatalf("v2 read as rank time %q, %+v", r.RankTime, m)
	}
}

// Samples stay out of the JSON unless kept.
func TestSamplesOnRequest(t *testing.T) {
	m := Measurement{TimeUS: 3}
	m.Stats, _ = Summarize([]float64{2, 3, 4}, false)
	b, _ := json.Marshal(m)
	if strings.Contains(string(b), "samples_us") {
		t.Errorf("summary only: %s", b)
	}
	m.Stats, _ = Summarize([]float64{2, 3, 4}, true)
	if b, _ = json.Marshal(m); !strings.Contains(string(b), "samples_us") {
		t.Errorf("with samples: %s", b)
	}
}

// Times per operation of a group are the group's divided by its size.
func TestScale(t *testing.T) {
	m := Measurement{TimeUS: 40, RankMaxUS: 40, RankMinUS: 20, Stats: Stats{MinUS: 8, P50US: 12, MaxUS: 80, SamplesUS: []float64{8, 12}}}
	m.scale(4)
	if m.TimeUS != 10 || m.RankMinUS != 5 || m.MinUS != 2 || m.P50US != 3 || m.SamplesUS[1] != 3 {
		t.Fatalf("scaled %+v", m)
	}
	m.setBandwidth(1000, 1.5)
	if math.Abs(m.AlgBW-0.1) > 1e-12 || math.Abs(m.BusBW-0.15) > 1e-12 {
		t.Fatalf("bandwidth %g %g", m.AlgBW, m.BusBW)
	}
}
