package mem_test

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/mem"
	"github.com/collkit/collkit/transport/transporttest"
)

func world(cfg mem.Config) transporttest.World {
	return func(t testing.TB, size int) []transport.Transport {
		n := mem.NewNetwork(size, cfg)
		t.Cleanup(func() { n.Close() })
		return n.Transports()
	}
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, world(mem.Config{}))
}

// Delays exercise the timer path of Recv under real scheduling.
func TestConformanceDelayed(t *testing.T) {
	transporttest.Run(t, world(mem.Config{Seed: 3, Delay: 50 * time.Microsecond}))
}

var hdr = transport.Header{Seq: 1, Coll: transport.CollSendRecv}

// drops sends 200 numbered messages on each of three links and returns, per
// link, the numbers that arrived. With concurrent set every link's sender is
// its own goroutine; otherwise one goroutine interleaves them.
func drops(t *testing.T, seed int64, concurrent bool) [][]int {
	const msgs = 200
	n := mem.NewNetwork(3, mem.Config{Seed: seed, Drop: 0.3})
	defer n.Close()
	ts := n.Transports()
	links := [][2]int{{1, 0}, {2, 0}, {0, 1}}
	send := func(l [2]int, i int) {
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], uint32(i))
		if err := ts[l[0]].Send(t.Context(), l[1], hdr, b[:]); err != nil {
			t.Errorf("send %v: %v", l, err)
		}
	}
	if concurrent {
		for _, l := range links {
			go func() {
				for i := range msgs {
					send(l, i)
				}
			}()
		}
	} else {
		for i := range msgs {
			for _, l := range slices.Backward(links) {
				send(l, i)
			}
		}
	}
	got := make([][]int, len(links))
	done := make(chan struct{})
	for k, l := range links {
		go func() {
			defer func() { done <- struct{}{} }()
			// Under synctest the deadline passes as soon as every goroutine
			// waits, that is once the link is drained.
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			var b [4]byte
			for {
				err := ts[l[1]].Recv(ctx, l[0], hdr, b[:])
				if errors.Is(err, context.DeadlineExceeded) {
					return
				}
				if err != nil {
					t.Errorf("recv %v: %v", l, err)
					return
				}
				got[k] = append(got[k], int(binary.LittleEndian.Uint32(b[:])))
			}
		}()
	}
	for range links {
		<-done
	}
	return got
}

func TestDropIsDeterministic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := drops(t, 1, true)
		b := drops(t, 1, false)
		c := drops(t, 2, true)
		for k := range a {
			if !slices.IsSorted(a[k]) {
				t.Errorf("link %d delivered out of order: %v", k, a[k])
			}
			if n := len(a[k]); n < 100 || n > 180 {
				t.Errorf("link %d delivered %d of 200 messages with Drop 0.3", k, n)
			}
			if !slices.Equal(a[k], b[k]) {
				t.Errorf("seed 1 dropped different messages on link %d when scheduled differently:\n%v\n%v", k, a[k], b[k])
			}
			if slices.Equal(a[k], c[k]) {
				t.Errorf("seeds 1 and 2 dropped the same messages on link %d", k)
			}
		}
		if slices.Equal(a[0], a[1]) {
			t.Errorf("links 1->0 and 2->0 dropped the same messages; each link needs its own random source")
		}
	})
}

