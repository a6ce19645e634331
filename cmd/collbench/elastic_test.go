package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// A short chaos run with real processes: 4 ranks, 3 kills with SIGKILL
// (any rank, rank 0 too), each followed by a replacement that joins. Every
// event must recover with the survivors agreeing, and the world must be
// back at 4.
func TestElasticChaos(t *testing.T) {
	jsonPath := filepath.Join(t.TempDir(), "events.json")
	stdout, stderr, code := collbench(t, nil, "elastic", "--np", "4", "--events", "3", "--kill-every", "200ms", "--regrow",
		"--size", "16K", "--seed", "7", "--json", jsonPath)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"events                         3", "hangs                          0",
		"wrong elements                 0", "disagreements                  0", "shrink ms, every survivor      median"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, stdout)
		}
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var s elasticSummary
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("--json: %v\n%s", err, b)
	}
	if len(s.Events) != 3 || s.Verified == 0 {
		t.Fatalf("--json has %d events and %d verified all-reduces; want 3 and some", len(s.Events), s.Verified)
	}
	for _, ev := range s.Events {
		if ev.Survivors != 3 || ev.SizeAfter != 4 || len(ev.Members) != 4 || slices.Contains(ev.Members, ev.VictimID) {
			t.Errorf("event %d: %d survivors, size %d after, members %v (victim %d); want 3, 4, 4 members without the victim", ev.Event, ev.Survivors, ev.SizeAfter, ev.Members, ev.VictimID)
		}
		if ev.DetectFirstMS <= 0 || ev.DetectLastMS < ev.DetectFirstMS || len(ev.ShrinkMS) != 3 || ev.GrowMS <= 0 || ev.JoinerID < 1<<20 {
			t.Errorf("event %d: times detect %v/%v, shrink %v, grow %v, joiner %d; want them measured", ev.Event, ev.DetectFirstMS, ev.DetectLastMS, ev.ShrinkMS, ev.GrowMS, ev.JoinerID)
		}
	}
}

// A wrong element in one process's result fails the run, naming it.
func TestElasticWrongElementFails(t *testing.T) {
	stdout, stderr, code := collbench(t, []string{corruptVar + "=2"}, "elastic", "--np", "3", "--events", "1", "--kill-every", "5s", "--size", "8K")
	if code != exitFailed {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, exitFailed, stdout, stderr)
	}
	if !regexp.MustCompile(`wrong elements\s+1\n`).MatchString(stdout) || !strings.Contains(stderr, "process 2 (pid") ||
		!strings.Contains(stderr, "found 1 wrong elements: step 3") {
		t.Errorf("the run did not report process 2's wrong element:\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
}

func TestElasticFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--np", "4", "--events", "4"}, "without --regrow would kill every process"},
		{[]string{"--np", "1"}, "at least 2 processes"},
		{[]string{"--transport", "nccl"}, "want tcp or shm"},
		{[]string{"--size", "12"}, "not a multiple of the element size 8"},
		{[]string{"--kill-every", "0s"}, "must be positive"},
	} {
		if _, err := parseElasticFlags(c.args, os.Stderr); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v; want an error saying %q", c.args, err, c.want)
		}
	}
	if o, err := parseElasticFlags([]string{"--np", "8", "--events", "100", "--regrow", "--size", "64K"}, os.Stderr); err != nil || o.size != 65536 || o.events != 100 {
		t.Errorf("valid flags: %+v, %v", o, err)
	}
}

func TestPercentile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3}
	if p := percentile(xs, 50); p != 3 {
		t.Errorf("median of 1..5: %v", p)
	}
	if p := percentile(xs, 99); p != 5 {
		t.Errorf("p99 of 1..5: %v", p)
	}
	if p := percentile([]float64{7}, 99); p != 7 {
		t.Errorf("p99 of one sample: %v", p)
	}
}
