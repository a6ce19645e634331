package bench_test

import (
	"context"
	"testing"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/bench"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
)

// flipping flips a bit of the first byte of every payload of at least
// 1 KiB it sends: the collectives' data, not the benchmark's own small
// all-reduces of times and counts.
type flipping struct{ transport.Transport }

func (f flipping) Send(ctx context.Context, peer int, h transport.Header, p []byte) error {
	if len(p) >= 1<<10 {
		q := append([]byte(nil), p...)
		q[0] ^= 0x40
		p = q
	}
	return f.Transport.Send(ctx, peer, h, p)
}

// A corrupted result is counted: every collective's check finds wrong
// elements when the transport flips bits, checking against expected values
// made a few KiB at a time rather than against a whole buffer.
func TestCheckFindsWrongElements(t *testing.T) {
	const n = 3
	cfg := bench.Config{MinBytes: 48 << 10, MaxBytes: 48 << 10, Iters: 1, Check: 1,
		DType: reduce.Float32, Op: reduce.Sum, Seed: 9}
	for _, coll := range bench.Collectives() {
		if coll == "barrier" {
			continue // no data to corrupt: TestCheckFindsEarlyBarrier
		}
		t.Run(coll, func(t *testing.T) {
			rows := onWrapped(t, n, func(tr transport.Transport) transport.Transport { return flipping{tr} },
				func(c *collkit.Comm) ([]bench.Row, error) {
					return bench.RunCollective(context.Background(), c, coll, cfg, 1, nil)
				})
			if len(rows[0]) != 1 || rows[0][0].OutOfPlace.Wrong == 0 || rows[0][0].InPlace.Wrong == 0 {
				t.Errorf("rows %+v: want wrong elements out of place and in place", rows[0])
			}
		})
	}
}

// hasty lets its rank out of every barrier at once: it takes a barrier's
// empty messages only when it next receives from the same peer, so it
// never waits for the others to arrive.
type hasty struct {
	transport.Transport
	owed map[int][]transport.Header
}

func (h *hasty) Recv(ctx context.Context, peer int, hd transport.Header, p []byte) error {
	if hd.Coll == transport.CollBarrier {
		h.owed[peer] = append(h.owed[peer], hd)
		return nil
	}
	for _, o := range h.owed[peer] {
		if err := h.Transport.Recv(ctx, peer, o, nil); err != nil {
			return err
		}
	}
	h.owed[peer] = nil
	return h.Transport.Recv(ctx, peer, hd, p)
}

// A barrier that lets ranks out before all have entered is caught: in each
// checked barrier one rank enters late, and the ranks that left before it
// entered are counted.
func TestCheckFindsEarlyBarrier(t *testing.T) {
	const n = 3
	cfg := bench.Config{MinBytes: 4, MaxBytes: 4, Iters: 1, Check: 2, DType: reduce.Float32, Op: reduce.Sum}
	rows := onWrapped(t, n, func(tr transport.Transport) transport.Transport { return &hasty{tr, map[int][]transport.Header{}} },
		func(c *collkit.Comm) ([]bench.Row, error) {
			return bench.RunCollective(context.Background(), c, "barrier", cfg, 0, nil)
		})
	if m := rows[0][0].OutOfPlace; !m.Checked || m.Wrong == 0 {
		t.Errorf("out of place: checked %v, %d early leaves; want checked and some", m.Checked, m.Wrong)
	}
}
