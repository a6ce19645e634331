package group_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/group"
	"github.com/collkit/collkit/transport/mem"
	"github.com/collkit/collkit/transport/transporttest"
)

// members is the parent ranks of a group of size out of a parent of
// size+3: size+1, 1, 2, ..., size-1, so that group and parent ranks differ
// and some parent ranks stay out ({4, 1, 2} out of 6 for size 3).
func members(size int) []int {
	ranks := []int{size + 1}
	for i := 1; i < size; i++ {
		ranks = append(ranks, i)
	}
	return ranks
}

// owned is a group that closes its parent too. A group's own Close is local
// by design, so a peer could not notice it; the suite's PeerClose case needs
// the parent to go, as it would when a process exits.
type owned struct {
	*group.Transport
	parent transport.Transport
}

func (o owned) Close() error {
	o.Transport.Close()
	return o.parent.Close()
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, func(t testing.TB, size int) []transport.Transport {
		net := mem.NewNetwork(size+3, mem.Config{})
		t.Cleanup(func() { net.Close() })
		ranks := members(size)
		out := make([]transport.Transport, size)
		for i, pr := range ranks {
			g, err := group.New(net.Transport(pr), ranks, 0x5A5A)
			if err != nil {
				t.Fatal(err)
			}
			out[i] = owned{g, net.Transport(pr)}
		}
		return out
	})
}

func TestNewValidates(t *testing.T) {
	net := mem.NewNetwork(4, mem.Config{})
	defer net.Close()
	p := net.Transport(1)
	cases := []struct {
		ranks []int
		want  string
	}{
		{nil, "do not include this process (rank 1"},
		{[]int{0, 2}, "do not include this process (rank 1"},
		{[]int{1, 3, 1}, "parent rank 1 is listed twice"},
		{[]int{1, 4}, "ranks[1] is 4, not a rank of the parent"},
		{[]int{-1, 1}, "ranks[0] is -1"},
	}
	for _, c := range cases {
		g, err := group.New(p, c.ranks, 1)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(ranks %v) = %v, %v; want an error containing %q", c.ranks, g, err, c.want)
		}
	}
	g, err := group.New(p, []int{3, 1}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if g.Rank() != 1 || g.Size() != 2 || g.ParentRank(0) != 3 || g.Comm() != 1 {
		t.Errorf("group {3, 1} on parent rank 1: rank %d size %d parent of 0 %d comm %d; want 1 2 3 1",
			g.Rank(), g.Size(), g.ParentRank(0), g.Comm())
	}
}

// A group message reaches the parent rank the group names, with the
// caller's Comm XOR the group's on the wire.
func TestMapsPeersAndComm(t *testing.T) {
	net := mem.NewNetwork(6, mem.Config{})
	defer net.Close()
	ranks := []int{4, 1, 2}
	g, err := group.New(net.Transport(2), ranks, 0x700)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := transport.Header{Seq: 3, Coll: transport.CollSendRecv, Comm: 0x05}
	if err := g.Send(ctx, 0, h, []byte("to group rank 0")); err != nil {
		t.Fatal(err)
	}
	wire := h
	wire.Comm = 0x705
	buf := make([]byte, len("to group rank 0"))
	if err := net.Transport(4).Recv(ctx, 2, wire, buf); err != nil {
		t.Fatalf("parent rank 4 did not get group rank 2's message with comm 0x705 from parent rank 2: %v", err)
	}
	if string(buf) != "to group rank 0" {
		t.Errorf("got %q", buf)
	}
	// And back: parent rank 1 is group rank 1.
	if err := net.Transport(1).Send(ctx, 2, wire, []byte{42}); err != nil {
		t.Fatal(err)
	}
	b := []byte{0}
	if err := g.Recv(ctx, 1, h, b); err != nil || b[0] != 42 {
		t.Fatalf("Recv from group rank 1 = %v, %v; want 42 from parent rank 1", b, err)
	}
}

// Two groups over the same pair of parent ranks: a message of one read by
// the other is a mismatch on the communicator, reported in group terms.
func TestOtherGroupIsMismatch(t *testing.T) {
	net := mem.NewNetwork(3, mem.Config{})
	defer net.Close()
	a, _ := group.New(net.Transport(2), []int{0, 2}, 1)
	b, err := group.New(net.Transport(0), []int{2, 0}, 2)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := transport.Header{Seq: 1, Coll: transport.CollAllReduce}
	if err := a.Send(ctx, 0, h, []byte{1}); err != nil {
		t.Fatal(err)
	}
	err = b.Recv(ctx, 0, h, []byte{0})
	var me *transport.MismatchError
	if !errors.As(err, &me) {
		t.Fatalf("Recv of another group's message returned %v, want a *transport.MismatchError", err)
	}
	if me.Peer != 0 || me.Want.Comm != 0 || me.Got.Comm != 1^2 {
		t.Errorf("MismatchError peer %d, comm want %#x got %#x; want peer 0 (group rank), 0 and 3", me.Peer, me.Want.Comm, me.Got.Comm)
	}
	var pe *transport.PeerError
	if !errors.As(err, &pe) || pe.Rank != 0 || pe.Addr != "parent rank 2" {
		t.Errorf("error %v: want a PeerError for group rank 0 with Addr \"parent rank 2\"", err)
	}
	if !strings.Contains(err.Error(), "communicator") {
		t.Errorf("error %q does not say the communicators differ", err)
	}
}

