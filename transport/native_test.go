package transport_test

import (
	"strings"
	"testing"

	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
)

func TestCheckNative(t *testing.T) {
	const size = 3
	b := func(elems int) []byte { return make([]byte, 8*elems) } // float64
	h := func(count int, op reduce.Op, root int32) transport.Header {
		return transport.Header{Count: uint64(count), DType: reduce.Float64, Op: op, Root: root}
	}
	for _, c := range []struct {
		name       string
		coll       transport.Coll
		h          transport.Header
		send, recv []byte
		want       string // "" means no error
	}{
		{"allreduce", transport.CollAllReduce, h(5, reduce.Sum, -1), b(5), b(5), ""},
		{"allreduce empty", transport.CollAllReduce, h(0, reduce.Sum, -1), nil, nil, ""},
		{"allreduce count", transport.CollAllReduce, h(4, reduce.Sum, -1), b(5), b(5), "send is 40 bytes and recv 40 bytes; both must hold the header's count of 4 float64 elements (8 bytes each)"},
		{"allreduce lengths", transport.CollAllReduce, h(5, reduce.Sum, -1), b(5), b(4), "send is 40 bytes and recv 32 bytes"},
		{"allreduce partial element", transport.CollAllReduce, h(5, reduce.Sum, -1), b(5)[3:], b(5)[3:], "send is 37 bytes"},
		{"allreduce op", transport.CollAllReduce, h(5, 0, -1), b(5), b(5), "invalid reduction op"},
		{"allreduce dtype", transport.CollAllReduce, transport.Header{Count: 5, Op: reduce.Sum}, b(5), b(5), "invalid dtype"},
		{"broadcast", transport.CollBroadcast, h(5, 0, 2), b(5), b(5), ""},
		{"broadcast root", transport.CollBroadcast, h(5, 0, 3), b(5), b(5), "root 3 is outside [0, 3)"},
		{"broadcast negative root", transport.CollBroadcast, h(5, 0, -1), b(5), b(5), "root -1 is outside [0, 3)"},
		{"reduce", transport.CollReduce, h(5, reduce.Max, 0), b(5), b(5), ""},
		{"reduce root", transport.CollReduce, h(5, reduce.Max, 7), b(5), b(5), "root 7 is outside [0, 3)"},
		{"reduce op", transport.CollReduce, h(5, 0, 0), b(5), b(5), "invalid reduction op"},
		{"allgather", transport.CollAllGather, h(6, 0, -1), b(2), b(6), ""},
		{"allgather count", transport.CollAllGather, h(9, 0, -1), b(2), b(6), "recv is 48 bytes and send 16 bytes; recv must hold the header's count of 9 float64 elements (8 bytes each) and send one of 3 equal shares of it"},
		{"allgather share", transport.CollAllGather, h(6, 0, -1), b(3), b(6), "recv is 48 bytes and send 24 bytes"},
		{"allgather uneven", transport.CollAllGather, h(7, 0, -1), b(2), b(7), "recv is 56 bytes and send 16 bytes"},
		{"reducescatter", transport.CollReduceScatter, h(6, reduce.Sum, -1), b(6), b(2), ""},
		{"reducescatter share", transport.CollReduceScatter, h(6, reduce.Sum, -1), b(6), b(6), "send is 48 bytes and recv 48 bytes; send must hold the header's count of 6 float64 elements (8 bytes each) and recv one of 3 equal shares of it"},
		{"reducescatter op", transport.CollReduceScatter, h(6, 0, -1), b(6), b(2), "invalid reduction op"},
		{"not native", transport.CollGather, h(6, 0, 0), b(2), b(6), "gather is not a native collective"},
	} {
		es, err := transport.CheckNative(c.coll, c.h, size, c.send, c.recv)
		switch {
		case c.want == "" && (err != nil || es != 8):
			t.Errorf("%s: element size %d, error %v; want 8, nil", c.name, es, err)
		case c.want != "" && (err == nil || es != 0):
			t.Errorf("%s: element size %d, error %v; want 0 and an error with %q", c.name, es, err, c.want)
		case c.want != "" && !strings.Contains(err.Error(), c.want):
			t.Errorf("%s: %q, want it to contain %q", c.name, err, c.want)
		}
	}
}
