package bench

import (
	"encoding/csv"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/gonum/stat"
)

func TestSummarize(t *testing.T) {
	s, mean := Summarize([]float64{4, 1, 3, 2, 100}, true)
	// Sorted: 1 2 3 4 100; p99 interpolates 4 + 0.96 x 96.
	want := Stats{Iters: 5, MinUS: 1, P50US: 3, P99US: 96.16, MaxUS: 100}
	if s.Iters != want.Iters || s.MinUS != want.MinUS || s.P50US != want.P50US || math.Abs(s.P99US-want.P99US) > 1e-9 || s.MaxUS != want.MaxUS {
		t.Errorf("stats %+v, want %+v", s, want)
	}
	if mean != 22 {
		t.Errorf("mean %g, want 22", mean)
	}
	// Sample standard deviation of the five values is sqrt(7610/4).
	if wantCV := math.Sqrt(7610.0/4) / 22; math.Abs(s.CV-wantCV) > 1e-12 {
		t.Errorf("cv %g, want %g", s.CV, wantCV)
	}
	if len(s.SamplesUS) != 5 || s.SamplesUS[0] != 4 {
		t.Errorf("samples %v, want the five inputs in order", s.SamplesUS)
	}
	one, _ := Summarize([]float64{7}, false)
	if one.CV != 0 || one.P99US != 7 || one.SamplesUS != nil {
		t.Errorf("one sample: %+v", one)
	}
}

func TestNextBatch(t *testing.T) {
	const ms = 1000.0 // microseconds
	cases := []struct {
		done    int
		spentUS float64
		want    int
	}{
		{5, 100 * ms, 0},   // min time reached
		{1000, 1 * ms, 0},  // cap reached
		{5, 5, 50},         // 1 us each: grow at most tenfold
		{5, 50 * ms, 6},    // 10 ms each, 50 ms left: 5 x 1.2
		{20, 80 * ms, 6},   // 4 ms each, 20 ms left: 5 x 1.2
		{990, 990, 10},     // up to the cap, not past it
		{100, 1 * ms, 900}, // up to the cap
		{10, 99.5 * ms, 1}, // almost there: at least one more
		{5, 5000 * ms, 0},  // iterations longer than min time
		{0, 0, 0},          // nothing run: stop
	}
	for _, c := range cases {
		if got := nextBatch(c.done, c.spentUS, 100*time.Millisecond, 1000); got != c.want {
			t.Errorf("nextBatch(%d, %g us, 100ms, 1000) = %d, want %d", c.done, c.spentUS, got, c.want)
		}
	}
}

func TestFitLatencyBandwidth(t *testing.T) {
	var xs, ys, ws []float64
	for b := 8.0; b <= 1<<26; b *= 4 {
		t := 5 + b/2000 // 5 us + 2 GB/s
		xs, ys, ws = append(xs, b), append(ys, t), append(ws, 1/(t*t))
	}
	lat, bw := FitLatencyBandwidth(xs, ys, ws)
	if math.Abs(lat-5) > 1e-6 || math.Abs(bw-2) > 1e-9 {
		t.Fatalf("fit latency %g us, bandwidth %g GB/s; want 5 and 2", lat, bw)
	}
	if lat, bw := FitLatencyBandwidth([]float64{8, 8}, []float64{1, 2}, nil); lat != 0 || bw != 0 {
		t.Fatalf("one size: %g %g, want zeros", lat, bw)
	}
	if _, bw := FitLatencyBandwidth([]float64{8, 16}, []float64{2, 1}, nil); bw != 0 {
		t.Fatalf("falling times: bandwidth %g, want 0", bw)
	}
	// The failing CI run's shape: 0.9 us at 8 B, then steeply up. A free
	// line would cross zero above 8 B (negative latency); through the
	// origin, t = bytes/b with b the weighted fit of the three points.
	xs, ys = []float64{8, 256, 8192}, []float64{0.9, 120, 4000}
	ws = []float64{1 / (0.9 * 0.9), 1 / (120 * 120.0), 1 / (4000 * 4000.0)}
	if a, _ := stat.LinearRegression(xs, ys, ws, false); a >= 0 {
		t.Fatalf("test data: the free fit's intercept is %g, want it negative", a)
	}
	lat, bw = FitLatencyBandwidth(xs, ys, ws)
	var xy, xx float64
	for i := range xs {
		xy, xx = xy+ws[i]*xs[i]*ys[i], xx+ws[i]*xs[i]*xs[i]
	}
	if lat != 0 || math.Abs(bw-xx/xy/1e3) > 1e-12 || !(bw > 0) {
		t.Fatalf("superlinear times: latency %g us, bandwidth %g GB/s; want 0 and %g", lat, bw, xx/xy/1e3)
	}
}

func TestSummarizeRows(t *testing.T) {
	var rows []Row
	for _, b := range []int64{8, 1024, 1 << 20} {
		us := 10 + float64(b)/1000 // 1 GB/s
		m := Measurement{TimeUS: us, Stats: Stats{P50US: us}, AlgBW: float64(b) / us / 1e3}
		m.BusBW = m.AlgBW * AllReduceBusFactor(4)
		rows = append(rows, Row{Bytes: b, OutOfPlace: m})
	}
	s := SummarizeRows(rows, 4)
	if s.BestLatencyBytes != 8 || math.Abs(s.BestLatencyUS-10.008) > 1e-9 {
		t.Errorf("best latency %g at %d B, want 10.008 at 8", s.BestLatencyUS, s.BestLatencyBytes)
	}
	if math.Abs(s.FitLatencyUS-10) > 1e-6 || math.Abs(s.FitAlgBW-1) > 1e-9 || math.Abs(s.FitBusBW-1.5) > 1e-9 {
		t.Errorf("fit %+v, want 10 us, algbw 1, busbw 1.5", s)
	}
}