// delays sends 100 messages at once on a link with Delay and returns how
// long after the send each one arrived.
func delays(t *testing.T, seed int64, delay time.Duration) []time.Duration {
	n := mem.NewNetwork(2, mem.Config{Seed: seed, Delay: delay})
	defer n.Close()
	ts := n.Transports()
	start := time.Now()
	for i := range 100 {
		h := hdr
		h.Step = uint32(i)
		if err := ts[0].Send(t.Context(), 1, h, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	var at []time.Duration
	for i := range 100 {
		h := hdr
		h.Step = uint32(i)
		b := []byte{0}
		if err := ts[1].Recv(t.Context(), 0, h, b); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if b[0] != byte(i) {
			t.Fatalf("message %d carries %d", i, b[0])
		}
		at = append(at, time.Since(start))
	}
	return at
}

func TestDelayKeepsOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const delay = 10 * time.Millisecond
		a := delays(t, 1, delay) // Recv checks the order through the Step of each header
		if a[len(a)-1] > delay {
			t.Errorf("last message arrived %v after it was sent, more than Delay %v", a[len(a)-1], delay)
		}
		if a[0] == 0 || a[len(a)-1] < delay/2 {
			t.Errorf("messages were not delayed: first after %v, last after %v", a[0], a[len(a)-1])
		}
		if b := delays(t, 1, delay); !slices.Equal(a, b) {
			t.Errorf("seed 1 delayed messages differently on a second run:\n%v\n%v", a, b)
		}
	})
}

// blockedRecv starts a Recv and waits until it blocks.
func blockedRecv(tr transport.Transport, peer int) <-chan error {
	res := make(chan error, 1)
	go func() { res <- tr.Recv(context.Background(), peer, hdr, make([]byte, 1)) }()
	synctest.Wait()
	return res
}

// wantErr fails t unless err is a *transport.PeerError naming peer and
// wrapping target.
func wantErr(t *testing.T, what string, err error, peer int, target error) {
	t.Helper()
	var pe *transport.PeerError
	switch {
	case !errors.Is(err, target):
		t.Errorf("%s: got %v, want an error wrapping %v", what, err, target)
	case !errors.As(err, &pe) || pe.Rank != peer:
		t.Errorf("%s: got %v, want a *transport.PeerError naming rank %d", what, err, peer)
	}
}

// exchange checks that a message gets from rank a to rank b.
func exchange(t *testing.T, ts []transport.Transport, a, b int) {
	t.Helper()
	if err := ts[a].Send(t.Context(), b, hdr, []byte{7}); err != nil {
		t.Errorf("send %d->%d: %v", a, b, err)
	}
	p := []byte{0}
	if err := ts[b].Recv(t.Context(), a, hdr, p); err != nil || p[0] != 7 {
		t.Errorf("recv %d->%d: %v, payload %d", a, b, err, p[0])
	}
}

func TestCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := mem.NewNetwork(3, mem.Config{})
		defer n.Close()
		ts := n.Transports()
		at0, at1 := blockedRecv(ts[0], 1), blockedRecv(ts[1], 0)
		n.Cut(0, 1)
		wantErr(t, "rank 0's Recv from 1 during Cut", <-at0, 1, transport.ErrPeerGone)
		wantErr(t, "rank 1's Recv from 0 during Cut", <-at1, 0, transport.ErrPeerGone)
		wantErr(t, "Send 0->1 after Cut", ts[0].Send(t.Context(), 1, hdr, []byte{1}), 1, transport.ErrPeerGone)
		wantErr(t, "Send 1->0 after Cut", ts[1].Send(t.Context(), 0, hdr, []byte{1}), 0, transport.ErrPeerGone)
		n.Cut(1, 0) // twice is fine
		exchange(t, ts, 0, 2)
		exchange(t, ts, 2, 1)
	})
}

func TestCutLosesMessagesInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := mem.NewNetwork(2, mem.Config{Delay: time.Second})
		defer n.Close()
		ts := n.Transports()
		for range 3 {
			if err := ts[0].Send(t.Context(), 1, hdr, []byte{1}); err != nil {
				t.Fatal(err)
			}
		}
		n.Cut(0, 1)
		wantErr(t, "Recv of a message sent before Cut", ts[1].Recv(t.Context(), 0, hdr, []byte{0}), 0, transport.ErrPeerGone)
	})
}

