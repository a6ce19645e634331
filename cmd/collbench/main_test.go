package main

import (
	"bytes"
	"context"
	"errors"
	"github.com/collkit/collkit/launch"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/collkit/collkit/algo/adaptive"
	"github.com/collkit/collkit/bench"
)

// binary is collbench built once for the tests that run real processes.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "collbench-test")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "collbench")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		panic("building collbench: " + err.Error())
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// collbench runs the binary with a clean rank environment and returns its
// output and exit status.
func collbench(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(cleanEnv(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("collbench %v hung: stderr:\n%s", args, errb.String())
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("running collbench: %v", err)
	}
	return out.String(), errb.String(), code
}

// cleanEnv is this process's environment without rank variables, so that
// collbench launches its own ranks even under a CI launcher.
func cleanEnv() []string { return launch.WithoutLauncherEnv(os.Environ()) }

func TestFourRanksRingOverTCP(t *testing.T) {
	jsonPath := filepath.Join(t.TempDir(), "out.json")
	stdout, stderr, code := collbench(t, nil, "--np", "4", "--algo", "ring", "-b", "8", "-e", "1M", "-f", "4",
		"-n", "3", "-w", "1", "--json", jsonPath)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "# Avg bus bandwidth") || !strings.Contains(stdout, "4 ranks") {
		t.Fatalf("no nccl-tests style table:\n%s", stdout)
	}
	file, err := bench.ReadJSONFile(jsonPath)
	if err != nil {
		t.Fatalf("JSON output: %v", err)
	}
	if len(file.Reports) != 1 {
		t.Fatalf("%d reports, want 1", len(file.Reports))
	}
	report := file.Reports[0]
	// Sizes 8 * 4^k up to 1 MiB: 8 B ... 512 KiB.
	if report.Ranks != 4 || report.Algorithm != "ring" || len(report.Rows) != 9 {
		t.Fatalf("report: ranks=%d algorithm=%q rows=%d, want 4, ring, 9", report.Ranks, report.Algorithm, len(report.Rows))
	}
	for _, row := range report.Rows {
		if row.OutOfPlace.Wrong != 0 || row.InPlace.Wrong != 0 || row.OutOfPlace.TimeUS <= 0 || row.OutOfPlace.BusBW <= 0 {
			t.Errorf("row %+v: want no wrong elements and positive times", row)
		}
	}
}

func TestEveryDTypeAndOp(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode")
	}
	for _, dt := range []string{"float32", "float64", "int32", "int64", "uint8", "float16", "bfloat16"} {
		for _, op := range []string{"sum", "prod", "min", "max", "avg"} {
			stdout, stderr, code := collbench(t, nil, "--np", "3", "-d", dt, "-o", op, "-b", "8", "-e", "4K", "-f", "8", "-n", "1", "-w", "0")
			if code != 0 || !strings.Contains(stdout, "Out of bounds values : 0 OK") {
				t.Fatalf("%s %s: exit %d\n%s\n%s", dt, op, code, stdout, stderr)
			}
		}
	}
}

// Bad input gets one clear line on stderr and exit status 2, without
// launching anything that could hang.
func TestBadInput(t *testing.T) {
	cases := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"unknown algorithm", nil, []string{"--algo", "nope"}, `--algo "nope": unknown algorithm`},
		{"unknown transport", nil, []string{"--transport", "carrier-pigeon"}, "unknown transport"},
		{"plot format", nil, []string{"--plot", "out.gif"}, "must end in .png or .svg"},
		{"bad tolerance", nil, []string{"--tolerance", "lots"}, "--tolerance"},
		{"missing baseline", nil, []string{"--baseline", "/nonexistent/base.json"}, "--baseline"},
		{"compare one file", nil, []string{"compare", "a.json"}, "want two result files"},
		{"compare missing file", nil, []string{"compare", "/nonexistent/a.json", "/nonexistent/b.json"}, "baseline"},
		{"plot nothing", nil, []string{"plot"}, "at least one result file"},
		{"unknown dtype", nil, []string{"-d", "complex128"}, "data type"},
		{"unknown op", nil, []string{"-o", "xor"}, "reduction op"},
		{"size not a multiple", nil, []string{"--size", "6", "-d", "float32"}, "not a multiple of the element size 4"},
		{"np zero", nil, []string{"--np", "0"}, "--np 0"},
		{"group zero", nil, []string{"--group", "0"}, "--group 0"},
		{"group of broadcasts", nil, []string{"--group", "4", "--coll", "broadcast"}, "--group applies to --coll allreduce only"},
		{"bad size", nil, []string{"--size", "lots"}, "not a positive byte count"},
		{"no iterations", nil, []string{"-n", "0"}, "-n 0: at least one timed iteration"},
		{"negative warm-up", nil, []string{"--warmup-time", "-1s"}, "--warmup-time"},
		{"root not a rank", nil, []string{"--root", "5", "--coll", "broadcast"}, "--root 5 is not a rank of 4"},
		{"root not a rank under a launcher", []string{"RANK=0", "WORLD_SIZE=2"}, []string{"--root", "2"}, "rank 0: --root 2 is not a rank of 2"},
		{"old -t", nil, []string{"-t", "shm"}, "--transport shm"},
		{"old -a", nil, []string{"-a", "tree"}, "--algo tree"},
		{"more memory than -M", nil, []string{"--size", "64M", "-M", "1M"}, "more than -M 1.0 MiB allows"},
		{"tuning for other ranks", nil, []string{"--algo", "adaptive", "--tuning", tuningFor(t, 2), "--np", "3", "--transport", "tcp"}, "no entry for 3 ranks over tcp"},
		{"unknown flag", nil, []string{"--frobnicate"}, "unknown flag"},
		{"bad RANK", []string{"RANK=x", "WORLD_SIZE=2"}, []string{"--size", "64"}, "RANK"},
		{"unreachable MASTER_ADDR", []string{"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + closedPort(t)},
			[]string{"--size", "64", "--connect-timeout", "2s"}, "127.0.0.1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			stdout, stderr, code := collbench(t, c.env, c.args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			if len(lines) != 1 || !strings.Contains(stderr, c.want) || !strings.HasPrefix(stderr, "collbench: ") {
				t.Fatalf("stderr should be one line containing %q, got:\n%s", c.want, stderr)
			}
			if strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine ") {
				t.Fatalf("panic: %s", stderr)
			}
			if time.Since(start) > 20*time.Second {
				t.Fatalf("took %v", time.Since(start))
			}
		})
	}
}

