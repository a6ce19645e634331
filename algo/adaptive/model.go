package adaptive

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"os"
	"slices"
	"time"
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

// FitSamples fits the cost terms of an algorithm of the given shape to its
// samples, one Fit per measured size: the band from that size up to the
// next (the first from zero bytes, the last without end). Samples of one
// size are pooled; samples with no positive, finite time are dropped.
//
// Timings on a busy machine are noisy, and mostly upwards (a rank is
// preempted; nothing runs faster than the machine). A line through each
// two neighbouring samples turns that noise into physics: a band whose time
// falls gets no bandwidth term (it was 1e6 GB/s), a spike makes the band
// before it refit through the origin and overestimate its own size (tree
// won at 64 bytes at 4 ranks where halving-doubling had measured faster),
// and a band's latency, the difference of two large noisy numbers, jumps
// 5-9x between neighbours (issue 16). So the fit:
//
//  1. Caps the bandwidth at the best the sweep shows: the marginal
//     bandwidth (s2 - s1) / (t2 - t1) between two measured sizes whose time
//     grew by at least half (smaller rises are noise), or the best average
//     s / t if higher. A sweep whose time never grew by half cannot tell
//     its bandwidth; then the bytes of its largest size may take a tenth of
//     its time (latencyOnly), or the built-in bandwidth if higher. A linear
//     cost, latency + bytes / bandwidth, gives its bandwidth back; noise
//     can raise the cap to at most 3x the best average.
//  2. Smooths the time left once the bytes are paid at that cap,
//     z = t - s / cap, into a non-decreasing sequence z' by isotonic
//     regression (pool adjacent violators) weighted by 1/t^2: squared
//     relative errors, so that small and large sizes count alike and a
//     spike pooled with a fast neighbour moves the pool little, as upward
//     noise deserves. The fitted time y = z' + s / cap never falls, rises by
//     at least the cap's time for the added bytes, and equals the sample
//     wherever the samples already did both.
//  3. Anchors each band at its own size's fitted time, so that the model
//     reproduces y at every measured size and choices there follow the
//     measurements. A band's latency is the previous band's (the first's:
//     z' of the smallest size, whose time is all latency), moved only as
//     far as it must to stay within [f, z']: at most z', the time not
//     spent on bytes at the cap, so that the bandwidth stays under the cap;
//     at least f, the intercept of the line to the next size's y, so that
//     the band ends no higher than the next begins. The bandwidth is what
//     is left of y once that latency is paid. Latencies thus change only
//     where the data insist (halving-doubling's step from recursive doubling
//     to Rabenseifner), never fall, and are never negative; between
//     measured sizes the model rises from one size's time to at most the
//     next's, on the chord or below it.
func FitSamples(shape Shape, ranks int, samples []Sample) []Fit {
	pts := pool(samples)
	if len(pts) == 0 {
		return nil
	}
	// Times are in microseconds, costs per byte of the buffer; capSlope is
	// the least cost per byte the cap allows.
	capSlope := 1 / bestBandwidth(pts, shape, ranks)
	z := make([]point, len(pts))
	for i, p := range pts {
		z[i] = point{bytes: p.bytes, us: max(p.us-float64(p.bytes)*capSlope, 0), w: p.w}
	}
	isotonic(z)
	fitted := func(i int) float64 { return z[i].us + float64(z[i].bytes)*capSlope }

	fits := make([]Fit, len(pts))
	lat := z[0].us
	for i, p := range pts {
		f := Fit{MinBytes: p.bytes}
		if i == 0 {
			f.MinBytes = 0
		}
		y, slope, floor := fitted(i), capSlope, 0.0
		if i+1 < len(pts) {
			f.MaxBytes = pts[i+1].bytes
			slope = (fitted(i+1) - y) / float64(pts[i+1].bytes-p.bytes)
			floor = y - slope*float64(p.bytes)
		}
		lat = min(max(lat, floor), z[i].us)
		if p.bytes > 0 {
			slope = (y - lat) / float64(p.bytes)
		} else {
			lat = y
		}
		fits[i] = shape.at(f.MinBytes).terms(ranks, f, lat, slope)
	}
	return fits
}

// point is a measured size: its time and the weight of that time.
type point struct {
	bytes int64
	us    float64
	w     float64
}

// pool sorts the usable samples by size and pools those of one size into
// their weighted mean.
func pool(samples []Sample) []point {
	var pts []point
	for _, s := range samples {
		if s.Bytes >= 0 && s.TimeUS > 0 && !math.IsInf(s.TimeUS, 0) {
			pts = append(pts, point{bytes: s.Bytes, us: s.TimeUS, w: 1 / (s.TimeUS * s.TimeUS)})
		}
	}
	slices.SortStableFunc(pts, func(a, b point) int { return cmp.Compare(a.bytes, b.bytes) })
	out := pts[:0]
	for _, p := range pts {
		if n := len(out); n > 0 && out[n-1].bytes == p.bytes {
			out[n-1] = merge(out[n-1], p)
			continue
		}
		out = append(out, p)
	}
	return out
}

func merge(a, b point) point {
	w := a.w + b.w
	return point{bytes: a.bytes, us: (a.us*a.w + b.us*b.w) / w, w: w}
}

// isotonic replaces the times of pts (sorted by size) with the
// non-decreasing sequence nearest to them in weighted least squares: pool
// adjacent violators.
func isotonic(pts []point) {
	type block struct {
		point
		n int
	}
	var blocks []block
	for _, p := range pts {
		blocks = append(blocks, block{p, 1})
		for k := len(blocks) - 1; k > 0 && blocks[k-1].us > blocks[k].us; k-- {
			blocks[k-1] = block{merge(blocks[k-1].point, blocks[k].point), blocks[k-1].n + blocks[k].n}
			blocks = blocks[:k]
		}
	}
	i := 0
	for _, b := range blocks {
		for range b.n {
			pts[i].us = b.us
			i++
		}
	}
}

// bestBandwidth is the most bytes of the buffer per microsecond that the
// sweep pts vouches for (FitSamples, step 1).
func bestBandwidth(pts []point, shape Shape, ranks int) float64 {
	average, marginal := 0.0, 0.0
	for i, p := range pts {
		average = max(average, float64(p.bytes)/p.us)
		for _, q := range pts[i+1:] {
			if rise := q.us - p.us; rise >= p.us/2 {
				marginal = max(marginal, float64(q.bytes-p.bytes)/rise)
			}
		}
	}
	if marginal > 0 {
		return max(marginal, average)
	}
	return max(average/latencyOnly, defaultFit.BandwidthGBs*1e3/max(shape.at(0).Factor(ranks), 1e-9))
}

// latencyOnly is the share of the time at the largest size that a sweep
// whose time never grew by half may spend on bytes (FitSamples, step 1).
const latencyOnly = 0.1

// terms converts time = a + b*bytes into the shape's latency per step and
// bandwidth, and puts them into f.
func (sh Shape) terms(n int, f Fit, a, b float64) Fit {
	f.LatencyUS = a / max(sh.Steps(n), 1)
	f.BandwidthGBs = defaultFit.BandwidthGBs // one rank moves nothing
	if b > 0 && sh.Factor(n) > 0 {
		f.BandwidthGBs = sh.Factor(n) / (b * 1e3)
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
// shape of its smallest size, the one it was fitted with (Config.Choose).
func (sh Shape) at(bytes int64) Shape {
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
