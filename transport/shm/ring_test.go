//go:build linux

package shm

import (
	"bytes"
	"context"
	"testing"

	"github.com/collkit/collkit/transport"
)

// A producer whose messages are read as they come starts each one that
// fits in the ring's first quarter (ring.rewind), so it never pages in the
// rest; messages that do not fit, or that find the ring holding others,
// still go where they always went. Every payload arrives whole and in
// order across the pad records, and Peek shows the message behind a pad.
func TestRingRewinds(t *testing.T) {
	ts := local(t, 2, Config{Dir: segDir(t), RingBytes: MinRingBytes})
	ctx := context.Background()
	r := &ts[0].peers[1].out
	quarter := r.size / 4
	h := transport.Header{Coll: transport.CollSendRecv, Root: -1}
	// send sends a message of size bytes with h and reports whether a pad
	// record went before it.
	send := func(size int) ([]byte, bool) {
		t.Helper()
		p := make([]byte, size)
		for i := range p {
			p[i] = byte(int(h.Seq)*31 + i)
		}
		before := r.mine
		if err := ts[0].Send(ctx, 1, h, p); err != nil {
			t.Fatalf("message %d (%d bytes): send: %v", h.Seq, size, err)
		}
		total := uint64(transport.HeaderSize + size)
		start := r.mine - total
		if start == before {
			return p, false
		}
		if start&r.mask != 0 || before&r.mask < quarter {
			t.Fatalf("message %d (%d bytes) after head %d: starts at %d, want %d or the start of the next lap from the last three quarters", h.Seq, size, before, start, before)
		}
		return p, true
	}
	recv := func(want []byte) {
		t.Helper()
		got := make([]byte, len(want))
		if err := ts[1].Recv(ctx, 0, h, got); err != nil {
			t.Fatalf("message %d (%d bytes): recv: %v", h.Seq, len(want), err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("message %d (%d bytes): payload differs", h.Seq, len(want))
		}
		h.Seq++
	}

	// One at a time, small: the head stays within a quarter and a message.
	peekedPads := 0
	for i := range 200 {
		size := 1 + i*37%700
		p, padded := send(size)
		if at := r.mine & r.mask; at > quarter+uint64(transport.HeaderSize+700) {
			t.Fatalf("message %d (%d bytes) ends at offset %d of the %d-byte ring: it should have started in the first quarter", h.Seq, size, at, r.size)
		}
		if padded || i%3 == 0 {
			got, ok := ts[1].Peek(0)
			if !ok || got.Seq != h.Seq || got.Len != uint32(size) {
				t.Fatalf("message %d (pad before it: %v): Peek = %+v, %v; want its header", h.Seq, padded, got, ok)
			}
			if padded {
				peekedPads++
			}
		}
		recv(p)
	}
	if peekedPads == 0 {
		t.Fatal("200 small messages through a 4 KiB ring made no pad record")
	}

	// Larger than the ring, between small ones: they stream through it.
	for _, size := range []int{5000, 100, 3000, 9000, 1, 2000} {
		p := make([]byte, size)
		for i := range p {
			p[i] = byte(int(h.Seq)*31 + i)
		}
		sent := make(chan error, 1)
		go func(h transport.Header) { sent <- ts[0].Send(ctx, 1, h, p) }(h)
		recv(p)
		if err := <-sent; err != nil {
			t.Fatalf("message of %d bytes: send: %v", size, err)
		}
	}

	// Two in the ring at once: the second follows the first.
	for range 20 {
		a, _ := send(300)
		h.Seq++
		b, padded := send(400)
		if padded {
			t.Fatalf("message %d: a pad record in a ring that held message %d", h.Seq, h.Seq-1)
		}
		h.Seq--
		recv(a)
		recv(b)
	}
}
