package adaptive

import (
	_ "embed"
	"encoding/json"
	"math"
	"slices"
)

// builtinJSON is the table adaptive uses without a tuning file: its
// candidates measured by scripts/compare-mpi.sh on a quiet 2-core VM
// (2026-11-24; 2, 3, 4 and 8 ranks over tcp and shm, 8 B to 16 MiB) and
// fitted as `collbench tune` fits its sweeps, to the medians of every round
// of several runs: 6 rounds for every world size and transport. Three
// rounds were too few: a candidate whose time is bimodal from round to
// round (pairwise at 256 KiB, 4 ranks) won two of three and ran 1.4x the
// steady ring's median. The tcp rounds are from after tcp connections left
// the system's bbr for cubic (3 runs), which made large messages up to 2x
// faster and changed which candidate wins from 1 MiB. The shm rounds are
// from after shm's rings and native all-reduce began to stream (3 runs,
// 23:42-00:13 UTC), which made every shm candidate up to 2x faster from 64
// KiB, and they include shm's native all-reduce, a candidate over the
// transports that have one (WithNative). The rounds are kept in
// internal/mkbuiltin/testdata, and TestBuiltinIsTheRounds checks that this
// table is what they make:
//
//	go run ./algo/adaptive/internal/mkbuiltin algo/adaptive/internal/mkbuiltin/testdata/rounds-2026-11-25.txt > algo/adaptive/builtin.json
//
// (a newer run's OUT_DIR/raw.txt, or several concatenated, works the
// same way, from the repository root).
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
