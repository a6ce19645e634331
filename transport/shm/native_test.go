//go:build linux

package shm_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/shm"
)

// The correctness table for the native all-reduce.
func TestNativeAllReduce(t *testing.T) {
	algotest.AllReduceWith(t, algotest.Native, algotest.ShmWorld, algotest.Options{
		Sizes:  []int{1, 2, 3, 4, 5, 8},
		Counts: []int{0, 1, 7, 1000, 3000, 4097, 65537}, // 12000 B: one step above 2 ranks, two below; 16388 B: two
	})
}

// Tiny native buffers cut every buffer into many chunks, so the two halves
// alternate many times within one call and across calls.
func TestNativeAllReduceManyChunks(t *testing.T) {
	algotest.AllReduceWith(t, algotest.Native, algotest.ShmWorldWith(shm.Config{NativeBytes: 256}), algotest.Options{
		Sizes:  []int{2, 3, 5},
		Counts: []int{1, 7, 64, 4099},
		DTypes: []reduce.DType{reduce.Uint8, reduce.Float16, reduce.Float32, reduce.Float64},
	})
}

// Back-to-back native all-reduces with new data every call, small ones
// (one barrier, the halves and header slots reused every second call) mixed
// with chunked ones (two barriers a chunk): a rank that ran ahead into the
// next call must never change what a slower rank still reads. Each result
// is checked element by element. Every other call is in place, where a
// rank above 0 reduces its own contribution from a private copy.
func TestNativeAllReduceBackToBack(t *testing.T) {
	const n, calls = 3, 3000
	ts := world(shm.Config{NativeBytes: 1 << 10})(t, n)
	sizes := []int{1, 3, 128, 130, 1} // float32 elements; 130 x 4 B > one 512 B half
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, tr := range ts {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			defer func() {
				if errs[r] != nil {
					tr.Close() // the other ranks stop waiting for this one
				}
			}()
			for i := range calls {
				count := sizes[i%len(sizes)]
				send, recv := make([]float32, count), make([]float32, count)
				for k := range send {
					send[k] = float32(r*1000 + i%1000 + k)
				}
				if i%2 == 1 {
					recv = send
				}
				h := transport.Header{Seq: uint64(i), Count: uint64(count), Root: -1, Coll: transport.CollAllReduce, DType: reduce.Float32, Op: reduce.Sum}
				if err := tr.(transport.NativeAllReducer).AllReduce(ctx, h, reduce.Bytes(send), reduce.Bytes(recv)); err != nil {
					errs[r] = fmt.Errorf("call %d: %w", i, err)
					return
				}
				for k, got := range recv {
					if want := float32(n*(i%1000+k) + 1000*n*(n-1)/2); got != want {
						errs[r] = fmt.Errorf("rank %d, call %d, element %d: got %v, want %v", r, i, k, got, want)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// Buffers that do not hold the header's count get one error, on the rank
// that passed them, before any barrier.
func TestNativeAllReduceBadCount(t *testing.T) {
	ts := world(shm.Config{})(t, 2)
	for r, tr := range ts {
		h := transport.Header{Count: 3, Root: -1, Coll: transport.CollAllReduce, DType: reduce.Float32, Op: reduce.Sum}
		buf := make([]byte, 8)
		err := tr.(transport.NativeAllReducer).AllReduce(context.Background(), h, buf, buf)
		want := fmt.Sprintf("shm: rank %d: native all-reduce: send is 8 bytes and recv 8 bytes; both must hold the header's count of 3 float32 elements", r)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("rank %d: %v, want an error with %q", r, err, want)
		}
	}
}

// Random non-integer floats make the order of reduction visible in the
// last bits. Above the one-barrier size each rank reduces its own slice of
// every chunk, from its private input and the peers' shared copies, and
// every other slice comes from the rank that reduced it: every rank must
// end with the same bits, close to the exact sum, in place and out of
// place, and send must come back unchanged out of place. Sizes: one chunk
// of the default buffer, and many chunks of a small one.
func TestNativeAllReduceSameBits(t *testing.T) {
	for _, cfg := range []shm.Config{{}, {NativeBytes: 4 << 10}} {
		for _, n := range []int{2, 3, 4} {
			for _, count := range []int{5000, 70001} {
				for _, inPlace := range []bool{false, true} {
					name := fmt.Sprintf("native=%d/n=%d/count=%d/inplace=%v", cfg.NativeBytes, n, count, inPlace)
					t.Run(name, func(t *testing.T) { testNativeSameBits(t, world(cfg)(t, n), count, inPlace) })
				}
			}
		}
	}
}

func testNativeSameBits(t *testing.T, ts []transport.Transport, count int, inPlace bool) {
	n := len(ts)
	inputs := algotest.RoundingFloats(n, count)
	results := make([][]float32, n)
	err := algotest.OnEveryRank(ts, func(ctx context.Context, r int, tr transport.Transport) error {
		send := slices.Clone(inputs[r])
		recv := send
		if !inPlace {
			recv = make([]float32, count)
		}
		h := transport.Header{Count: uint64(count), Root: -1, Coll: transport.CollAllReduce, DType: reduce.Float32, Op: reduce.Sum}
		if err := tr.(transport.NativeAllReducer).AllReduce(ctx, h, reduce.Bytes(send), reduce.Bytes(recv)); err != nil {
			return err
		}
		if !inPlace && !slices.Equal(send, inputs[r]) {
			return errors.New("send changed")
		}
		results[r] = recv
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range count {
		var sum, bound float64
		for r := range n {
			sum += float64(inputs[r][i])
			bound += math.Abs(float64(inputs[r][i]))
		}
		got := results[0][i]
		if d := math.Abs(float64(got) - sum); d > 1e-6*bound+1e-30 {
			t.Fatalf("element %d: rank 0 has %g, the exact sum is %g (off by %g)", i, got, sum, d)
		}
		for r := 1; r < n; r++ {
			if math.Float32bits(results[r][i]) != math.Float32bits(got) {
				t.Fatalf("element %d: rank %d has %g (bits %#x), rank 0 %g (bits %#x)", i, r,
					results[r][i], math.Float32bits(results[r][i]), got, math.Float32bits(got))
			}
		}
	}
}