func TestKill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := mem.NewNetwork(3, mem.Config{})
		defer n.Close()
		ts := n.Transports()
		own, from0, from2 := blockedRecv(ts[1], 0), blockedRecv(ts[0], 1), blockedRecv(ts[2], 1)
		n.Kill(1)
		wantErr(t, "the killed rank's own Recv", <-own, 0, transport.ErrClosed)
		err := <-from0
		wantErr(t, "rank 0's Recv from the killed rank", err, 1, transport.ErrPeerGone)
		if err != nil && !strings.Contains(err.Error(), "killed") {
			t.Errorf("error %q does not say that rank 1 was killed", err)
		}
		wantErr(t, "rank 2's Recv from the killed rank", <-from2, 1, transport.ErrPeerGone)
		wantErr(t, "Send to the killed rank", ts[0].Send(t.Context(), 1, hdr, []byte{1}), 1, transport.ErrPeerGone)
		wantErr(t, "Send by the killed rank", ts[1].Send(t.Context(), 2, hdr, []byte{1}), 2, transport.ErrClosed)
		exchange(t, ts, 0, 2)
		exchange(t, ts, 2, 0)
	})
}

// A transport's Close is orderly: what it sent before still arrives.
func TestCloseDeliversWhatWasSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := mem.NewNetwork(2, mem.Config{Seed: 5, Delay: time.Millisecond})
		defer n.Close()
		ts := n.Transports()
		for i := range 2 {
			if err := ts[0].Send(t.Context(), 1, hdr, []byte{byte(i)}); err != nil {
				t.Fatal(err)
			}
		}
		ts[0].Close()
		for i := range 2 {
			p := []byte{0xFF}
			if err := ts[1].Recv(t.Context(), 0, hdr, p); err != nil || p[0] != byte(i) {
				t.Fatalf("message %d sent before Close: %v, payload %d", i, err, p[0])
			}
		}
		wantErr(t, "Recv after the peer's messages ran out", ts[1].Recv(t.Context(), 0, hdr, []byte{0}), 0, transport.ErrPeerGone)
		wantErr(t, "Send to a closed peer", ts[1].Send(t.Context(), 0, hdr, []byte{0}), 0, transport.ErrPeerGone)
	})
}

func TestDroppedMessageWaitsForContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := mem.NewNetwork(2, mem.Config{Drop: 1})
		defer n.Close()
		ts := n.Transports()
		if err := ts[0].Send(t.Context(), 1, hdr, []byte{1}); err != nil {
			t.Fatalf("a dropped Send must look like a success: %v", err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		err := ts[1].Recv(ctx, 0, hdr, []byte{0})
		wantErr(t, "Recv of a dropped message", err, 0, context.DeadlineExceeded)
		if d := time.Since(start); d != time.Second {
			t.Errorf("Recv returned after %v, want the 1s deadline", d)
		}
	})
}

