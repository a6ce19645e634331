package bufpool_test

import (
	"fmt"
	"math/bits"
	"sync"
	"testing"

	"github.com/collkit/collkit/internal/bufpool"
)

// BenchmarkGetPut compares a Get and Put of bufpool, bytebufferpool under
// size classes, with the hand-rolled pool transport/mem had before (one
// sync.Pool of *[]byte per power-of-two class), on every core at once as
// the ranks of a job would:
//
//	go test -run '^$' -bench GetPut -count 10 ./internal/bufpool/ | tee pools.txt
func BenchmarkGetPut(b *testing.B) {
	for _, size := range []int{64, 1 << 10, 256 << 10} {
		b.Run(fmt.Sprintf("pool=bufpool/bytes=%d", size), func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					buf := bufpool.Get(size)
					buf.B[0] = 1
					bufpool.Put(buf)
				}
			})
		})
		b.Run(fmt.Sprintf("pool=syncpool/bytes=%d", size), func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					buf := getOld(size)
					(*buf)[0] = 1
					putOld(buf)
				}
			})
		})
	}
}

// The pool of transport/mem before bufpool, for comparison.
var oldPools [28]sync.Pool

func getOld(n int) *[]byte {
	s := bits.Len(uint(n - 1))
	if v, ok := oldPools[s].Get().(*[]byte); ok {
		*v = (*v)[:n]
		return v
	}
	b := make([]byte, n, 1<<s)
	return &b
}

func putOld(b *[]byte) {
	c := cap(*b)
	oldPools[bits.Len(uint(c-1))].Put(b)
}
