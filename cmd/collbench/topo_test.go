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
	var out, errb bytes.Buffer
	if code := run([]string{"topo"}, &out, &errb); code != 0 {
		t.Fatalf("topo exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"# GPUs (NVML)", "# node key for hierarchical grouping: ", "# NCCL"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("topo output lacks %q:\n%s", want, out.String())
		}
	}
}