// Close unblocks the group's calls, fails later ones, and leaves the parent
// usable.
func TestCloseKeepsParent(t *testing.T) {
	net := mem.NewNetwork(2, mem.Config{})
	defer net.Close()
	g, _ := group.New(net.Transport(0), []int{0, 1}, 9)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := transport.Header{Seq: 1, Coll: transport.CollSendRecv}
	res := make(chan error, 1)
	go func() { res <- g.Recv(ctx, 1, h, []byte{0}) }()
	g.Close()
	select {
	case err := <-res:
		if !errors.Is(err, transport.ErrClosed) {
			t.Errorf("Recv pending during Close returned %v, want transport.ErrClosed", err)
		}
	case <-ctx.Done():
		t.Fatal("Close did not unblock a pending Recv")
	}
	for _, err := range []error{g.Send(ctx, 1, h, nil), g.Recv(ctx, 1, h, nil)} {
		var pe *transport.PeerError
		if !errors.Is(err, transport.ErrClosed) || !errors.As(err, &pe) || pe.Rank != 1 {
			t.Errorf("call after Close returned %v, want a PeerError for rank 1 wrapping transport.ErrClosed", err)
		}
	}
	if err := net.Transport(1).Send(ctx, 0, h, []byte{7}); err != nil {
		t.Fatal(err)
	}
	if err := net.Transport(0).Recv(ctx, 1, h, []byte{0}); err != nil {
		t.Errorf("parent unusable after the group closed: %v", err)
	}
}

// A parent failure names the group peer, keeps the parent rank in Addr and
// still wraps the parent's sentinel.
func TestParentErrorNamesBoth(t *testing.T) {
	net := mem.NewNetwork(4, mem.Config{})
	defer net.Close()
	g, _ := group.New(net.Transport(1), []int{1, 3}, 9)
	net.Kill(3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := g.Recv(ctx, 1, transport.Header{}, []byte{0})
	var pe *transport.PeerError
	if !errors.Is(err, transport.ErrPeerGone) || !errors.As(err, &pe) || pe.Rank != 1 || pe.Addr != "parent rank 3" {
		t.Errorf("Recv from a killed peer returned %v; want a PeerError for group rank 1, Addr \"parent rank 3\", wrapping ErrPeerGone", err)
	}
	if err := g.Send(ctx, 5, transport.Header{}, nil); !errors.Is(err, transport.ErrBadPeer) {
		t.Errorf("Send to group rank 5 of 2 returned %v, want ErrBadPeer", err)
	}
}

// unbuffered hides mem's Buffered capability.
type unbuffered struct{ transport.Transport }

func TestForwardsBuffered(t *testing.T) {
	net := mem.NewNetwork(2, mem.Config{})
	defer net.Close()
	g, _ := group.New(net.Transport(0), []int{0, 1}, 1)
	if got := g.SendBuffer(); got != math.MaxInt {
		t.Errorf("SendBuffer over mem = %d, want mem's %d", got, math.MaxInt)
	}
	g, _ = group.New(unbuffered{net.Transport(0)}, []int{0, 1}, 1)
	if got := g.SendBuffer(); got != 0 {
		t.Errorf("SendBuffer over an unbuffered parent = %d, want 0", got)
	}
}

// ctxFunc is a context whose dynamic type cannot be compared, so the group
// cannot keep its scope for the next call.
type ctxFunc struct {
	context.Context
	_ []func() // a func slice makes the type incomparable
}

// Each call's context governs it alone: a cancelled context does not leak
// into the next call, and contexts that cannot be compared work.
func TestContexts(t *testing.T) {
	net := mem.NewNetwork(2, mem.Config{})
	defer net.Close()
	a, _ := group.New(net.Transport(0), []int{0, 1}, 1)
	b, _ := group.New(net.Transport(1), []int{0, 1}, 1)
	h := transport.Header{Seq: 1}
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Recv(dead, 0, h, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Recv with a cancelled context returned %v, want context.Canceled", err)
	}
	ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	for i, c := range []context.Context{ctx, ctxFunc{Context: ctx}, context.Background(), ctx} {
		if err := a.Send(c, 1, h, []byte{byte(i)}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		p := []byte{0}
		if err := b.Recv(c, 0, h, p); err != nil || p[0] != byte(i) {
			t.Fatalf("recv %d = %v, %v", i, p, err)
		}
	}
}

// BenchmarkPingPong measures what a group adds to a small message over mem.
func BenchmarkPingPong(b *testing.B) {
	for _, name := range []string{"parent", "group"} {
		b.Run(name, func(b *testing.B) {
			net := mem.NewNetwork(2, mem.Config{})
			defer net.Close()
			ts := net.Transports()
			if name == "group" {
				for r := range ts {
					g, err := group.New(ts[r], []int{0, 1}, 1)
					if err != nil {
						b.Fatal(err)
					}
					ts[r] = g
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			h := transport.Header{Seq: 1}
			p, q := make([]byte, 8), make([]byte, 8)
			b.ReportAllocs()
			for b.Loop() {
				if err := ts[0].Send(ctx, 1, h, p); err != nil {
					b.Fatal(err)
				}
				if err := ts[1].Recv(ctx, 0, h, q); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
