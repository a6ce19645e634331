package transporttest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
)

// World returns size connected transports, index i being rank i, and
// registers with t.Cleanup whatever releases them. The suite may already
// have closed some of them by then.
type World func(t testing.TB, size int) []transport.Transport

// How long the suite waits before it calls a transport hung.
const (
	shortWait = 10 * time.Second // calls that should return at once
	longWait  = 2 * time.Minute  // the large transfers
	grace     = 5 * time.Second  // past a context's deadline
)

// Run runs the conformance suite as subtests of t, building a fresh World
// for each.
func Run(t *testing.T, newWorld World) {
	s := suite{newWorld}
	tests := []struct {
		name string
		test func(*testing.T)
	}{
		{"RankSize", s.rankSize},
		{"Ordered", s.ordered},
		{"ZeroLength", s.zeroLength},
		{"FullDuplex", s.fullDuplex},
		{"AllToAll", s.allToAll},
		{"Ring", s.ring},
		{"Mismatch", s.mismatch},
		{"BadPeer", s.badPeer},
		{"RecvDeadline", s.recvDeadline},
		{"RecvCanceled", s.recvCanceled},
		{"CloseUnblocksRecv", s.closeUnblocksRecv},
		{"PeerClose", s.peerClose},
		{"CloseTwice", s.closeTwice},
		{"Ping", s.ping},
		{"Peek", s.peek},
	}
	for _, tc := range tests {
		t.Run(tc.name, tc.test)
	}
}

type suite struct{ newWorld World }

func (s suite) world(t *testing.T, size int) []transport.Transport {
	t.Helper()
	ts := s.newWorld(t, size)
	if len(ts) != size {
		t.Fatalf("World(%d) returned %d transports", size, len(ts))
	}
	for i, tr := range ts {
		if tr == nil {
			t.Fatalf("World(%d): transport %d is nil", size, i)
		}
	}
	return ts
}

// header is a header with every field set, so that a transport that loses a
// field fails. Len is deliberately wrong: Send and Recv take it from len(p).
func header(seq uint64, coll transport.Coll, step int) transport.Header {
	return transport.Header{
		Seq: seq, Count: 1<<40 + 3, Comm: 0xC0FFEE, Root: -1, Coll: coll,
		DType: reduce.BFloat16, Op: reduce.Max, Algo: 7, Step: uint32(step), Len: 0xBAD,
	}
}

func (s suite) rankSize(t *testing.T) {
	for _, size := range []int{1, 2, 3, 5} {
		for i, tr := range s.world(t, size) {
			if tr.Rank() != i {
				t.Errorf("world of %d: transport %d has Rank() = %d", size, i, tr.Rank())
			}
			if tr.Size() != size {
				t.Errorf("world of %d: transport %d has Size() = %d", size, i, tr.Size())
			}
		}
	}
}

// ordered sends many messages of awkward sizes one way, reusing the send
// buffer, and checks every byte on arrival.
func (s suite) ordered(t *testing.T) {
	ts := s.world(t, 2)
	sizes := []int{0, 1, 40, 4095, 64<<10 + 3, 4<<20 + 1}
	rounds := 4
	if testing.Short() {
		sizes[len(sizes)-1] = 1<<20 + 1
		rounds = 2
	}
	r := rand.New(rand.NewPCG(1, 2))
	var plan []int
	for range rounds {
		p := slices.Clone(sizes)
		r.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
		plan = append(plan, p...)
	}
	longest := slices.Max(sizes)
	ctx := withTimeout(t, longWait)
	var g group
	g.Go(func() error {
		buf := make([]byte, longest) // reused: Send must be done with p when it returns
		for i, n := range plan {
			pattern(buf[:n], 'o', 0, 1, i)
			if err := ts[0].Send(ctx, 1, header(1, transport.CollSendRecv, i), buf[:n]); err != nil {
				return fmt.Errorf("rank 0: send message %d (%d bytes) to rank 1: %w", i, n, err)
			}
		}
		return nil
	})
	g.Go(func() error {
		got, want := make([]byte, longest), make([]byte, longest)
		for i, n := range plan {
			if err := ts[1].Recv(ctx, 0, header(1, transport.CollSendRecv, i), got[:n]); err != nil {
				return fmt.Errorf("rank 1: recv message %d (%d bytes) from rank 0: %w", i, n, err)
			}
			pattern(want[:n], 'o', 0, 1, i)
			if err := diff(got[:n], want[:n]); err != nil {
				return fmt.Errorf("rank 1: message %d from rank 0: %w", i, err)
			}
		}
		return nil
	})
	g.Wait(t, longWait+grace)
}

