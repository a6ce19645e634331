package main

import (
	"math"
	"reflect"
	"testing"

	"github.com/collkit/collkit/algo/adaptive"
)

// The built-in table is what mkbuiltin makes of the rounds kept in
// testdata: every entry, fit and sample, so the table can be made again
// and checked against the measurements it claims.
func TestBuiltinIsTheRounds(t *testing.T) {
	made, err := build(machines...)
	if err != nil {
		t.Fatal(err)
	}
	got := adaptive.Builtin()
	if len(made.Entries) != len(got.Entries) {
		t.Fatalf("mkbuiltin makes %d entries, the built-in table has %d", len(made.Entries), len(got.Entries))
	}
	for i, e := range made.Entries {
		if !reflect.DeepEqual(e, got.Entries[i]) {
			t.Errorf("entry %d: mkbuiltin makes %+v, the built-in table has %+v", i, e, got.Entries[i])
		}
	}
}

// machines are the rounds of each VM the built-in table was measured on:
// an AMD EPYC and an Intel Xeon, each with 2 cores, a sweep of every
// size on an Intel Xeon VM of the same kind on a slower day (tcp's floor
// 7.7 us against 3.1; scripts/compare-mpi.sh's sweep.txt), and ten rounds
// of every size on that VM after shm's native all-reduce and pairwise's
// out-of-place first round got faster (2026-11-29), and five more after
// halving-doubling began to run recursive doubling up to 256 KiB on 2 and
// 3 ranks (the same day, later), in two runs of the script, and five more
// in a third run after the table was fitted to those (s22a), and five
// rounds of every size on a faster EPYC VM (2026-12-05: tcp from s26a, shm
// from s26b after the native all-reduce streamed its reduced slices), and
// ten on that EPYC VM (2026-12-06: s28c and s28d).
var machines = []string{"testdata/rounds-2026-11-25.txt", "testdata/rounds-2026-11-25-xeon.txt", "testdata/sweep-2026-11-28-xeon.txt", "testdata/sweep-2026-11-29-xeon.txt", "testdata/sweep-2026-11-29b-xeon.txt", "testdata/sweep-2026-11-29c-xeon.txt", "testdata/sweep-2026-11-29d-xeon.txt", "testdata/sweep-2026-12-05-epyc.txt", "testdata/sweep-2026-12-06-epyc.txt"}

// At every size each machine measured, what the built-in table chooses
// (over shm with the native all-reduce among the candidates) took at most
// 1.2x the time of that machine's best candidate there, unless the
// machines disagree by more: then it took no more than the candidate
// whose worst ratio over them is the least. Neither machine gets its own
// best everywhere: at 2 ranks over tcp, 1 MiB, halving-doubling won on the
// EPYC and ring by 1.25x on the Xeon; ring is 1.13x the EPYC's best. At 4
// ranks over tcp, 256 KiB, ring took 1.22x pairwise in s22a, while pairwise
// took 1.69x ring on the EPYC (its bimodal rounds), so no choice is within
// 1.2x of both.
func TestBuiltinNearBest(t *testing.T) {
	shapes := map[string]adaptive.Shape{}
	for _, a := range adaptive.WithNative(nil) {
		shapes[a.Name] = a.Shape
	}
	files := make([]medians, len(machines))
	bests := make([]map[point]float64, len(machines))
	for i, path := range machines {
		m, err := read(path, shapes)
		if err != nil {
			t.Fatal(err)
		}
		files[i], bests[i] = m, m.fastest()
	}
	// reach is the least any candidate's worst ratio to the best over the
	// machines that measured p can be: where the machines disagree more
	// than 1.2x, no choice is within it on all of them.
	reach := func(p point) float64 {
		least := math.Inf(1)
		for name := range shapes {
			worst := 0.0
			for i, m := range files {
				if fastest := bests[i][p]; fastest > 0 {
					us, ok := m[key{p.transport, p.ranks, name}][p.bytes]
					if !ok {
						us = math.Inf(1)
					}
					worst = max(worst, us/fastest)
				}
			}
			least = min(least, worst)
		}
		return least
	}
	for i, path := range machines {
		for p, fastest := range bests[i] {
			cfg := adaptive.Config{Transport: p.transport}
			if p.transport == "shm" {
				cfg.Algorithms = adaptive.WithNative(nil)
			}
			a, _ := cfg.Choose(p.bytes, p.ranks)
			r := files[i][key{p.transport, p.ranks, a.Name}][p.bytes] / fastest
			if r <= 1.2 {
				continue
			}
			// The fits are smooth in the size, so where the least-worst
			// candidate beats another by a few percent, a fit may pick the
			// other (8 ranks over tcp, 128 KiB: tree 1.23x, ring 1.21x).
			if least := reach(p); r > 1.05*least {
				t.Errorf("%s: %s, %d ranks, %d bytes: built-in choice %s took %.2fx the best, and some candidate is within %.2fx on every machine", path, p.transport, p.ranks, p.bytes, a.Name, r, least)
			}
		}
	}
}
