package reduce

import (
	"math"
	"math/rand/v2"
	"testing"
)

// refF16ToF64 decodes binary16 from its definition.
func refF16ToF64(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h>>10) & 0x1f
	man := float64(h & 0x3ff)
	switch exp {
	case 0x1f:
		if man != 0 {
			return math.NaN()
		}
		return sign * math.Inf(1)
	case 0:
		return sign * math.Ldexp(man, -24)
	}
	return sign * math.Ldexp(1024+man, exp-25)
}

// refRound rounds f to nearest even on a binary float format with prec
// significand bits (implicit bit included), minimum normal exponent emin
// (value 2^emin) and largest finite value maxFinite, all in float64, which
// holds every float32 and every intermediate exactly. It returns the rounded
// value; ±Inf on overflow.
func refRound(f float64, prec, emin int, maxFinite float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) || f == 0 {
		return f
	}
	a := math.Abs(f)
	_, e := math.Frexp(a) // a = fr * 2^e, fr in [0.5, 1)
	e--                   // a = m * 2^e, m in [1, 2)
	e = max(e, emin)      // subnormals share the quantum of the smallest normals
	quantum := math.Ldexp(1, e-(prec-1))
	r := math.RoundToEven(a/quantum) * quantum
	if r > maxFinite {
		r = math.Inf(1)
	}
	return math.Copysign(r, f)
}

// f16Encode maps every non-NaN binary16 value to its encoding, by inverting
// the exhaustively checked decoder.
var f16Encode = func() map[float32]uint16 {
	m := make(map[float32]uint16, 1<<16)
	for h := range 1 << 16 {
		if f := F16ToF32(uint16(h)); f == f {
			m[f] = uint16(h) // -0 and +0 compare equal as keys; handled below
		}
	}
	return m
}()

func refF32ToF16(f float32) uint16 {
	r := float32(refRound(float64(f), 11, -14, 65504))
	if r == 0 {
		if math.Signbit(float64(r)) {
			return 0x8000
		}
		return 0
	}
	return f16Encode[r]
}

func refF32ToBF16(f float32) uint16 {
	r := float32(refRound(float64(f), 8, -126, (2-1.0/128)*math.Ldexp(1, 127)))
	return uint16(math.Float32bits(r) >> 16) // exact: the low 16 bits are zero
}

func f16IsNaN(h uint16) bool  { return h&0x7c00 == 0x7c00 && h&0x3ff != 0 }
func bf16IsNaN(h uint16) bool { return h&0x7f80 == 0x7f80 && h&0x7f != 0 }

func TestF16ToF32Exhaustive(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		got := F16ToF32(h)
		want := refF16ToF64(h)
		if math.IsNaN(want) {
			if !math.IsNaN(float64(got)) || math.Signbit(float64(got)) != (h&0x8000 != 0) {
				t.Errorf("F16ToF32(%#04x) = %g, want a NaN with the same sign", h, got)
			}
			continue
		}
		if float64(got) != want || math.Signbit(float64(got)) != math.Signbit(want) {
			t.Errorf("F16ToF32(%#04x) = %g, want %g", h, got, want)
		}
	}
}

func TestF16RoundTripExhaustive(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		got := F32ToF16(F16ToF32(h))
		if f16IsNaN(h) {
			if !f16IsNaN(got) || got&0x8000 != h&0x8000 {
				t.Errorf("F32ToF16(F16ToF32(%#04x)) = %#04x, want a NaN with the same sign", h, got)
			}
		} else if got != h {
			t.Errorf("F32ToF16(F16ToF32(%#04x)) = %#04x", h, got)
		}
	}
}

func TestBF16RoundTripExhaustive(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		f := BF16ToF32(h)
		if math.Float32bits(f) != uint32(h)<<16 {
			t.Fatalf("BF16ToF32(%#04x) = %#08x", h, math.Float32bits(f))
		}
		got := F32ToBF16(f)
		if bf16IsNaN(h) {
			if !bf16IsNaN(got) || got&0x8000 != h&0x8000 {
				t.Errorf("F32ToBF16(BF16ToF32(%#04x)) = %#04x, want a NaN with the same sign", h, got)
			}
		} else if got != h {
			t.Errorf("F32ToBF16(BF16ToF32(%#04x)) = %#04x", h, got)
		}
	}
}