func (s suite) zeroLength(t *testing.T) {
	ts := s.world(t, 2)
	ctx := withTimeout(t, shortWait)
	// Empty messages between non-empty ones, as nil and as empty slices.
	sends := [][]byte{nil, {}, {42}, nil, {43}}
	recvs := [][]byte{{}, nil, make([]byte, 1), make([]byte, 0), make([]byte, 1)}
	var g group
	g.Go(func() error {
		for i, p := range sends {
			if err := ts[0].Send(ctx, 1, header(2, transport.CollSendRecv, i), p); err != nil {
				return fmt.Errorf("rank 0: send message %d (%d bytes) to rank 1: %w", i, len(p), err)
			}
		}
		return nil
	})
	g.Go(func() error {
		for i, p := range recvs {
			if err := ts[1].Recv(ctx, 0, header(2, transport.CollSendRecv, i), p); err != nil {
				return fmt.Errorf("rank 1: recv message %d (%d bytes) from rank 0: %w", i, len(p), err)
			}
			if !bytes.Equal(p, sends[i]) {
				return fmt.Errorf("rank 1: message %d from rank 0 is %v, want %v", i, p, sends[i])
			}
		}
		return nil
	})
	g.Go(func() error {
		if err := ts[1].Send(ctx, 0, header(3, transport.CollSendRecv, 0), nil); err != nil {
			return fmt.Errorf("rank 1: send an empty message to rank 0: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		if err := ts[0].Recv(ctx, 1, header(3, transport.CollSendRecv, 0), nil); err != nil {
			return fmt.Errorf("rank 0: recv an empty message from rank 1: %w", err)
		}
		return nil
	})
	g.Wait(t, shortWait+grace)
}

// fullDuplex has every pair of three ranks stream 16 MiB both ways at once.
func (s suite) fullDuplex(t *testing.T) {
	const size = 3
	total, chunk := 16<<20, 4<<20
	if testing.Short() {
		total, chunk = 1<<20, 256<<10
	}
	streamPairs(t, s.world(t, size), 'd', 4, transport.CollSendRecv, total/chunk, chunk,
		func(from, to, i int) int { return chunk })
}

// allToAll runs every send and receive of four ranks on its own goroutine,
// with many messages of mixed sizes.
func (s suite) allToAll(t *testing.T) {
	const size = 4
	msgs := 50
	if testing.Short() {
		msgs = 10
	}
	sizes := []int{0, 1, 40, 4095, 64<<10 + 3, 8}
	streamPairs(t, s.world(t, size), 'a', 5, transport.CollAllToAll, msgs, slices.Max(sizes),
		func(from, to, i int) int { return sizes[(i+from+to)%len(sizes)] })
}

// streamPairs has every ordered pair of ranks of ts send msgs messages at
// once, each sender and each receiver on its own goroutine. Message i from
// rank from to rank to has length(from, to, i) bytes (at most maxLen) of
// pattern(tag, from, to, i), framed by header(seq, coll, i), and the
// receiver checks every byte.
func streamPairs(t *testing.T, ts []transport.Transport, tag byte, seq uint64, coll transport.Coll, msgs, maxLen int, length func(from, to, i int) int) {
	ctx := withTimeout(t, longWait)
	var g group
	for me := range ts {
		for peer := range ts {
			if peer == me {
				continue
			}
			g.Go(func() error {
				buf := make([]byte, maxLen)
				for i := range msgs {
					p := buf[:length(me, peer, i)]
					pattern(p, tag, me, peer, i)
					if err := ts[me].Send(ctx, peer, header(seq, coll, i), p); err != nil {
						return fmt.Errorf("rank %d: send message %d to rank %d: %w", me, i, peer, err)
					}
				}
				return nil
			})
			g.Go(func() error {
				got, want := make([]byte, maxLen), make([]byte, maxLen)
				for i := range msgs {
					n := length(peer, me, i)
					if err := ts[me].Recv(ctx, peer, header(seq, coll, i), got[:n]); err != nil {
						return fmt.Errorf("rank %d: recv message %d from rank %d: %w", me, i, peer, err)
					}
					pattern(want[:n], tag, peer, me, i)
					if err := diff(got[:n], want[:n]); err != nil {
						return fmt.Errorf("rank %d: message %d from rank %d: %w", me, i, peer, err)
					}
				}
				return nil
			})
		}
	}
	g.Wait(t, longWait+grace)
}

// ring passes a token per rank around a ring of five for 100 rounds: each
// rank sends to its right and receives from its left in every round.
func (s suite) ring(t *testing.T) {
	const size, rounds = 5, 100
	ts := s.world(t, size)
	ctx := withTimeout(t, longWait)
	var g group
	for me := range size {
		g.Go(func() error {
			right, left := (me+1)%size, (me+size-1)%size
			token := me
			for k := range rounds {
				h := header(6, transport.CollAllReduce, k)
				out := ringMsg(token, k)
				sent := make(chan error, 1)
				go func() { sent <- ts[me].Send(ctx, right, h, out) }()
				in := make([]byte, len(out))
				err := ts[me].Recv(ctx, left, h, in)
				if serr := <-sent; serr != nil {
					return fmt.Errorf("rank %d: round %d: send to rank %d: %w", me, k, right, serr)
				}
				if err != nil {
					return fmt.Errorf("rank %d: round %d: recv from rank %d: %w", me, k, left, err)
				}
				want := ((me-k-1)%size + size) % size
				if !bytes.Equal(in, ringMsg(want, k)) {
					return fmt.Errorf("rank %d: round %d: got %x from rank %d, want the token of rank %d (%x)", me, k, in, left, want, ringMsg(want, k))
				}
				token = want
			}
			return nil
		})
	}
	g.Wait(t, longWait+grace)
}

// ringMsg is the ring test's message: the token, the round, and round bytes
// of padding so that lengths vary.
func ringMsg(token, round int) []byte {
	b := make([]byte, 16+round)
	binary.LittleEndian.PutUint64(b, uint64(token))
	binary.LittleEndian.PutUint64(b[8:], uint64(round))
	for i := 16; i < len(b); i++ {
		b[i] = byte(round)
	}
	return b
}

// mismatch sends a message whose header differs from the receiver's in one
// field and checks the receiver's error.
func (s suite) mismatch(t *testing.T) {
	base := header(9, transport.CollAllReduce, 0)
	with := func(change func(*transport.Header)) transport.Header {
		h := base
		change(&h)
		return h
	}
	cases := []struct {
		name             string
		sent             transport.Header
		sentLen, recvLen int
	}{
		{"Seq", with(func(h *transport.Header) { h.Seq++ }), 8, 8},
		{"Len", base, 8, 16},
		{"Count", with(func(h *transport.Header) { h.Count-- }), 8, 8},
		{"Coll", with(func(h *transport.Header) { h.Coll = transport.CollBroadcast }), 8, 8},
		{"Step", with(func(h *transport.Header) { h.Step = 1 }), 8, 8},
		{"Root", with(func(h *transport.Header) { h.Root = 2 }), 8, 8},
		{"DType", with(func(h *transport.Header) { h.DType = reduce.Int64 }), 8, 8},
		{"Op", with(func(h *transport.Header) { h.Op = reduce.Sum }), 8, 8},
		{"Comm", with(func(h *transport.Header) { h.Comm++ }), 8, 8},
		{"Algo", with(func(h *transport.Header) { h.Algo++ }), 8, 8},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			const from, to = 2, 1 // not rank 0, so that a zero Peer is caught
			ts := s.world(t, 3)
			ctx := withTimeout(t, shortWait)
			sent := make(chan error, 1)
			go func() { sent <- ts[from].Send(ctx, to, c.sent, make([]byte, c.sentLen)) }()
			err := within(t, shortWait+grace, "Recv of a mismatched message", func() error {
				return ts[to].Recv(ctx, from, base, make([]byte, c.recvLen))
			})
			if serr := await(t, sent, shortWait+grace, "Send of a mismatched message"); serr != nil {
				t.Logf("sender's error: %v", serr)
			}
			if err == nil {
				t.Fatalf("Recv accepted a message whose %s differs from the expected header", c.name)
			}
			if !errors.Is(err, transport.ErrMismatch) {
				t.Errorf("errors.Is(err, transport.ErrMismatch) is false for %v", err)
			}
			var me *transport.MismatchError
			if !errors.As(err, &me) {
				t.Fatalf("error %v (%T) has no *transport.MismatchError", err, err)
			}
			if me.Peer != from {
				t.Errorf("MismatchError.Peer = %d, want %d", me.Peer, from)
			}
			want, got := base, c.sent
			want.Len, got.Len = uint32(c.recvLen), uint32(c.sentLen)
			if me.Want != want {
				t.Errorf("MismatchError.Want = %v, want %v", me.Want, want)
			}
			if me.Got != got {
				t.Errorf("MismatchError.Got = %v, want %v", me.Got, got)
			}
		})
	}
}

