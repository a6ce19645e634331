package verify

import (
	"bytes"
	"math"

	"github.com/collkit/collkit/reduce"
)

// Value is the input element i of rank for a given seed and op: an integer in
// [0, 15], or 1 or 2 for Prod.
func Value(seed uint64, rank, i int, op reduce.Op) int64 {
	x := mix(seed ^ uint64(rank)*0x9E3779B97F4A7C15 ^ uint64(i)*0xD1B54A32D192ED03)
	if op == reduce.Prod {
		if x%4 == 0 {
			return 2
		}
		return 1
	}
	return int64(x % 16)
}

// mix is splitmix64's finalizer: cheap and well spread.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 27
	x *= 0x94D049BB133111EB
	return x ^ x>>31
}

// Fill writes rank's seeded input into buf, len(buf)/dt.Size() elements.
func Fill(dt reduce.DType, op reduce.Op, buf []byte, seed uint64, rank int) {
	FillFrom(dt, op, buf, seed, rank, 0)
}

// FillFrom is Fill of a block of a longer input: it writes elements first,
// first+1, ... of rank's seeded input into buf.
func FillFrom(dt reduce.DType, op reduce.Op, buf []byte, seed uint64, rank, first int) {
	encode(dt, buf, func(i int) (float64, int64) {
		v := Value(seed, rank, first+i, op)
		return float64(v), v
	})
}

// Expect writes into buf the exact all-reduce of the inputs that Fill gives
// ranks 0..n-1.
func Expect(dt reduce.DType, op reduce.Op, buf []byte, seed uint64, n int) {
	ExpectFrom(dt, op, buf, seed, n, 0)
}

// ExpectFrom is Expect of a block of a longer result: it writes elements
// first, first+1, ... of the all-reduce into buf.
func ExpectFrom(dt reduce.DType, op reduce.Op, buf []byte, seed uint64, n, first int) {
	isFloat := dt == reduce.Float32 || dt == reduce.Float64 || dt == reduce.Float16 || dt == reduce.BFloat16
	encode(dt, buf, func(i int) (float64, int64) {
		i += first
		f := float64(Value(seed, 0, i, op))
		v := Value(seed, 0, i, op)
		for r := 1; r < n; r++ {
			x := Value(seed, r, i, op)
			switch op {
			case reduce.Sum, reduce.Avg:
				f += float64(x)
				v += x
			case reduce.Prod:
				f *= float64(x)
				v *= x
			case reduce.Min:
				f, v = min(f, float64(x)), min(v, x)
			case reduce.Max:
				f, v = max(f, float64(x)), max(v, x)
			}
		}
		if op == reduce.Avg {
			if isFloat {
				f /= float64(n)
			} else {
				v = wrap(dt, v) / int64(n)
			}
		}
		return f, v
	})
}

// encode writes element i of buf, for every whole element, from elem(i):
// floats from f (rounded to nearest even), integers from v (wrapped). It
// builds the bytes in a block on the stack and copies each block out: the
// race detector checks a copy once but every byte stored into buf on its
// own, and storing byte by byte was a fifth of the race-enabled algorithm
// tables' CPU time.
func encode(dt reduce.DType, buf []byte, elem func(i int) (f float64, v int64)) {
	es := dt.Size()
	n := len(buf) / es
	var block [4096]byte
	for start := 0; start < n; {
		m := min(n-start, len(block)/es)
		for j := range m {
			f, v := elem(start + j)
			x := bits(dt, f, v)
			for k := range es {
				block[j*es+k] = byte(x >> (8 * k))
			}
		}
		copy(buf[start*es:], block[:m*es])
		start += m
	}
}

// wrap reduces v to dt's width, as the wrapping integer arithmetic of the
// kernels does.
func wrap(dt reduce.DType, v int64) int64 {
	switch dt {
	case reduce.Int32:
		return int64(int32(v))
	case reduce.Uint8:
		return int64(uint8(v))
	}
	return v
}

// bits is one element of dt, little-endian in the low dt.Size() bytes.
func bits(dt reduce.DType, f float64, v int64) uint64 {
	switch dt {
	case reduce.Float32:
		return uint64(math.Float32bits(float32(f)))
	case reduce.Float64:
		return math.Float64bits(f)
	case reduce.Float16:
		return uint64(reduce.F32ToF16(float32(f)))
	case reduce.BFloat16:
		return uint64(reduce.F32ToBF16(float32(f)))
	case reduce.Int32:
		return uint64(uint32(int32(v)))
	case reduce.Int64:
		return uint64(v)
	case reduce.Uint8:
		return uint64(uint8(v))
	}
	return 0
}

// Wrong counts the elements of got that differ bit for bit from want.
func Wrong(dt reduce.DType, got, want []byte) int {
	if bytes.Equal(got, want) {
		return 0
	}
	es := dt.Size()
	if len(got) != len(want) {
		return max(len(got), len(want)) / es
	}
	wrong := 0
	for i := 0; i+es <= len(got); i += es {
		if !bytes.Equal(got[i:i+es], want[i:i+es]) {
			wrong++
		}
	}
	return wrong
}

// WrongFill counts the elements of got that differ from rank's input as
// Fill writes it, got starting at element first. It needs no buffer of
// got's size: the expected values are made a few KiB at a time.
func WrongFill(dt reduce.DType, op reduce.Op, got []byte, seed uint64, rank, first int) int {
	return wrongAgainst(dt, got, first, func(want []byte, at int) { FillFrom(dt, op, want, seed, rank, at) })
}

// WrongExpect counts the elements of got that differ from the all-reduce
// of n ranks' inputs as Expect writes it, got starting at element first.
// It needs no buffer of got's size.
func WrongExpect(dt reduce.DType, op reduce.Op, got []byte, seed uint64, n, first int) int {
	return wrongAgainst(dt, got, first, func(want []byte, at int) { ExpectFrom(dt, op, want, seed, n, at) })
}

// wrongAgainst compares got, from element first on, with what make writes,
// chunk by chunk.
func wrongAgainst(dt reduce.DType, got []byte, first int, make func(want []byte, at int)) int {
	es := dt.Size()
	var chunk [4096]byte
	n := len(chunk) / es * es
	wrong := 0
	for off := 0; off < len(got); off += n {
		g := got[off:min(off+n, len(got))]
		want := chunk[:len(g)]
		make(want, first+off/es)
		wrong += Wrong(dt, g, want)
	}
	return wrong
}
