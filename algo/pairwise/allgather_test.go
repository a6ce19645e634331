package pairwise_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/pairwise"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/verify"
)

// testAllGather checks every block of every rank's result, out of place
// and in place (send is recv's own block).
func testAllGather(t *testing.T, world algotest.World, sizes, counts []int, hide bool) {
	eachCase(t, world, sizes, counts, hide, transport.CollAllGather, func(ctx context.Context, tr transport.Transport, h transport.Header, r, n, count int, inPlace bool) error {
		dt, bs := h.DType, count*h.DType.Size()
		recv := make([]byte, n*bs)
		for i := range recv {
			recv[i] = 0xEE // what a lost block would leave
		}
		send := recv[r*bs : (r+1)*bs]
		if !inPlace {
			send = make([]byte, bs)
		}
		verify.Fill(dt, reduce.Sum, send, h.Seq, r)
		if err := pairwise.AllGather(ctx, tr, h, send, recv); err != nil {
			return err
		}
		want := make([]byte, bs)
		for k := range n {
			verify.Fill(dt, reduce.Sum, want, h.Seq, k)
			if w := verify.Wrong(dt, recv[k*bs:(k+1)*bs], want); w > 0 {
				return fmt.Errorf("rank %d: block of rank %d: %d wrong", r, k, w)
			}
		}
		return nil
	})
}

func TestAllGatherMem(t *testing.T) {
	testAllGather(t, algotest.MemWorld, []int{1, 2, 3, 4, 5, 8}, []int{0, 1, 5, 999}, false)
}

func TestAllGatherMemUnbuffered(t *testing.T) {
	testAllGather(t, algotest.MemWorld, []int{2, 5, 8}, []int{1, 999}, true)
}

func TestAllGatherTCP(t *testing.T) {
	testAllGather(t, algotest.TCPWorld, []int{3, 4}, []int{1, 300001}, false)
}

func TestAllGatherBadSizes(t *testing.T) {
	ts := algotest.MemWorld(t, 3)
	err := pairwise.AllGather(context.Background(), ts[0], transport.Header{}, make([]byte, 4), make([]byte, 8))
	if err == nil {
		t.Fatal("recv of 8 bytes for 3 blocks of 4: no error")
	}
	if want := "rank 0"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name %q", err, want)
	}
}
