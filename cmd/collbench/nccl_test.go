package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeNCCL builds the fake NCCL and CUDA driver of transport/nccl's tests
// and returns the environment that makes collbench load it.
func fakeNCCL(t *testing.T) []string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("needs gcc to build the fake NCCL library")
	}
	so := filepath.Join(t.TempDir(), "libfake_nccl_for_tests.so")
	src := filepath.Join("..", "..", "transport", "nccl", "testdata", "fake_nccl_for_tests.c")
	if out, err := exec.Command(gcc, "-shared", "-fPIC", "-O1", "-o", so, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v: %s", err, out)
	}
	return []string{"COLLKIT_NCCL_LIB=" + so, "COLLKIT_CUDA_LIB=" + so}
}

// TestNCCLDeviceMemory runs collbench --transport nccl on the fake
// library (one GPU, so --np defaults to 1): buffers on the "GPU" by
// default, every collective NCCL runs, checked element by element.
func TestNCCLDeviceMemory(t *testing.T) {
	env := fakeNCCL(t)
	for _, coll := range []string{"allreduce", "broadcast", "reduce", "allgather", "reducescatter", "sendrecv"} {
		js := filepath.Join(t.TempDir(), coll+".json")
		out, errs, code := collbench(t, env, "--transport", "nccl", "--coll", coll, "-b", "8", "-e", "4K", "-n", "3", "-w", "1", "-c", "2", "-d", "all", "--json", js)
		if code != 0 || !strings.Contains(out, "# Out of bounds values : 0 OK") {
			t.Fatalf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", coll, code, out, errs)
		}
		b, err := os.ReadFile(js)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"memory": "device"`) || !strings.Contains(string(b), `"ranks": 1`) {
			t.Errorf("%s: the result does not say device memory on 1 rank:\n%.600s", coll, b)
		}
	}
	// nccl-tests' -m: all-reduces in one NCCL group on device memory.
	js := filepath.Join(t.TempDir(), "group.json")
	out, errs, code := collbench(t, env, "--transport", "nccl", "-b", "8", "-e", "4K", "-n", "2", "-c", "2", "--group", "3", "--json", js)
	if b, _ := os.ReadFile(js); code != 0 || !strings.Contains(out, "# Out of bounds values : 0 OK") || !strings.Contains(string(b), `"memory": "device"`) {
		t.Errorf("--group 3 on device memory: exit %d\n%s\n%s", code, out, errs)
	}
	// --mem host is the staged path, which still checks out.
	out, errs, code = collbench(t, env, "--transport", "nccl", "--mem", "host", "-b", "8", "-e", "1K", "-n", "2", "-c", "1")
	if code != 0 || !strings.Contains(out, "# Out of bounds values : 0 OK") {
		t.Errorf("--mem host: exit %d\n%s\n%s", code, out, errs)
	}
}

// TestNCCLUsage: what cannot run says so in one line.
func TestNCCLUsage(t *testing.T) {
	env := fakeNCCL(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		// The fake is NCCL 2.21.5 with one GPU.
		{[]string{"--transport", "nccl", "--np", "2"}, "--np 2 --transport nccl: more ranks than GPUs: 2 ranks on 1 GPU(s): NCCL 2.21.5 allows one rank per GPU (NCCL 2.30 and newer take NCCL_MULTI_RANK_GPU_ENABLE=1 to share)"},
		{[]string{"--transport", "tcp", "--mem", "device"}, "--mem device: transport tcp moves host memory only"},
		{[]string{"--transport", "nccl", "--mem", "gpu"}, `--mem "gpu": want device`},
		{[]string{"--transport", "nccl", "--coll", "alltoall"}, "add --mem host"},
	} {
		_, errs, code := collbench(t, env, c.args...)
		if code != exitUsage || !strings.Contains(errs, c.want) || strings.Count(strings.TrimSpace(errs), "\n") > 0 {
			t.Errorf("collbench %v: exit %d, stderr %q; want one line with %q", c.args, code, errs, c.want)
		}
	}
}
