package halvingdoubling

import (
	"context"
	"sync"

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
// are busy at once. One serves one all-reduce, as a crew's Job, and handles
// one exchange at a time; senders are reused from call to call.
type sender struct {
	t    transport.Transport
	crew *pipeline.Crew
	jobs chan sendJob
	done chan error        // one result per job
	sent pipeline.Progress // segments of the current job sent
}

type sendJob struct {
	peer int // -1: stop
	h    transport.Header
	buf  []byte
	seg  int
}

var senders = sync.Pool{New: func() any {
	return &sender{jobs: make(chan sendJob, 1), done: make(chan error, 1)}
}}

// startSender starts a sender for t in crew.
func startSender(crew *pipeline.Crew, t transport.Transport) *sender {
	s := senders.Get().(*sender)
	s.t, s.crew = t, crew
	s.sent.Init()
	crew.Go(s)
	return s
}

// Run sends the posted jobs until stop. A failed send cancels the crew, to
// unblock the receiver, and is reported on done like any other result.
func (s *sender) Run(ctx context.Context) error {
	for j := range s.jobs {
		if j.peer < 0 {
			return nil
		}
		err := sendSegments(ctx, s.t, j.peer, j.h, j.buf, j.seg, &s.sent)
		if err != nil {
			s.crew.Fail()
		}
		s.done <- err
	}
	return nil
}

// post starts sending buf; the caller then reads exactly one result from
// done before posting again.
func (s *sender) post(peer int, h transport.Header, buf []byte, seg int) {
	s.sent.Init()
	s.jobs <- sendJob{peer: peer, h: h, buf: buf, seg: seg}
}

// stop ends the goroutine once it is idle; the caller then waits for the
// crew and gives the sender back with release.
func (s *sender) stop() { s.jobs <- sendJob{peer: -1} }

func (s *sender) release() {
	s.t, s.crew = nil, nil
	senders.Put(s)
}
