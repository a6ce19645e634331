package tcp

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/collkit/collkit/internal/clock"
	"github.com/collkit/collkit/internal/spin"
	"github.com/collkit/collkit/transport"
)

// TestRecvLargePolled receives 1 MiB messages on a stream that polls for
// large messages (pollAll), from a writer that stops partway for longer
// than the polling budget: the rest arrives through the parking read, and
// every byte is where it belongs. A peer that hangs up partway is an error,
// not a short message.
func TestRecvLargePolled(t *testing.T) {
	const size = 1 << 20
	h := transport.Header{Seq: 7, Count: size / 4, Root: -1, Coll: transport.CollAllReduce, Len: size}
	frame := make([]byte, transport.HeaderSize+size)
	h.Encode(frame)
	for i := range size {
		frame[transport.HeaderSize+i] = byte(i*7 + i>>10)
	}
	for _, tc := range []struct {
		name    string
		pause   time.Duration // between the two halves
		hangUp  bool          // after the first half
		wantErr bool
	}{
		{name: "at once"},
		{name: "pause past the budget", pause: 30 * time.Millisecond},
		{name: "hang-up partway", hangUp: true, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tcpPair(t)
			defer a.Close()
			defer b.Close()
			s := newStream(b)
			s.pollAll = true
			s.budget = spin.Fixed(2 * time.Millisecond)
			half := len(frame) / 2
			go func() {
				a.Write(frame[:half])
				if tc.hangUp {
					a.Close()
					return
				}
				time.Sleep(tc.pause)
				a.Write(frame[half:])
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			p := make([]byte, size)
			n, err := s.recv(ctx, 1, h, p, clock.Since())
			if tc.wantErr {
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("recv after a hang-up partway: n=%d err=%v, want io.ErrUnexpectedEOF", n, err)
				}
				return
			}
			if err != nil || n != len(frame) {
				t.Fatalf("recv: n=%d err=%v, want %d bytes", n, err, len(frame))
			}
			for i, v := range p {
				if want := frame[transport.HeaderSize+i]; v != want {
					t.Fatalf("byte %d: %d, want %d", i, v, want)
				}
			}
		})
	}
}

// TestOnHost counts the ranks that share this rank's host.
func TestOnHost(t *testing.T) {
	addrs := [][]byte{[]byte("127.0.0.1:5000"), []byte("10.0.0.2:5001"), []byte("127.0.0.1:5002"), []byte("bad")}
	if got := onHost("127.0.0.1:5000", addrs); got != 2 {
		t.Errorf("onHost: %d, want 2", got)
	}
	if got := onHost("10.0.0.9:1", addrs); got != 1 {
		t.Errorf("onHost of a host with no rank listed: %d, want 1 (this rank)", got)
	}
}
