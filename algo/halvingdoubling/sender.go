package halvingdoubling

import (
	"context"

	"github.com/collkit/collkit/algo/pipeline"

	"github.com/collkit/collkit/transport"
)

// sendSegments sends buf to peer in segments of at most seg bytes, numbering
// them from h.Step. sent, when not nil, counts each segment once it is out.
func sendSegments(ctx context.Context, t transport.Transport, peer int, h transport.Header, buf []byte, seg int, sent *pipeline.Progress) error {
	base := h.Step
	for j, off := 0, 0; off < len(buf); j, off = j+1, off+seg {
		h.Step = base | uint32(j)&0xffffff
		if err := t.Send(ctx, peer, h, buf[off:min(off+seg, len(buf))]); err != nil {
			return err
		}
		if sent != nil {
			sent.Add()
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
	done   chan error        // one result per job
	sent   pipeline.Progress // segments of the current job sent
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
	}
	s.sent.Init()
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
	s.sent.Init()
	s.jobs <- sendJob{peer: peer, h: h, buf: buf, seg: seg}
}

// stop ends the goroutine once it is idle.
func (s *sender) stop() { close(s.jobs) }
