package tcp

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/collkit/collkit/internal/clock"
	"github.com/collkit/collkit/transport"
)

// TestSleepLearnsWake receives messages that come long after the polling
// budget ran out: each receive sleeps, reads from the kernel's receive
// timestamp how long after its message arrived it woke, and teaches the
// budget that cost and the wait without it. Every byte arrives where it
// belongs.
//
// The delay is a sleep on purpose: the late message is the condition
// under test.
func TestSleepLearnsWake(t *testing.T) {
	a, b := tcpPair(t)
	defer a.Close()
	defer b.Close()
	s := newStream(b)
	const delay = 20 * time.Millisecond
	for round := range 3 {
		h := transport.Header{Seq: uint64(round), Count: 2, Root: -1, Coll: transport.CollAllReduce, Len: 8}
		frame := make([]byte, transport.HeaderSize+8)
		h.Encode(frame)
		for i := range 8 {
			frame[transport.HeaderSize+i] = byte(round*8 + i + 1)
		}
		go func() {
			time.Sleep(delay) // far past the budget: the receive sleeps
			a.Write(frame)
		}()
		p := make([]byte, 8)
		begin := time.Now()
		start := clock.Since()
		n, err := s.recv(context.Background(), 1, h, p, start)
		took := time.Since(begin)
		if err != nil || n != len(frame) {
			t.Fatalf("round %d: recv: n=%d err=%v, want %d bytes", round, n, err, len(frame))
		}
		for i, v := range p {
			if want := frame[transport.HeaderSize+i]; v != want {
				t.Fatalf("round %d: byte %d: %d, want %d", round, i, v, want)
			}
		}
		if round == 0 && s.woke < 0 {
			continue // the first sleep turns the timestamps on, which may take effect late
		}
		if s.woke < 0 || s.woke > took {
			t.Fatalf("round %d: the sleep cost %v by the receive timestamp, want between 0 and the %v the receive took", round, s.woke, took)
		}
		if w := s.budget.Wake(); w <= 0 || w > took {
			t.Fatalf("round %d: the budget learned a wake-up cost of %v, want more than 0 and at most %v", round, w, took)
		}
		// The wait it learned is the time to the message's arrival: the
		// sender's delay, not the receive's whole time.
		if got := s.wokeAt - s.woke - start; got < delay/2 || got > took {
			t.Fatalf("round %d: the message arrived %v after the wait began, want between %v and %v", round, got, delay/2, took)
		}
	}
}

// TestStampOf finds the SO_TIMESTAMPNS timestamp among control messages,
// and returns 0 for none or for a malformed one.
func TestStampOf(t *testing.T) {
	msg := func(level, typ int32, data []byte) []byte {
		b := make([]byte, unix.CmsgSpace(len(data)))
		binary.NativeEndian.PutUint64(b, uint64(unix.CmsgLen(len(data))))
		binary.NativeEndian.PutUint32(b[8:], uint32(level))
		binary.NativeEndian.PutUint32(b[12:], uint32(typ))
		copy(b[unix.CmsgLen(0):], data)
		return b
	}
	ts := make([]byte, 16)
	binary.NativeEndian.PutUint64(ts, 1700000000)
	binary.NativeEndian.PutUint64(ts[8:], 123456789)
	const want = 1700000000*int64(time.Second) + 123456789
	other := msg(unix.SOL_SOCKET, unix.SO_TIMESTAMP, make([]byte, 16))
	for _, tc := range []struct {
		name string
		b    []byte
		want int64
	}{
		{"alone", msg(unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, ts), want},
		{"after another", append(other, msg(unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, ts)...), want},
		{"none", other, 0},
		{"empty", nil, 0},
		{"short data", msg(unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, ts[:8]), 0},
		{"length past the end", msg(unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, ts)[:20], 0},
		{"length below a header", append(binary.NativeEndian.AppendUint64(nil, 4), make([]byte, 24)...), 0},
	} {
		if got := stampOf(tc.b); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}
