package pairwise

import (
	"context"
	"fmt"
	"sync"

	"github.com/collkit/collkit/algo/pipeline"
	"github.com/collkit/collkit/transport"
)

// AllToAll sends block k of send to rank k and receives rank k's block for
// this rank into block k of recv, on every rank of t. send and recv have the
// same length, n blocks of equal size. recv may be send itself (in place),
// at the cost of a block of staging space.
//
// In step s of n, rank r exchanges blocks with rank s-r (mod n), whose
// partner in that step is r, and sits out the step where that is itself:
// each pair of ranks meets once, and a rank in place can send a block and
// receive its replacement in one exchange. The blocks go out on a sender
// goroutine while this one receives, unless the transport buffers a whole
// block (transport.Buffered), in which case each step sends and then
// receives on one goroutine.
func AllToAll(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error {
	n, r := t.Size(), t.Rank()
	if len(send) != len(recv) || len(send)%n != 0 {
		return fmt.Errorf("pairwise: all-to-all: rank %d: send is %d bytes and recv %d; both must hold %d equal blocks", r, len(send), len(recv), n)
	}
	bs := len(send) / n
	a := exchange{t: t, h: h, n: n, r: r, bs: bs, send: send, recv: recv}
	if !pipeline.SameBuffer(send, recv) {
		copy(a.block(recv, r), a.block(send, r))
	}
	if n == 1 {
		return nil
	}
	if b, ok := t.(transport.Buffered); ok && bs <= b.SendBuffer() {
		// A send completes before its receive starts: in place, the block
		// is on its way before its replacement lands.
		for s := range n {
			if err := a.sendStep(ctx, s, nil); err != nil {
				return err
			}
			if err := a.recvStep(ctx, s); err != nil {
				return err
			}
		}
		return nil
	}
	if pipeline.SameBuffer(send, recv) && bs > 0 {
		// In place, the send of each step goes from a copy, while the
		// receive overwrites the block.
		stage := pipeline.Stage(bs)
		defer pipeline.Release(stage)
		for s := range n {
			if err := a.inPlaceStep(ctx, s, stage.B); err != nil {
				return err
			}
		}
		return nil
	}
	x := senders.Get().(*exchange)
	*x = a
	crew := pipeline.StartCrew(ctx)
	crew.Go(x) // every step's send
	var err error
	for s := 0; s < n && err == nil; s++ {
		err = a.recvStep(crew.Context(), s)
	}
	err = crew.Wait(err)
	crew.Release()
	*x = exchange{}
	senders.Put(x)
	return err
}

// exchange is one all-to-all on one rank; as a crew's Job, it sends every
// step's block.
type exchange struct {
	t          transport.Transport
	h          transport.Header
	n, r, bs   int
	send, recv []byte
}

var senders = sync.Pool{New: func() any { return new(exchange) }}

func (a *exchange) block(b []byte, k int) []byte { return b[k*a.bs : (k+1)*a.bs] }

// partner is the rank this one exchanges with in step s; itself in the
// step it sits out.
func (a *exchange) partner(s int) int { return (s - a.r + a.n) % a.n }

func (a *exchange) header(s int) transport.Header {
	h := a.h
	h.Step = uint32(s)
	return h
}

func (a *exchange) wrap(s int, err error) error {
	return fmt.Errorf("pairwise all-to-all step %d/%d with rank %d: %w", s, a.n, a.partner(s), err)
}

// sendStep sends step s's block: from out, or from send when out is nil.
func (a *exchange) sendStep(ctx context.Context, s int, out []byte) error {
	p := a.partner(s)
	if p == a.r {
		return nil
	}
	if out == nil {
		out = a.block(a.send, p)
	}
	if err := a.t.Send(ctx, p, a.header(s), out); err != nil {
		return a.wrap(s, err)
	}
	return nil
}

func (a *exchange) recvStep(ctx context.Context, s int) error {
	p := a.partner(s)
	if p == a.r {
		return nil
	}
	if err := a.t.Recv(ctx, p, a.header(s), a.block(a.recv, p)); err != nil {
		return a.wrap(s, err)
	}
	return nil
}

// inPlaceStep exchanges step s's block from a copy in stage.
func (a *exchange) inPlaceStep(ctx context.Context, s int, stage []byte) error {
	p := a.partner(s)
	if p == a.r {
		return nil
	}
	in := a.block(a.recv, p)
	copy(stage, in)
	if err := pipeline.Exchange(ctx, a.t, a.header(s), p, stage, p, in); err != nil {
		return a.wrap(s, err)
	}
	return nil
}

// Run sends every step's block.
func (a *exchange) Run(ctx context.Context) error {
	for s := range a.n {
		if err := a.sendStep(ctx, s, nil); err != nil {
			return err
		}
	}
	return nil
}
