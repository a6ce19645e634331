package reduce

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// testLengths are element counts around the 32-byte blocks and the 128-byte
// unrolled loop of the vector kernels, for every element size.
var testLengths = []int{0, 1, 2, 3, 7, 15, 16, 17, 31, 33, 63, 64, 65, 1000, 4099}

// eachImpl runs f with the vector kernels (when this CPU has them) and with
// the generic Go code alone.
func eachImpl(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	if asmImpl != "" {
		t.Run(asmImpl, f)
	}
	t.Run("generic", func(t *testing.T) {
		defer func(old bool) { useAsm = old }(useAsm)
		useAsm = false
		f(t)
	})
}

// refElem applies op to one element of each of x and y, little endian, the
// slow and obvious way: no unsafe views, no vector code, no shared helpers
// except the scalar half conversions, which half_test.go checks against
// float64 references.
func refElem(dt DType, op Op, x, y []byte) []byte {
	if op == Avg {
		op = Sum
	}
	le := binary.LittleEndian
	out := make([]byte, dt.Size())
	f32 := func(a, b float32) float32 {
		switch op {
		case Sum:
			return a + b
		case Prod:
			return a * b
		case Min:
			return min(a, b)
		}
		return max(a, b)
	}
	switch dt {
	case Float32:
		le.PutUint32(out, math.Float32bits(f32(math.Float32frombits(le.Uint32(x)), math.Float32frombits(le.Uint32(y)))))
	case Float64:
		a, b := math.Float64frombits(le.Uint64(x)), math.Float64frombits(le.Uint64(y))
		var r float64
		switch op {
		case Sum:
			r = a + b
		case Prod:
			r = a * b
		case Min:
			r = min(a, b)
		case Max:
			r = max(a, b)
		}
		le.PutUint64(out, math.Float64bits(r))
	case Int32, Int64, Uint8:
		var a, b int64 // exact products of two int32s or uint8s, wrapped below
		switch dt {
		case Int32:
			a, b = int64(int32(le.Uint32(x))), int64(int32(le.Uint32(y)))
		case Int64:
			a, b = int64(le.Uint64(x)), int64(le.Uint64(y))
		case Uint8:
			a, b = int64(x[0]), int64(y[0])
		}
		var r int64
		switch op {
		case Sum:
			r = a + b
		case Prod:
			r = a * b
		case Min:
			r = min(a, b)
		case Max:
			r = max(a, b)
		}
		switch dt {
		case Int32:
			le.PutUint32(out, uint32(r))
		case Int64:
			le.PutUint64(out, uint64(r))
		case Uint8:
			out[0] = uint8(r)
		}
	case Float16:
		le.PutUint16(out, F32ToF16(f32(F16ToF32(le.Uint16(x)), F16ToF32(le.Uint16(y)))))
	case BFloat16:
		le.PutUint16(out, F32ToBF16(f32(BF16ToF32(le.Uint16(x)), BF16ToF32(le.Uint16(y)))))
	}
	return out
}

// isNaN reports whether the element e of type dt is a NaN.
func isNaN(dt DType, e []byte) bool {
	le := binary.LittleEndian
	switch dt {
	case Float32:
		return math.IsNaN(float64(math.Float32frombits(le.Uint32(e))))
	case Float64:
		return math.IsNaN(math.Float64frombits(le.Uint64(e)))
	case Float16:
		return le.Uint16(e)&0x7c00 == 0x7c00 && le.Uint16(e)&0x3ff != 0
	case BFloat16:
		return le.Uint16(e)&0x7f80 == 0x7f80 && le.Uint16(e)&0x7f != 0
	}
	return false
}

// sameElem compares elements bit for bit, except that any NaN equals any NaN:
// which NaN comes out of an operation on two NaNs is not specified (x86 and Go
// both pick an operand, and the Go compiler may swap commutative operands).
func sameElem(dt DType, got, want []byte) bool {
	if string(got) == string(want) {
		return true
	}
	return isNaN(dt, got) && isNaN(dt, want)
}

// checkElems fails t at the first few elements where got differs from want.
func checkElems(t *testing.T, dt DType, what string, got, want, a, b []byte) {
	t.Helper()
	size := dt.Size()
	bad := 0
	for i := 0; i < len(want); i += size {
		if !sameElem(dt, got[i:i+size], want[i:i+size]) {
			if bad++; bad <= 3 {
				t.Errorf("%s: element %d: got %s, want %s (inputs %s, %s)", what, i/size,
					fmtElem(dt, got[i:i+size]), fmtElem(dt, want[i:i+size]), fmtElem(dt, a[i:i+size]), fmtElem(dt, b[i:i+size]))
			}
		}
	}
	if bad > 3 {
		t.Errorf("%s: %d bad elements in all", what, bad)
	}
}

