package pipeline

import (
	"fmt"

	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
)

// CheckAllReduce checks an all-reduce's arguments: a valid h.DType and h.Op,
// and send and recv of the same length, a whole number of elements. It
// returns the element size; the caller wraps the error with its name.
func CheckAllReduce(h transport.Header, send, recv []byte) (es int, err error) {
	es = h.DType.Size()
	if es == 0 || !h.Op.Valid() {
		return 0, fmt.Errorf("invalid dtype %v or op %v", h.DType, h.Op)
	}
	if len(send) != len(recv) || len(send)%es != 0 {
		return 0, fmt.Errorf("send is %d bytes and recv %d bytes; both must be the same multiple of %d (%v)",
			len(send), len(recv), es, h.DType)
	}
	return es, nil
}

// AllReduceAlone finishes an all-reduce that needs no messages, because n
// is 1, and reports whether it did: recv gets send (unless in place). An
// empty all-reduce over several ranks still needs messages: the ranks must
// learn that every one of them passed an empty buffer (dissemination.Agree).
func AllReduceAlone(n int, h transport.Header, send, recv []byte) bool {
	if n != 1 {
		return false
	}
	if !SameBuffer(send, recv) {
		copy(recv, send)
	}
	reduce.Finish(h.DType, h.Op, recv, n)
	return true
}

// SegmentBytes is the segment size of a pipelined algorithm: configured
// (zero or negative means def) and rounded down to whole elements of es
// bytes, at least one element.
func SegmentBytes(configured, def, es int) int {
	seg := configured
	if seg <= 0 {
		seg = def
	}
	seg -= seg % es
	if seg == 0 {
		seg = es
	}
	return seg
}

// Eager reports whether a collective that sends each peer at most bytes
// may run on one goroutine, each exchange sending before it receives: bytes
// is at most limit, and t buffers (transport.Buffered) twice bytes, since a
// peer may still hold as much from the previous collective.
func Eager(t transport.Transport, bytes, limit int) bool {
	b, ok := t.(transport.Buffered)
	return ok && bytes <= limit && 2*bytes <= b.SendBuffer()
}
