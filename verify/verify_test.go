package verify_test

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/verify"
)

// Expect must agree with folding the ranks' inputs through the kernels in
// rank order, for every dtype, op and world size: both are exact by design.
func TestExpectMatchesKernels(t *testing.T) {
	const count = 777
	for _, dt := range reduce.DTypes {
		for _, op := range reduce.Ops {
			for n := 1; n <= 8; n++ {
				acc := make([]byte, count*dt.Size())
				in := make([]byte, len(acc))
				verify.Fill(dt, op, acc, 42, 0)
				for r := 1; r < n; r++ {
					verify.Fill(dt, op, in, 42, r)
					reduce.Reduce(dt, op, acc, in)
				}
				reduce.Finish(dt, op, acc, n)
				want := make([]byte, len(acc))
				verify.Expect(dt, op, want, 42, n)
				if w := verify.Wrong(dt, acc, want); w != 0 {
					t.Errorf("%v %v n=%d: %d of %d elements differ", dt, op, n, w, count)
				}
			}
		}
	}
}

func TestWrongCountsElements(t *testing.T) {
	a := []byte{1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0}
	b := []byte{1, 0, 0, 0, 2, 0, 9, 0, 3, 0, 0, 7}
	if got := verify.Wrong(reduce.Float32, a, b); got != 2 {
		t.Fatalf("Wrong = %d, want 2", got)
	}
	if got := verify.Wrong(reduce.Float32, a, a); got != 0 {
		t.Fatalf("Wrong(a, a) = %d, want 0", got)
	}
}

// The inputs must not be constant, or a broken algorithm could pass.
func TestInputsVary(t *testing.T) {
	seen := map[int64]bool{}
	for i := range 100 {
		seen[verify.Value(1, 0, i, reduce.Sum)] = true
	}
	if len(seen) < 10 {
		t.Fatalf("only %d distinct input values in 100 elements", len(seen))
	}
	if verify.Value(1, 0, 5, reduce.Sum) == verify.Value(1, 1, 5, reduce.Sum) &&
		verify.Value(1, 0, 6, reduce.Sum) == verify.Value(1, 1, 6, reduce.Sum) &&
		verify.Value(1, 0, 7, reduce.Sum) == verify.Value(1, 1, 7, reduce.Sum) {
		t.Fatal("ranks get the same inputs")
	}
}

// Fill stores each element little-endian at its own offset, across the
// blocks it is built in: element i decodes to Value(i).
func TestFillLayout(t *testing.T) {
	const count = 3001 // several 4 KiB blocks in every dtype, and a partial one
	for _, dt := range reduce.DTypes {
		for _, op := range []reduce.Op{reduce.Sum, reduce.Prod} {
			buf := make([]byte, count*dt.Size()+dt.Size()-1) // a trailing part element stays 0
			verify.Fill(dt, op, buf, 7, 3)
			for i := range count {
				b := buf[i*dt.Size():]
				var got float64
				switch dt {
				case reduce.Float32:
					got = float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
				case reduce.Float64:
					got = math.Float64frombits(binary.LittleEndian.Uint64(b))
				case reduce.Int32:
					got = float64(int32(binary.LittleEndian.Uint32(b)))
				case reduce.Int64:
					got = float64(int64(binary.LittleEndian.Uint64(b)))
				case reduce.Uint8:
					got = float64(b[0])
				case reduce.Float16:
					got = float64(reduce.F16ToF32(binary.LittleEndian.Uint16(b)))
				case reduce.BFloat16:
					got = float64(reduce.BF16ToF32(binary.LittleEndian.Uint16(b)))
				}
				if want := float64(verify.Value(7, 3, i, op)); got != want {
					t.Fatalf("%v %v element %d = %v, want %v", dt, op, i, got, want)
				}
			}
			for _, c := range buf[count*dt.Size():] {
				if c != 0 {
					t.Fatalf("%v %v: Fill wrote past the last whole element", dt, op)
				}
			}
		}
	}
}

// FillFrom and ExpectFrom write the same bytes as a block of what Fill and
// Expect write.
func TestFromIsABlock(t *testing.T) {
	const count, first, n = 5003, 1201, 5
	for _, dt := range reduce.DTypes {
		for _, op := range reduce.Ops {
			es := dt.Size()
			whole, block := make([]byte, count*es), make([]byte, 2000*es)
			verify.Fill(dt, op, whole, 9, 2)
			verify.FillFrom(dt, op, block, 9, 2, first)
			if w := verify.Wrong(dt, block, whole[first*es:first*es+len(block)]); w != 0 {
				t.Errorf("%v %v: FillFrom differs from Fill in %d elements", dt, op, w)
			}
			verify.Expect(dt, op, whole, 9, n)
			verify.ExpectFrom(dt, op, block, 9, n, first)
			if w := verify.Wrong(dt, block, whole[first*es:first*es+len(block)]); w != 0 {
				t.Errorf("%v %v: ExpectFrom differs from Expect in %d elements", dt, op, w)
			}
		}
	}
}

// WrongFill and WrongExpect count what Wrong counts against Fill's and
// Expect's whole buffers, from any first element, without those buffers.
func TestWrongWithoutBuffers(t *testing.T) {
	const count, first = 3001, 997
	dt, op := reduce.BFloat16, reduce.Max
	es := dt.Size()
	in := make([]byte, (first+count)*es)
	verify.Fill(dt, op, in, 5, 2)
	all := make([]byte, len(in))
	verify.Expect(dt, op, all, 5, 3)
	for _, bad := range []int{0, 1, 77} {
		got := append([]byte(nil), all[first*es:]...)
		fills := append([]byte(nil), in[first*es:]...)
		for i := range bad {
			got[(i*37%count)*es] ^= 0x40
			fills[(i*37%count)*es] ^= 0x40
		}
		want := verify.Wrong(dt, got, all[first*es:])
		if want != bad {
			t.Fatalf("Wrong counts %d of %d flipped elements", want, bad)
		}
		if w := verify.WrongExpect(dt, op, got, 5, 3, first); w != want {
			t.Errorf("WrongExpect = %d, Wrong = %d", w, want)
		}
		if w := verify.WrongFill(dt, op, fills, 5, 2, first); w != want {
			t.Errorf("WrongFill = %d, Wrong = %d", w, want)
		}
	}
}
