package nccl

import (
	"context"
	"fmt"

	"github.com/collkit/collkit/transport"
)

// pairEntry is a two-rank communicator carrying the messages of one
// direction between two ranks, made on first use.
type pairEntry struct {
	ready chan struct{} // closed once c or err is set
	c     *comm
	err   error
}

// pair returns the communicator for messages from src to dst, creating it
// with the peer on first use: src creates its unique id and publishes it
// under "nccl/<Name>/p2p/<src>-<dst>"; src is rank 0 in it and dst rank 1.
func (t *Transport) pair(ctx context.Context, src, dst int) (*comm, error) {
	k := [2]int{src, dst}
	t.mu.Lock()
	e := t.pairs[k]
	if e == nil {
		e = &pairEntry{ready: make(chan struct{})}
		t.pairs[k] = e
		t.mu.Unlock()
		e.c, e.err = t.newPair(ctx, src, dst)
		close(e.ready)
		return e.c, e.err
	}
	t.mu.Unlock()
	select {
	case <-e.ready:
		return e.c, e.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (t *Transport) newPair(ctx context.Context, src, dst int) (*comm, error) {
	if t.store == nil {
		return nil, fmt.Errorf("nccl: rank %d: send or receive before Connect", t.rank)
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	context.AfterFunc(t.life, stop)
	key := fmt.Sprintf("%s/p2p/%d-%d", t.prefix, src, dst)
	me := 0
	if t.rank == dst {
		me = 1
	}
	id, err := t.exchangeID(ctx, key, me == 0)
	if err != nil {
		return nil, err
	}
	return t.initComm(ctx, fmt.Sprintf("the pair communicator for messages from rank %d to rank %d", src, dst), 2, id, me)
}

func (t *Transport) checkPeer(op string, peer int) error {
	if peer < 0 || peer >= t.size || peer == t.rank {
		return &transport.PeerError{Rank: peer, Op: op, Err: fmt.Errorf("%w: rank %d of %d", transport.ErrBadPeer, t.rank, t.size)}
	}
	if t.closed.Load() || t.failed.Load() {
		return &transport.PeerError{Rank: peer, Op: op, Err: transport.ErrClosed}
	}
	return nil
}

// Send delivers p to peer: the encoded header, then p, each with ncclSend
// on the pair communicator for this direction.
func (t *Transport) Send(ctx context.Context, peer int, h transport.Header, p []byte) error {
	if err := t.checkPeer("send", peer); err != nil {
		return err
	}
	c, err := t.pair(ctx, t.rank, peer)
	if err != nil {
		return &transport.PeerError{Rank: peer, Op: "send", Err: err}
	}
	h.Len = uint32(len(p))
	var hdr [transport.HeaderSize]byte
	h.Encode(hdr[:])
	if err := c.message(ctx, hdr[:], p, nil, nil); err != nil {
		return &transport.PeerError{Rank: peer, Op: "send", Err: err}
	}
	return nil
}

// Recv receives the next message from peer into p: the header first, which
// must equal h with h.Len = len(p), then the payload.
func (t *Transport) Recv(ctx context.Context, peer int, h transport.Header, p []byte) error {
	if err := t.checkPeer("recv", peer); err != nil {
		return err
	}
	c, err := t.pair(ctx, peer, t.rank)
	if err != nil {
		return &transport.PeerError{Rank: peer, Op: "recv", Err: err}
	}
	h.Len = uint32(len(p))
	var hdr [transport.HeaderSize]byte
	if err := c.message(ctx, nil, nil, hdr[:], nil); err != nil {
		return &transport.PeerError{Rank: peer, Op: "recv", Err: err}
	}
	got, err := transport.Decode(hdr[:])
	if err != nil {
		return &transport.PeerError{Rank: peer, Op: "recv", Err: err}
	}
	if err := h.Check(peer, got); err != nil {
		// The payload was not received: this direction is out of step.
		c.mu.Lock()
		c.abort(err)
		c.mu.Unlock()
		return err
	}
	if err := c.message(ctx, nil, nil, nil, p); err != nil {
		return &transport.PeerError{Rank: peer, Op: "recv", Err: err}
	}
	return nil
}

// message runs one step on a pair communicator: on the sender (rank 0 of
// it) ncclSend of hdr and then of body; on the receiver (rank 1) ncclRecv
// into hdrOut, or into bodyOut.
func (c *comm) message(ctx context.Context, hdr, body, hdrOut, bodyOut []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		return err
	}
	send := hdr != nil
	n := len(hdr) + len(body)
	out := hdrOut
	if out == nil {
		out = bodyOut
	}
	if !send {
		n = len(out)
		if n == 0 {
			return nil
		}
	}
	var calls []func() (string, int32)
	if send {
		calls = append(calls, func() (string, int32) {
			return "ncclSend", c.a.ncclSend(c.sendD.p, uintptr(len(hdr)), ncclUint8, 1, c.h, c.stream)
		})
		if len(body) > 0 {
			calls = append(calls, func() (string, int32) {
				return "ncclSend", c.a.ncclSend(c.sendD.p+uintptr(len(hdr)), uintptr(len(body)), ncclUint8, 1, c.h, c.stream)
			})
		}
	} else {
		calls = append(calls, func() (string, int32) {
			return "ncclRecv", c.a.ncclRecv(c.recvD.p, uintptr(n), ncclUint8, 0, c.h, c.stream)
		})
	}
	stage := func() error {
		if send {
			if err := c.reserve(n, 0); err != nil {
				return err
			}
			if err := c.upload(hdr, 0); err != nil {
				return err
			}
			return c.upload(body, len(hdr))
		}
		return c.reserve(0, n)
	}
	for i, call := range calls {
		if i > 0 {
			stage = nil
		}
		if err := c.enqueue(ctx, stage, call); err != nil {
			return err
		}
	}
	if !send {
		if err := c.onDevice(func() error { return c.download(0, n) }); err != nil {
			c.fault(err)
			return err
		}
	}
	if err := c.poll(ctx, map[bool]string{true: "send", false: "receive"}[send], true); err != nil {
		return err
	}
	if !send {
		c.fetch(out, 0)
	}
	return nil
}