func (s suite) badPeer(t *testing.T) {
	const size, me = 3, 1
	ts := s.world(t, size)
	ctx := withTimeout(t, shortWait)
	h := header(10, transport.CollSendRecv, 0)
	for _, peer := range []int{-1, size, size + 7, me} {
		for _, op := range []string{"Send", "Recv"} {
			err := within(t, shortWait+grace, op, func() error {
				if op == "Send" {
					return ts[me].Send(ctx, peer, h, make([]byte, 4))
				}
				return ts[me].Recv(ctx, peer, h, make([]byte, 4))
			})
			if !errors.Is(err, transport.ErrBadPeer) {
				t.Errorf("rank %d: %s with rank %d returned %v, want an error wrapping transport.ErrBadPeer", me, op, peer, err)
				continue
			}
			if err := checkPeer(err, peer); err != nil {
				t.Errorf("rank %d: %s with rank %d: %v", me, op, peer, err)
			}
		}
	}
}

func (s suite) recvDeadline(t *testing.T) {
	const d, slack = 200 * time.Millisecond, 2 * time.Second
	ts := s.world(t, 2)
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	start := time.Now()
	err := within(t, d+grace, "Recv past its context's deadline", func() error {
		return ts[0].Recv(ctx, 1, header(11, transport.CollSendRecv, 0), make([]byte, 8))
	})
	elapsed := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Recv with nothing sent returned %v, want an error wrapping context.DeadlineExceeded", err)
	}
	if err := checkPeer(err, 1); err != nil {
		t.Error(err)
	}
	if elapsed < d/2 {
		t.Errorf("Recv gave up after %v, before its %v deadline", elapsed, d)
	}
	if elapsed > d+slack {
		t.Errorf("Recv returned %v after its %v deadline", elapsed-d, d)
	}
}

