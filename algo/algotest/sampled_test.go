package algotest

import "testing"

// The coverage sampled promises: on each visit every dtype runs once out of
// place and once in place, and any ops visits in a row run every dtype with
// every op in both placements.
func TestSampledCovers(t *testing.T) {
	const dtypes = 7
	for ops := 1; ops <= 5; ops++ {
		for first := range 12 {
			seen := map[[3]int]bool{}
			for v := first; v < first+ops; v++ {
				for d := range dtypes {
					runs := [2]int{}
					for o := range ops {
						for p, inPlace := range []bool{false, true} {
							if sampled(v, d, o, ops, inPlace) {
								runs[p]++
								seen[[3]int{d, o, p}] = true
							}
						}
					}
					if runs != [2]int{1, 1} {
						t.Fatalf("ops=%d visit %d dtype %d: %d runs out of place, %d in place, want 1 and 1", ops, v, d, runs[0], runs[1])
					}
				}
			}
			if len(seen) != dtypes*ops*2 {
				t.Errorf("ops=%d visits %d..%d: %d of %d dtype, op and placement combinations", ops, first, first+ops-1, len(seen), dtypes*ops*2)
			}
		}
	}
}
