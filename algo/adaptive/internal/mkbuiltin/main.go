// Command mkbuiltin writes adaptive's built-in table (algo/adaptive/
// builtin.json) from the raw.txt of a scripts/compare-mpi.sh run: for every
// transport and world size there, the median of the rounds of each
// candidate at each size, fitted as `collbench tune` fits its sweeps.
//
//	go run ./algo/adaptive/internal/mkbuiltin OUT_DIR/raw.txt > algo/adaptive/builtin.json
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/collkit/collkit/algo/adaptive"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: mkbuiltin RAW.txt (from scripts/compare-mpi.sh) > algo/adaptive/builtin.json")
		os.Exit(2)
	}
	t, err := build(os.Args[1])
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

// build reads lines "collkit allreduce TRANSPORT NP BYTES ALGO TIME_US" and
// fits every candidate of adaptive it finds.
func build(path string) (*adaptive.Table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	shapes := map[string]adaptive.Shape{}
	for _, a := range adaptive.WithNative(nil) {
		shapes[a.Name] = a.Shape
	}
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
		return nil, fmt.Errorf("%s has no collkit all-reduce lines of ring, tree or halvingdoubling", path)
	}
	keys := slices.SortedFunc(maps.Keys(times), func(a, b key) int {
		return cmp.Or(cmp.Compare(a.transport, b.transport), cmp.Compare(a.ranks, b.ranks), cmp.Compare(a.algo, b.algo))
	})
	t := &adaptive.Table{Schema: adaptive.Schema, Created: time.Now().UTC(), Host: "built-in: scripts/compare-mpi.sh on a 2-core VM"}
	for _, k := range keys {
		var samples []adaptive.Sample
		for _, b := range slices.Sorted(maps.Keys(times[k])) {
			samples = append(samples, adaptive.Sample{Bytes: b, TimeUS: median(times[k][b])})
		}
		t.Entries = append(t.Entries, adaptive.Entry{Transport: k.transport, Ranks: k.ranks, Algorithm: k.algo,
			Fits: adaptive.FitSamples(shapes[k.algo], k.ranks, samples), Samples: samples})
	}
	return t, nil
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