func (s suite) recvCanceled(t *testing.T) {
	ts := s.world(t, 2)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	started, res := make(chan struct{}), make(chan error, 1)
	go func() {
		close(started)
		res <- ts[0].Recv(ctx, 1, header(12, transport.CollSendRecv, 0), make([]byte, 8))
	}()
	<-started
	cancel()
	err := await(t, res, shortWait, "Recv after its context was canceled")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Recv returned %v, want an error wrapping context.Canceled", err)
	}
	if err := checkPeer(err, 1); err != nil {
		t.Error(err)
	}
}

// closeUnblocksRecv closes a transport while its Recv waits. The Recv may not
// have blocked yet when Close runs; either way it must fail with ErrClosed.
func (s suite) closeUnblocksRecv(t *testing.T) {
	ts := s.world(t, 2)
	ctx := withTimeout(t, shortWait)
	h := header(13, transport.CollSendRecv, 0)
	started, res := make(chan struct{}), make(chan error, 1)
	go func() {
		close(started)
		res <- ts[0].Recv(ctx, 1, h, make([]byte, 8))
	}()
	<-started
	if err := within(t, shortWait, "Close", ts[0].Close); err != nil {
		t.Errorf("Close: %v", err)
	}
	err := await(t, res, shortWait+grace, "Recv during Close")
	if !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Recv blocked during Close returned %v, want an error wrapping transport.ErrClosed", err)
	}
	if err := checkPeer(err, 1); err != nil {
		t.Error(err)
	}
	checkClosed(t, ts[0], 1)
}

