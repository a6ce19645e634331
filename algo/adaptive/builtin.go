package adaptive

import (
	_ "embed"
	"encoding/json"
	"math"
	"slices"
)

// builtinJSON is the table adaptive uses without a tuning file: its
// candidates measured by scripts/compare-mpi.sh on 2-core VMs that rank
// them differently, and fitted as `collbench tune` fits its sweeps. The
// AMD EPYC VM's rounds (2026-11-24) are the medians of 6 rounds for every
// world size and transport: three were too few, since a candidate whose
// time is bimodal from round to round (pairwise at 256 KiB, 4 ranks) won
// two of three and ran 1.4x the steady ring's median; its tcp rounds are
// from after tcp connections left the system's bbr for cubic, its shm
// rounds from after shm's rings and native all-reduce began to stream. The
// Intel Xeon VM's (2026-11-25) are 6 rounds too, its shm rounds from after
// shm began to time streaming against ordinary stores at Connect (ordinary
// won there). Those keep the table's rows, 10 of 22 sizes; the third
// file is 6 rounds of every size (the sweep.txt of two compare-mpi.sh runs
// of 3) on a Xeon VM of the same kind on a slower day (2026-11-28), which
// found what the rows hid: at 2 ranks over shm, tree at 128 KiB took 2x
// native and ring at 512 KiB 1.4x, both the old table's choices. The
// fourth is 10 rounds of every size on that VM (2026-11-29, the sweep.txt
// of two compare-mpi.sh runs of 5) after shm's native all-reduce began to
// reduce its own slice straight into recv and pairwise its first round out
// of place: without it the table chose halving-doubling at 64 KiB over
// shm on 2 ranks (1.55x native there) and ring at 8 MiB over tcp on 2
// (1.24x halving-doubling). The fifth and sixth are 5 rounds of every size
// each on that VM later the same day (two compare-mpi.sh runs, s21a and
// s21b), after halving-doubling began to run recursive doubling up to 256
// KiB on 2 and 3 ranks: the fifth moved five choices (tree at 64 KiB over
// tcp on 3 ranks, where halving-doubling took 1.25x its best; pairwise at
// 128 KiB on 4, where ring took 1.33x; halving-doubling at 16 MiB on 3 and
// pairwise on 8; tree at 64 KiB on 2), the sixth one back (at 64 KiB on 2
// ranks tree took 1.20x halving-doubling there, halving-doubling 1.04x
// tree in the fifth). The seventh is 5 rounds of every size in a third
// run (s22a) with the six-file table; it moved four choices (pairwise at
// 128 KiB over tcp on 2 ranks and at 512 KiB on 4, where ring took 1.16x
// and 1.24x it; halving-doubling at 8 MiB on 8, where pairwise took 1.18x
// ring and halving-doubling 1.10x; native at 32 KiB over shm on 2): on the
// seventh file's rounds 4 sizes beyond 1.1x the best instead of 7, over
// all seven files 24 instead of 29. The eighth is 5 rounds of every size
// on a faster EPYC VM (2026-12-05; tcp from s26a, shm from s26b, after
// the native all-reduce began to stream its reduced slices): it moved
// three choices, ring for tree at 16 MiB over tcp on 2 ranks (tree took
// 1.51x the best there, ring 1.07x), pairwise at 1 MiB on 8 and
// halving-doubling at 32 KiB over shm on 2. The ninth is 10 rounds of every
// size on that EPYC VM (2026-12-06, s28c and s28d, after collbench began
// to return its freed memory to the kernel before each size and the
// communicator's clock to read the counter under kvm-clock): it moved two
// choices, both on 8 ranks over tcp (pairwise for tree at 128 KiB,
// halving-doubling for pairwise at 4 MiB). Where the machines disagree, a
// candidate's time is its worst ratio to the best over them
// (internal/mkbuiltin; a size a machine skipped is interpolated between
// its own): adaptive picks the candidate least far from the best on any,
// at most 1.2x it at every size measured but one (4 ranks over tcp, 256
// KiB: ring, 1.22x pairwise on the seventh file, where pairwise took 1.69x
// ring on the EPYC; TestBuiltinNearBest), where the EPYC's table alone ran
// up to 1.5x the Xeon's best. The rounds are kept in
// internal/mkbuiltin/testdata, and TestBuiltinIsTheRounds checks that this
// table is what they make:
//
//	go run ./algo/adaptive/internal/mkbuiltin algo/adaptive/internal/mkbuiltin/testdata/rounds-2026-11-25.txt algo/adaptive/internal/mkbuiltin/testdata/rounds-2026-11-25-xeon.txt algo/adaptive/internal/mkbuiltin/testdata/sweep-2026-11-28-xeon.txt algo/adaptive/internal/mkbuiltin/testdata/sweep-2026-11-29-xeon.txt algo/adaptive/internal/mkbuiltin/testdata/sweep-2026-11-29b-xeon.txt algo/adaptive/internal/mkbuiltin/testdata/sweep-2026-11-29c-xeon.txt algo/adaptive/internal/mkbuiltin/testdata/sweep-2026-11-29d-xeon.txt algo/adaptive/internal/mkbuiltin/testdata/sweep-2026-12-05-epyc.txt algo/adaptive/internal/mkbuiltin/testdata/sweep-2026-12-06-epyc.txt > algo/adaptive/builtin.json
//
//go:embed builtin.json
var builtinJSON []byte

var builtin = parseBuiltin(builtinJSON)

// parseBuiltin reads the embedded table; a table that does not parse (a
// bad edit, which TestBuiltinTable catches) leaves only the shape terms.
func parseBuiltin(b []byte) *Table {
	var t Table
	if json.Unmarshal(b, &t) != nil || t.Schema != Schema {
		return &Table{}
	}
	return &t
}

// Builtin returns a copy of the table adaptive uses without a tuning file.
// It was measured on a small machine (2 cores, tcp and shm); `collbench
// tune` measures yours.
func Builtin() *Table {
	t := *builtin
	t.Entries = slices.Clone(builtin.Entries)
	for i := range t.Entries {
		e := &t.Entries[i]
		e.Fits, e.Samples = slices.Clone(e.Fits), slices.Clone(e.Samples)
	}
	return &t
}

// nearest returns the world size of transport's entries closest to n (by
// ratio, so 6 ranks use the 8-rank terms rather than the 4-rank ones only
// when 8 is nearer in doublings), or n when there are none: the fitted
// terms are per step and per byte, and the shape scales them to n.
func (t *Table) nearest(transport string, n int) int {
	best, dist := n, math.Inf(1)
	for _, e := range t.Entries {
		if e.Transport != transport {
			continue
		}
		d := float64(max(e.Ranks, n)) / float64(max(min(e.Ranks, n), 1)) // the ratio: cheaper than a log, same order
		if d < dist || d == dist && e.Ranks > best {
			best, dist = e.Ranks, d
		}
	}
	return best
}
