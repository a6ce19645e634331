package tree_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/tree"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/mem"
	"github.com/collkit/collkit/transport/tcp"
)

func TestAllReduceMem(t *testing.T) {
	algotest.AllReduce(t, tree.AllReduce, algotest.MemWorld)
}

// Tiny segments force many pipelined messages per tree, with halves of
// different segment counts, on the one-goroutine path and (EagerBytes -1)
// on the goroutines, which the main table reaches only with its largest
// count.
func TestAllReduceMemTinySegments(t *testing.T) {
	counts := []int{0, 1, 5, 17, 100, 1001}
	t.Run("eager=0", func(t *testing.T) {
		algotest.AllReduceWith(t, tree.Config{SegmentBytes: 24}.AllReduce, algotest.MemWorld, algotest.Options{Counts: counts})
	})
	t.Run("eager=-1", func(t *testing.T) {
		algotest.AllReduceWith(t, tree.Config{SegmentBytes: 24, EagerBytes: -1}.AllReduce, algotest.MemWorld, algotest.Options{
			Counts: counts,
			DTypes: []reduce.DType{reduce.Float32, reduce.Int64, reduce.BFloat16},
		})
	})
}

// Larger worlds than the table's, odd and even, on both paths.
func TestAllReduceMemLargeWorlds(t *testing.T) {
	for _, eager := range []int{0, -1} {
		t.Run(fmt.Sprintf("eager=%d", eager), func(t *testing.T) {
			algotest.AllReduceWith(t, tree.Config{SegmentBytes: 64, EagerBytes: eager}.AllReduce, algotest.MemWorld, algotest.Options{
				Sizes:  []int{9, 12, 16, 17, 31, 32, 33},
				Counts: []int{1, 3, 100},
				DTypes: []reduce.DType{reduce.Float32},
			})
		})
	}
}

// rendezvous makes every Send wait until the receiver has started the
// matching Recv: the least buffering the transport contract allows. It hides
// transport.Buffered, so the pipelined path runs, and a message order the two
// ends disagree on, or a wait cycle between ranks, deadlocks instead of
// hiding in a queue.
type rendezvous struct {
	transport.Transport
	links []*rendezvousLink // by sender*n+receiver, shared by the world
}

type rendezvousLink struct {
	sent    atomic.Int64 // messages sent, written by the sender only
	started atomic.Int64 // receives started
	mu      sync.Mutex
	wake    chan struct{} // closed and replaced whenever started grows
}

func (l *rendezvousLink) changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.wake
}

func (t *rendezvous) link(src, dst int) *rendezvousLink { return t.links[src*t.Size()+dst] }