// peerClose closes rank 1 while rank 0 waits for it: rank 0 must learn that
// instead of waiting for its deadline.
func (s suite) peerClose(t *testing.T) {
	ts := s.world(t, 2)
	h := header(14, transport.CollSendRecv, 0)
	ctx := withTimeout(t, shortWait)
	started, res := make(chan struct{}), make(chan error, 1)
	go func() {
		close(started)
		res <- ts[0].Recv(ctx, 1, h, make([]byte, 8))
	}()
	<-started
	if err := within(t, shortWait, "Close", ts[1].Close); err != nil {
		t.Errorf("rank 1: Close: %v", err)
	}
	check := func(when string, err error) {
		t.Helper()
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			t.Errorf("rank 0: Recv %s waited for its deadline (%v): it must notice that rank 1 closed", when, err)
		case !errors.Is(err, transport.ErrPeerGone) && !errors.Is(err, transport.ErrClosed):
			t.Errorf("rank 0: Recv %s returned %v, want an error wrapping transport.ErrPeerGone or transport.ErrClosed", when, err)
		default:
			if err := checkPeer(err, 1); err != nil {
				t.Errorf("rank 0: Recv %s: %v", when, err)
			}
		}
	}
	check("waiting while rank 1 closed", await(t, res, shortWait+grace, "Recv from a closed peer"))
	ctx = withTimeout(t, shortWait)
	check("after rank 1 closed", within(t, shortWait+grace, "Recv from a closed peer", func() error {
		return ts[0].Recv(ctx, 1, h, make([]byte, 8))
	}))
}

func (s suite) closeTwice(t *testing.T) {
	ts := s.world(t, 2)
	if err := within(t, shortWait, "Close", ts[0].Close); err != nil {
		t.Errorf("first Close: %v", err)
	}
	if err := within(t, shortWait, "second Close", ts[0].Close); err != nil {
		t.Logf("second Close: %v", err)
	}
	checkClosed(t, ts[0], 1)
}

// ping checks a transport.Pinger: a live peer blocked in a Recv answers
// with that wait, in progress and then failed; a closed peer is gone,
// which is not the same as not answering.
// peek: a message that arrived shows its header, whole, without being
// consumed; nothing shows before it arrives or after it was received.
func (s suite) peek(t *testing.T) {
	ts := s.world(t, 3)
	pk, ok := ts[1].(transport.Peeker)
	if !ok {
		t.Skip("not a transport.Peeker")
	}
	if h, ok := pk.Peek(0); ok {
		t.Fatalf("Peek(0) before any Send: %v", h)
	}
	for _, bad := range []int{-1, 1, 3} {
		if h, ok := pk.Peek(bad); ok {
			t.Errorf("Peek(%d), not a peer: %v", bad, h)
		}
	}
	h := header(9, transport.CollAllGather, 2)
	payload := []byte("peeked, not taken")
	if err := within(t, shortWait, "Send", func() error { return ts[0].Send(withTimeout(t, shortWait), 1, h, payload) }); err != nil {
		t.Fatal(err)
	}
	want := h
	want.Len = uint32(len(payload))
	var got transport.Header
	for deadline := time.Now().Add(shortWait); ; time.Sleep(time.Millisecond) {
		if got, ok = pk.Peek(0); ok || time.Now().After(deadline) {
			break
		}
	}
	if !ok || got != want {
		t.Fatalf("Peek(0) after a Send: %v, %v; want %v", got, ok, want)
	}
	if h, ok := pk.Peek(2); ok {
		t.Errorf("Peek(2), which sent nothing: %v", h)
	}
	buf := make([]byte, len(payload))
	if err := within(t, shortWait, "Recv", func() error { return ts[1].Recv(withTimeout(t, shortWait), 0, h, buf) }); err != nil {
		t.Fatal(err)
	}
	if err := diff(buf, payload); err != nil {
		t.Fatalf("the message received after Peek: %v", err)
	}
	if h, ok := pk.Peek(0); ok {
		t.Errorf("Peek(0) after the Recv took the message: %v", h)
	}
}