// narrowingCases returns float32 values that exercise rounding: random bit
// patterns of every class, the neighbours and midpoints of every value of the
// 16-bit format (decode gives the values, step the midpoints' spacing), the
// overflow threshold and the smallest subnormals.
func narrowingCases(decode func(uint16) float32) []float32 {
	r := rand.New(rand.NewPCG(1, 2))
	var cs []float32
	for range 1 << 18 {
		cs = append(cs, math.Float32frombits(r.Uint32()))
	}
	for range 1 << 16 { // values in and near the 16-bit formats' ranges
		cs = append(cs, float32(r.NormFloat64()*math.Ldexp(1, r.IntN(60)-40)))
	}
	for i := range 1<<15 - 1 {
		lo, hi := decode(uint16(i)), decode(uint16(i+1))
		if lo != lo || hi != hi || math.IsInf(float64(hi), 0) {
			continue
		}
		mid := float32((float64(lo) + float64(hi)) / 2) // exact in float32
		for _, v := range []float32{lo, mid, hi} {
			for _, w := range []float32{v, math.Nextafter32(v, -1), math.Nextafter32(v, 1)} {
				cs = append(cs, w, -w)
			}
		}
	}
	inf := float32(math.Inf(1))
	cs = append(cs, 0, float32(math.Copysign(0, -1)), inf, -inf, float32(math.NaN()),
		65504, 65519, 65519.996, 65520, 65536, 1e10, math.MaxFloat32,
		ldexp32(1, -24), ldexp32(1, -25), math.Nextafter32(ldexp32(1, -25), 1),
		ldexp32(3, -26), ldexp32(1, -14), math.Nextafter32(ldexp32(1, -14), 0),
		math.SmallestNonzeroFloat32, ldexp32(1, -126), ldexp32(1, -133), ldexp32(1, -134),
		ldexp32(3, -135), math.Float32frombits(0x7f7f8000), math.Float32frombits(0x7f7f7fff))
	return cs
}

func TestF32ToF16Rounding(t *testing.T) {
	testNarrowing(t, "F32ToF16", F32ToF16, F16ToF32, refF32ToF16, f16IsNaN)
}

func TestF32ToBF16Rounding(t *testing.T) {
	testNarrowing(t, "F32ToBF16", F32ToBF16, BF16ToF32, refF32ToBF16, bf16IsNaN)
}

// testNarrowing checks narrow, named name, against the reference ref on
// narrowingCases(widen): NaNs stay NaNs, everything else rounds as ref does.
func testNarrowing(t *testing.T, name string, narrow func(float32) uint16, widen func(uint16) float32,
	ref func(float32) uint16, isNaN func(uint16) bool) {
	bad := 0
	for _, f := range narrowingCases(widen) {
		got := narrow(f)
		if f != f {
			if !isNaN(got) {
				t.Errorf("%s(NaN %#08x) = %#04x, not a NaN", name, math.Float32bits(f), got)
			}
			continue
		}
		if want := ref(f); got != want {
			t.Errorf("%s(%g = %#08x) = %#04x, want %#04x", name, f, math.Float32bits(f), got, want)
			if bad++; bad > 10 {
				t.Fatal("too many errors")
			}
		}
	}
}

// TestNaNsStayNaN narrows every float32 NaN pattern class, including
// signalling NaNs whose payload lives only in bits that are dropped.
func TestNaNsStayNaN(t *testing.T) {
	for _, b := range []uint32{0x7f800001, 0xff800001, 0x7fc00000, 0x7fffffff, 0xffffffff, 0x7f801fff, 0x7f80ffff, 0xff80ffff} {
		f := math.Float32frombits(b)
		if h := F32ToF16(f); !f16IsNaN(h) || h&0x8000 != uint16(b>>16)&0x8000 {
			t.Errorf("F32ToF16(%#08x) = %#04x", b, h)
		}
		if h := F32ToBF16(f); !bf16IsNaN(h) || h&0x8000 != uint16(b>>16)&0x8000 {
			t.Errorf("F32ToBF16(%#08x) = %#04x", b, h)
		}
	}
}

// TestHalfKernelsRound runs 16-bit Reduce on values whose float32 result is
// not representable and compares with rounding the float64 result, which
// also tests the vector conversions (F16C, AVX2) and not just the scalar ones.
func TestHalfKernelsRound(t *testing.T) {
	eachImpl(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(5, 5))
		const n = 4099
		for _, dt := range []DType{Float16, BFloat16} {
			dec, ref := F16ToF32, refF32ToF16
			if dt == BFloat16 {
				dec, ref = BF16ToF32, refF32ToBF16
			}
			a, b := make([]uint16, n), make([]uint16, n)
			randElems(r, dt, Bytes(a))
			randElems(r, dt, Bytes(b))
			for _, op := range []Op{Sum, Prod} {
				dst := make([]uint16, n)
				ReduceTo(dt, op, Bytes(dst), Bytes(a), Bytes(b))
				for i := range dst {
					x, y := dec(a[i]), dec(b[i])
					var w float32
					if op == Sum {
						w = x + y
					} else {
						w = x * y
					}
					if w != w {
						continue
					}
					if want := ref(w); dst[i] != want {
						t.Errorf("%v %v %g, %g: got %#04x, want %#04x", dt, op, x, y, dst[i], want)
					}
				}
			}
		}
	})
}

func ldexp32(m float64, e int) float32 { return float32(math.Ldexp(m, e)) }
