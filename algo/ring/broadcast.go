package ring

import (
	"context"
	"fmt"
	"sync"

	"github.com/collkit/collkit/algo/dissemination"
	"github.com/collkit/collkit/algo/pipeline"
	"github.com/collkit/collkit/transport"
)

// Broadcast runs a pipelined chain broadcast with the default Config.
func Broadcast(ctx context.Context, t transport.Transport, h transport.Header, buf []byte, root int) error {
	return Config{}.Broadcast(ctx, t, h, buf, root)
}

// Broadcast copies buf from rank root into buf on every rank of t. All
// ranks pass buffers of the same length. The data flows along a chain, root
// to root+1 to ... to root-1, in segments, so that every link carries the
// buffer once and all links are busy at once. Broadcast sets h.Root to root,
// so ranks that disagree on the root get a mismatch error.
//
// The chain has no cycle, so a rank may forward on the goroutine that
// receives without risking a deadlock; it does for buffers up to
// Config.EagerBytes, and uses a sender goroutine above, to receive the next
// segment while it forwards the last.
func (c Config) Broadcast(ctx context.Context, t transport.Transport, h transport.Header, buf []byte, root int) error {
	n, r := t.Size(), t.Rank()
	if root < 0 || root >= n {
		return fmt.Errorf("ring: broadcast: root %d is not a rank of %d (0 to %d)", root, n, n-1)
	}
	h.Root = int32(root)
	if len(buf) == 0 {
		// Still take part, so that ranks that passed data fail here too.
		return dissemination.Agree(ctx, t, h)
	}
	if n == 1 {
		return nil
	}
	es := h.DType.Size()
	if es == 0 {
		es = 1 // a broadcast moves bytes; a dtype only aligns the segments
	}
	ch := chain{n: n, r: r, root: root, seg: c.segBytes(es), len: len(buf)}
	pos := ch.pos()
	switch {
	case pos == 0:
		return ch.sendAll(ctx, t, h, buf, nil)
	case pos == n-1:
		return ch.recvAll(ctx, t, h, buf, nil, false)
	case len(buf) <= c.eagerBytes() || len(buf) <= ch.seg:
		return ch.recvAll(ctx, t, h, buf, nil, true)
	}
	x := chains.Get().(*chainCall)
	x.ch, x.t, x.h, x.buf = ch, t, h, buf
	x.ready.Init()
	crew := pipeline.StartCrew(ctx)
	crew.Go(x) // the sending half
	err := crew.Wait(ch.recvAll(crew.Context(), t, h, buf, &x.ready, false))
	crew.Release()
	x.t, x.buf = nil, nil
	chains.Put(x)
	return err
}

// chainCall is the sending half of a pipelined chain broadcast, as a crew's
// Job: it forwards each segment once the receiving half has it. It is
// reused from call to call.
type chainCall struct {
	ch    chain
	t     transport.Transport
	h     transport.Header
	buf   []byte
	ready pipeline.Progress // segments received
}

func (x *chainCall) Run(ctx context.Context) error {
	return x.ch.sendAll(ctx, x.t, x.h, x.buf, &x.ready)
}

var chains = sync.Pool{New: func() any { return new(chainCall) }}

// chain is the shape of a chain broadcast: the buffer of len bytes cut in
// segments that travel from root around the ring to root-1.
type chain struct {
	n, r, root, seg, len int
}

// pos is this rank's place in the chain, 0 for the root.
func (c chain) pos() int { return (c.r - c.root + c.n) % c.n }

func (c chain) segments() int { return (c.len + c.seg - 1) / c.seg }

// span is the byte range of segment i.
func (c chain) span(i int) (lo, hi int) { return i * c.seg, min((i+1)*c.seg, c.len) }

// sendAll sends every segment to the right neighbour, each once ready says
// it has arrived (ready is nil at the root, which has them all).
func (c chain) sendAll(ctx context.Context, t transport.Transport, h transport.Header, buf []byte, ready *pipeline.Progress) error {
	right := (c.r + 1) % c.n
	for i := range c.segments() {
		if ready != nil {
			if err := ready.Wait(ctx, int64(i+1)); err != nil {
				return err
			}
		}
		lo, hi := c.span(i)
		h.Step = uint32(i)
		if err := t.Send(ctx, right, h, buf[lo:hi]); err != nil {
			return fmt.Errorf("ring broadcast segment %d/%d: %w", i, c.segments(), err)
		}
	}
	return nil
}

// recvAll receives every segment from the left neighbour, telling ready
// (if any) after each, or forwarding it itself when forward is set.
func (c chain) recvAll(ctx context.Context, t transport.Transport, h transport.Header, buf []byte, ready *pipeline.Progress, forward bool) error {
	left, right := (c.r-1+c.n)%c.n, (c.r+1)%c.n
	for i := range c.segments() {
		lo, hi := c.span(i)
		seg := buf[lo:hi]
		h.Step = uint32(i)
		err := t.Recv(ctx, left, h, seg)
		if err == nil && forward {
			err = t.Send(ctx, right, h, seg)
		}
		if err != nil {
			return fmt.Errorf("ring broadcast segment %d/%d: %w", i, c.segments(), err)
		}
		if ready != nil {
			ready.Add()
		}
	}
	return nil
}
