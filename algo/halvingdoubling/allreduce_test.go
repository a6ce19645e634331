package halvingdoubling_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/halvingdoubling"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/mem"
)

// Configs that force each sub-algorithm and each way of running an exchange.
var (
	doublingOnly     = halvingdoubling.Config{DoublingMaxBytes: math.MaxInt}
	rabenseifnerOnly = halvingdoubling.Config{DoublingMaxBytes: -1}
)

// Small counts, where most blocks of the reduce-scatter are short or empty,
// and large ones, each with every dtype and op.
var forcedCounts = []int{0, 1, 2, 3, 7, 13, 64, 1001, 4099}

// The default config: recursive doubling up to 32 KiB, Rabenseifner above,
// one goroutine below 64 KiB.
func TestAllReduceMem(t *testing.T) {
	algotest.AllReduce(t, halvingdoubling.AllReduce, algotest.MemWorld)
}

func TestAllReduceMemDoubling(t *testing.T) {
	algotest.AllReduceWith(t, doublingOnly.AllReduce, algotest.MemWorld, algotest.Options{Counts: forcedCounts})
}

func TestAllReduceMemRabenseifner(t *testing.T) {
	algotest.AllReduceWith(t, rabenseifnerOnly.AllReduce, algotest.MemWorld, algotest.Options{Counts: forcedCounts})
}

// Tiny segments and no one-goroutine path: many overlapped messages per
// exchange, with halves of different segment counts, in both sub-algorithms.
func TestAllReduceMemTinySegments(t *testing.T) {
	for _, cfg := range []halvingdoubling.Config{
		{DoublingMaxBytes: -1, SegmentBytes: 24, EagerBytes: -1},
		{DoublingMaxBytes: math.MaxInt, SegmentBytes: 24, EagerBytes: -1},
	} {
		t.Run(fmt.Sprintf("doublingMax=%d", cfg.DoublingMaxBytes), func(t *testing.T) {
			algotest.AllReduceWith(t, cfg.AllReduce, algotest.MemWorld, algotest.Options{
				Counts: []int{0, 1, 5, 17, 100, 1001},
				DTypes: []reduce.DType{reduce.Float32, reduce.Float64, reduce.Uint8, reduce.BFloat16},
			})
		})
	}
}

// The same table over real loopback sockets, where Send may block.
func TestAllReduceTCP(t *testing.T) {
	algotest.AllReduceWith(t, halvingdoubling.AllReduce, algotest.TCPWorld, algotest.Options{
		Counts: []int{0, 1, 7, 1000, 65537},
	})
}

// Both sub-algorithms over TCP with the helper goroutine on every exchange.
func TestAllReduceTCPOverlapped(t *testing.T) {
	for _, cfg := range []halvingdoubling.Config{
		{DoublingMaxBytes: -1, SegmentBytes: 4 << 10, EagerBytes: -1},
		{DoublingMaxBytes: math.MaxInt, SegmentBytes: 4 << 10, EagerBytes: -1},
	} {
		t.Run(fmt.Sprintf("doublingMax=%d", cfg.DoublingMaxBytes), func(t *testing.T) {
			algotest.AllReduceWith(t, cfg.AllReduce, algotest.TCPWorld, algotest.Options{
				Sizes:  []int{2, 3, 4, 5, 8},
				Counts: []int{1, 3, 4099},
				DTypes: []reduce.DType{reduce.Float32, reduce.Int64},
				Ops:    []reduce.Op{reduce.Sum, reduce.Avg},
			})
		})
	}
}

// runAll runs fn on every rank at once and returns each rank's error.
func runAll(ctx context.Context, ts []transport.Transport, fn func(ctx context.Context, r int, t transport.Transport) error) []error {
	errs := make([]error, len(ts))
	var wg sync.WaitGroup
	for r, t := range ts {
		wg.Go(func() { errs[r] = fn(ctx, r, t) })
	}
	wg.Wait()
	return errs
}

// Random non-integer floats make the order of reduction visible in the last
// bits: every rank must still end with the same bits, every config with the
// same bits (both sub-algorithms evaluate the same tree), and the result must
// be close to the exact sum. send must come back unchanged.
func TestFloatBitIdentical(t *testing.T) {
	configs := []namedConfig{
		{"default", halvingdoubling.Config{}},
		{"doubling", doublingOnly},
		{"rabenseifner", rabenseifnerOnly},
		{"rabenseifner-tiny-segments", halvingdoubling.Config{DoublingMaxBytes: -1, SegmentBytes: 40, EagerBytes: -1}},
	}
	for _, n := range []int{3, 5, 6, 8} {
		for _, count := range []int{1, 7, 1001, 20000} {
			for _, op := range []reduce.Op{reduce.Sum, reduce.Avg} {
				t.Run(fmt.Sprintf("n=%d/count=%d/%v", n, count, op), func(t *testing.T) {
					testFloatBits(t, n, count, op, configs)
				})
			}
		}
	}
}