func fmtElem(dt DType, e []byte) string {
	le := binary.LittleEndian
	switch dt {
	case Float32:
		return fmt.Sprintf("%g(%#08x)", math.Float32frombits(le.Uint32(e)), le.Uint32(e))
	case Float64:
		return fmt.Sprintf("%g(%#016x)", math.Float64frombits(le.Uint64(e)), le.Uint64(e))
	case Int32:
		return fmt.Sprint(int32(le.Uint32(e)))
	case Int64:
		return fmt.Sprint(int64(le.Uint64(e)))
	case Uint8:
		return fmt.Sprint(e[0])
	case Float16:
		return fmt.Sprintf("%g(%#04x)", F16ToF32(le.Uint16(e)), le.Uint16(e))
	case BFloat16:
		return fmt.Sprintf("%g(%#04x)", BF16ToF32(le.Uint16(e)), le.Uint16(e))
	}
	return fmt.Sprintf("% x", e)
}

// randElems fills b with random elements of type dt, a quarter of them drawn
// from the special values that the vector kernels must get right: signed
// zeros, infinities, NaNs, subnormals, extremes and ties.
func randElems(r *rand.Rand, dt DType, b []byte) {
	le := binary.LittleEndian
	size := dt.Size()
	for i := 0; i < len(b); i += size {
		e := b[i : i+size]
		special := r.IntN(4) == 0
		switch dt {
		case Float32:
			v := float32(r.NormFloat64() * 100)
			if special {
				v = []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)),
					float32(math.NaN()), -float32(math.NaN()), math.SmallestNonzeroFloat32, -1e-40,
					math.MaxFloat32, -math.MaxFloat32, 1, -1, 3}[r.IntN(13)]
			}
			le.PutUint32(e, math.Float32bits(v))
		case Float64:
			v := r.NormFloat64() * 100
			if special {
				v = []float64{0, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), math.NaN(), -math.NaN(),
					math.SmallestNonzeroFloat64, -1e-310, math.MaxFloat64, -math.MaxFloat64, 1, -1, 3}[r.IntN(13)]
			}
			le.PutUint64(e, math.Float64bits(v))
		case Int32:
			v := r.Uint32()
			if special {
				v = []uint32{0, 1, 0xffffffff, 0x7fffffff, 0x80000000, 0x10000}[r.IntN(6)]
			}
			le.PutUint32(e, v)
		case Int64:
			v := r.Uint64()
			if special {
				v = []uint64{0, 1, 1<<64 - 1, 1<<63 - 1, 1 << 63, 1 << 32, 0xffffffff}[r.IntN(7)]
			}
			le.PutUint64(e, v)
		case Uint8:
			e[0] = uint8(r.Uint32())
			if special {
				e[0] = []uint8{0, 1, 255, 128, 16}[r.IntN(5)]
			}
		case Float16, BFloat16:
			// Random bits cover every class; ordinary values get exponents
			// near 0 so that sums and products round instead of overflowing.
			v := uint16(r.Uint32())
			if !special {
				if dt == Float16 {
					v = v&0x83ff | uint16(10+r.IntN(10))<<10
				} else {
					v = v&0x807f | uint16(120+r.IntN(15))<<7
				}
			}
			le.PutUint16(e, v)
		}
	}
}

const guard = 64 // bytes checked on each side of dst for stray writes

// guarded returns an n-byte slice at offset off (a multiple of the element
// size, so not 32-byte aligned when it is odd) inside a buffer whose other
// bytes hold a known pattern, and a function that checks the pattern.
func guarded(n, off int) ([]byte, func(t *testing.T)) {
	buf := make([]byte, guard+off+n+guard)
	for i := range buf {
		buf[i] = byte(0xa5 ^ i)
	}
	s := buf[guard+off : guard+off+n : guard+off+n]
	return s, func(t *testing.T) {
		t.Helper()
		for i := range buf {
			if i >= guard+off && i < guard+off+n {
				continue
			}
			if buf[i] != byte(0xa5^i) {
				t.Fatalf("byte %d outside dst [%d, %d) was overwritten", i, guard+off, guard+off+n)
			}
		}
	}
}

func TestReduce(t *testing.T) {
	eachImpl(t, func(t *testing.T) {
		for _, dt := range DTypes {
			for _, op := range Ops {
				t.Run(fmt.Sprintf("%v/%v", dt, op), func(t *testing.T) {
					testReduce(t, dt, op)
				})
			}
		}
	})
}

