package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/collkit/collkit/transport/nccl"
)

func TestNCCLUnavailableExitsWithOneLine(t *testing.T) {
	if nccl.Available() == nil {
		t.Skip("NCCL loads on this machine")
	}
	var out, errb bytes.Buffer
	code := run([]string{"--transport", "nccl", "--np", "2", "--size", "1K"}, &out, &errb)
	if code != exitUsage {
		t.Errorf("exit %d, want %d", code, exitUsage)
	}
	msg := errb.String()
	if !strings.HasPrefix(msg, "collbench: ") || !strings.Contains(msg, "nccl: NCCL not available: libnccl.so.2 not found (searched: ") || strings.Count(msg, "\n") != 1 {
		t.Errorf("stderr %q, want one line naming the missing libnccl.so.2", msg)
	}
}

func TestTopo(t *testing.T) {
	stdout, stderr, code := collbench(t, nil, "topo")
	if code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, stderr)
	}
	for _, want := range []string{"# Network interfaces", "127.0.0.1/8", "# RDMA devices", "# UCX transport", "# GPUs (NVML)", "# node key for hierarchical grouping: ", "# NCCL"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("topo output lacks %q:\n%s", want, stdout)
		}
	}
	if _, _, code := collbench(t, nil, "topo", "extra"); code != exitUsage {
		t.Errorf("topo with an argument exited %d, want %d", code, exitUsage)
	}
}

// The test binary is built without the rdma tag: --transport rdma must say
// how to get it instead of failing obscurely.
func TestTransportRDMAWithoutTag(t *testing.T) {
	_, stderr, code := collbench(t, nil, "--np", "2", "--transport", "rdma", "--size", "64")
	if code == 0 {
		t.Fatal("--transport rdma succeeded in a build without the rdma tag")
	}
	if !strings.Contains(stderr, "built without RDMA support: rebuild with -tags rdma and libucx-dev installed") {
		t.Errorf("stderr does not say how to build with RDMA:\n%s", stderr)
	}
}
