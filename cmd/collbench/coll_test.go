package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/collkit/collkit/bench"
)

// Every --coll runs on three processes over TCP with a root that is not
// rank 0 and verifies clean, with nccl-tests' bus factor.
func TestEveryCollective(t *testing.T) {
	for _, coll := range bench.Collectives() {
		jsonPath := filepath.Join(t.TempDir(), "out.json")
		args := []string{"--coll", coll, "--root", "2", "--np", "3", "-d", "int32", "-o", "max", "-n", "2", "-w", "1", "--json", jsonPath}
		rows := 3
		if coll == "barrier" {
			rows = 1 // no data: one row of 0 bytes
		} else {
			args = append(args, "-b", "8", "-e", "128K", "-f", "128")
		}
		stdout, stderr, code := collbench(t, nil, args...)
		if code != 0 || !strings.Contains(stdout, "Out of bounds values : 0 OK") {
			t.Fatalf("--coll %s: exit %d\n%s\n%s", coll, code, stdout, stderr)
		}
		file, err := bench.ReadJSONFile(jsonPath)
		if err != nil {
			t.Fatal(err)
		}
		r := file.Reports[0]
		if r.Collective != coll || len(r.Rows) != rows {
			t.Fatalf("--coll %s: report of %q with %d rows, want %d (8 B, 1 KiB, 128 KiB; the barrier 0 B)", coll, r.Collective, len(r.Rows), rows)
		}
		for _, row := range r.Rows {
			m := row.OutOfPlace
			if coll == "barrier" {
				if m.Wrong != 0 || !m.Checked || row.Bytes != 0 || m.TimeUS <= 0 {
					t.Errorf("--coll barrier: %d wrong, checked %v, %d bytes, %v us", m.Wrong, m.Checked, row.Bytes, m.TimeUS)
				}
				continue
			}
			if got, want := m.BusBW/m.AlgBW, bench.BusFactor(coll, 3); m.Wrong != 0 || got < want*0.999 || got > want*1.001 {
				t.Errorf("--coll %s, %d bytes: %d wrong, busbw/algbw %v, want 0 and %v", coll, row.Bytes, m.Wrong, got, want)
			}
		}
	}
}

func TestBadCollective(t *testing.T) {
	for _, args := range [][]string{{"--coll", "allsum"}, {"--coll", "reduce", "--np", "2", "--root", "2"}, {"tune", "--coll", "gather"}, {"--coll", "barrier", "--size", "64"}} {
		_, stderr, code := collbench(t, nil, args...)
		if code != 2 || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line", args, code, stderr)
		}
	}
}
