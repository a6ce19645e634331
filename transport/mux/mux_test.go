package mux_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/mem"
	"github.com/collkit/collkit/transport/mux"
	"github.com/collkit/collkit/transport/transporttest"
)

// members is the parent ranks of a view of size out of a parent of size+2,
// reversed and shifted so that view and parent ranks differ and two parent
// ranks stay out.
func members(size int) []int {
	ranks := make([]int, size)
	for i := range ranks {
		ranks[i] = size - i
	}
	return ranks
}

// views opens communicator comm on every member of a fresh parent world.
func views(t testing.TB, world algotest.World, size int, comm uint32) []transport.Transport {
	parents := world(t, size+2)
	ranks := members(size)
	out := make([]transport.Transport, size)
	for i, pr := range ranks {
		m := mux.New(parents[pr])
		t.Cleanup(func() { m.Close() })
		v, err := m.Open(comm, ranks)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = v
	}
	return out
}

func TestConformanceMem(t *testing.T) {
	transporttest.Run(t, func(t testing.TB, size int) []transport.Transport {
		return views(t, algotest.MemWorld, size, 9)
	})
}

func TestConformanceTCP(t *testing.T) {
	transporttest.Run(t, func(t testing.TB, size int) []transport.Transport {
		return views(t, algotest.TCPWorld, size, 9)
	})
}

// Three views that share pairs of ranks stream messages around their own
// rings at the same time; every message arrives in its view, in order, with
// its bytes intact.
func TestConcurrentViews(t *testing.T) {
	for name, world := range map[string]algotest.World{"mem": algotest.MemWorld, "tcp": algotest.TCPWorld} {
		t.Run(name, func(t *testing.T) {
			parents := world(t, 4)
			ms := make([]*mux.Mux, 4)
			for r, p := range parents {
				ms[r] = mux.New(p)
				t.Cleanup(func() { ms[r].Close() })
			}
			groups := map[uint32][]int{1: {0, 1, 2, 3}, 2: {3, 1}, 3: {1, 3, 0}}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			errs := make(chan error, 16)
			for comm, ranks := range groups {
				for _, pr := range ranks {
					v, err := ms[pr].Open(comm, ranks)
					if err != nil {
						t.Fatal(err)
					}
					wg.Go(func() {
						if err := ringTraffic(ctx, v, comm); err != nil {
							errs <- fmt.Errorf("comm %d rank %d: %w", comm, v.Rank(), err)
							cancel()
						}
					})
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

// ringTraffic sends 200 messages of varying length to the right neighbour
// and checks the 200 from the left, sending on its own goroutine.
func ringTraffic(ctx context.Context, v *mux.Transport, comm uint32) error {
	n, r := v.Size(), v.Rank()
	if n == 1 {
		return nil
	}
	const rounds = 200
	msg := func(from, i int) []byte {
		b := make([]byte, (i*97+int(comm)*13)%5000)
		for j := range b {
			b[j] = byte(from*31 + i*7 + j + int(comm))
		}
		return b
	}
	h := func(i int) transport.Header {
		return transport.Header{Seq: uint64(i), Coll: transport.CollSendRecv, Comm: comm, Step: uint32(i)}
	}
	sendErr := make(chan error, 1)
	go func() {
		for i := range rounds {
			if err := v.Send(ctx, (r+1)%n, h(i), msg(r, i)); err != nil {
				sendErr <- err
				return
			}
		}
		sendErr <- nil
	}()
	left := (r - 1 + n) % n
	for i := range rounds {
		want := msg(left, i)
		got := make([]byte, len(want))
		if err := v.Recv(ctx, left, h(i), got); err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("message %d from %d: wrong bytes", i, left)
		}
	}
	return <-sendErr
}

// A message sent before the receiver opened its view waits for it.
func TestOpenLate(t *testing.T) {
	parents := algotest.MemWorld(t, 2)
	m0, m1 := mux.New(parents[0]), mux.New(parents[1])
	defer m0.Close()
	defer m1.Close()
	v1, err := m1.Open(5, []int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	h := transport.Header{Coll: transport.CollBroadcast}
	if err := v1.Send(ctx, 0, h, []byte("early")); err != nil {
		t.Fatal(err)
	}
	v0, err := m0.Open(5, []int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	if err := v0.Recv(ctx, 1, h, got); err != nil || string(got) != "early" {
		t.Fatalf("got %q, %v; want \"early\"", got, err)
	}
	if _, err := m0.Open(5, []int{0, 1}); err == nil {
		t.Error("opened communicator 5 twice")
	}
	if _, err := m0.Open(6, []int{1}); err == nil {
		t.Error("opened a view that leaves this rank out")
	}
}

// A broken link fails the receives of every view that waits on it.
func TestLinkCut(t *testing.T) {
	net := mem.NewNetwork(2, mem.Config{})
	defer net.Close()
	m0, m1 := mux.New(net.Transport(0)), mux.New(net.Transport(1))
	defer m0.Close()
	defer m1.Close()
	a, _ := m0.Open(1, []int{0, 1})
	b, _ := m0.Open(2, []int{1, 0})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	go func() { errs <- a.Recv(ctx, 1, transport.Header{}, make([]byte, 4)) }()
	go func() { errs <- b.Recv(ctx, 0, transport.Header{}, make([]byte, 4)) }()
	net.Cut(0, 1)
	for range 2 {
		if err := <-errs; !errors.Is(err, transport.ErrPeerGone) {
			t.Errorf("got %v, want ErrPeerGone", err)
		}
	}
}
