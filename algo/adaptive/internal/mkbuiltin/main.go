// Command mkbuiltin writes adaptive's built-in table (algo/adaptive/
// builtin.json) from the raw.txt of scripts/compare-mpi.sh runs, one file
// per machine (several runs of one machine concatenated): for every
// transport and world size there, the median of the rounds of each
// candidate at each size, fitted as `collbench tune` fits its sweeps. With
// several machines, which rank the candidates differently, a candidate's
// time at a size is the worst over the machines of its median over that
// machine's best candidate there, times the geometric mean of the
// machines' best: adaptive then picks, at each size, the candidate that is
// least far from the best on whichever of them it runs.
//
//	go run ./algo/adaptive/internal/mkbuiltin MACHINE1.txt [MACHINE2.txt ...] > algo/adaptive/builtin.json
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/collkit/collkit/algo/adaptive"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: mkbuiltin RAW.txt... (from scripts/compare-mpi.sh, one file per machine) > algo/adaptive/builtin.json")
		os.Exit(2)
	}
	t, err := build(os.Args[1:]...)
	if err == nil {
		var b []byte
		if b, err = json.MarshalIndent(t, "", "  "); err == nil {
			_, err = os.Stdout.Write(append(b, '\n'))
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkbuiltin:", err)
		os.Exit(1)
	}
}

type key struct {
	transport string
	ranks     int
	algo      string
}

// medians maps a candidate to its median time at each size.
type medians map[key]map[int64]float64

// point is a transport, world size and buffer size: where candidates race.
type point struct {
	transport string
	ranks     int
	bytes     int64
}

// fastest is the best candidate's time at every point m measured.
func (m medians) fastest() map[point]float64 {
	best := map[point]float64{}
	for k, sizes := range m {
		for b, us := range sizes {
			p := point{k.transport, k.ranks, b}
			if v, ok := best[p]; !ok || us < v {
				best[p] = us
			}
		}
	}
	return best
}

// build fits every candidate of adaptive found in the files, one per
// machine (see the package comment).
func build(paths ...string) (*adaptive.Table, error) {
	shapes := map[string]adaptive.Shape{}
	for _, a := range adaptive.WithNative(nil) {
		shapes[a.Name] = a.Shape
	}
	var machines []medians
	for _, p := range paths {
		m, err := read(p, shapes)
		if err != nil {
			return nil, err
		}
		machines = append(machines, m)
	}
	fill(machines)
	times := machines[0]
	if len(machines) > 1 {
		times = worstRatio(machines)
	}
	keys := slices.SortedFunc(maps.Keys(times), func(a, b key) int {
		return cmp.Or(cmp.Compare(a.transport, b.transport), cmp.Compare(a.ranks, b.ranks), cmp.Compare(a.algo, b.algo))
	})
	t := &adaptive.Table{Schema: adaptive.Schema, Created: time.Now().UTC(), Host: "built-in: scripts/compare-mpi.sh on 2-core VMs"}
	for _, k := range keys {
		var samples []adaptive.Sample
		for _, b := range slices.Sorted(maps.Keys(times[k])) {
			samples = append(samples, adaptive.Sample{Bytes: b, TimeUS: times[k][b]})
		}
		t.Entries = append(t.Entries, adaptive.Entry{Transport: k.transport, Ranks: k.ranks, Algorithm: k.algo,
			Fits: adaptive.FitSamples(shapes[k.algo], k.ranks, samples), Samples: samples})
	}
	return t, nil
}

// read takes the medians of one machine's lines "collkit allreduce
// TRANSPORT NP BYTES ALGO TIME_US" for the candidates in shapes.
func read(path string, shapes map[string]adaptive.Shape) (medians, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	times := map[key]map[int64][]float64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		w := strings.Fields(sc.Text())
		if len(w) != 7 || w[0] != "collkit" || w[1] != "allreduce" {
			continue
		}
		if _, ok := shapes[w[5]]; !ok {
			continue
		}
		ranks, err1 := strconv.Atoi(w[3])
		bytes, err2 := strconv.ParseInt(w[4], 10, 64)
		us, err3 := strconv.ParseFloat(w[6], 64)
		if err := cmp.Or(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("%s: %q: %w", path, sc.Text(), err)
		}
		k := key{w[2], ranks, w[5]}
		if times[k] == nil {
			times[k] = map[int64][]float64{}
		}
		times[k][bytes] = append(times[k][bytes], us)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(times) == 0 {
		return nil, fmt.Errorf("%s has no collkit all-reduce lines of adaptive's candidates", path)
	}
	m := medians{}
	for k, sizes := range times {
		m[k] = map[int64]float64{}
		for b, v := range sizes {
			m[k][b] = median(v)
		}
	}
	return m, nil
}

// worstRatio combines machines (see the package comment): a candidate and
// size that some machine lacks are left out.
func worstRatio(machines []medians) medians {
	best := make([]map[point]float64, len(machines))
	for i, m := range machines {
		best[i] = m.fastest()
	}
	out := medians{}
	for k, sizes := range machines[0] {
	size:
		for b := range sizes {
			p, worst, logBest := point{k.transport, k.ranks, b}, 0.0, 0.0
			for i, m := range machines {
				us, ok := m[k][b]
				if !ok {
					continue size
				}
				worst = max(worst, us/best[i][p])
				logBest += math.Log(best[i][p])
			}
			if out[k] == nil {
				out[k] = map[int64]float64{}
			}
			out[k][b] = worst * math.Exp(logBest/float64(len(machines)))
		}
	}
	return out
}

// fill gives every machine a median at each size another measured for the
// same transport and world size, within the sizes it measured itself:
// interpolated, log-log, between its own neighbouring sizes. The tables of
// scripts/compare-mpi.sh keep 10 of a sweep's 22 sizes, its sweep.txt
// every size; without this a size only a sweep has would be left out (see
// worstRatio), and so would be what that sweep measured there.
func fill(machines []medians) {
	type group struct {
		transport string
		ranks     int
	}
	sizes := map[group]map[int64]bool{}
	for _, m := range machines {
		for k, s := range m {
			g := group{k.transport, k.ranks}
			if sizes[g] == nil {
				sizes[g] = map[int64]bool{}
			}
			for b := range s {
				sizes[g][b] = true
			}
		}
	}
	for _, m := range machines {
		for k, s := range m {
			own := slices.Sorted(maps.Keys(s))
			for b := range sizes[group{k.transport, k.ranks}] {
				i, found := slices.BinarySearch(own, b)
				if found || i == 0 || i == len(own) {
					continue
				}
				lo, hi := own[i-1], own[i]
				f := math.Log(float64(b)/float64(lo)) / math.Log(float64(hi)/float64(lo))
				s[b] = math.Exp(math.Log(s[lo]) + f*(math.Log(s[hi])-math.Log(s[lo])))
			}
		}
	}
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
