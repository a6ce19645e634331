package ring_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/ring"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/verify"
)

// testBroadcast broadcasts from every root and checks every rank's buffer.
func testBroadcast(t *testing.T, c ring.Config, world func(testing.TB, int) []transport.Transport, sizes, lengths []int) {
	for _, n := range sizes {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			ts := world(t, n)
			var seq uint64
			for root := range n {
				for _, length := range lengths {
					seq++
					if err := broadcastOnce(c, ts, seq, root, length); err != nil {
						t.Fatalf("root %d, %d bytes: %v", root, length, err)
					}
				}
			}
		})
	}
}

func broadcastOnce(c ring.Config, ts []transport.Transport, seq uint64, root, length int) error {
	want := make([]byte, length)
	verify.Fill(reduce.Uint8, reduce.Sum, want, seq, root)
	h := transport.Header{Seq: seq, Count: uint64(length), Coll: transport.CollBroadcast, DType: reduce.Uint8}
	return algotest.OnEveryRank(ts, func(ctx context.Context, r int, tr transport.Transport) error {
		buf := algotest.Poisoned(length)
		if r == root {
			copy(buf, want)
		}
		if err := c.Broadcast(ctx, tr, h, buf, root); err != nil {
			return err
		}
		if w := verify.Wrong(reduce.Uint8, buf, want); w > 0 {
			return fmt.Errorf("%d of %d bytes wrong", w, length)
		}
		return nil
	})
}

var broadcastLengths = []int{0, 1, 7, 1000, 4099, 65537}

func TestBroadcastMem(t *testing.T) {
	testBroadcast(t, ring.Config{}, algotest.MemWorld, []int{1, 2, 3, 4, 5, 6, 7, 8}, broadcastLengths)
}

// Small segments and no one-goroutine path: the sender goroutine forwards
// while the next segments arrive.
func TestBroadcastMemPipelined(t *testing.T) {
	testBroadcast(t, ring.Config{SegmentBytes: 100, EagerBytes: -1}, algotest.MemWorld, []int{2, 3, 5, 8}, broadcastLengths)
}

func TestBroadcastTCP(t *testing.T) {
	testBroadcast(t, ring.Config{SegmentBytes: 64 << 10}, algotest.TCPWorld, []int{2, 3, 4}, []int{0, 13, 1 << 20})
}

func TestBroadcastArguments(t *testing.T) {
	ts := algotest.MemWorld(t, 3)
	for _, root := range []int{-1, 3} {
		err := ring.Broadcast(context.Background(), ts[0], transport.Header{}, make([]byte, 4), root)
		if err == nil || !strings.Contains(err.Error(), "is not a rank of 3") {
			t.Errorf("root %d: got %v, want an error naming the bad root", root, err)
		}
	}
}

// Ranks that disagree on the root get a mismatch error where a message
// passes between them.
func TestBroadcastRootsDisagree(t *testing.T) {
	ts := algotest.MemWorld(t, 3)
	err := algotest.OnEveryRank(ts, func(ctx context.Context, r int, tr transport.Transport) error {
		root := 0
		if r == 1 {
			root = 2 // waits for rank 0, which sends as root 0
		}
		return ring.Broadcast(ctx, tr, transport.Header{Coll: transport.CollBroadcast}, make([]byte, 8), root)
	})
	if !errors.Is(err, transport.ErrMismatch) {
		t.Fatalf("got %v, want a mismatch error", err)
	}
}