func (s suite) ping(t *testing.T) {
	ts := s.world(t, 3)
	p, ok := ts[0].(transport.Pinger)
	if !ok {
		t.Skip("not a transport.Pinger")
	}
	h := header(16, transport.CollAllReduce, 3)
	ctx, cancel := context.WithCancel(t.Context())
	res := make(chan error, 1)
	go func() { res <- ts[1].Recv(ctx, 2, h, make([]byte, 8)) }()
	// ping asks rank 1 until its answer shows the Recv from rank 2 (it
	// may not have started yet) and returns that wait.
	ping := func(failed bool) transport.Wait {
		t.Helper()
		deadline := time.Now().Add(shortWait)
		for {
			ws, err := within2(t, func() ([]transport.Wait, error) {
				pctx, pcancel := context.WithTimeout(t.Context(), shortWait)
				defer pcancel()
				return p.Ping(pctx, 1)
			})
			if err != nil {
				t.Fatalf("rank 0: Ping(1), a live peer: %v", err)
			}
			for _, w := range ws {
				if w.Peer == 2 && w.Op == "recv" && w.Failed == failed && w.Header.Seq == h.Seq && w.Header.Step == h.Step {
					// The whole call, which a communicator compares with its own.
					if got, want := w.Header, h; got.Comm != want.Comm || got.Count != want.Count || got.Coll != want.Coll ||
						got.DType != want.DType || got.Op != want.Op || got.Root != want.Root || got.Algo != want.Algo {
						t.Fatalf("Ping(1) reported the Recv's header as %v, want %v", got, want)
					}
					return w
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("rank 0: Ping(1) answered %v; want rank 1's recv from rank 2 (seq %d, step %d, failed %v)", ws, h.Seq, h.Step, failed)
			}
		}
	}
	if w := ping(false); w.Header.Coll != h.Coll || w.Header.Len != 8 {
		t.Errorf("rank 1's wait, as Ping tells it: %v; want %v #%d step %d, 8 bytes", w, h.Coll, h.Seq, h.Step)
	}
	cancel()
	if err := await(t, res, shortWait, "Recv after its context was canceled"); !errors.Is(err, context.Canceled) {
		t.Fatalf("rank 1: Recv returned %v, want an error wrapping context.Canceled", err)
	}
	ping(true)

	if err := within(t, shortWait, "Close", ts[2].Close); err != nil {
		t.Errorf("rank 2: Close: %v", err)
	}
	_, err := within2(t, func() ([]transport.Wait, error) {
		pctx, pcancel := context.WithTimeout(t.Context(), shortWait)
		defer pcancel()
		return p.Ping(pctx, 2)
	})
	switch {
	case errors.Is(err, transport.ErrNoAnswer):
		t.Errorf("rank 0: Ping(2), a closed peer, returned %v: a closed peer is gone, not stuck", err)
	case !errors.Is(err, transport.ErrPeerGone):
		t.Errorf("rank 0: Ping(2), a closed peer, returned %v, want an error wrapping transport.ErrPeerGone", err)
	default:
		if err := checkPeer(err, 2); err != nil {
			t.Error(err)
		}
	}
	ended, cancelEnded := context.WithCancel(t.Context())
	cancelEnded()
	if _, err := p.Ping(ended, 1); !errors.Is(err, context.Canceled) || errors.Is(err, transport.ErrNoAnswer) {
		t.Errorf("rank 0: Ping(1) with a context already cancelled returned %v, want context.Canceled: "+
			"no time to answer says nothing about the peer", err)
	}
	for _, peer := range []int{0, 3, -1} {
		if _, err := p.Ping(t.Context(), peer); !errors.Is(err, transport.ErrBadPeer) {
			t.Errorf("rank 0: Ping(%d) returned %v, want an error wrapping transport.ErrBadPeer", peer, err)
		}
	}
}

// within2 is within for a function that also returns waits.
func within2(t *testing.T, f func() ([]transport.Wait, error)) ([]transport.Wait, error) {
	t.Helper()
	var ws []transport.Wait
	err := within(t, shortWait+grace, "Ping", func() error {
		var err error
		ws, err = f()
		return err
	})
	return ws, err
}

// checkClosed checks that Send and Recv with peer fail with ErrClosed on a
// closed transport. It stops at the first failure: a transport that still
// sends would make Recv wait out its deadline without telling more.
func checkClosed(t *testing.T, tr transport.Transport, peer int) {
	t.Helper()
	ctx := withTimeout(t, shortWait)
	h := header(15, transport.CollSendRecv, 0)
	for _, op := range []string{"Send", "Recv"} {
		err := within(t, shortWait+grace, op+" on a closed transport", func() error {
			if op == "Send" {
				return tr.Send(ctx, peer, h, make([]byte, 8))
			}
			return tr.Recv(ctx, peer, h, make([]byte, 8))
		})
		if !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("%s on a closed transport returned %v, want an error wrapping transport.ErrClosed", op, err)
		}
		if err := checkPeer(err, peer); err != nil {
			t.Errorf("%s on a closed transport: %v", op, err)
		}
	}
}

