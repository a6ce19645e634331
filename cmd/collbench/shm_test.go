package main

import (
	"strings"
	"testing"
)

// The shared-memory transport between processes: the native all-reduce and
// the ring over the rings, checked element by element.
func TestShmTransport(t *testing.T) {
	stdout, stderr, code := collbench(t, nil, "--np", "3", "--transport", "shm", "--algo", "native,ring",
		"-b", "8", "-e", "4M", "-f", "16", "-n", "2", "-w", "1")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "transport shm, 3 ranks") || strings.Count(stdout, "Out of bounds values : 0 OK") != 2 {
		t.Fatalf("want two verified tables over shm:\n%s", stdout)
	}
}

// Hierarchical over TCP with simulated nodes uses shared memory inside each
// node (the ranks really share this host).
func TestHierarchicalShmInsideNodes(t *testing.T) {
	stdout, stderr, code := collbench(t, nil, "--np", "4", "--nodes", "2", "--algo", "hierarchical",
		"-b", "8", "-e", "1M", "-f", "32", "-n", "2", "-w", "1")
	if code != 0 || !strings.Contains(stdout, "Out of bounds values : 0 OK") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}
