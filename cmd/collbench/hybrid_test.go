package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/collkit/collkit"
)

// --intra: what it accepts, and the mistakes refused before anything runs.
func TestIntraFlag(t *testing.T) {
	o, err := parse(t, "--algo", "hierarchical", "--nodes", "2", "--np", "2", "--transport", "tcp", "--intra", "nccl")
	if collkit.TransportAvailable("nccl") != nil { // refused here, before any rank starts
		if err == nil || !strings.Contains(err.Error(), "--intra nccl: ") || !strings.Contains(err.Error(), "--intra shm or group") {
			t.Fatalf("--intra nccl without NCCL: %v, want the reason and what to use instead", err)
		}
	} else if err != nil || o.intra != "nccl" {
		t.Fatalf("--intra nccl: %v, intra %q", err, o.intra)
	}
	if o, err := parse(t, "--algo", "hierarchical", "--intra", "group"); err != nil || o.intra != "group" {
		t.Fatalf("--intra group: %v, intra %q", err, o.intra)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--algo", "hierarchical", "--intra", "gpu"}, `--intra "gpu": want shm, group or nccl`},
		{[]string{"--algo", "ring", "--intra", "nccl"}, "only --algo hierarchical has an intra-node level"},
		{[]string{"--algo", "hierarchical", "--intra", "nccl", "--group", "4"}, "--group/-m with --intra nccl"},
	} {
		if _, err := parse(t, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error saying %q", c.args, err, c.want)
		}
	}
}

// The GPU machine's hybrid run, on the fake library: two simulated nodes
// of one rank each, NCCL inside each, TCP between them, every dtype and
// op checked element by element, on GPU memory (the default with --intra
// nccl) and on host memory.
func TestHybridOverFakeNCCL(t *testing.T) {
	env := fakeNCCL(t)
	for _, mem := range []string{"device", "host"} {
		js := filepath.Join(t.TempDir(), "hybrid.json")
		args := []string{"--algo", "hierarchical", "--nodes", "2", "--np", "2", "--transport", "tcp", "--intra", "nccl",
			"-d", "all", "-o", "all", "-b", "8", "-e", "64K", "-f", "32", "-n", "2", "-w", "1", "-q", "--json", js,
			"--spin-wait", "0"} // two ranks on a small machine: no core to spare for TCP polling beside NCCL's
		if mem == "host" {
			args = append(args, "--mem", "host")
		}
		stdout, stderr, code := collbench(t, env, args...)
		if code != 0 {
			t.Fatalf("--mem %s: exit %d\nstdout:\n%s\nstderr:\n%s", mem, code, stdout, stderr)
		}
		if n := strings.Count(stdout, "Out of bounds values : 0 OK"); n != 7*5 {
			t.Fatalf("--mem %s: %d checked tables passed, want 35 (7 dtypes x 5 ops):\n%s", mem, n, stdout)
		}
		if !strings.Contains(stdout, "intra=nccl,inter=tcp") {
			t.Fatalf("--mem %s: the header does not say NCCL inside nodes and TCP between:\n%s", mem, stdout)
		}
		b, err := os.ReadFile(js)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"memory": "`+mem+`"`) {
			t.Fatalf("--mem %s: the JSON does not record memory %q:\n%.2000s", mem, mem, b)
		}
	}
	// Other algorithms cannot run on GPU memory over tcp: refused up front.
	_, stderr, code := collbench(t, env, "--algo", "hierarchical,ring", "--nodes", "2", "--np", "2", "--transport", "tcp", "--intra", "nccl")
	if code != 2 || !strings.Contains(stderr, "only --algo hierarchical runs there") {
		t.Fatalf("--algo hierarchical,ring --intra nccl: exit %d, stderr %s", code, stderr)
	}
}

// Without NCCL the hybrid run stops at setup with one line that says what
// was searched and what to do, and exit status 2.
func TestHybridWithoutNCCL(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "libnccl.so.2")
	stdout, stderr, code := collbench(t, []string{"COLLKIT_NCCL_LIB=" + missing, "COLLKIT_CUDA_LIB=" + missing},
		"--algo", "hierarchical", "--nodes", "2", "--np", "2", "--transport", "tcp", "--intra", "nccl", "--size", "1K", "-n", "1")
	if code != 2 {
		t.Fatalf("exit %d, want 2\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if lines := strings.Split(strings.TrimSpace(stderr), "\n"); len(lines) != 1 || stdout != "" {
		t.Errorf("want one line on stderr and nothing run, got stdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
	for _, says := range []string{"--intra nccl", "NCCL not available", missing, "--intra shm or group"} {
		if !strings.Contains(stderr, says) {
			t.Errorf("stderr does not say %q:\n%s", says, stderr)
		}
	}
}
