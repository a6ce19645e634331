package mem

import (
	"math/bits"
	"sync"
)

// Payload copies come from pools of power-of-two buffers, so a steady stream
// of messages allocates nothing once the pools are warm.
const maxPooledShift = 27 // 128 MiB; longer payloads are allocated each time

var pools [maxPooledShift + 1]sync.Pool // pools[s] holds *[]byte of cap 1<<s

// getBuf returns a buffer of length n, or nil when n is 0.
func getBuf(n int) *[]byte {
	if n == 0 {
		return nil
	}
	s := bits.Len(uint(n - 1))
	if s > maxPooledShift {
		b := make([]byte, n)
		return &b
	}
	if v, ok := pools[s].Get().(*[]byte); ok {
		*v = (*v)[:n]
		return v
	}
	b := make([]byte, n, 1<<s)
	return &b
}

// putBuf recycles a buffer from getBuf; nil is ignored.
func putBuf(b *[]byte) {
	if b == nil {
		return
	}
	c := cap(*b)
	if c == 0 || c&(c-1) != 0 || c > 1<<maxPooledShift {
		return
	}
	pools[bits.Len(uint(c-1))].Put(b)
}
