package pipeline_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/collkit/collkit/algo/pipeline"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/mem"
)

func TestSegmentBytes(t *testing.T) {
	for _, c := range []struct{ configured, def, es, want int }{
		{0, 64, 4, 64},
		{-1, 64, 4, 64},
		{10, 64, 4, 8},
		{3, 64, 4, 4},
		{6, 64, 8, 8},
		{1 << 20, 64, 2, 1 << 20},
	} {
		if got := pipeline.SegmentBytes(c.configured, c.def, c.es); got != c.want {
			t.Errorf("SegmentBytes(%d, %d, %d) = %d, want %d", c.configured, c.def, c.es, got, c.want)
		}
	}
}

func TestCheckAllReduce(t *testing.T) {
	h := transport.Header{DType: reduce.Float32, Op: reduce.Sum}
	if es, err := pipeline.CheckAllReduce(h, make([]byte, 8), make([]byte, 8)); es != 4 || err != nil {
		t.Fatalf("valid call: es %d, err %v; want 4, nil", es, err)
	}
	for _, c := range []struct {
		h          transport.Header
		send, recv int
		want       string
	}{
		{transport.Header{DType: reduce.Float32, Op: reduce.Sum}, 8, 4, "send is 8 bytes and recv 4 bytes"},
		{transport.Header{DType: reduce.Float32, Op: reduce.Sum}, 6, 6, "same multiple of 4"},
		{transport.Header{DType: reduce.DType(200), Op: reduce.Sum}, 8, 8, "invalid dtype"},
		{transport.Header{DType: reduce.Float32, Op: reduce.Op(200)}, 8, 8, "invalid dtype"},
	} {
		_, err := pipeline.CheckAllReduce(c.h, make([]byte, c.send), make([]byte, c.recv))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %v send %d recv %d: got %v, want an error containing %q", c.h.DType, c.h.Op, c.send, c.recv, err, c.want)
		}
	}
}

func TestAllReduceAlone(t *testing.T) {
	h := transport.Header{DType: reduce.Int32, Op: reduce.Avg}
	send := reduce.Bytes([]int32{6, -9})
	recv := make([]byte, len(send))
	if pipeline.AllReduceAlone(2, h, send, recv) {
		t.Fatal("2 ranks with data: AllReduceAlone did the all-reduce")
	}
	if !pipeline.AllReduceAlone(1, h, send, recv) || !bytes.Equal(recv, send) {
		t.Fatalf("1 rank: recv %v, want a copy of send %v", recv, send)
	}
	if !pipeline.AllReduceAlone(3, h, nil, nil) {
		t.Fatal("empty buffer: AllReduceAlone did not finish it")
	}
}

// buffered is a transport that reports a send buffer of n bytes.
type buffered struct {
	transport.Transport
	n int
}

func (b buffered) SendBuffer() int { return b.n }

func TestEager(t *testing.T) {
	net := mem.NewNetwork(2, mem.Config{})
	defer net.Close()
	tr := buffered{net.Transports()[0], 1000}
	for _, c := range []struct {
		t           transport.Transport
		bytes, most int
		want        bool
	}{
		{tr, 500, 1000, true},
		{tr, 501, 1000, false}, // twice must fit the buffer
		{tr, 400, 399, false},  // above the configured limit
		{tr, 0, 1000, true},
		{struct{ transport.Transport }{tr.Transport}, 8, 1000, false}, // not Buffered
	} {
		if got := pipeline.Eager(c.t, c.bytes, c.most); got != c.want {
			t.Errorf("Eager(%T, %d, %d) = %v, want %v", c.t, c.bytes, c.most, got, c.want)
		}
	}
}
