package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/algo/adaptive"
	"github.com/collkit/collkit/bench"
	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/reduce"
)

func parse(t *testing.T, args ...string) (options, error) {
	t.Helper()
	return parseFlags(args, io.Discard)
}

// Each nccl-tests and OSU flag means what it means there.
func TestFlagsSameMeaning(t *testing.T) {
	cases := []struct {
		args  []string
		check func(o options) bool
	}{
		{[]string{"-t", "1", "-g", "1", "-p", "1", "-y", "0", "-C", "0", "-S", "0", "-R", "0", "-G", "0", "-D", "0", "-u", "0"}, func(o options) bool { return true }},
		{[]string{"-a", "1"}, func(o options) bool { return o.bench.RankTime == bench.RankAvg }},
		{[]string{"-a", "0"}, func(o options) bool { return o.bench.RankTime == bench.Rank0 }},
		{[]string{}, func(o options) bool { return o.bench.RankTime == bench.RankMax && o.bench.Sync == bench.SyncNone }},
		{[]string{"-z", "1"}, func(o options) bool { return o.bench.Sync == bench.SyncBarrier }},
		{[]string{"-z", "3"}, func(o options) bool { return o.bench.Sync == bench.SyncBarrierUntimed }},
		{[]string{"-m", "4"}, func(o options) bool { return o.bench.Group == 4 && o.bench.PerOperation }},
		{[]string{"--agg_iters", "2"}, func(o options) bool { return o.bench.Group == 2 && o.bench.PerOperation }},
		{[]string{"-N", "3"}, func(o options) bool { return o.cycles == 3 }},
		{[]string{"-T", "30"}, func(o options) bool { return o.timeout == 30*time.Second }},
		{[]string{"-T", "0"}, func(o options) bool { return o.timeout < 0 }},
		{[]string{"--timeout", "90s"}, func(o options) bool { return o.timeout == 90*time.Second }},
		{[]string{"-I", "0"}, func(o options) bool { return o.style.NoPerIteration && !o.samples }},
		{[]string{"-I", "1"}, func(o options) bool { return !o.style.NoPerIteration && o.samples && o.bench.KeepSamples }},
		{[]string{}, func(o options) bool { return !o.samples && !o.bench.KeepSamples }},
		{[]string{"-K", "2"}, func(o options) bool { return o.bench.SkipIters == 2 }},
		{[]string{"-J", "r.json"}, func(o options) bool { return o.jsonPath == "r.json" }},
		{[]string{"-F", "r.csv"}, func(o options) bool { return o.csvPath == "r.csv" }},
		{[]string{"-i", "1M", "-b", "1M", "-e", "4M"}, func(o options) bool {
			return o.bench.StepBytes == 1<<20 && len(o.bench.Sizes()) == 4
		}},
		{[]string{"-d", "all"}, func(o options) bool { return len(o.dtypes) == len(reduce.DTypes) }},
		{[]string{"-o", "all"}, func(o options) bool { return len(o.ops) == len(reduce.Ops) }},
		{[]string{"-d", "half", "-o", "max"}, func(o options) bool { return o.bench.DType == reduce.Float16 && o.bench.Op == reduce.Max }},
		{[]string{"-r", "all"}, func(o options) bool { return o.rootAll }},
		{[]string{"-r", "-1"}, func(o options) bool { return o.rootAll }},
		{[]string{"-r", "2"}, func(o options) bool { return o.root == 2 && !o.rootAll }},
		{[]string{"-M", "1"}, func(o options) bool { return o.memLimit == 0 }},
		// OSU.
		{[]string{"-m", "8:1M"}, func(o options) bool { return o.bench.MinBytes == 8 && o.bench.MaxBytes == 1<<20 && o.bench.Group == 1 }},
		{[]string{"-m", ":4K"}, func(o options) bool { return o.bench.MinBytes == 8 && o.bench.MaxBytes == 4096 }},
		{[]string{"-m", "64:"}, func(o options) bool { return o.bench.MinBytes == 64 && o.bench.MaxBytes == 64<<20 }},
		{[]string{"-m", "1K"}, func(o options) bool { return o.bench.MaxBytes == 1024 && o.bench.Group == 1 }},
		{[]string{"--message-size", "1048576"}, func(o options) bool { return o.bench.MaxBytes == 1<<20 }},
		{[]string{"--iterations", "100", "-x", "3"}, func(o options) bool { return o.bench.Iters == 100 && o.bench.Warmup == 3 }},
		{[]string{"-f"}, func(o options) bool { return o.style.RankSpread && o.bench.StepFactor == 2 }},
		{[]string{"-f", "-n", "5"}, func(o options) bool { return o.style.RankSpread && o.bench.Iters == 5 }},
		{[]string{"-f", "4"}, func(o options) bool { return !o.style.RankSpread && o.bench.StepFactor == 4 }},
		{[]string{"--full"}, func(o options) bool { return o.style.RankSpread }},
		{[]string{"-c", "0", "-c"}, func(o options) bool { return false }}, // replaced below: disagreement
		{[]string{"-c"}, func(o options) bool { return o.bench.Check == 1 }},
		{[]string{"-c", "3"}, func(o options) bool { return o.bench.Check == 3 }},
		{[]string{"-z"}, func(o options) bool { return o.bench.Sync == bench.SyncNone }},
		{[]string{"-l"}, func(o options) bool { return true }},
		{[]string{"-k", "fixed:1", "--coll", "broadcast"}, func(o options) bool { return o.root == 1 }},
		{[]string{"-M", "512M"}, func(o options) bool { return o.memLimit == 512<<20 }},
		{[]string{"--mem-limit", "1G"}, func(o options) bool { return o.memLimit == 1<<30 }},
		// collbench's own long names keep working.
		{[]string{"--algo", "ring", "--size", "16384"}, func(o options) bool {
			return o.algos[0] == "ring" && o.bench.MinBytes == 16384 && o.bench.MaxBytes == 16384
		}},
		{[]string{"--transport", "tcp", "--algo", "tree,ring"}, func(o options) bool { return o.transports[0] == "tcp" && len(o.algos) == 2 }},
	}
	for _, c := range cases {
		if strings.Join(c.args, " ") == "-c 0 -c" {
			if _, err := parse(t, c.args...); err == nil || !strings.Contains(err.Error(), "disagree") {
				t.Errorf("%v: %v, want the disagreement named", c.args, err)
			}
			continue
		}
		o, err := parse(t, c.args...)
		if err != nil {
			t.Errorf("%v: %v", c.args, err)
			continue
		}
		if !c.check(o) {
			t.Errorf("%v: options %+v", c.args, o)
		}
	}
}