func TestNoAllocationPerMessage(t *testing.T) {
	n := mem.NewNetwork(2, mem.Config{})
	defer n.Close()
	ts := n.Transports()
	ctx := context.Background()
	p, q := make([]byte, 1000), make([]byte, 1000)
	allocs := testing.AllocsPerRun(100, func() {
		if err := ts[0].Send(ctx, 1, hdr, p); err != nil {
			t.Fatal(err)
		}
		if err := ts[1].Recv(ctx, 0, hdr, q); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0 {
		t.Errorf("%v allocations per message", allocs)
	}
}

func TestPanicsOnBadArguments(t *testing.T) {
	n := mem.NewNetwork(2, mem.Config{})
	defer n.Close()
	for name, f := range map[string]func(){
		"NewNetwork(0)": func() { mem.NewNetwork(0, mem.Config{}) },
		"Cut(0, 0)":     func() { n.Cut(0, 0) },
		"Cut(0, 2)":     func() { n.Cut(0, 2) },
		"Kill(-1)":      func() { n.Kill(-1) },
		"Transport(2)":  func() { n.Transport(2) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			f()
		}()
	}
}

func BenchmarkSendRecv(b *testing.B) {
	for _, bc := range []struct {
		name string
		size int
	}{{"1KiB", 1 << 10}, {"1MiB", 1 << 20}} {
		size := bc.size
		b.Run(bc.name, func(b *testing.B) {
			n := mem.NewNetwork(2, mem.Config{})
			defer n.Close()
			ts := n.Transports()
			ctx := context.Background()
			p, q := make([]byte, size), make([]byte, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if err := ts[0].Send(ctx, 1, hdr, p); err != nil {
					b.Fatal(err)
				}
				if err := ts[1].Recv(ctx, 0, hdr, q); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A stopped rank answers no Ping and its own calls hang until it is closed,
// though its messages still queue; a cut link answers no Ping either. An
// aborting rank's peers get its reason.
func TestStopAndAbort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := mem.NewNetwork(3, mem.Config{})
		defer n.Close()
		ts := n.Transports()
		p := ts[0].(transport.Pinger)
		stuck := blockedRecv(ts[2], 1)
		n.Stop(2)
		exchange(t, ts, 0, 1) // the others still talk
		if err := ts[1].Send(t.Context(), 2, hdr, []byte{1}); err != nil {
			t.Errorf("send to the stopped rank: %v (it should queue)", err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		start := time.Now()
		_, err := p.Ping(ctx, 2)
		cancel()
		wantErr(t, "Ping of the stopped rank", err, 2, transport.ErrNoAnswer)
		if d := time.Since(start); d != time.Second {
			t.Errorf("Ping of the stopped rank returned after %v, want its context's 1s", d)
		}
		synctest.Wait()
		select {
		case err := <-stuck:
			t.Errorf("the stopped rank's Recv returned (%v) though a message for it is queued", err)
		default:
		}
		if ws, err := p.Ping(t.Context(), 1); err != nil || len(ws) != 0 {
			t.Errorf("Ping of the live, idle rank 1: %v, %v; want no waits", ws, err)
		}
		ts[2].Close()
		wantErr(t, "the stopped rank's Recv after Close", <-stuck, 1, transport.ErrClosed)
		_, err = p.Ping(t.Context(), 2)
		wantErr(t, "Ping of the closed rank", err, 2, transport.ErrPeerGone)

		n.Cut(0, 1)
		ctx, cancel = context.WithTimeout(t.Context(), time.Second)
		_, err = p.Ping(ctx, 1)
		cancel()
		wantErr(t, "Ping over a cut link", err, 1, transport.ErrNoAnswer)

		m := mem.NewNetwork(2, mem.Config{})
		defer m.Close()
		us := m.Transports()
		waiting := blockedRecv(us[1], 0)
		us[0].(transport.Aborter).Abort("rank 0 had enough")
		err = <-waiting
		var ae *transport.AbortError
		if !errors.As(err, &ae) || ae.Rank != 0 || ae.Reason != "rank 0 had enough" {
			t.Errorf("Recv from an aborting rank: %v, want its *transport.AbortError", err)
		}
		wantErr(t, "Recv from an aborting rank", err, 0, transport.ErrPeerGone)
	})
}

// An aborted rank's messages still arrive; after them its peers' Recvs,
// and their Sends to it, quote its reason.
func TestAbortLeavesReason(t *testing.T) {
	net := mem.NewNetwork(2, mem.Config{})
	defer net.Close()
	ctx := context.Background()
	a, b := net.Transport(0), net.Transport(1)
	h := transport.Header{Seq: 1, Coll: transport.CollBarrier}
	if err := a.Send(ctx, 1, h, []byte{7}); err != nil {
		t.Fatal(err)
	}
	a.Abort("rank 0: counts differ")
	got := make([]byte, 1)
	if err := b.Recv(ctx, 0, h, got); err != nil || got[0] != 7 {
		t.Fatalf("the message sent before the abort: %v, %v", got, err)
	}
	for op, err := range map[string]error{"recv": b.Recv(ctx, 0, h, nil), "send": b.Send(ctx, 0, h, nil)} {
		var ae *transport.AbortError
		if !errors.As(err, &ae) || ae.Rank != 0 || ae.Reason != "rank 0: counts differ" || !errors.Is(err, transport.ErrPeerGone) {
			t.Errorf("%s after the abort: got %v, want an AbortError from rank 0 quoting its reason", op, err)
		}
	}
}
