package halvingdoubling

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/collkit/collkit/transport"
)

// sendSegments sends buf to peer in segments of at most seg bytes, numbering
// them from h.Step. sent, when not nil, counts each segment once it is out.
func sendSegments(ctx context.Context, t transport.Transport, peer int, h transport.Header, buf []byte, seg int, sent *progress) error {
	base := h.Step
	for j, off := 0, 0; off < len(buf); j, off = j+1, off+seg {
		h.Step = base | uint32(j)&0xffffff
		if err := t.Send(ctx, peer, h, buf[off:min(off+seg, len(buf))]); err != nil {
			return err
		}
		if sent != nil {
			sent.add()
		}
	}
	return nil
}

// sender is the goroutine that sends one side of each exchange while the
// all-reduce's own goroutine receives the other, so both directions of a link
// are busy at once. One lives for one all-reduce and handles one exchange at
// a time.
type sender struct {
	t      transport.Transport
	ctx    context.Context
	cancel context.CancelFunc // called on a send error, to unblock the receiver
	jobs   chan sendJob
	done   chan error // one result per job
	sent   progress   // segments of the current job sent
}

type sendJob struct {
	peer int
	h    transport.Header
	buf  []byte
	seg  int
}

func startSender(ctx context.Context, cancel context.CancelFunc, t transport.Transport) *sender {
	s := &sender{
		t: t, ctx: ctx, cancel: cancel,
		jobs: make(chan sendJob, 1),
		done: make(chan error, 1),
		sent: progress{wake: make(chan struct{}, 1)},
	}
	go s.loop()
	return s
}

func (s *sender) loop() {
	for j := range s.jobs {
		err := sendSegments(s.ctx, s.t, j.peer, j.h, j.buf, j.seg, &s.sent)
		if err != nil {
			s.cancel()
		}
		s.done <- err
	}
}

// post starts sending buf; the caller then reads exactly one result from
// done before posting again.
func (s *sender) post(peer int, h transport.Header, buf []byte, seg int) {
	s.sent.reset()
	s.jobs <- sendJob{peer: peer, h: h, buf: buf, seg: seg}
}

// stop ends the goroutine once it is idle.
func (s *sender) stop() { close(s.jobs) }

// progress counts segments sent, so the receiver can reduce into a segment
// as soon as its old contents are on their way.
type progress struct {
	done atomic.Int64
	wake chan struct{}
}

// reset starts a new count; only while no sender is running.
func (g *progress) reset() {
	g.done.Store(0)
	select {
	case <-g.wake:
	default:
	}
}

func (g *progress) add() {
	g.done.Add(1)
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

func (g *progress) wait(ctx context.Context, n int64) error {
	for g.done.Load() < n {
		select {
		case <-g.wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Staging buffers for incoming segments, reused across all-reduces.
var stages sync.Pool

func getStage(n int) *[]byte {
	if b, ok := stages.Get().(*[]byte); ok && cap(*b) >= n {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n)
	return &b
}

func putStage(b *[]byte) { stages.Put(b) }

func sameStart(a, b []byte) bool {
	return len(a) > 0 && len(b) > 0 && &a[0] == &b[0] || len(a) == 0 && len(b) == 0
}

func isCancel(err error) bool { return errors.Is(err, context.Canceled) }
