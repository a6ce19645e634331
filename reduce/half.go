package reduce

import "math"

// The conversions split off the common case, a normal number that stays
// normal, into small functions that the compiler inlines into the loops of
// apply16: integer arithmetic and one well-predicted branch. Zeros,
// subnormals, infinities and NaNs take the slow path.

// F16ToF32 widens an IEEE 754 binary16 value.
func F16ToF32(h uint16) float32 {
	if f, ok := f16ToF32Normal(h); ok {
		return f
	}
	return f16ToF32Special(h)
}

// f16ToF32Normal widens h and reports whether it is normal (exponent 1..30):
// rebias the exponent by 127-15; otherwise the result is meaningless.
func f16ToF32Normal(h uint16) (float32, bool) {
	u := uint32(h)
	return math.Float32frombits((u&0x8000)<<16 | (u&0x7fff)<<13 + 112<<23), u&0x7c00-0x400 < 0x7800
}

// f16ToF32Special widens zeros, subnormals, infinities and NaNs. It is kept
// out of line so that the loops that inline f16ToF32Normal stay small.
//
//go:noinline
func f16ToF32Special(h uint16) float32 {
	sign := uint32(h>>15) << 31
	man := uint32(h) & 0x3ff
	if h&0x7c00 == 0x7c00 { // inf or nan
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	}
	// zero or subnormal: value = man * 2^-24, exact in float32
	f := float32(man) * (1.0 / (1 << 24))
	if sign != 0 {
		f = -f
	}
	return f
}

// F32ToF16 narrows to binary16 with round-to-nearest-even.
func F32ToF16(f float32) uint16 {
	if h, ok := f32ToF16Normal(f); ok {
		return h
	}
	return f32ToF16Special(f)
}

// f32ToF16Normal narrows f and reports whether 2^-14 <= |f| < 2^16, where the
// result is a normal binary16 or, rounding up past 65504, infinity: adding
// 0xfff plus the lowest kept bit rounds to nearest even, and the carry runs
// into the exponent. Otherwise the result is meaningless.
func f32ToF16Normal(f float32) (uint16, bool) {
	b := math.Float32bits(f)
	abs := b & 0x7fffffff
	r := abs + 0xfff + (abs>>13)&1
	return uint16(b>>16)&0x8000 | uint16(r>>13-112<<10), abs-0x38800000 < 0x47800000-0x38800000
}

// f32ToF16Special narrows what f32ToF16Normal does not handle: results that
// are zero or subnormal, values of at least 2^16 (infinity) and NaNs.
// It is kept out of line like f16ToF32Special.
//
//go:noinline
func f32ToF16Special(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff { // inf or nan
		if man != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign
		}
		man |= 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		rest := man & (1<<shift - 1)
		r := man >> shift
		if rest > half || (rest == half && r&1 == 1) {
			r++ // may carry into the smallest normal, which is still correct
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | man>>13
	rest := man & 0x1fff
	if rest > 0x1000 || (rest == 0x1000 && r&1 == 1) {
		r++ // may carry into the exponent, which is still correct (up to inf)
	}
	return sign | uint16(r)
}

// BF16ToF32 widens a bfloat16 value.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 narrows to bfloat16 with round-to-nearest-even.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // nan: keep it quiet
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}
