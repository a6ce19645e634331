package tcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/transport"
)

// freeze makes t look, from outside, like a process stopped with SIGSTOP:
// its listening port stays open, so the kernel still completes connections
// to it, but nothing accepts them or answers. (It swaps the listener for
// one that nobody serves: a deadline set on the served one could not stop
// an Accept already under way.)
func (t *Transport) freeze(tb testing.TB) {
	tb.Helper()
	t.mu.Lock()
	ln := t.ln
	t.mu.Unlock()
	ln.Close() // servePings returns
	frozen, err := net.Listen("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatalf("rank %d: listening again on %s: %v", t.cfg.Rank, ln.Addr(), err)
	}
	tb.Cleanup(func() { frozen.Close() })
}

// A stopped rank answers no ping, with or without secret and TLS: every
// prober gets transport.ErrNoAnswer within its context. Live ranks answer
// at once, whatever they are blocked on.
func TestPingStoppedPeer(t *testing.T) {
	ca := newTestCA(t)
	for _, tc := range []struct {
		name   string
		change func(*Config)
	}{
		{"plain", nil},
		{"secret", func(c *Config) { c.Secret = testSecret }},
		{"tls", func(c *Config) { c.TLS, c.Secret = ca.rankTLS(t, fmt.Sprint("rank", c.Rank)), testSecret }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newWorld(t, 3, nil, tc.change)
			// Rank 1 waits on the stopped rank 2.
			rctx, rcancel := context.WithCancel(context.Background())
			defer rcancel()
			go ts[1].Recv(rctx, 2, hdr(5), make([]byte, 8))
			ts[2].freeze(t)

			const window = 300 * time.Millisecond
			for _, prober := range []int{0, 1} {
				ctx, cancel := context.WithTimeout(context.Background(), window)
				start := time.Now()
				_, err := ts[prober].Ping(ctx, 2)
				took := time.Since(start)
				cancel()
				if !errors.Is(err, transport.ErrNoAnswer) || errors.Is(err, transport.ErrPeerGone) {
					t.Fatalf("rank %d: Ping of the stopped rank 2 returned %v, want an error wrapping transport.ErrNoAnswer", prober, err)
				}
				if took < window/2 || took > window+2*time.Second {
					t.Errorf("rank %d: Ping of the stopped rank 2 gave up after %v; its context allowed %v", prober, took, window)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for {
				ws, err := ts[0].Ping(ctx, 1)
				if err != nil {
					t.Fatalf("rank 0: Ping of the live rank 1: %v", err)
				}
				if len(ws) == 1 && ws[0].Peer == 2 && ws[0].Op == "recv" && !ws[0].Failed {
					break // its Recv from rank 2 is under way
				}
			}
		})
	}
}

// Once the mesh is built the listener answers pings only: a stream hello
// is turned away, and a ping from another job or without the secret is
// rejected as during Connect.
func TestListenerAfterConnect(t *testing.T) {
	logs := &syncBuffer{}
	ts := make([]*Transport, 2)
	for r := range ts {
		tr, err := New(Config{Rank: r, Size: 2, JobID: "test", Secret: testSecret})
		if err != nil {
			t.Fatal(err)
		}
		tr.log = slog.New(slog.NewTextHandler(logs, nil))
		ts[r] = tr
		t.Cleanup(func() { tr.Close() })
	}
	connect(t, bootstrap.NewMemStore(), ts...)
	addr := ts[0].Addr()
	ask := func(h hello) (reply, error) {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			return reply{}, err
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		h.Flags |= flagAuth
		hb := appendHello(nil, h)
		nc.Write(hb)
		b, err := readMsg(nc)
		if err != nil {
			return reply{}, err
		}
		nonceA, err := decodeChallenge(b)
		if err != nil {
			return decodeReply(b)
		}
		nonceD := newNonce()
		nc.Write(appendProof(nil, proof{Nonce: nonceD, MAC: handshakeMAC(testSecret, labelDialer, &nonceA, &nonceD, hb)}))
		if b, err = readMsg(nc); err != nil {
			return reply{}, err
		}
		return decodeReply(b)
	}
	stream := hello{Rank: 1, Target: 0, Size: 2, Streams: 1, JobID: "test"}
	if rep, err := ask(stream); err != nil || rep.Accept || rep.Reason != reasonBuilt {
		t.Errorf("a stream hello after Connect: %+v, %v; want a reject with reason %v", rep, err, reasonBuilt)
	}
	other := stream
	other.Flags, other.JobID = flagPing, "other"
	if rep, err := ask(other); err != nil || rep.Accept || rep.Reason != reasonJob {
		t.Errorf("a ping from another job: %+v, %v; want a reject with reason %v", rep, err, reasonJob)
	}
	if _, err := ts[1].Ping(context.Background(), 0); err != nil {
		t.Errorf("rank 1: Ping(0): %v", err)
	}
	// Each is logged after its reject is sent.
	for deadline := time.Now().Add(10 * time.Second); strings.Count(logs.String(), "level=WARN") < 2; runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatalf("%d warnings logged for 2 rejected connections:\n%s", strings.Count(logs.String(), "level=WARN"), logs)
		}
	}
}