// A flag that cannot apply gets one line naming what to use instead.
func TestFlagsSayWhatToUse(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-t", "shm"}, "--transport"},
		{[]string{"-t", "4"}, "--np 4"},
		{[]string{"-a", "ring"}, "--algo ring"},
		{[]string{"-a", "32"}, "0 to 3"},
		{[]string{"-g", "8"}, "--np 8"},
		{[]string{"-z", "0"}, "block"},
		{[]string{"-z50,90"}, "p50 and p99"},
		{[]string{"-G", "4"}, "CUDA graphs"},
		{[]string{"-G", "png"}, "--plot"},
		{[]string{"-m", "1048576"}, "-m :1048576"},
		{[]string{"-i", "1000"}, "--iterations 1000"},
		{[]string{"-i", "1M", "-f", "2"}, "give one step"},
		{[]string{"-N", "0"}, "at least 1"},
		{[]string{"-n", "0"}, "leave -n out"},
		{[]string{"--iterations", "0"}, "leave -n out"},
		{[]string{"-d", "cuda"}, "accelerator"},
		{[]string{"-d", "int8"}, "data type"},
		{[]string{"-T", "mpi_float"}, "-d"},
		{[]string{"-I"}, "--session"},
		{[]string{"-I", "2"}, "0 or 1"},
		{[]string{"-r", "gpu"}, "compute target"},
		{[]string{"-k", "rotate"}, "-r all"},
		{[]string{"-D", "vect:2:1"}, "derived datatypes"},
		{[]string{"-P", "PAPI_TOT_CYC"}, "PAPI"},
		{[]string{"-C", "1"}, "host's time"},
		{[]string{"-S", "1"}, "timestamps"},
		{[]string{"-R", "1"}, "registration"},
		{[]string{"-y", "1"}, "stream"},
		{[]string{"-u", "4"}, "misaligned"},
		{[]string{"--cta_policy", "1"}, "CTA"},
		{[]string{"-M", "lots"}, "memory"},
		{[]string{"-m", "8:1M", "-b", "8"}, "give the sizes once"},
		{[]string{"-m", "4", "--coll", "broadcast"}, "allreduce only"},
		{[]string{"-d", "all", "tune"}, "unexpected argument"},
		{[]string{"--accelerator", "cuda"}, "host memory"},
		{[]string{"--type", "mpi_int"}, "-d"},
		{[]string{"--graph", "png"}, "--plot"},
		{[]string{"--array-size", "32"}, "dummy compute"},
		{[]string{"--ddt", "cont"}, "contiguous"},
		{[]string{"--validation-warmup", "5"}, "checked iterations"},
	}
	for _, c := range cases {
		_, err := parse(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: %v, want one line containing %q", c.args, err, c.want)
		}
	}
}

