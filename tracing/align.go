package tracing

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/collkit/collkit/transport"
)

// Align returns what to add to this rank's clock to read rank 0's. Each
// other rank pings rank 0 rounds times; rank 0 answers with its clock, and
// the round with the shortest round trip gives the offset, assuming the two
// directions take equally long. Rank 0 gets 0. Every rank must call it with
// the same h and rounds.
func Align(ctx context.Context, t transport.Transport, h transport.Header, rounds int) (time.Duration, error) {
	rounds = max(rounds, 1)
	h.Coll = transport.CollBarrier
	var buf [8]byte
	if t.Rank() != 0 {
		best, off := time.Duration(1<<62), time.Duration(0)
		for i := range rounds {
			h.Step = uint32(i)
			t0 := time.Now()
			if err := t.Send(ctx, 0, h, buf[:]); err != nil {
				return 0, fmt.Errorf("tracing: align with rank 0: %w", err)
			}
			if err := t.Recv(ctx, 0, h, buf[:]); err != nil {
				return 0, fmt.Errorf("tracing: align with rank 0: %w", err)
			}
			t1 := time.Now()
			remote := time.Unix(0, int64(binary.LittleEndian.Uint64(buf[:])))
			if rtt := t1.Sub(t0); rtt < best {
				mid := t0.Add(rtt / 2)
				best, off = rtt, remote.Sub(mid)
			}
		}
		return off, nil
	}
	for peer := 1; peer < t.Size(); peer++ {
		for i := range rounds {
			h.Step = uint32(i)
			if err := t.Recv(ctx, peer, h, buf[:]); err != nil {
				return 0, fmt.Errorf("tracing: align rank %d: %w", peer, err)
			}
			binary.LittleEndian.PutUint64(buf[:], uint64(time.Now().UnixNano()))
			if err := t.Send(ctx, peer, h, buf[:]); err != nil {
				return 0, fmt.Errorf("tracing: align rank %d: %w", peer, err)
			}
		}
	}
	return 0, nil
}

// Gather sends every rank's spans to rank 0, which gets them all in rank
// order; the others get nil. Every rank must call it with the same h.
func Gather(ctx context.Context, t transport.Transport, h transport.Header, rec *Recorder) ([]Event, error) {
	h.Coll = transport.CollGather
	mine := rec.Events()
	if t.Rank() != 0 {
		b, err := json.Marshal(mine)
		if err != nil {
			return nil, fmt.Errorf("tracing: %w", err)
		}
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(b)))
		h.Step = 0
		if err := t.Send(ctx, 0, h, n[:]); err != nil {
			return nil, fmt.Errorf("tracing: sending spans to rank 0: %w", err)
		}
		h.Step = 1
		if err := t.Send(ctx, 0, h, b); err != nil {
			return nil, fmt.Errorf("tracing: sending spans to rank 0: %w", err)
		}
		return nil, nil
	}
	all := mine
	for peer := 1; peer < t.Size(); peer++ {
		var n [8]byte
		h.Step = 0
		if err := t.Recv(ctx, peer, h, n[:]); err != nil {
			return nil, fmt.Errorf("tracing: spans of rank %d: %w", peer, err)
		}
		size := binary.LittleEndian.Uint64(n[:])
		if size > 1<<32 {
			return nil, fmt.Errorf("tracing: rank %d announced %d bytes of spans: not a trace", peer, size)
		}
		b := make([]byte, size)
		h.Step = 1
		if err := t.Recv(ctx, peer, h, b); err != nil {
			return nil, fmt.Errorf("tracing: spans of rank %d: %w", peer, err)
		}
		var evs []Event
		if err := json.Unmarshal(b, &evs); err != nil {
			return nil, fmt.Errorf("tracing: spans of rank %d: %w", peer, err)
		}
		all = append(all, evs...)
	}
	return all, nil
}