func testReduce(t *testing.T, dt DType, op Op) {
	size := dt.Size()
	r := rand.New(rand.NewPCG(uint64(dt), uint64(op)))
	for _, n := range testLengths {
		off := (n % 3) * size // aligned and unaligned buffers
		nb := n * size
		a, b := make([]byte, nb), make([]byte, nb)
		randElems(r, dt, a)
		randElems(r, dt, b)
		want := make([]byte, nb)
		for i := 0; i < nb; i += size {
			copy(want[i:], refElem(dt, op, a[i:i+size], b[i:i+size]))
		}
		// The four ways to call: Reduce, and ReduceTo into a fresh buffer,
		// into a and into b.
		for _, mode := range []string{"Reduce", "ReduceTo", "ReduceTo dst=a", "ReduceTo dst=b"} {
			dst, check := guarded(nb, off)
			x, y := make([]byte, nb), make([]byte, nb)
			copy(x, a)
			copy(y, b)
			switch mode {
			case "Reduce":
				copy(dst, a)
				Reduce(dt, op, dst, y)
			case "ReduceTo":
				ReduceTo(dt, op, dst, x, y)
			case "ReduceTo dst=a":
				copy(dst, a)
				ReduceTo(dt, op, dst, dst, y)
			case "ReduceTo dst=b":
				copy(dst, b)
				ReduceTo(dt, op, dst, x, dst)
			}
			what := fmt.Sprintf("%s n=%d", mode, n)
			checkElems(t, dt, what, dst, want, a, b)
			check(t)
			if mode != "ReduceTo dst=b" && string(y) != string(b) {
				t.Errorf("%s: source b was modified", what)
			}
			if mode == "ReduceTo" && string(x) != string(a) {
				t.Errorf("%s: source a was modified", what)
			}
		}
	}
}

// TestAsmMatchesGeneric compares the vector kernels with the generic Go code
// directly, on large random buffers at every unaligned offset.
func TestAsmMatchesGeneric(t *testing.T) {
	if asmImpl == "" || !useAsm {
		t.Skip("no vector kernels on this CPU or build")
	}
	for _, dt := range DTypes {
		size := dt.Size()
		r := rand.New(rand.NewPCG(uint64(dt), 99))
		for off := 0; off < blockSize; off += size {
			nb := 4099*size - off
			a, b := make([]byte, nb), make([]byte, nb)
			randElems(r, dt, a)
			randElems(r, dt, b)
			fast, slow := make([]byte, nb), make([]byte, nb)
			for _, op := range Ops {
				ReduceTo(dt, op, fast, a, b)
				useAsm = false
				ReduceTo(dt, op, slow, a, b)
				useAsm = true
				checkElems(t, dt, fmt.Sprintf("%v/%v off=%d: asm vs generic", dt, op, off), fast, slow, a, b)
			}
			for _, n := range []int{2, 3, 7, 1 << 20} {
				copy(fast, a)
				copy(slow, a)
				Finish(dt, Avg, fast, n)
				useAsm = false
				Finish(dt, Avg, slow, n)
				useAsm = true
				checkElems(t, dt, fmt.Sprintf("%v Finish n=%d off=%d: asm vs generic", dt, n, off), fast, slow, a, a)
			}
		}
	}
}

// TestKernelsPresent makes sure that the fast paths are actually taken where
// the CPU has them, so that the tests above test them.
func TestKernelsPresent(t *testing.T) {
	if asmImpl == "" {
		t.Skip("no vector kernels on this CPU or build")
	}
	for _, dt := range []DType{Float32, Float64, Int32, Int64, BFloat16, Uint8} {
		for _, op := range []Op{Sum, Min, Max} {
			if binaryKernels[dt][op] == nil {
				t.Errorf("no %s kernel for %v %v", asmImpl, dt, op)
			}
		}
	}
	for _, dt := range []DType{Float32, Float64, BFloat16} {
		if divKernels[dt] == nil {
			t.Errorf("no %s Finish kernel for %v", asmImpl, dt)
		}
	}
}

func refFinish(dt DType, e []byte, n int) []byte {
	le := binary.LittleEndian
	out := make([]byte, len(e))
	switch dt {
	case Float32:
		le.PutUint32(out, math.Float32bits(math.Float32frombits(le.Uint32(e))/float32(n)))
	case Float64:
		le.PutUint64(out, math.Float64bits(math.Float64frombits(le.Uint64(e))/float64(n)))
	case Int32:
		le.PutUint32(out, uint32(int64(int32(le.Uint32(e)))/int64(n)))
	case Int64:
		le.PutUint64(out, uint64(int64(le.Uint64(e))/int64(n)))
	case Uint8:
		out[0] = uint8(int(e[0]) / n)
	case Float16:
		le.PutUint16(out, F32ToF16(F16ToF32(le.Uint16(e))/float32(n)))
	case BFloat16:
		le.PutUint16(out, F32ToBF16(BF16ToF32(le.Uint16(e))/float32(n)))
	}
	return out
}

