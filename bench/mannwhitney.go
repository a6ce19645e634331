package bench

import (
	"math"
	"slices"

	"gonum.org/v1/gonum/stat/distuv"
)

// MannWhitneyGreater is the one-sided Mann-Whitney U test that values in b
// tend to be larger than values in a. It returns the p-value from the
// normal approximation with tie and continuity corrections (good from about
// five samples a side), and 1 when either side is empty or all values tie.
func MannWhitneyGreater(a, b []float64) float64 {
	n1, n2 := float64(len(a)), float64(len(b))
	if n1 == 0 || n2 == 0 {
		return 1
	}
	type obs struct {
		v     float64
		fromB bool
	}
	all := make([]obs, 0, len(a)+len(b))
	for _, v := range a {
		all = append(all, obs{v, false})
	}
	for _, v := range b {
		all = append(all, obs{v, true})
	}
	slices.SortFunc(all, func(x, y obs) int {
		switch {
		case x.v < y.v:
			return -1
		case x.v > y.v:
			return 1
		}
		return 0
	})
	n := n1 + n2
	var rankB, ties float64
	for i := 0; i < len(all); {
		j := i
		for j < len(all) && all[j].v == all[i].v {
			j++
		}
		rank := float64(i+j+1) / 2 // average of ranks i+1 .. j
		for k := i; k < j; k++ {
			if all[k].fromB {
				rankB += rank
			}
		}
		t := float64(j - i)
		ties += t*t*t - t
		i = j
	}
	u := rankB - n2*(n2+1)/2
	mean := n1 * n2 / 2
	variance := n1 * n2 / 12 * ((n + 1) - ties/(n*(n-1)))
	if variance <= 0 {
		return 1
	}
	z := (u - mean - 0.5) / math.Sqrt(variance)
	return distuv.UnitNormal.Survival(z)
}
