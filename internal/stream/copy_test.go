package stream

import (
	"bytes"
	"fmt"
	"testing"
)

// Every length and alignment around the line size, and big ones: the copy
// is exact and touches nothing outside dst.
func TestCopy(t *testing.T) {
	src := make([]byte, 1<<20+300)
	for i := range src {
		src[i] = byte(i*7 + i>>8)
	}
	for _, n := range []int{0, 1, 15, 63, 64, 65, 127, 128, 129, 191, 1000, 4096, 65536 + 17, 1 << 20} {
		for _, dOff := range []int{0, 1, 8, 16, 33, 63} {
			for _, sOff := range []int{0, 3, 64} {
				buf := bytes.Repeat([]byte{0xEE}, n+200)
				dst := buf[dOff : dOff+n]
				if got := Copy(dst, src[sOff:sOff+n]); got != n {
					t.Fatalf("n %d: Copy returned %d", n, got)
				}
				if i := firstDiff(dst, src[sOff:sOff+n]); i >= 0 {
					t.Fatalf("n %d dst+%d src+%d: byte %d is %#x, want %#x", n, dOff, sOff, i, dst[i], src[sOff+i])
				}
				for i, b := range buf {
					if (i < dOff || i >= dOff+n) && b != 0xEE {
						t.Fatalf("n %d dst+%d src+%d: byte %d outside dst changed to %#x", n, dOff, sOff, i-dOff, b)
					}
				}
			}
		}
	}
}

// Like copy, Copy stops at the shorter slice.
func TestCopyShorter(t *testing.T) {
	src := bytes.Repeat([]byte{7}, 500)
	dst := make([]byte, 300)
	if got := Copy(dst, src); got != 300 || !bytes.Equal(dst, src[:300]) {
		t.Fatalf("short dst: %d", got)
	}
	dst = make([]byte, 700)
	if got := Copy(dst, src); got != 500 || !bytes.Equal(dst[:500], src) || dst[500] != 0 {
		t.Fatalf("short src: %d", got)
	}
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

func BenchmarkCopy(b *testing.B) {
	for _, n := range []int{4 << 10, 64 << 10, 256 << 10, 1 << 20} {
		src, dst := make([]byte, n), make([]byte, n)
		for _, c := range []struct {
			name string
			copy func(dst, src []byte) int
		}{{"copy", func(d, s []byte) int { return copy(d, s) }}, {"stream", Copy}} {
			b.Run(fmt.Sprintf("%s/bytes=%d", c.name, n), func(b *testing.B) {
				b.SetBytes(int64(n))
				for range b.N {
					c.copy(dst, src)
				}
			})
		}
	}
}
