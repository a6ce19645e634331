package collkit

import (
	"context"
	"fmt"

	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
)

// maxP2PMessage is the largest message a Send puts on the wire; longer
// buffers go as several, numbered by Step.
const maxP2PMessage = 1 << 30

// p2pSeq numbers the point-to-point messages with one peer, each direction
// on its own, apart from the collectives' sequence: only the two ranks
// involved call Send and Recv.
type p2pSeq struct{ sent, received uint64 }

// Send sends buf to rank peer, which must call Recv with a buffer of the
// same length and dtype. Sends to one peer arrive in the order they were
// made. Like a collective, Send holds the communicator while it runs, and
// a large Send may wait for the peer's Recv: two ranks that send to each
// other before receiving should do so in a Group, which runs its sends and
// receives concurrently.
//
// A Recv that disagrees with the Send (another length or dtype) fails on
// the receiving rank at that call, which aborts its communicator. Whether
// the Send fails too depends on whether it had to wait for the receiver: a
// Send that the transport takes without it (over tcp one that fits in the
// socket buffers, transport.Buffered's SendBuffer, a few MiB; over the
// in-memory transport any) has returned nil by then, and the sender learns
// of the mismatch at its next call on the communicator, from the
// receiver's abort notice. A larger Send, still waiting for the receiver
// to read it, fails with that notice, which quotes the mismatch.
func (c *Comm) Send(ctx context.Context, dt DType, buf []byte, peer int) error {
	run, err := c.sendOp(dt, buf, peer)
	return c.call(ctx, nameSend, run, err)
}

// SendAsync starts a Send and returns at once (see Work).
func (c *Comm) SendAsync(ctx context.Context, dt DType, buf []byte, peer int) *Work {
	run, err := c.sendOp(dt, buf, peer)
	return c.start(ctx, nameSend, run, err)
}

func (c *Comm) sendOp(dt DType, buf []byte, peer int) (operation, error) {
	if err := c.checkP2P("send", dt, buf, peer); err != nil {
		return operation{}, err
	}
	return operation{kind: opSend, dt: dt, send: buf, root: peer}, nil
}

func (c *Comm) send(ctx context.Context, dt DType, buf []byte, peer int) error {
	return c.runP2P(ctx, "send", peer, func(ctx context.Context, t transport.Transport, h transport.Header) error {
		return sendChunks(ctx, t, peer, h, buf)
	}, c.p2pHeader(dt, buf, peer, true))
}

// Recv receives the next Send from rank peer into buf, which must have the
// length and dtype the peer sent.
func (c *Comm) Recv(ctx context.Context, dt DType, buf []byte, peer int) error {
	run, err := c.recvOp(dt, buf, peer)
	return c.call(ctx, nameRecv, run, err)
}

// RecvAsync starts a Recv and returns at once (see Work).
func (c *Comm) RecvAsync(ctx context.Context, dt DType, buf []byte, peer int) *Work {
	run, err := c.recvOp(dt, buf, peer)
	return c.start(ctx, nameRecv, run, err)
}

func (c *Comm) recvOp(dt DType, buf []byte, peer int) (operation, error) {
	if err := c.checkP2P("recv", dt, buf, peer); err != nil {
		return operation{}, err
	}
	return operation{kind: opRecv, dt: dt, recv: buf, root: peer}, nil
}

func (c *Comm) recv(ctx context.Context, dt DType, buf []byte, peer int) error {
	return c.runP2P(ctx, "recv", peer, func(ctx context.Context, t transport.Transport, h transport.Header) error {
		return recvChunks(ctx, t, peer, h, buf)
	}, c.p2pHeader(dt, buf, peer, false))
}

func (c *Comm) checkP2P(what string, dt DType, buf []byte, peer int) error {
	if err := c.checkDType(what, dt, buf); err != nil {
		return err
	}
	if peer < 0 || peer >= c.Size() || peer == c.Rank() {
		return c.badArg(what, "peer %d is this rank or not a rank of this communicator (0 to %d)", peer, c.Size()-1)
	}
	return nil
}

// p2pHeader numbers the next message to (send) or from peer. The caller
// holds c.mu. Root is the sending rank.
func (c *Comm) p2pHeader(dt DType, buf []byte, peer int, send bool) transport.Header {
	if c.p2pSeq == nil {
		c.p2pSeq = make([]p2pSeq, c.Size())
	}
	h := transport.Header{Coll: transport.CollSendRecv, DType: dt, Count: uint64(len(buf) / dt.Size()), Algo: algoDirect}
	if send {
		h.Seq, h.Root = c.p2pSeq[peer].sent, int32(c.Rank())
		c.p2pSeq[peer].sent++
	} else {
		h.Seq, h.Root = c.p2pSeq[peer].received, int32(peer)
		c.p2pSeq[peer].received++
	}
	return h
}

// runP2P is run for point-to-point calls, which keep their own sequence
// numbers. The caller holds c.mu.
func (c *Comm) runP2P(ctx context.Context, what string, peer int, fn func(context.Context, transport.Transport, transport.Header) error, h transport.Header) error {
	if err := c.usable(); err != nil {
		return err
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	err := c.observed(what, "direct", h, int(h.Count)*max(h.DType.Size(), 1), func(t transport.Transport) error { return fn(ctx, t, h) })
	if err != nil {
		return c.fail(fmt.Errorf("collkit: rank %d: %s #%d with rank %d (%d x %v): %w", c.Rank(), what, h.Seq, peer, h.Count, h.DType, explain(ctx, err)))
	}
	return nil
}

func sendChunks(ctx context.Context, t transport.Transport, peer int, h transport.Header, buf []byte) error {
	for i, off := 0, 0; off < len(buf) || i == 0; i, off = i+1, off+maxP2PMessage {
		h.Step = uint32(i)
		if err := t.Send(ctx, peer, h, buf[off:min(off+maxP2PMessage, len(buf))]); err != nil {
			return err
		}
	}
	return nil
}

func recvChunks(ctx context.Context, t transport.Transport, peer int, h transport.Header, buf []byte) error {
	for i, off := 0, 0; off < len(buf) || i == 0; i, off = i+1, off+maxP2PMessage {
		h.Step = uint32(i)
		if err := t.Recv(ctx, peer, h, buf[off:min(off+maxP2PMessage, len(buf))]); err != nil {
			return err
		}
	}
	return nil
}

// Send sends buf to rank peer (see Comm.Send).
func Send[T Element](ctx context.Context, c *Comm, buf []T, peer int) error {
	return c.Send(ctx, dtypeOf[T](), reduce.Bytes(buf), peer)
}

// SendAsync starts a typed Send (see Comm.SendAsync).
func SendAsync[T Element](ctx context.Context, c *Comm, buf []T, peer int) *Work {
	return c.SendAsync(ctx, dtypeOf[T](), reduce.Bytes(buf), peer)
}

// Recv receives the next Send from rank peer into buf (see Comm.Recv).
func Recv[T Element](ctx context.Context, c *Comm, buf []T, peer int) error {
	return c.Recv(ctx, dtypeOf[T](), reduce.Bytes(buf), peer)
}

// RecvAsync starts a typed Recv (see Comm.RecvAsync).
func RecvAsync[T Element](ctx context.Context, c *Comm, buf []T, peer int) *Work {
	return c.RecvAsync(ctx, dtypeOf[T](), reduce.Bytes(buf), peer)
}
