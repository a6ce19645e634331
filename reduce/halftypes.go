package reduce

import (
	"math"
	"strconv"
)

// F16 is an IEEE 754 binary16 (half precision) number held as its bits: the
// Go element type of Float16 data. Make one with ToF16; read it with
// Float32, which is exact. Comparing F16 values with == compares bits (a
// NaN equals itself, and 0 differs from -0).
type F16 uint16

// BF16 is a bfloat16 number (the upper half of a float32) held as its
// bits: the Go element type of BFloat16 data. Make one with ToBF16; read it
// with Float32, which is exact.
type BF16 uint16

// ToF16 rounds f to the nearest F16, ties to even. Values whose magnitude
// rounds beyond 65504 become infinities; results below 2^-14 in magnitude
// are subnormal or zero; a NaN becomes a quiet NaN of the same sign.
func ToF16(f float32) F16 { return F16(F32ToF16(f)) }

// Float32 is h as a float32 (every F16 is one exactly).
func (h F16) Float32() float32 { return F16ToF32(uint16(h)) }

// String is the shortest decimal that rounds back to h, such as "0.1",
// "65500" (for 65504) or "-Inf".
func (h F16) String() string {
	return shortest(h.Float32(), func(f float32) bool { return ToF16(f) == h })
}

// ToBF16 rounds f to the nearest BF16, ties to even. Values whose magnitude
// rounds beyond the largest bfloat16 (about 3.39e38) become infinities; a
// NaN stays a NaN of the same sign.
func ToBF16(f float32) BF16 { return BF16(F32ToBF16(f)) }

// Float32 is h as a float32 (every BF16 is one exactly).
func (h BF16) Float32() float32 { return BF16ToF32(uint16(h)) }

// String is the shortest decimal that rounds back to h, such as "0.1" or
// "-Inf".
func (h BF16) String() string {
	return shortest(h.Float32(), func(f float32) bool { return ToBF16(f) == h })
}

// shortest formats v with the fewest significant digits that read back as
// the same 16-bit value (same reports that), as strconv does for float32
// and numpy for float16: the largest F16, 65504, prints as 65500.
func shortest(v float32, same func(float32) bool) string {
	if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
		return strconv.FormatFloat(float64(v), 'g', -1, 32)
	}
	for digits := 1; digits < 9; digits++ {
		s := strconv.FormatFloat(float64(v), 'g', digits, 32)
		if f, err := strconv.ParseFloat(s, 64); err == nil && same(float32(f)) {
			return strconv.FormatFloat(f, 'g', -1, 64) // 65500, not 6.55e+04
		}
	}
	return strconv.FormatFloat(float64(v), 'g', -1, 32)
}