func TestJSONRoundTripAndV1(t *testing.T) {
	dir := t.TempDir()
	r := NewReport()
	r.Collective, r.Algorithm, r.Transport, r.Ranks = "allreduce", "ring", "tcp", 2
	r.TransportSettings = map[string]string{"streams": "2"}
	m := Measurement{TimeUS: 3, AlgBW: 1, BusBW: 1}
	m.Stats, _ = Summarize([]float64{2, 3, 4}, true)
	r.Finish([]Row{{Bytes: 8, Count: 2, DType: "float32", Op: "sum", Root: -1, Algorithm: "ring", OutOfPlace: m, InPlace: m}})
	path := filepath.Join(dir, "v2.json")
	if err := WriteJSONFile(path, []Report{r}); err != nil {
		t.Fatal(err)
	}
	f, err := ReadJSONFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := f.Reports[0].Rows[0].OutOfPlace
	if f.Schema != SchemaVersion || got.P50US != 3 || len(got.SamplesUS) != 3 || f.Reports[0].TransportSettings["streams"] != "2" {
		t.Fatalf("read back %+v (schema %s)", got, f.Schema)
	}
	if f.Environment.GoVersion != runtime.Version() || f.Environment.Cores != runtime.NumCPU() || f.Environment.CollkitVersion == "" {
		t.Errorf("environment %+v", f.Environment)
	}
	if runtime.GOOS == "linux" && !strings.HasPrefix(f.Environment.Kernel, "Linux ") {
		t.Errorf("kernel %q, want uname's Linux ...", f.Environment.Kernel)
	}

	v1 := `{"schema":"collkit.bench/v1","reports":[{"collective":"allreduce","algorithm":"ring","transport":"tcp","ranks":4,
	  "rows":[{"bytes":8,"count":2,"dtype":"float32","op":"sum","root":-1,"algorithm":"ring",
	  "out_of_place":{"time_us":12.5,"algbw_gbs":0.00064,"busbw_gbs":0.00096,"wrong":0},"in_place":{"time_us":13,"algbw_gbs":0,"busbw_gbs":0,"wrong":0}}],
	  "avg_busbw_gbs":0.00096,"wrong":0}]}`
	path = filepath.Join(dir, "v1.json")
	if err := os.WriteFile(path, []byte(v1), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err = ReadJSONFile(path)
	if err != nil {
		t.Fatalf("reading a v1 file: %v", err)
	}
	if f.Reports[0].Rows[0].OutOfPlace.Typical() != 12.5 {
		t.Errorf("v1 typical time %g, want the mean 12.5", f.Reports[0].Rows[0].OutOfPlace.Typical())
	}
	if err := os.WriteFile(path, []byte(`{"schema":"something/v9"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadJSONFile(path); err == nil || !strings.Contains(err.Error(), "something/v9") {
		t.Errorf("unknown schema: %v", err)
	}
}

func TestWriteCSV(t *testing.T) {
	r := Report{Collective: "allreduce", Algorithm: "tree", Transport: "tcp", Ranks: 3,
		TransportSettings: map[string]string{"streams": "1", "spin_wait": "0s"}}
	m := Measurement{TimeUS: 5, AlgBW: 0.5, BusBW: 0.66}
	m.Stats, _ = Summarize([]float64{4, 5, 6}, false)
	r.Finish([]Row{{Bytes: 1024, Count: 256, DType: "float32", Op: "sum", Root: -1, Algorithm: "tree", OutOfPlace: m, InPlace: m}})
	f := File{Schema: SchemaVersion, Environment: Environment{CPUModel: "Test CPU, 2 cores", Cores: 2}, Reports: []Report{r}}
	var b strings.Builder
	if err := WriteCSV(&b, f); err != nil {
		t.Fatal(err)
	}
	lines, err := csv.NewReader(strings.NewReader(b.String())).ReadAll()
	if err != nil {
		t.Fatalf("output is not CSV: %v\n%s", err, b.String())
	}
	if len(lines) != 3 || strings.Join(lines[0], ",") != strings.Join(CSVColumns, ",") {
		t.Fatalf("%d lines, header %v", len(lines), lines[0])
	}
	col := func(line int, name string) string {
		for i, c := range CSVColumns {
			if c == name {
				return lines[line][i]
			}
		}
		t.Fatalf("no column %s", name)
		return ""
	}
	if col(1, "placement") != "out_of_place" || col(2, "placement") != "in_place" || col(1, "p50_us") != "5" ||
		col(1, "cpu_model") != "Test CPU, 2 cores" || col(1, "transport_settings") != "spin_wait=0s;streams=1" || col(1, "bytes") != "1024" {
		t.Errorf("line %v", lines[1])
	}
}

func TestCPUModel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpuinfo")
	os.WriteFile(path, []byte("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Test @ 2.0GHz\n"), 0o644)
	if got := cpuModel(path); got != "Intel(R) Xeon(R) Test @ 2.0GHz" {
		t.Errorf("cpuModel = %q", got)
	}
	if got := cpuModel(filepath.Join(t.TempDir(), "none")); got != "" {
		t.Errorf("missing file: %q", got)
	}
}
