package bufpool_test

import (
	"testing"

	"github.com/collkit/collkit/internal/bufpool"
)

func TestGetLengthAndCapacity(t *testing.T) {
	for _, n := range []int{1, 7, 64, 65, 1000, 256 << 10, 256<<10 + 1, 40 << 20, bufpool.MaxPooled, bufpool.MaxPooled + 1} {
		b := bufpool.Get(n)
		if len(b.B) != n {
			t.Errorf("Get(%d): len %d", n, len(b.B))
		}
		want := 1
		for want < n {
			want <<= 1
		}
		if n > bufpool.MaxPooled {
			want = n
		}
		if cap(b.B) != want {
			t.Errorf("Get(%d): cap %d, want %d", n, cap(b.B), want)
		}
		bufpool.Put(b)
	}
	if b := bufpool.Get(0); len(b.B) != 0 {
		t.Errorf("Get(0): len %d", len(b.B))
	}
	bufpool.Put(nil)
}

// A buffer given back is what the next Get of its class returns, in every
// class, the ones above bytebufferpool's 32 MiB included; and the same
// size again and again allocates nothing.
func TestReuseWithoutAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop buffers at random")
	}
	for _, n := range []int{8, 300, 256 << 10, 48 << 20} {
		b := bufpool.Get(n)
		b.B[0] = 42
		bufpool.Put(b)
		c := bufpool.Get(n - 1)
		if c != b || c.B[0] != 42 || len(c.B) != n-1 {
			t.Errorf("Get(%d) after Put of a %d-byte buffer: a new buffer", n-1, n)
		}
		bufpool.Put(c)
		if a := testing.AllocsPerRun(100, func() { bufpool.Put(bufpool.Get(n)) }); a != 0 {
			t.Errorf("Get and Put of %d bytes: %v allocations", n, a)
		}
	}
}

// bytebufferpool recalibrates every 42000 Puts; afterwards a pool still
// keeps the buffers of its class, however long.
func TestCalibrationKeepsBuffers(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop buffers at random")
	}
	const n = 32 << 20
	for range 42001 {
		bufpool.Put(bufpool.Get(n))
	}
	b := bufpool.Get(n)
	bufpool.Put(b)
	if c := bufpool.Get(n); c != b {
		t.Error("after calibration the pool dropped a buffer of its own class")
	}
}