// OSU's value-less flags are recognised by what follows them.
func TestRewriteOSU(t *testing.T) {
	var o options
	var c compatFlags
	var raw rawFlags
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	defineFlags(fs, &o, &c, &raw)
	for in, want := range map[string]string{
		"-f":                  "--full",
		"-f 4":                "-f 4",
		"-c -n 5":             "--validation -n 5",
		"-c 0":                "-c 0",
		"-I":                  "--session",
		"-z -f":               "--tail-lat --full",
		"--json -f":           "--json -f",
		"-J -c -b 8":          "-J -c -b 8",
		"-n 5 -- -f":          "-n 5 -- -f",
		"--algo ring -f 2 -c": "--algo ring -f 2 --validation",
	} {
		if got := strings.Join(rewriteOSU(fs, strings.Fields(in)), " "); got != want {
			t.Errorf("%q became %q, want %q", in, got, want)
		}
	}
}

// preflight refuses what cannot run, before any rank starts: a root that
// is not a rank, buffers larger than this host's memory, a tuning file
// made for another rank count or transport.
func TestPreflight(t *testing.T) {
	dir := t.TempDir()
	meminfo := filepath.Join(dir, "meminfo")
	os.WriteFile(meminfo, []byte("MemTotal:       16000000 kB\nMemFree:  100 kB\nMemAvailable:    8000000 kB\n"), 0o644)
	o, err := parse(t, "--size", "1G")
	if err != nil {
		t.Fatal(err)
	}
	err = preflight(o, 4, 4, meminfo)
	if err == nil || !strings.Contains(err.Error(), "12.0 GiB for the 4 ranks on this host, more than its 7.6 GiB MemAvailable") {
		t.Fatalf("1 GiB at 4 ranks with 7.6 GiB available: %v", err)
	}
	if !speaks(err, bootstrap.Env{Rank: 2, LocalRank: 0}) || speaks(err, bootstrap.Env{Rank: 1, LocalRank: 1}) {
		t.Error("a memory error is each host's first local rank's to report")
	}
	if err := preflight(o, 2, 2, meminfo); err != nil {
		t.Errorf("6 GiB in 7.6: %v", err)
	}
	if a, ok := memAvailable(meminfo); !ok || a != 8000000<<10 {
		t.Errorf("MemAvailable %d %v", a, ok)
	}
	if _, ok := memAvailable(filepath.Join(dir, "none")); ok {
		t.Error("a missing meminfo has no MemAvailable")
	}

	o, _ = parse(t, "--root", "5")
	err = preflight(o, 4, 4, meminfo)
	if err == nil || !strings.Contains(err.Error(), "--root 5 is not a rank of 4") {
		t.Fatalf("root 5 of 4: %v", err)
	}
	if !speaks(err, bootstrap.Env{Rank: 0, LocalRank: 0}) || speaks(err, bootstrap.Env{Rank: 4, LocalRank: 0}) {
		t.Error("a root error is rank 0's alone to report")
	}

	tuning := filepath.Join(dir, "tune.json")
	table := &adaptive.Table{Schema: adaptive.Schema, Entries: []adaptive.Entry{
		{Transport: "tcp", Ranks: 2, Algorithm: "ring", Fits: []adaptive.Fit{{LatencyUS: 1, BandwidthGBs: 1}}},
	}}
	if err := table.Save(tuning); err != nil {
		t.Fatal(err)
	}
	o, _ = parse(t, "--algo", "adaptive", "--tuning", tuning, "--transport", "tcp")
	if err := preflight(o, 2, 2, meminfo); err != nil {
		t.Errorf("a table made for 2 ranks over tcp, run at 2 over tcp: %v", err)
	}
	err = preflight(o, 4, 4, meminfo)
	if err == nil || !strings.Contains(err.Error(), "no entry for 4 ranks over tcp (it has 2 ranks over tcp)") {
		t.Fatalf("a table for 2 ranks at 4: %v", err)
	}
	if line := tuningLine(o, 2); !strings.Contains(line, "fits 1 of adaptive's 4 candidates") {
		t.Errorf("header line %q: want the missing candidates named", line)
	}
}