func TestFinish(t *testing.T) {
	eachImpl(t, func(t *testing.T) {
		for _, dt := range DTypes {
			size := dt.Size()
			r := rand.New(rand.NewPCG(uint64(dt), 7))
			for _, ranks := range []int{1, 2, 3, 7, 8, 255, 256, 1000} {
				for _, n := range testLengths {
					off := (n % 3) * size
					nb := n * size
					in := make([]byte, nb)
					randElems(r, dt, in)
					want := make([]byte, nb)
					for i := 0; i < nb; i += size {
						if ranks <= 1 {
							copy(want[i:], in[i:i+size])
						} else {
							copy(want[i:], refFinish(dt, in[i:i+size], ranks))
						}
					}
					buf, check := guarded(nb, off)
					copy(buf, in)
					Finish(dt, Avg, buf, ranks)
					checkElems(t, dt, fmt.Sprintf("%v Finish avg ranks=%d n=%d", dt, ranks, n), buf, want, in, in)
					check(t)

					// Other operators are complete after Reduce.
					copy(buf, in)
					for _, op := range []Op{Sum, Prod, Min, Max} {
						Finish(dt, op, buf, ranks)
					}
					if string(buf) != string(in) {
						t.Errorf("%v Finish changed the buffer for an operator other than avg", dt)
					}
				}
			}
		}
	})
}

// TestAvgIsSumThenFinish checks the documented contract on a small example
// with exact results.
func TestAvgIsSumThenFinish(t *testing.T) {
	eachImpl(t, func(t *testing.T) {
		acc := []int32{10, -10, 7, 100}
		for range 2 {
			Reduce(Int32, Avg, Bytes(acc), Bytes([]int32{10, -10, 7, 100}))
		}
		Finish(Int32, Avg, Bytes(acc), 3)
		if want := []int32{10, -10, 7, 100}; fmt.Sprint(acc) != fmt.Sprint(want) {
			t.Errorf("avg of three equal int32 buffers: got %v, want %v", acc, want)
		}
		f := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
		Reduce(Float32, Avg, Bytes(f), Bytes([]float32{3, 2, 1, 0, -1, -2, -3, -4, -5, -6, -7, -8}))
		Finish(Float32, Avg, Bytes(f), 2)
		for i, v := range f {
			if v != 2 {
				t.Errorf("float32 avg element %d = %g, want 2", i, v)
			}
		}
	})
}

func TestPanics(t *testing.T) {
	mustPanic := func(name, want string, f func()) {
		t.Helper()
		defer func() {
			t.Helper()
			r := recover()
			if r == nil {
				t.Errorf("%s: did not panic", name)
			} else if !strings.Contains(fmt.Sprint(r), want) {
				t.Errorf("%s: panic %q does not mention %q", name, r, want)
			}
		}()
		f()
	}
	mustPanic("length mismatch", "length mismatch", func() { Reduce(Float32, Sum, make([]byte, 8), make([]byte, 4)) })
	mustPanic("ReduceTo mismatch", "length mismatch", func() { ReduceTo(Float32, Sum, make([]byte, 8), make([]byte, 8), make([]byte, 12)) })
	mustPanic("partial element", "multiple", func() { Reduce(Float64, Sum, make([]byte, 12), make([]byte, 12)) })
	mustPanic("invalid dtype", "invalid dtype", func() { Reduce(DType(0), Sum, make([]byte, 8), make([]byte, 8)) })
	mustPanic("invalid op", "invalid op", func() { Reduce(Float32, Op(9), make([]byte, 8), make([]byte, 8)) })
	// Empty buffers are fine whatever the type.
	Reduce(Float32, Sum, nil, nil)
	Finish(Float32, Avg, nil, 4)
}

func TestBytes(t *testing.T) {
	if Bytes[float32](nil) != nil {
		t.Error("Bytes(nil) != nil")
	}
	s := []uint16{0x0102, 0x0304}
	b := Bytes(s)
	if len(b) != 4 || b[0] != 0x02 || b[3] != 0x03 {
		t.Errorf("Bytes(%#x) = % x", s, b)
	}
	b[0] = 0xff // shares memory
	if s[0] != 0x01ff {
		t.Errorf("Bytes does not alias its argument: s[0] = %#x", s[0])
	}
}
