package verify_test

import (
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
