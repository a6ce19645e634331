package pairwise

import (
	"context"
	"fmt"

	"github.com/collkit/collkit/algo/pipeline"
	"github.com/collkit/collkit/transport"
)

// AllToAll sends block k of send to rank k and receives rank k's block for
// this rank into block k of recv, on every rank of t. send and recv have the
// same length, n blocks of equal size. recv may be send itself (in place),
// at the cost of a copy of send.
//
// The blocks go out on a sender goroutine while this one receives, unless
// the transport buffers a whole block (transport.Buffered), in which case
// each step sends and then receives on one goroutine.
func AllToAll(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error {
	n, r := t.Size(), t.Rank()
	if len(send) != len(recv) || len(send)%n != 0 {
		return fmt.Errorf("pairwise: all-to-all: rank %d: send is %d bytes and recv %d; both must hold %d equal blocks", r, len(send), len(recv), n)
	}
	bs := len(send) / n
	if pipeline.SameBuffer(send, recv) && bs > 0 {
		s := pipeline.Stage(len(send))
		defer pipeline.Release(s)
		copy(*s, send)
		send = *s
	}
	copy(recv[r*bs:(r+1)*bs], send[r*bs:(r+1)*bs])
	if n == 1 {
		return nil
	}
	block := func(b []byte, k int) []byte { return b[k*bs : (k+1)*bs] }
	sendStep := func(ctx context.Context, s int) error {
		to := (r + s) % n
		h := h // a copy per step: sends and receives run on two goroutines
		h.Step = uint32(s)
		if err := t.Send(ctx, to, h, block(send, to)); err != nil {
			return fmt.Errorf("pairwise all-to-all step %d/%d: %w", s, n-1, err)
		}
		return nil
	}
	recvStep := func(ctx context.Context, s int) error {
		from := (r - s + n) % n
		h := h
		h.Step = uint32(s)
		if err := t.Recv(ctx, from, h, block(recv, from)); err != nil {
			return fmt.Errorf("pairwise all-to-all step %d/%d: %w", s, n-1, err)
		}
		return nil
	}
	if b, ok := t.(transport.Buffered); ok && bs <= b.SendBuffer() {
		for s := 1; s < n; s++ {
			if err := sendStep(ctx, s); err != nil {
				return err
			}
			if err := recvStep(ctx, s); err != nil {
				return err
			}
		}
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sendErr := make(chan error, 1)
	go func() {
		var err error
		for s := 1; s < n && err == nil; s++ {
			err = sendStep(ctx, s)
		}
		if err != nil {
			cancel() // unblock the receiver
		}
		sendErr <- err
	}()
	var recvErr error
	for s := 1; s < n && recvErr == nil; s++ {
		recvErr = recvStep(ctx, s)
	}
	if recvErr != nil {
		cancel()
	}
	if err := <-sendErr; err != nil && (recvErr == nil || pipeline.Canceled(recvErr)) {
		return err
	}
	return recvErr
}
