//go:build linux

package shm

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/collkit/collkit/internal/stream"
	"github.com/collkit/collkit/transport"
)

// ring is a single-producer single-consumer byte ring in shared memory.
// head and tail count bytes written and read since the start; each is
// written by one side only. A side that finds nothing to do sets its wait
// word (cwait for the consumer, pwait for the producer) and sleeps on it;
// the other side clears and wakes it after moving head or tail.
//
// Messages are a transport.Header followed by the payload, back to back,
// with now and then a pad record (see rewind) that starts the next message
// at the ring's start.
type ring struct {
	head, tail *atomic.Uint64
	// mine is the word this side writes (head on a producer's ring, tail
	// on a consumer's) as it last wrote it: reading the shared word back
	// would wait for its line, which the other side took when it polled
	// it (about 100 ns a load; see native.hdr).
	mine         uint64
	cwait, pwait *atomic.Uint32
	cwake, pwake *waker // of cwait and pwait, on this side's waits
	data         []byte
	size         uint64
	mask         uint64
	streaming    bool // put streams from streamMin up (Transport.Streaming)
}

func (t *Transport) newRing(s *segment, l layout, sender int) ring {
	c, d := l.ctrl(sender), l.data(sender)
	return ring{
		head:  s.u64(c + ctrlHead),
		tail:  s.u64(c + ctrlTail),
		cwait: s.u32(c + ctrlCwait),
		pwait: s.u32(c + ctrlPwait),
		cwake: t.newWaker(s.u32(c + ctrlCwait)),
		pwake: t.newWaker(s.u32(c + ctrlPwait)),
		data:  s.mem[d : d+l.ringBytes : d+l.ringBytes],
		size:  uint64(l.ringBytes),
		mask:  uint64(l.ringBytes - 1),
	}
}

// batch is the most bytes one side moves before it publishes them, so that
// the other side works on a large message while this side still copies.
func (r *ring) batch() uint64 { return min(r.size/4, 256<<10) }

// rewind returns the pad record that a message of total bytes, written at
// head into the empty ring, should follow so that it starts at the ring's
// start, or nil: when head is in the last three quarters of the ring and
// the message fits before it. So a producer whose messages are consumed as
// they come cycles through the ring's first quarter, the part that Connect
// already touched (chooseStores), and does not page in the rest. On the
// 2-core EPYC VM a first touch of a shared page costs 12 us to write and 5
// more to read through the other mapping (scripts/firsttouch.c), and a 16
// KiB ring all-reduce over 4 ranks (the headline) took 400-900 us a call
// for its first 35 calls, while the messages paged in the last 768 KiB of
// each ring (60 us a call over 1000 calls, 42 once warm). Messages that do
// not fit, and rings that are not empty, go on as before.
func (r *ring) rewind(head, total uint64, pad []byte) []byte {
	at := head & r.mask
	skip := r.size - at
	if at < r.size/4 || skip < transport.HeaderSize || total > at {
		return nil
	}
	transport.Header{Coll: transport.CollPad, Root: -1, Len: uint32(skip - transport.HeaderSize)}.Encode(pad)
	return pad[:transport.HeaderSize]
}

// put copies b into the ring at position pos (which has room for it).
// From streamMin up it streams when r.streaming (see package
// internal/stream): the reader read these lines on the last lap, and on
// some machines ordinary stores take each one back from its cache first
// (2-core EPYC VM, ring all-reduce, np 2, 4 MiB: 1180 us a call, 570 us
// streamed).
func (r *ring) put(pos uint64, b []byte) {
	i := pos & r.mask
	if len(b) < streamMin || !r.streaming {
		n := copy(r.data[i:], b)
		copy(r.data, b[n:])
		return
	}
	n := stream.Copy(r.data[i:], b)
	stream.Copy(r.data, b[n:])
}

// get copies len(b) bytes at position pos out of the ring.
func (r *ring) get(pos uint64, b []byte) {
	i := pos & r.mask
	n := copy(b, r.data[i:])
	copy(b[n:], r.data)
}

