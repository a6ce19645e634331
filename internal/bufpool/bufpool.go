package bufpool

import (
	"math/bits"
	"sync"

	"github.com/valyala/bytebufferpool"
)

// Buffer is a pooled buffer; its B is the memory.
type Buffer = bytebufferpool.ByteBuffer

// Size classes. Class s holds buffers of capacity 1<<s.
const (
	// MaxPooled is the largest buffer the pools keep; Get allocates longer
	// ones each time and Put drops them.
	MaxPooled = 1 << maxShift
	maxShift  = 27 // 128 MiB
	// calibratedShift is the largest class that a bytebufferpool.Pool holds.
	// bytebufferpool calibrates every 42000 Puts and tracks sizes only up
	// to 32 MiB: from then on it drops every buffer longer than that, so a
	// 64 MiB fusion buffer would be allocated on every call. The classes
	// above are plain sync.Pools of the same Buffers.
	calibratedShift = 25 // 32 MiB
)

var (
	calibrated [calibratedShift + 1]bytebufferpool.Pool
	large      [maxShift - calibratedShift]sync.Pool
)

// class returns the size class of a buffer of n > 0 bytes.
func class(n int) int { return bits.Len(uint(n - 1)) }

// empty is what Get(0) returns, to every caller.
var empty Buffer

// Get returns a buffer whose B has length n (its contents are not zeroed)
// and capacity the power of two at or above n. Get(0) returns a shared
// buffer with an empty B, which must stay empty; Put takes it back.
func Get(n int) *Buffer {
	if n <= 0 {
		return &empty
	}
	s := class(n)
	var b *Buffer
	switch {
	case s <= calibratedShift:
		b = calibrated[s].Get()
	case s <= maxShift:
		b, _ = large[s-calibratedShift-1].Get().(*Buffer)
	default:
		return &Buffer{B: make([]byte, n)}
	}
	if b == nil {
		b = &Buffer{}
	}
	if cap(b.B) != 1<<s {
		b.B = make([]byte, n, 1<<s)
	}
	b.B = b.B[:n]
	return b
}

// Put gives b, from Get, back to its pool. b must not be used afterwards.
// A nil b is ignored.
func Put(b *Buffer) {
	if b == nil {
		return
	}
	c := cap(b.B)
	if c == 0 || c&(c-1) != 0 || c > MaxPooled {
		return
	}
	s := class(c)
	// bytebufferpool learns the sizes it is given from len: the whole
	// class, so that its calibration never finds this buffer too long.
	b.B = b.B[:c]
	if s <= calibratedShift {
		calibrated[s].Put(b)
		return
	}
	b.B = b.B[:0]
	large[s-calibratedShift-1].Put(b)
}
