package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/collkit/collkit/bench"
)

// needNetns skips unless this process may build network namespaces.
func needNetns(t *testing.T) {
	t.Helper()
	switch {
	case testing.Short():
		t.Skip("skipped with -short: builds network namespaces and runs real ranks")
	case runtime.GOOS != "linux":
		t.Skip("network namespaces are Linux only")
	case os.Geteuid() != 0:
		t.Skip("needs root to build network namespaces (run as root, e.g. in CI)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2 (the ip command): apt-get install -y iproute2")
	}
	probe := "ckprobe" + strings.ReplaceAll(t.Name(), "/", "")
	if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace here (no CAP_SYS_ADMIN?): %v: %s", err, out)
	}
	exec.Command("ip", "netns", "del", probe).Run()
}

// netns runs scripts/netns.sh mode with env and returns its output.
func netns(t *testing.T, mode string, env ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join("..", "..", "scripts", "netns.sh"), mode)
	cmd.Env = append(cleanEnv(), append([]string{"COLLBENCH=" + binary}, env...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("netns.sh %s hung:\n%s", mode, out.String())
	}
	return out.String(), err
}

// Two "hosts" with 2 ranks each and slow links between them: hierarchical
// all-reduce, which sends less across hosts, beats the flat ring, and both
// are exact.
func TestNetnsHierarchicalBeatsRing(t *testing.T) {
	needNetns(t)
	jsonPath := filepath.Join(t.TempDir(), "compare.json")
	out, err := netns(t, "compare", "HOSTS=2", "RANKS_PER_HOST=2", "RATE=100mbit", "SIZE=2M", "ITERS=2",
		"ALGOS=ring,hierarchical", "JSON="+jsonPath)
	if err != nil {
		t.Fatalf("netns.sh compare: %v\n%s", err, out)
	}
	f, err := bench.ReadJSONFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	times := map[string]float64{}
	for _, r := range f.Reports {
		if r.Wrong != 0 || len(r.Rows) != 1 {
			t.Fatalf("%s: %d wrong elements, %d rows\n%s", r.Algorithm, r.Wrong, len(r.Rows), out)
		}
		times[r.Algorithm] = r.Rows[0].OutOfPlace.TimeUS
	}
	t.Logf("2 MiB over 100 Mbit/s links between 2 hosts: ring %.0f us, hierarchical %.0f us", times["ring"], times["hierarchical"])
	if !(times["hierarchical"] < times["ring"]) {
		t.Errorf("hierarchical (%.0f us) did not beat ring (%.0f us) over slow inter-host links\n%s",
			times["hierarchical"], times["ring"], out)
	}
}

// A host's link taken down mid-run makes every rank fail with an error
// and a stall report within the timeout, instead of hanging.
func TestNetnsLinkDown(t *testing.T) {
	needNetns(t)
	start := time.Now()
	out, err := netns(t, "linkdown", "HOSTS=2", "RANKS_PER_HOST=2", "RATE=", "TIMEOUT=3s", "DOWN_AFTER=1")
	if err != nil {
		t.Fatalf("netns.sh linkdown: %v\n%s", err, out)
	}
	// Every rank fails (netns.sh checks that); the ranks that timed out
	// themselves carry a stall report, the others may quote a peer's abort
	// notice instead, whose long text the script's output line cuts short.
	if n := strings.Count(out, "stall report"); n < 1 {
		t.Errorf("no stall report:\n%s", out)
	}
	for r := range 4 {
		if !strings.Contains(out, fmt.Sprintf("rank %d: collbench: rank %d:", r, r)) {
			t.Errorf("rank %d reported no error:\n%s", r, out)
		}
	}
	// 1 s before the cut, 3 s timeout, then rank 0, having failed, waits up
	// to bootstrap.AbortGrace (1 s) for ranks that cannot reach its store.
	if d := time.Since(start); d > 60*time.Second {
		t.Errorf("took %v", d)
	}
	t.Log(out)
}