// checkPeer reports whether err is a *transport.PeerError naming peer, as the
// contract requires of every error that concerns one peer.
func checkPeer(err error, peer int) error {
	var pe *transport.PeerError
	if !errors.As(err, &pe) {
		return fmt.Errorf("error %q (%T) is not a *transport.PeerError", err, err)
	}
	if pe.Rank != peer {
		return fmt.Errorf("PeerError names rank %d, want %d: %v", pe.Rank, peer, err)
	}
	return nil
}

// pattern fills b with pseudo-random bytes determined by its arguments.
func pattern(b []byte, test byte, src, dst, i int) {
	var seed [32]byte
	seed[0] = test
	binary.LittleEndian.PutUint64(seed[8:], uint64(src))
	binary.LittleEndian.PutUint64(seed[16:], uint64(dst))
	binary.LittleEndian.PutUint64(seed[24:], uint64(i))
	rand.NewChaCha8(seed).Read(b)
}

// diff describes the first byte where got and want differ, or returns nil.
func diff(got, want []byte) error {
	if bytes.Equal(got, want) {
		return nil
	}
	if len(got) != len(want) {
		return fmt.Errorf("%d bytes, want %d", len(got), len(want))
	}
	i := 0
	for got[i] == want[i] {
		i++
	}
	return fmt.Errorf("byte %d of %d is %#02x, want %#02x", i, len(got), got[i], want[i])
}

func withTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// within runs f on a goroutine and returns its result, failing t if f has
// not returned after d.
func within(t *testing.T, d time.Duration, what string, f func() error) error {
	t.Helper()
	res := make(chan error, 1)
	go func() { res <- f() }()
	return await(t, res, d, what)
}

// await receives from res, failing t if nothing comes within d.
func await(t *testing.T, res <-chan error, d time.Duration, what string) error {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case err := <-res:
		return err
	case <-timer.C:
		t.Fatalf("%s: no return after %v; the transport hangs", what, d)
		return nil
	}
}

// group runs functions on goroutines and collects their errors. The
// goroutines never touch t, so one that outlives a failed test is harmless.
type group struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []error
}

func (g *group) Go(f func() error) {
	g.wg.Go(func() {
		if err := f(); err != nil {
			g.mu.Lock()
			g.errs = append(g.errs, err)
			g.mu.Unlock()
		}
	})
}

// Wait fails t unless every function returns nil within d.
func (g *group) Wait(t *testing.T, d time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		g.wg.Wait()
		close(done)
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	hung := false
	select {
	case <-done:
	case <-timer.C:
		hung = true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, err := range g.errs {
		t.Error(err)
	}
	if hung {
		t.Fatalf("goroutines still running after %v: the transport deadlocked or lost a message", d)
	}
	if len(g.errs) > 0 {
		t.FailNow()
	}
}