// write streams the header bytes hb and then p into pr's ring. moved
// reports whether any byte was published before an error.
func (t *Transport) write(ctx context.Context, pr *peer, h *transport.Header, hb, p []byte) (moved bool, err error) {
	r := &pr.out
	head := r.mine
	tail := r.tail.Load()
	total := uint64(len(hb) + len(p))
	if head == tail {
		var pb [transport.HeaderSize]byte
		if pad := r.rewind(head, total, pb[:]); pad != nil {
			// Published with the message's first batch, which the
			// whole ring's room then holds.
			r.put(head, pad)
			head += r.size - head&r.mask
		}
	}
	first := true
	for done := uint64(0); done < total; {
		free := r.size - (head - tail)
		if free == 0 {
			tail = r.tail.Load()
			if free = r.size - (head - tail); free == 0 {
				err := t.await(ctx, r.pwake, &pr.outWait, &note{op: opSend, peer: pr.rank, h: h},
					func() bool { return r.tail.Load() != tail },
					func(live bool) error { return pr.gone(live) })
				if err != nil {
					return !first, err
				}
				continue
			}
		}
		// The first batch carries the header and as much payload as fits,
		// so a small message is one publish.
		n := min(free, total-done)
		if !first {
			n = min(n, r.batch())
		}
		for n > 0 {
			var src []byte
			if done < uint64(len(hb)) {
				src = hb[done:]
			} else {
				src = p[done-uint64(len(hb)):]
			}
			k := min(n, uint64(len(src)))
			r.put(head, src[:k])
			head += k
			done += k
			n -= k
		}
		raceSync()
		r.produced(head)
		first = false
	}
	return false, nil
}

// read takes one message from pr's ring: it waits for the header, checks it
// against want and streams the payload into p. moved reports whether the
// message was partly consumed when an error came.
func (t *Transport) read(ctx context.Context, pr *peer, want transport.Header, p []byte) (moved bool, err error) {
	r := &pr.in
	tail := r.mine
	head := r.head.Load()
	gone := func(live bool) error { return pr.gone(live) }
	n := note{op: opRecv, peer: pr.rank, h: &want}
	var got transport.Header
	for {
		if head-tail < transport.HeaderSize {
			err := t.await(ctx, r.cwake, &pr.inWait, &n, func() bool {
				head = r.head.Load()
				return head-tail >= transport.HeaderSize
			}, gone)
			if err != nil {
				return false, err // a pad passed over is not consumed: r.mine still points at it
			}
		}
		raceSync()
		var hb [transport.HeaderSize]byte
		r.get(tail, hb[:])
		tail += transport.HeaderSize
		var err error
		if got, err = transport.Decode(hb[:]); err != nil {
			return true, fmt.Errorf("%w; the ring from rank %d is out of step: an earlier operation was cut short, or the peer runs another collkit version",
				err, pr.rank)
		}
		if got.Coll != transport.CollPad {
			break
		}
		tail += uint64(got.Len) // the message follows in the same publish
	}
	if err := want.Check(pr.rank, got); err != nil {
		r.consumed(tail)
		return true, err
	}
	for off := uint64(0); off < uint64(len(p)); {
		avail := head - tail
		if avail == 0 {
			r.consumed(tail)
			err := t.await(ctx, r.cwake, &pr.inWait, &n, func() bool {
				head = r.head.Load()
				return head != tail
			}, gone)
			if err != nil {
				return true, err
			}
			continue
		}
		n := min(avail, uint64(len(p))-off, r.batch())
		raceSync()
		r.get(tail, p[off:off+n])
		tail += n
		off += n
		if off < uint64(len(p)) {
			r.consumed(tail)
		}
	}
	r.consumed(tail)
	return false, nil
}

// produced publishes a producer's new head and wakes the consumer if it
// sleeps for data.
func (r *ring) produced(head uint64) {
	r.mine = head
	r.head.Store(head)
	wake(r.cwait)
}

// consumed publishes a consumer's new tail and wakes the producer if it
// sleeps for room.
func (r *ring) consumed(tail uint64) {
	r.mine = tail
	r.tail.Store(tail)
	wake(r.pwait)
}

// streamMin is the smallest put that streams.
const streamMin = 4 << 10
