//go:build linux

package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestMain plays a rank when a test starts this binary again as one.
func TestMain(m *testing.M) {
	if _, ok := os.LookupEnv(rankEnv); ok {
		if err := run(os.Args[1:], io.Discard); err != nil {
			fmt.Fprintln(os.Stderr, "gofloor:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Both transports exchange every iteration's bytes (measure checks the
// first and last byte of each) and print one line with a positive time.
func TestFloor(t *testing.T) {
	for _, c := range []struct{ mode, size string }{{"tcp", "8"}, {"tcp", "4096"}, {"shm", "8"}, {"shm", "200"}} {
		var out strings.Builder
		if err := run([]string{c.mode, "300", c.size}, &out); err != nil {
			t.Fatalf("%s %s B: %v", c.mode, c.size, err)
		}
		f := strings.Fields(out.String())
		if len(f) != 4 || f[0] != "floor-go" || f[1] != c.mode || f[2] != c.size {
			t.Fatalf("%s %s B: printed %q, want \"floor-go %s %s US\"", c.mode, c.size, out.String(), c.mode, c.size)
		}
		if us, err := strconv.ParseFloat(f[3], 64); err != nil || us <= 0 {
			t.Errorf("%s %s B: time %q is not a positive number", c.mode, c.size, f[3])
		}
	}
}

func TestFloorUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"udp"}, {"tcp", "0"}, {"tcp", "10", "0"}, {"shm", "10", "4097"}, {"shm", "x"}} {
		if err := run(args, io.Discard); err == nil || !strings.Contains(err.Error(), "usage: gofloor") {
			t.Errorf("run(%q) = %v, want the usage", args, err)
		}
	}
}
