package pipeline_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
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
	if pipeline.AllReduceAlone(3, h, nil, nil) {
		t.Fatal("empty buffer on 3 ranks: AllReduceAlone finished it without the ranks agreeing")
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

// Two ranks that both send a message their transport does not buffer meet
// each other's header instead of waiting on each other's send.
func TestExchangeBothSend(t *testing.T) {
	net := mem.NewNetwork(2, mem.Config{})
	defer net.Close()
	h := transport.Header{Seq: 1, Coll: transport.CollBroadcast, Count: 3}
	errs := make([]error, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for r, tr := range net.Transports() {
		wg.Go(func() {
			// Each expects a header only but gets 12 bytes: a mismatch. A
			// rank that fails stops the other, as a communicator's abort
			// would (its own send may then never go out).
			errs[r] = pipeline.Exchange(ctx, buffered{tr, 0}, h, 1-r, make([]byte, 12), 1-r, nil)
			if errs[r] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	if !errors.Is(errs[0], transport.ErrMismatch) && !errors.Is(errs[1], transport.ErrMismatch) {
		t.Errorf("no rank saw the mismatch: %v", errs)
	}
	fresh := mem.NewNetwork(2, mem.Config{})
	defer fresh.Close()
	for r, tr := range fresh.Transports() {
		wg.Go(func() {
			in := make([]byte, 4)
			errs[r] = pipeline.Exchange(context.Background(), buffered{tr, 0}, h, 1-r, []byte{1, 2, 3, byte(r)}, 1-r, in)
			if errs[r] == nil && in[3] != byte(1-r) {
				errs[r] = fmt.Errorf("got %v", in)
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d, matching exchange: %v", r, err)
		}
	}
}
