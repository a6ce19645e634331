package metrics

import (
	"math"
	"math/bits"
	"time"
)

// subBuckets per power of two: quantiles are good to about 2^(1/4) = 19%,
// with a fixed 256-bucket footprint covering 1 ns to hours.
const (
	subBits    = 2
	subBuckets = 1 << subBits
	numBuckets = 64 * subBuckets
)

// Histogram counts durations in logarithmic buckets. Its size is fixed, so
// it can stay on for a job's whole life. The zero value is empty and ready.
// Not safe for concurrent use; Registry serializes access.
type Histogram struct {
	counts [numBuckets]uint64
	n      uint64
	sum    time.Duration
	max    time.Duration
}

// bucket maps a duration in nanoseconds to its bucket: the position of the
// top bit, then the next subBits bits below it.
func bucket(ns uint64) int {
	if ns < subBuckets {
		return int(ns)
	}
	top := bits.Len64(ns) - 1
	sub := (ns >> (top - subBits)) & (subBuckets - 1)
	return (top-subBits+1)*subBuckets + int(sub)
}

// lower is the smallest duration in bucket b, upper the first above it.
func lower(b int) float64 {
	if b < subBuckets {
		return float64(b)
	}
	top := b/subBuckets + subBits - 1
	sub := b % subBuckets
	return math.Ldexp(float64(subBuckets+sub), top-subBits)
}

// Add records one duration.
func (h *Histogram) Add(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucket(uint64(d))]++
	h.n++
	h.sum += d
	h.max = max(h.max, d)
}

// Count is the number of durations recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Sum is their total.
func (h *Histogram) Sum() time.Duration { return h.sum }

// Max is the largest.
func (h *Histogram) Max() time.Duration { return h.max }

// Quantile returns the q-quantile (0 <= q <= 1), interpolated inside its
// bucket and never above Max; 0 when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := q * float64(h.n)
	var seen float64
	for b, c := range h.counts {
		if c == 0 {
			continue
		}
		if seen+float64(c) >= rank {
			lo, hi := lower(b), lower(b+1)
			v := lo + (hi-lo)*(rank-seen)/float64(c)
			return min(time.Duration(v), h.max)
		}
		seen += float64(c)
	}
	return h.max
}