func (t *rendezvous) Send(ctx context.Context, peer int, h transport.Header, p []byte) error {
	if err := t.Transport.Send(ctx, peer, h, p); err != nil {
		return err
	}
	l := t.link(t.Rank(), peer)
	seq := l.sent.Add(1)
	for {
		wake := l.changed()
		if l.started.Load() >= seq {
			return nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (t *rendezvous) Recv(ctx context.Context, peer int, h transport.Header, p []byte) error {
	l := t.link(peer, t.Rank())
	l.mu.Lock()
	l.started.Add(1)
	close(l.wake)
	l.wake = make(chan struct{})
	l.mu.Unlock()
	return t.Transport.Recv(ctx, peer, h, p)
}

func rendezvousWorld(t testing.TB, n int) []transport.Transport {
	ts := algotest.MemWorld(t, n)
	links := make([]*rendezvousLink, n*n)
	for i := range links {
		links[i] = &rendezvousLink{wake: make(chan struct{})}
	}
	out := make([]transport.Transport, n)
	for r, tr := range ts {
		out[r] = &rendezvous{Transport: tr, links: links}
	}
	return out
}

func TestAllReduceRendezvous(t *testing.T) {
	algotest.AllReduceWith(t, tree.Config{SegmentBytes: 24}.AllReduce, rendezvousWorld, algotest.Options{
		Sizes:  []int{1, 2, 3, 4, 5, 6, 7, 8, 13, 16, 32, 33},
		Counts: []int{0, 1, 7, 100, 1001},
		DTypes: []reduce.DType{reduce.Float32},
	})
}

// unbuffered hides transport.Buffered.
type unbuffered struct{ transport.Transport }

// Ranks may choose different paths (a transport's SendBuffer is per rank):
// the one-goroutine and pipelined paths put the same messages on every link
// in the same order.
func TestAllReduceMixedPaths(t *testing.T) {
	mixed := func(t testing.TB, n int) []transport.Transport {
		ts := algotest.MemWorld(t, n)
		for r := range ts {
			if r%2 == 1 {
				ts[r] = unbuffered{ts[r]}
			}
		}
		return ts
	}
	algotest.AllReduceWith(t, tree.Config{SegmentBytes: 24}.AllReduce, mixed, algotest.Options{
		Sizes:  []int{2, 3, 4, 5, 8, 11},
		Counts: []int{1, 7, 100},
		DTypes: []reduce.DType{reduce.Float32},
	})
}

// The same table over real loopback sockets.
func TestAllReduceTCP(t *testing.T) {
	algotest.AllReduceWith(t, tree.AllReduce, algotest.TCPWorldWith(tcp.Config{}), algotest.Options{
		Counts: []int{0, 1, 7, 1000, 65537},
	})
}

// Small socket buffers and segments larger than them make Sends wait for
// their receivers, over several streams per peer.
func TestAllReduceTCPFlowControl(t *testing.T) {
	algotest.AllReduceWith(t, tree.Config{SegmentBytes: 192 << 10}.AllReduce,
		algotest.TCPWorldWith(tcp.Config{SocketBuffer: 32 << 10, Streams: 2}), algotest.Options{
			Sizes:  []int{2, 3, 4, 7},
			Counts: []int{1, 10007, 300007},
			DTypes: []reduce.DType{reduce.Float32},
			Ops:    []reduce.Op{reduce.Sum, reduce.Avg},
		})
}

// TestAllReduceKill kills one rank while the others run and checks that
// every other rank returns an error instead of waiting forever. Each rank
// closes its transport when its collective fails, as collkit.Comm does
// (errors are fatal to a communicator), which is how a failure reaches
// ranks that never talk to the dead one.
func TestAllReduceKill(t *testing.T) {
	for _, tc := range []struct {
		name  string
		n     int
		count int
		cfg   tree.Config
		after int // the victim dies after this many Sends; -1 before starting
	}{
		{"one-goroutine/before", 5, 16, tree.Config{}, -1},
		{"one-goroutine/during", 6, 16, tree.Config{SegmentBytes: 8}, 1},
		{"pipelined/before", 5, 1 << 16, tree.Config{SegmentBytes: 1024}, -1},
		{"pipelined/during", 8, 1 << 16, tree.Config{SegmentBytes: 1024}, 7},
	} {
		for victim := range tc.n {
			t.Run(fmt.Sprintf("%s/n=%d/victim=%d", tc.name, tc.n, victim), func(t *testing.T) {
				killTest(t, tc.n, tc.count, tc.cfg, victim, tc.after)
			})
		}
	}
}

// killer kills its rank after a number of Sends.
type killer struct {
	transport.Transport
	net   *mem.Network
	sends atomic.Int64
	after int64
}

func (k *killer) Send(ctx context.Context, peer int, h transport.Header, p []byte) error {
	if k.sends.Add(1) > k.after {
		k.net.Kill(k.Rank())
	}
	return k.Transport.Send(ctx, peer, h, p)
}

// SendBuffer keeps the one-goroutine path available.
func (k *killer) SendBuffer() int { return k.Transport.(transport.Buffered).SendBuffer() }

func killTest(t *testing.T, n, count int, cfg tree.Config, victim, after int) {
	net := mem.NewNetwork(n, mem.Config{})
	defer net.Close()
	ts := net.Transports()
	if after < 0 {
		net.Kill(victim)
	} else {
		ts[victim] = &killer{Transport: ts[victim], net: net, after: int64(after)}
	}
	// The collective's own deadline is far away: the test wants the failure
	// to spread, not the deadline to end it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := transport.Header{Seq: 1, Count: uint64(count), Root: -1, Coll: transport.CollAllReduce,
		DType: reduce.Float32, Op: reduce.Sum}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, tr := range ts {
		if r == victim && after < 0 {
			continue
		}
		wg.Go(func() {
			buf := make([]byte, 4*count)
			errs[r] = cfg.AllReduce(ctx, tr, h, buf, buf)
			if errs[r] != nil {
				tr.Close()
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		cancel()
		<-done
		t.Fatalf("ranks still waiting 20 s after rank %d died; errors after cancelling: %v", victim, errs)
	}
	for r, err := range errs {
		if r == victim {
			continue
		}
		if err == nil {
			t.Errorf("rank %d: no error although rank %d died", r, victim)
			continue
		}
		if !errors.Is(err, transport.ErrPeerGone) && !errors.Is(err, transport.ErrClosed) {
			t.Errorf("rank %d: %v; want an error wrapping ErrPeerGone or ErrClosed", r, err)
		}
		if !strings.HasPrefix(err.Error(), "tree ") {
			t.Errorf("rank %d: %v; want it to say which tree, phase and segment", r, err)
		}
	}
}

// A failure of one rank leaves no goroutine of the algorithm behind on the
// others: once AllReduce has returned, none of its frames may be on any
// goroutine's stack.
func TestAllReduceKillNoLeak(t *testing.T) {
	killTest(t, 8, 1<<16, tree.Config{SegmentBytes: 1024}, 3, 7)
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for line := range strings.Lines(string(buf)) {
		if strings.Contains(line, "algo/tree.(*run)") && !strings.HasPrefix(line, "created by") {
			t.Fatalf("a goroutine of the algorithm is still running:\n%s", buf)
		}
	}
}

// Caller cancellation ends the collective on every rank.
func TestAllReduceCancel(t *testing.T) {
	ts := algotest.MemWorld(t, 4)
	ctx, cancel := context.WithCancel(context.Background())
	h := transport.Header{Seq: 1, Count: 1 << 16, Root: -1, Coll: transport.CollAllReduce, DType: reduce.Float32, Op: reduce.Sum}
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for r, tr := range ts[:3] { // rank 3 never joins
		wg.Go(func() {
			buf := make([]byte, 4<<16)
			errs[r] = tree.AllReduce(ctx, tr, h, buf, buf)
		})
	}
	cancel()
	wg.Wait()
	for r, err := range errs[:3] {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("rank %d: %v, want context.Canceled", r, err)
		}
	}
}

func TestAllReduceBadArguments(t *testing.T) {
	ts := algotest.MemWorld(t, 1)
	h := transport.Header{Seq: 1, Coll: transport.CollAllReduce, DType: reduce.Float32, Op: reduce.Sum}
	if err := tree.AllReduce(context.Background(), ts[0], h, make([]byte, 8), make([]byte, 4)); err == nil {
		t.Error("buffers of different sizes: no error")
	}
	if err := tree.AllReduce(context.Background(), ts[0], h, make([]byte, 6), make([]byte, 6)); err == nil {
		t.Error("buffer not a whole number of elements: no error")
	}
	h.Op = 0
	if err := tree.AllReduce(context.Background(), ts[0], h, make([]byte, 8), make([]byte, 8)); err == nil {
		t.Error("invalid op: no error")
	}
}