// hierarchical's label says what ran inside nodes and between them.
func TestHierarchy(t *testing.T) {
	cases := []struct {
		tr    string
		flag  string // --intra
		nodes []int
		shm   bool
		intra string
		inter string
	}{
		{"tcp", "", []int{0, 0, 0, 0}, true, "shm", ""},     // one host: shared memory only, no tcp at all
		{"tcp", "", []int{0, 0, 1, 1}, true, "shm", "tcp"},  // two nodes of two
		{"tcp", "", []int{0, 1, 2, 3}, true, "tcp", "tcp"},  // one rank per node: no intra-node transport
		{"tcp", "", []int{0, 0, 1, 1}, false, "tcp", "tcp"}, // no /dev/shm
		{"shm", "", []int{0, 0, 1, 1}, true, "shm", "shm"},  // shm is the main transport
		{"rdma", "", []int{0, 0, 1, 1}, true, "shm", "rdma"},
		{"tcp", "group", []int{0, 0, 1, 1}, true, "tcp", "tcp"},    // --intra group: the main transport inside nodes too
		{"tcp", "nccl", []int{0, 1}, true, "nccl", "tcp"},          // --intra nccl: NCCL even at one rank per node
		{"rdma", "nccl", []int{0, 0, 1, 1}, false, "nccl", "rdma"}, // NCCL inside nodes, RDMA between
	}
	for _, c := range cases {
		intra, inter, _ := hierarchy(c.tr, c.flag, c.nodes, c.shm)
		if intra != c.intra || inter != c.inter {
			t.Errorf("%s over nodes %v (shm %v): intra %q inter %q, want %q %q", c.tr, c.nodes, c.shm, intra, inter, c.intra, c.inter)
		}
	}
}

