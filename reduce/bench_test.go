package reduce

import (
	"fmt"
	"math"
	"testing"
	"time"
)

const (
	kib = 1 << 10
	mib = 1 << 20
)

func sizeName(n int) string {
	if n >= mib {
		return fmt.Sprintf("%dMiB", n/mib)
	}
	return fmt.Sprintf("%dKiB", n/kib)
}

// benchMem keeps the benchmark buffers of each size for the whole run:
// allocating and freeing hundreds of MiB per benchmark makes the runtime
// return memory to the kernel in the background, which disturbs the
// measurements (page faults, TLB shootdowns).
var benchMem = map[int][][]byte{}

// benchBufs returns two n-byte buffers of value one in type dt, so that
// repeated sums stay finite and repeated products stay at one: subnormals
// and infinities would measure something else. The buffers are reused by
// later calls; benchBuf3 returns a third one.
func benchBufs(dt DType, n int) (x, y []byte) {
	bufs := benchMemory(n, 2)
	x, y = bufs[0], bufs[1]
	var one []byte
	switch dt {
	case Float32:
		one = Bytes([]float32{1})
	case Float64:
		one = Bytes([]float64{1})
	case Int32:
		one = Bytes([]int32{1})
	case Int64:
		one = Bytes([]int64{1})
	case Uint8:
		one = []byte{1}
	case Float16:
		one = Bytes([]uint16{F32ToF16(1)})
	case BFloat16:
		one = Bytes([]uint16{F32ToBF16(1)})
	}
	for i := 0; i < n; i += len(one) {
		copy(x[i:], one)
	}
	copy(y, x)
	return x, y
}

func benchBuf3(n int) []byte {
	z := benchMemory(n, 3)[2]
	clear(z)
	return z
}

func benchMemory(n, k int) [][]byte {
	for len(benchMem[n]) < k {
		benchMem[n] = append(benchMem[n], make([]byte, n))
	}
	return benchMem[n]
}

// benchLoop runs f, which processes n bytes, under b.Loop. Besides MB/s (the
// mean) it reports the fastest single pass as best-GB/s, which is how
// reduce_bw.c measures: on a machine shared with other work the two differ
// by a lot for buffers that do not fit in L2.
func benchLoop(b *testing.B, n int, f func()) {
	b.SetBytes(int64(n))
	f() // warm up; b.Loop times every pass, the first one too
	best := time.Duration(math.MaxInt64)
	for b.Loop() {
		t := time.Now()
		f()
		best = min(best, time.Since(t))
	}
	b.ReportMetric(float64(n)/best.Seconds()/1e9, "best-GB/s")
}

type benchCase struct {
	dt   DType
	op   Op
	size int
}

// benchCases: float32 sum at every size (scripts/reduce-bench.sh compares it
// with C), the other fast paths at 4 MiB.
func benchCases() []benchCase {
	cs := []benchCase{{Float32, Sum, 256 * kib}, {Float32, Sum, 4 * mib}, {Float32, Sum, 64 * mib}}
	for _, dt := range DTypes {
		for _, op := range []Op{Sum, Prod, Min, Max} {
			if dt != Float32 || op != Sum {
				cs = append(cs, benchCase{dt, op, 4 * mib})
			}
		}
	}
	return cs
}

// BenchmarkReduce measures y = y op x; MB/s counts the bytes of y, like
// ../shared/peers/reduce_bw.c.
func BenchmarkReduce(b *testing.B) {
	for _, c := range benchCases() {
		b.Run(fmt.Sprintf("%v/%v/%s", c.dt, c.op, sizeName(c.size)), func(b *testing.B) {
			x, y := benchBufs(c.dt, c.size)
			benchLoop(b, c.size, func() { Reduce(c.dt, c.op, y, x) })
		})
	}
}

// BenchmarkReduceTo measures float32 sums with ReduceTo: into one of the
// inputs (dst=a, the same work as Reduce) and into a third buffer (dst=new,
// which moves a third more bytes: C's z[i] = x[i] + y[i] is the fair
// comparison for that one). MB/s counts the bytes of dst.
func BenchmarkReduceTo(b *testing.B) {
	for _, mode := range []string{"dst=a", "dst=new"} {
		for _, size := range []int{256 * kib, 4 * mib, 64 * mib} {
			b.Run(fmt.Sprintf("float32/sum/%s/%s", mode, sizeName(size)), func(b *testing.B) {
				x, y := benchBufs(Float32, size)
				z := y
				if mode == "dst=new" {
					z = benchBuf3(size)
				}
				benchLoop(b, size, func() { ReduceTo(Float32, Sum, z, y, x) })
			})
		}
	}
}

// BenchmarkReduceGeneric measures the portable Go code, which is what other
// architectures and the purego build get.
func BenchmarkReduceGeneric(b *testing.B) {
	defer func(old bool) { useAsm = old }(useAsm)
	useAsm = false
	for _, c := range []benchCase{{Float32, Sum, 4 * mib}, {Float64, Sum, 4 * mib}, {Float32, Max, 4 * mib},
		{Float16, Sum, 4 * mib}, {BFloat16, Sum, 4 * mib}} {
		b.Run(fmt.Sprintf("%v/%v/%s", c.dt, c.op, sizeName(c.size)), func(b *testing.B) {
			x, y := benchBufs(c.dt, c.size)
			b.SetBytes(int64(c.size))
			for b.Loop() {
				Reduce(c.dt, c.op, y, x)
			}
		})
	}
}

// BenchmarkFinish measures the division of Avg, one pass over the buffer.
// The buffer is refilled every few passes, before repeated division by 3
// reaches subnormal numbers, which are slow.
func BenchmarkFinish(b *testing.B) {
	for _, dt := range DTypes {
		b.Run(fmt.Sprintf("%v/avg/4MiB", dt), func(b *testing.B) {
			fresh, buf := benchBufs(dt, 4*mib)
			b.SetBytes(int64(len(buf)))
			i := 0
			for b.Loop() {
				if i++; i%8 == 0 {
					b.StopTimer()
					copy(buf, fresh)
					b.StartTimer()
				}
				Finish(dt, Avg, buf, 3)
			}
		})
	}
}
