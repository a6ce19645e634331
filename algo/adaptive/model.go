package adaptive

import (
	"encoding/json"
	"fmt"
	"math/bits"
	"os"
	"slices"
	"time"

	"gonum.org/v1/gonum/stat"
)

// Schema names the tuning file layout.
const Schema = "collkit.tuning/v1"

// Fit is the cost model of one algorithm over [MinBytes, MaxBytes):
// time = LatencyUS x steps + bytes x factor / (BandwidthGBs x 1e3) microseconds.
type Fit struct {
	MinBytes     int64   `json:"min_bytes"`
	MaxBytes     int64   `json:"max_bytes"` // 0 means no upper bound
	LatencyUS    float64 `json:"latency_us_per_step"`
	BandwidthGBs float64 `json:"bandwidth_gbs"`
}

// Sample is one measurement: the mean time of an all-reduce of Bytes.
type Sample struct {
	Bytes  int64   `json:"bytes"`
	TimeUS float64 `json:"time_us"`
}

// Entry is the fitted model of one algorithm on one transport and world size.
type Entry struct {
	Transport string   `json:"transport"`
	Ranks     int      `json:"ranks"`
	Algorithm string   `json:"algorithm"`
	Fits      []Fit    `json:"fits"`
	Samples   []Sample `json:"samples"` // what the fits came from
}

// Table is a tuning file.
type Table struct {
	Schema  string    `json:"schema"`
	Created time.Time `json:"created"`
	Host    string    `json:"host,omitempty"`
	Entries []Entry   `json:"entries"`
}

// Load reads a tuning file written by Save.
func Load(path string) (*Table, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("adaptive: reading tuning file: %w", err)
	}
	var t Table
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("adaptive: tuning file %s: %w", path, err)
	}
	if t.Schema != Schema {
		return nil, fmt.Errorf("adaptive: tuning file %s has schema %q, this build reads %q: run collbench tune again", path, t.Schema, Schema)
	}
	return &t, nil
}

// Save writes the table as indented JSON.
func (t *Table) Save(path string) error {
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("adaptive: writing tuning file: %w", err)
	}
	return nil
}

// entry finds the fitted model of an algorithm, or nil.
func (t *Table) entry(transport string, ranks int, algo string) *Entry {
	if t == nil {
		return nil
	}
	for i := range t.Entries {
		e := &t.Entries[i]
		if e.Transport == transport && e.Ranks == ranks && e.Algorithm == algo {
			return e
		}
	}
	return nil
}

// FitSamples fits the cost terms of an algorithm of the given shape to
// samples, one Fit per band between consecutive measured sizes: the line
// through the band's two end points, so that the model reproduces every
// measured size exactly and choices at those sizes follow the measurements.
// (Steadying a band with its neighbours' points, tried first, let one noisy
// sample move the choice at the next size: measured at 4 ranks, adaptive ran
// ring at 8 bytes, 1.6x slower than halving-doubling.)
func FitSamples(shape Shape, ranks int, samples []Sample) []Fit {
	s := slices.Clone(samples)
	slices.SortFunc(s, func(a, b Sample) int { return int(a.Bytes - b.Bytes) })
	if len(s) == 0 {
		return nil
	}
	if len(s) == 1 {
		return []Fit{shape.at(s[0].Bytes, Fit{}).terms(ranks, s[0].TimeUS, 0)}
	}
	fits := make([]Fit, 0, len(s)-1)
	for i := 0; i+1 < len(s); i++ {
		var x, y, w []float64
		for j := i; j <= i+1; j++ {
			x, y, w = append(x, float64(s[j].Bytes)), append(y, s[j].TimeUS), append(w, 1)
		}
		a, b := stat.LinearRegression(x, y, w, false)
		if a < 0 { // noise: no negative latency; refit through the origin
			a, b = 0, weightedSlope(x, y, w)
		}
		f := shape.at(s[i].Bytes, Fit{}).terms(ranks, a, b)
		f.MinBytes, f.MaxBytes = s[i].Bytes, s[i+1].Bytes
		if i == 0 {
			f.MinBytes = 0
		}
		if i+2 == len(s) {
			f.MaxBytes = 0
		}
		fits = append(fits, f)
	}
	return fits
}

func weightedSlope(x, y, w []float64) float64 {
	var num, den float64
	for i := range x {
		num += w[i] * x[i] * y[i]
		den += w[i] * x[i] * x[i]
	}
	if den == 0 {
		return 0
	}
	return num / den
}

// noBandwidth stands for a bandwidth term too small to measure.
const noBandwidth = 1e6

// terms converts time = a + b*bytes into the shape's latency per step and
// bandwidth.
func (sh Shape) terms(n int, a, b float64) Fit {
	f := Fit{LatencyUS: a / max(sh.Steps(n), 1), BandwidthGBs: noBandwidth}
	if b > 0 {
		f.BandwidthGBs = min(sh.Factor(n)/(b*1e3), noBandwidth)
	}
	return f
}

// Shape is what the cost model knows of an algorithm without measuring it.
type Shape struct {
	Steps  func(n int) float64 // latency steps of one all-reduce
	Factor func(n int) float64 // bytes each rank sends per byte of buffer
	// Small, when set, is the shape of calls of at most SmallBytes: an
	// algorithm that runs another method for small buffers.
	Small      *Shape
	SmallBytes int64
}

// at is the shape of a call of bytes. A fitted band is modelled with the
// shape it was fitted with, that of its smallest size, so that the model
// reproduces its measured end points.
func (sh Shape) at(bytes int64, f Fit) Shape {
	if f.MaxBytes > 0 || f.MinBytes > 0 {
		bytes = f.MinBytes
	}
	if sh.Small != nil && bytes <= sh.SmallBytes {
		return *sh.Small
	}
	return sh
}

// predict returns the modelled microseconds of an all-reduce of bytes.
func (sh Shape) predict(f Fit, n int, bytes int64) float64 {
	return f.LatencyUS*sh.Steps(n) + float64(bytes)*sh.Factor(n)/(f.BandwidthGBs*1e3)
}

// log2ceil is the number of doubling rounds that cover n ranks.
func log2ceil(n int) float64 {
	if n <= 1 {
		return 0
	}
	return float64(bits.Len(uint(n - 1)))
}

// fitFor returns the band of fits that covers bytes.
func fitFor(fits []Fit, bytes int64) Fit {
	for _, f := range fits {
		if bytes >= f.MinBytes && (f.MaxBytes == 0 || bytes < f.MaxBytes) {
			return f
		}
	}
	return fits[len(fits)-1]
}

// Default terms, used for algorithms the table does not cover: a loopback
// TCP hop costs about this much, and a core moves about this much.
var defaultFit = Fit{LatencyUS: 15, BandwidthGBs: 2}