// Away from a terminal, a long run prints a line per size, its share of
// the work counted by bytes, not by sizes.
func TestProgressLines(t *testing.T) {
	var b strings.Builder
	cfg := bench.Config{MinBytes: 8, MaxBytes: 64 << 20, StepFactor: 8, Iters: 20, Warmup: 5, Check: 1, DType: reduce.Float32}
	now := time.Unix(0, 0)
	p := &progress{w: &b, delay: 0, now: func() time.Time { return now }, total: sweepWork(cfg), sizesTotal: len(cfg.Sizes())}
	p.start = now
	p.Describe("ring/tcp")
	sizes := cfg.Sizes()
	for _, s := range sizes[:len(sizes)-1] {
		now = now.Add(time.Second)
		p.Done(cfg, s)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	n := len(sizes)
	if len(lines) != n-1 || !strings.HasPrefix(lines[0], fmt.Sprintf("# progress: ring/tcp 8 B done; 1 of %d sizes", n)) {
		t.Fatalf("lines:\n%s", b.String())
	}
	// All but the largest size done: most sizes, but a small part of the
	// work, since the largest is 8 times the one before.
	if last := lines[len(lines)-1]; !strings.Contains(last, fmt.Sprintf("%d of %d sizes", n-1, n)) || !strings.Contains(last, "% of the estimated work") {
		t.Fatalf("last line %q", last)
	}
	if frac := p.done / p.total; frac > 0.2 {
		t.Errorf("8 of 9 sizes but %.0f%% of the work: the largest size should weigh most", 100*frac)
	}
	quiet := &progress{w: &b, delay: time.Hour, now: time.Now, total: 1, start: time.Now()}
	b.Reset()
	quiet.Done(cfg, 8)
	if b.Len() != 0 {
		t.Errorf("a short run printed progress: %q", b.String())
	}
}

// The summary says "-" where no fit exists, never a made-up 0.00.
func TestMatrixNoFakeFit(t *testing.T) {
	mk := func(algo string, times ...float64) bench.Report {
		r := bench.Report{Collective: "allreduce", Algorithm: algo, Transport: "tcp", Ranks: 2, RankTime: "max"}
		var rows []bench.Row
		for i, us := range times {
			b := int64(8) << (5 * i)
			m := bench.Measurement{TimeUS: us, AlgBW: float64(b) / us / 1e3}
			m.BusBW = m.AlgBW
			rows = append(rows, bench.Row{Bytes: b, DType: "float32", Op: "sum", Root: -1, OutOfPlace: m})
		}
		r.Finish(rows)
		return r
	}
	var b strings.Builder
	writeMatrix(&b, []bench.Report{mk("ring", 10, 10.5, 20), mk("tree", 30), mk("halvingdoubling", 0.9, 120, 4000)}, nil)
	out := b.String()
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 6 && !strings.HasPrefix(l, "#") && (f[4] == "0.00" || f[5] == "0.00") {
			t.Errorf("a fit of 0.00: %q", l)
		}
	}
	if !strings.Contains(out, "# fit -: no line") || !strings.Contains(out, "# fit latency -: times grew faster") {
		t.Fatalf("matrix:\n%s", out)
	}
	if !strings.Contains(out, "time = the slowest rank's mean (-a 3)") {
		t.Errorf("the summary does not name its statistic:\n%s", out)
	}
}

// --transport auto, the default, runs shared memory for the ranks collbench
// launches on this host and TCP when a flag asks for TCP, and the header
// says which and why.
func TestTransportAuto(t *testing.T) {
	if err := collkit.TransportAvailable("shm"); err != nil {
		t.Skip(err)
	}
	cases := []struct {
		args      []string
		want, why string
	}{
		{nil, "shm", "all 4 ranks on this host"},
		{[]string{"--np", "2"}, "shm", "all 2 ranks on this host"},
		{[]string{"--streams", "2"}, "tcp", "Streams 2 asks for TCP"},
		{[]string{"--spin-wait", "0"}, "tcp", "SpinWait"},
		{[]string{"--algo", "hierarchical", "--nodes", "2"}, "tcp", "2 simulated nodes"},
		{[]string{"--transport", "tcp"}, "tcp", ""},
	}
	for _, c := range cases {
		o, err := parse(t, c.args...)
		if err != nil || len(o.transports) != 1 || o.transports[0] != c.want || !strings.Contains(o.autoWhy, c.why) || c.why == "" && o.autoWhy != "" {
			t.Errorf("%v: transports %v (%q), err %v; want %s (%s)", c.args, o.transports, o.autoWhy, err, c.want, c.why)
		}
	}
	out := runOK(t, "--np", "2", "--size", "64", "-n", "2", "-w", "0")
	if !strings.Contains(out, "allreduce over shm") || !strings.Contains(out, "# transport shm (--transport auto: all 2 ranks on this host") {
		t.Errorf("the header does not say that auto chose shm, and why:\n%s", out)
	}
}