// A mistake every rank of a launched job finds alike is reported by rank 0
// only: the others exit 2 without a word.
func TestUsageErrorOncePerJob(t *testing.T) {
	for _, args := range [][]string{{"--root", "7"}, {"-n", "0"}} {
		stdout, stderr, code := collbench(t, []string{"RANK=1", "WORLD_SIZE=4"}, args...)
		if code != 2 || stdout != "" || stderr != "" {
			t.Errorf("%v on rank 1: exit %d, stdout %q, stderr %q; want 2 and silence (rank 0 says it)", args, code, stdout, stderr)
		}
	}
}

// tuningFor writes a tuning file with fits for ranks ranks over tcp.
func tuningFor(t *testing.T, ranks int) string {
	path := filepath.Join(t.TempDir(), "tune.json")
	table := &adaptive.Table{Schema: adaptive.Schema}
	for _, a := range adaptive.Defaults() {
		table.Entries = append(table.Entries, adaptive.Entry{Transport: "tcp", Ranks: ranks, Algorithm: a.Name,
			Fits: []adaptive.Fit{{LatencyUS: 10, BandwidthGBs: 1}}})
	}
	if err := table.Save(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// closedPort returns a loopback port nobody listens on.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return strconv.Itoa(port)
}

// mpirun -np 4 collbench must work: ranks come from Open MPI's variables.
func TestUnderMpirun(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun not installed (apt-get install openmpi-bin; .ci/run installs it): skipping the Open MPI launch test")
	}
	port := closedPort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, mpirun, "--oversubscribe", "-np", "4", "-x", "MASTER_PORT="+port,
		binary, "-b", "1K", "-e", "64K", "-f", "8", "-n", "2", "-w", "1")
	cmd.Env = append(cleanEnv(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mpirun collbench: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "4 ranks") || !strings.Contains(string(out), "Out of bounds values : 0 OK") {
		t.Fatalf("unexpected output:\n%s", out)
	}
}

// --interleave turns which algorithm goes first: over n sizes (or rounds,
// or seeds) each of n algorithms is first once, and every order holds every
// algorithm once.
func TestTurnOrder(t *testing.T) {
	const n = 5
	for _, vary := range []string{"size", "round", "seed"} {
		firsts := map[int]bool{}
		for x := range n {
			q, k, seed := 0, 0, uint64(0)
			switch vary {
			case "size":
				k = x
			case "round":
				q = x
			default:
				seed = uint64(x)
			}
			order := turnOrder(n, q, k, seed)
			seen := map[int]bool{}
			for _, i := range order {
				seen[i] = true
			}
			if len(order) != n || len(seen) != n {
				t.Fatalf("%s %d: order %v, want each of %d algorithms once", vary, x, order, n)
			}
			firsts[order[0]] = true
		}
		if len(firsts) != n {
			t.Errorf("over %d values of the %s, %d algorithms went first, want %d", n, vary, len(firsts), n)
		}
	}
	if got := turnOrder(1, 3, 7, 9); len(got) != 1 || got[0] != 0 {
		t.Errorf("one algorithm: %v", got)
	}
}