type namedConfig struct {
	name string
	cfg  halvingdoubling.Config
}

func testFloatBits(t *testing.T, n, count int, op reduce.Op, configs []namedConfig) {
	inputs := algotest.RoundingFloats(n, count)
	ref := make([]float64, count)
	bound := make([]float64, count)
	for i := range ref {
		for r := range n {
			ref[i] += float64(inputs[r][i])
			bound[i] += math.Abs(float64(inputs[r][i]))
		}
		if op == reduce.Avg {
			ref[i] /= float64(n)
			bound[i] /= float64(n)
		}
	}

	var first []float32 // rank 0's result under the first config
	ts := algotest.MemWorld(t, n)
	for ci, c := range configs {
		h := transport.Header{Seq: uint64(ci + 1), Count: uint64(count), Root: -1,
			Coll: transport.CollAllReduce, DType: reduce.Float32, Op: op}
		results := make([][]float32, n)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		errs := runAll(ctx, ts, func(ctx context.Context, r int, tr transport.Transport) error {
			send := append([]float32(nil), inputs[r]...)
			results[r] = make([]float32, count)
			if err := c.cfg.AllReduce(ctx, tr, h, reduce.Bytes(send), reduce.Bytes(results[r])); err != nil {
				return err
			}
			for i := range send {
				if math.Float32bits(send[i]) != math.Float32bits(inputs[r][i]) {
					return fmt.Errorf("send[%d] changed from %g to %g", i, inputs[r][i], send[i])
				}
			}
			return nil
		})
		cancel()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("%s: rank %d: %v", c.name, r, err)
			}
		}
		if first == nil {
			first = results[0]
		}
		for r, res := range results {
			for i := range res {
				if math.Float32bits(res[i]) != math.Float32bits(first[i]) {
					t.Fatalf("%s: rank %d element %d = %x, rank 0 under %s has %x",
						c.name, r, i, math.Float32bits(res[i]), configs[0].name, math.Float32bits(first[i]))
				}
			}
		}
		for i, got := range first {
			// Each of the n-1 additions rounds by at most half an ulp of a
			// partial sum bounded by the sum of magnitudes.
			tol := float64(n) * 0x1p-24 * bound[i]
			if d := math.Abs(float64(got) - ref[i]); d > tol {
				t.Fatalf("%s: element %d = %g, exact %g, off by %g > %g", c.name, i, got, ref[i], d, tol)
			}
		}
	}
}

// When a rank dies in the middle of a stream of all-reduces, every other
// rank must return an error, not hang. Like a communicator, each rank closes
// its transport after an error, so failures spread to ranks that were
// waiting on a rank other than the dead one.
func TestPeerDies(t *testing.T) {
	for _, n := range []int{2, 4, 5, 7} {
		for _, count := range []int{3, 100 << 10} { // one goroutine; helper goroutine
			for _, victim := range []int{0, n - 1} {
				t.Run(fmt.Sprintf("n=%d/count=%d/victim=%d", n, count, victim), func(t *testing.T) {
					testPeerDies(t, n, count, victim)
				})
			}
		}
	}
}

func testPeerDies(t *testing.T, n, count, victim int) {
	net := mem.NewNetwork(n, mem.Config{})
	defer net.Close()
	errs := streamUntilKilled(net.Transports(), count, victim, func() { net.Kill(victim) })
	for r, err := range errs {
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			t.Errorf("rank %d hung until the deadline: %v", r, err)
		case r == victim && !errors.Is(err, transport.ErrClosed) && !errors.Is(err, transport.ErrPeerGone):
			// Usually ErrClosed; a survivor that saw the kill first and closed
			// may reach the victim's pending receive before the kill does.
			t.Errorf("killed rank %d: got %v, want an error wrapping ErrClosed or ErrPeerGone", r, err)
		case r != victim && !errors.Is(err, transport.ErrPeerGone):
			t.Errorf("rank %d: got %v, want an error wrapping ErrPeerGone", r, err)
		}
	}
}

