package reduce

import (
	"math"
	"testing"
)

func TestHalfF16Conversions(t *testing.T) {
	cases := []struct {
		name string
		f    float32
		want F16
	}{
		{"one", 1, 0x3c00},
		{"minus two", -2, 0xc000},
		{"zero", 0, 0x0000},
		{"minus zero", float32(math.Copysign(0, -1)), 0x8000},
		{"largest finite", 65504, 0x7bff},
		{"just below the tie to infinity", 65519.996, 0x7bff},
		{"tie to infinity (even)", 65520, 0x7c00},
		{"infinity", float32(math.Inf(1)), 0x7c00},
		{"minus infinity", float32(math.Inf(-1)), 0xfc00},
		{"smallest normal", ldexp32(1, -14), 0x0400},
		{"largest subnormal", ldexp32(1023, -24), 0x03ff},
		{"smallest subnormal", ldexp32(1, -24), 0x0001},
		{"tie between 0 and the smallest subnormal (even: 0)", ldexp32(1, -25), 0x0000},
		{"just above that tie", ldexp32(1.0001, -25), 0x0001},
		{"tie between subnormals 1 and 2 (even: 2)", ldexp32(3, -25), 0x0002},
		{"tie between subnormals 2 and 3 (even: 2)", ldexp32(5, -25), 0x0002},
		{"tie below 1 + 2^-10 (even: 1)", 1 + ldexp32(1, -11), 0x3c00},
		{"tie above 1 + 2^-10 (even: 1 + 2^-9)", 1 + ldexp32(3, -11), 0x3c02},
		{"tie at -(1 + 2^-11) (even: -1)", -(1 + ldexp32(1, -11)), 0xbc00},
		{"subnormal rounding up to the smallest normal", ldexp32(1023.5, -24), 0x0400},
	}
	for _, c := range cases {
		if got := ToF16(c.f); got != c.want {
			t.Errorf("%s: ToF16(%g) = %#04x, want %#04x", c.name, c.f, uint16(got), uint16(c.want))
		}
	}
	for h, want := range map[F16]float32{0x0001: ldexp32(1, -24), 0x03ff: ldexp32(1023, -24), 0x3c01: 1 + ldexp32(1, -10),
		0x7bff: 65504, 0xfc00: float32(math.Inf(-1)), 0x8000: float32(math.Copysign(0, -1))} {
		if got := h.Float32(); got != want || math.Signbit(float64(got)) != math.Signbit(float64(want)) {
			t.Errorf("F16(%#04x).Float32() = %g, want %g", uint16(h), got, want)
		}
	}
	if f := ToF16(float32(math.NaN())).Float32(); !math.IsNaN(float64(f)) {
		t.Errorf("NaN came back as %g", f)
	}
	if f := F16(0xfe01).Float32(); !math.IsNaN(float64(f)) || !math.Signbit(float64(f)) {
		t.Errorf("F16(0xfe01) = %g, want a negative NaN", f)
	}
	// Every F16 survives the trip through float32, NaNs as NaNs.
	for b := range 1 << 16 {
		h := F16(b)
		back := ToF16(h.Float32())
		if nan := b&0x7c00 == 0x7c00 && b&0x3ff != 0; nan {
			if back&0x7c00 != 0x7c00 || back&0x3ff == 0 || back&0x8000 != h&0x8000 {
				t.Fatalf("NaN %#04x came back as %#04x", b, uint16(back))
			}
		} else if back != h {
			t.Fatalf("%#04x came back as %#04x", b, uint16(back))
		}
	}
}

func TestHalfBF16Conversions(t *testing.T) {
	cases := []struct {
		name string
		f    float32
		want BF16
	}{
		{"one", 1, 0x3f80},
		{"minus two", -2, 0xc000},
		{"minus zero", float32(math.Copysign(0, -1)), 0x8000},
		{"largest finite", math.Float32frombits(0x7f7f0000), 0x7f7f},
		{"largest float32 (rounds to infinity)", math.MaxFloat32, 0x7f80},
		{"infinity", float32(math.Inf(1)), 0x7f80},
		{"minus infinity", float32(math.Inf(-1)), 0xff80},
		{"smallest normal", ldexp32(1, -126), 0x0080},
		{"smallest subnormal", ldexp32(1, -133), 0x0001},
		{"tie between 0 and the smallest subnormal (even: 0)", ldexp32(1, -134), 0x0000},
		{"tie between subnormals 1 and 2 (even: 2)", ldexp32(3, -134), 0x0002},
		{"tie below 1 + 2^-7 (even: 1)", 1 + ldexp32(1, -8), 0x3f80},
		{"tie above 1 + 2^-7 (even: 1 + 2^-6)", 1 + ldexp32(3, -8), 0x3f82},
		{"just above a tie", 1 + ldexp32(1, -8) + ldexp32(1, -20), 0x3f81},
	}
	for _, c := range cases {
		if got := ToBF16(c.f); got != c.want {
			t.Errorf("%s: ToBF16(%g) = %#04x, want %#04x", c.name, c.f, uint16(got), uint16(c.want))
		}
	}
	if f := ToBF16(float32(math.NaN())).Float32(); !math.IsNaN(float64(f)) {
		t.Errorf("NaN came back as %g", f)
	}
	// A NaN whose payload is all in the low half must not become infinity.
	if f := ToBF16(math.Float32frombits(0x7f800001)).Float32(); !math.IsNaN(float64(f)) {
		t.Errorf("NaN 0x7f800001 came back as %g", f)
	}
	for b := range 1 << 16 {
		h := BF16(b)
		back := ToBF16(h.Float32())
		if nan := b&0x7f80 == 0x7f80 && b&0x7f != 0; nan {
			if !math.IsNaN(float64(back.Float32())) {
				t.Fatalf("NaN %#04x came back as %#04x", b, uint16(back))
			}
		} else if back != h {
			t.Fatalf("%#04x came back as %#04x", b, uint16(back))
		}
	}
}

func TestHalfString(t *testing.T) {
	for h, want := range map[F16]string{ToF16(0.1): "0.1", ToF16(-2.5): "-2.5", ToF16(65504): "65500", ToF16(2048): "2048",
		0x0001: "6e-08", 0x7c00: "+Inf", 0xfc00: "-Inf", 0x7e00: "NaN", 0x8000: "-0"} {
		if got := h.String(); got != want {
			t.Errorf("F16(%#04x).String() = %q, want %q", uint16(h), got, want)
		}
	}
	for h, want := range map[BF16]string{ToBF16(0.1): "0.1", ToBF16(3.14159): "3.14", ToBF16(-1e30): "-1e+30", 0x7f80: "+Inf"} {
		if got := h.String(); got != want {
			t.Errorf("BF16(%#04x).String() = %q, want %q", uint16(h), got, want)
		}
	}
}
