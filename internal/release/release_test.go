package release

import (
	"fmt"
	"sync/atomic"
	"testing"
)

// Each store lands in its word, whole, and leaves its neighbours alone.
func TestStores(t *testing.T) {
	var w struct {
		a atomic.Uint64
		b atomic.Int64
		c atomic.Uint32
		d atomic.Bool
		e atomic.Uint32
	}
	w.e.Store(7)
	for _, v := range []uint64{1, 1 << 40, ^uint64(0), 0} {
		Uint64(&w.a, v)
		Int64(&w.b, -int64(v))
		Uint32(&w.c, uint32(v>>8))
		Bool(&w.d, v&1 == 1)
		if w.a.Load() != v || w.b.Load() != -int64(v) || w.c.Load() != uint32(v>>8) || w.d.Load() != (v&1 == 1) || w.e.Load() != 7 {
			t.Fatalf("stored %d: read %d %d %d %v, neighbour %d", v, w.a.Load(), w.b.Load(), w.c.Load(), w.d.Load(), w.e.Load())
		}
	}
}

// A reader that sees a published sequence number sees the data stored
// before it: a sequence lock with one writer, as the transports use.
func TestPublishOrder(t *testing.T) {
	var seq, x, y atomic.Uint64
	const n = 200000
	done := make(chan string)
	go func() {
		for last := uint64(0); last < n; {
			s := seq.Load()
			if s == last {
				continue
			}
			// The data of s or later: never older.
			if a, b := x.Load(), y.Load(); a < s || b < s {
				done <- fmt.Sprintf("reader saw seq %d with data %d, %d", s, a, b)
				return
			}
			last = s
		}
		done <- ""
	}()
	for i := uint64(1); i <= n; i++ {
		Uint64(&x, i)
		Uint64(&y, i)
		Uint64(&seq, i)
	}
	if msg := <-done; msg != "" {
		t.Fatal(msg)
	}
}