// Over TCP a dead peer is a closed socket, and sends may be blocked on it.
func TestPeerDiesTCP(t *testing.T) {
	for _, count := range []int{3, 1 << 20} {
		t.Run(fmt.Sprintf("count=%d", count), func(t *testing.T) {
			const n, victim = 5, 3
			ts := algotest.TCPWorld(t, n)
			errs := streamUntilKilled(ts, count, victim, func() { ts[victim].Close() })
			for r, err := range errs {
				if err == nil || errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("rank %d: got %v, want an error before the deadline", r, err)
				}
			}
		})
	}
}

// streamUntilKilled runs all-reduces of count float32 on every rank until
// each fails, calling kill once some rank other than victim has finished
// three. It returns each rank's error.
func streamUntilKilled(ts []transport.Transport, count, victim int, kill func()) []error {
	n := len(ts)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	started := make(chan struct{})
	var once sync.Once
	go func() {
		<-started
		kill()
	}()
	defer once.Do(func() { close(started) }) // never leave the killer waiting
	return runAll(ctx, ts, func(ctx context.Context, r int, tr transport.Transport) error {
		buf := make([]float32, count)
		for seq := uint64(1); ; seq++ {
			h := transport.Header{Seq: seq, Count: uint64(count), Root: -1,
				Coll: transport.CollAllReduce, DType: reduce.Float32, Op: reduce.Sum}
			if err := halvingdoubling.AllReduce(ctx, tr, h, reduce.Bytes(buf), reduce.Bytes(buf)); err != nil {
				tr.Close()
				return err
			}
			if seq == 3 && r == (victim+1)%n {
				once.Do(func() { close(started) })
			}
		}
	})
}

// Ranks configured differently must get a header mismatch, not wrong data or
// a hang.
func TestConfigMismatch(t *testing.T) {
	const n, count = 4, 1000
	ts := algotest.MemWorld(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h := transport.Header{Seq: 1, Count: count, Root: -1, Coll: transport.CollAllReduce, DType: reduce.Float32, Op: reduce.Sum}
	errs := runAll(ctx, ts, func(ctx context.Context, r int, tr transport.Transport) error {
		cfg := doublingOnly
		if r == 2 {
			cfg = rabenseifnerOnly
		}
		buf := make([]byte, count*4)
		err := cfg.AllReduce(ctx, tr, h, buf, buf)
		if err != nil {
			tr.Close()
		}
		return err
	})
	var mismatch bool
	for r, err := range errs {
		if err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("rank %d: got %v, want an error before the deadline", r, err)
		}
		mismatch = mismatch || errors.Is(err, transport.ErrMismatch)
	}
	if !mismatch {
		t.Errorf("no rank reported transport.ErrMismatch: %v", errs)
	}
}

func TestInvalidArguments(t *testing.T) {
	ts := algotest.MemWorld(t, 2)
	ctx := context.Background()
	h := transport.Header{Seq: 1, Count: 3, Root: -1, Coll: transport.CollAllReduce, DType: reduce.Float32, Op: reduce.Sum}
	for name, call := range map[string]func() error{
		"length mismatch": func() error { return halvingdoubling.AllReduce(ctx, ts[0], h, make([]byte, 12), make([]byte, 8)) },
		"partial element": func() error { return halvingdoubling.AllReduce(ctx, ts[0], h, make([]byte, 10), make([]byte, 10)) },
		"bad dtype": func() error {
			h := h
			h.DType = 0
			return halvingdoubling.AllReduce(ctx, ts[0], h, make([]byte, 12), make([]byte, 12))
		},
	} {
		if err := call(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// A steady stream of small all-reduces on the one-goroutine path must not
// allocate: staging buffers are pooled and nothing escapes per message.
func TestNoAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop buffers")
	}
	const n = 4
	ts := algotest.MemWorld(t, n)
	buf := make([][]byte, n)
	for r := range buf {
		buf[r] = make([]byte, 1024)
	}
	var seq uint64
	round := func(fn algotest.AllReduceFunc) func() {
		return func() {
			seq++
			h := transport.Header{Seq: seq, Count: 256, Root: -1, Coll: transport.CollAllReduce, DType: reduce.Float32, Op: reduce.Sum}
			errs := runAll(context.Background(), ts, func(ctx context.Context, r int, tr transport.Transport) error {
				return fn(ctx, tr, h, buf[r], buf[r])
			})
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	nothing := func(context.Context, transport.Transport, transport.Header, []byte, []byte) error { return nil }
	round(halvingdoubling.AllReduce)()
	harness := testing.AllocsPerRun(50, round(nothing))
	total := testing.AllocsPerRun(50, round(halvingdoubling.AllReduce))
	if total > harness {
		t.Errorf("%.1f allocations per all-reduce of %d ranks beyond the test harness's %.1f", total-harness, n, harness)
	}
}
