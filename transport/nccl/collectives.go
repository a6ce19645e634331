package nccl

import (
	"context"
	"fmt"

	"github.com/collkit/collkit/transport"
)

// prepare checks the arguments of collective coll against h
// (transport.CheckNative) and maps h's dtype and, for the collectives that
// reduce, its op. It returns the element count a rank passes to NCCL: its
// send count for all-gather, its recv count for reduce-scatter and the
// whole buffer's for the others.
func (t *Transport) prepare(coll transport.Coll, h transport.Header, send, recv []byte) (c *comm, count uintptr, nt, no int32, err error) {
	what := coll.String()
	if c, err = t.ready(what); err != nil {
		return nil, 0, 0, 0, err
	}
	es, err := transport.CheckNative(coll, h, t.size, send, recv)
	if err != nil {
		return nil, 0, 0, 0, t.badArg(what, "%w", err)
	}
	if nt, err = ncclType(h.DType, t.version); err != nil {
		return nil, 0, 0, 0, t.badArg(what, "%w", err)
	}
	if coll != transport.CollBroadcast && coll != transport.CollAllGather {
		if no, err = ncclOp(h.Op, t.version); err != nil {
			return nil, 0, 0, 0, t.badArg(what, "%w", err)
		}
	}
	return c, uintptr(min(len(send), len(recv)) / es), nt, no, nil
}

func (t *Transport) badArg(what, format string, args ...any) error {
	return fmt.Errorf("nccl: rank %d: %s: "+format, append([]any{t.rank, what}, args...)...)
}

func wrap(t *Transport, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("nccl: rank %d: %w", t.rank, err)
}

// AllReduce reduces send over all ranks into recv with ncclAllReduce,
// h.DType and h.Op. send and recv hold h.Count elements; recv may be send
// itself.
func (t *Transport) AllReduce(ctx context.Context, h transport.Header, send, recv []byte) error {
	c, count, nt, no, err := t.prepare(transport.CollAllReduce, h, send, recv)
	if err != nil || count == 0 {
		return err
	}
	return wrap(t, c.run(ctx, "allreduce", send, len(recv), recv, func(s, r uintptr) (string, int32) {
		return "ncclAllReduce", c.a.ncclAllReduce(s, r, count, nt, no, c.h, c.stream)
	}))
}

// Broadcast copies h.Root's send into recv on every rank with
// ncclBroadcast. send is read on the root only; send and recv hold h.Count
// elements.
func (t *Transport) Broadcast(ctx context.Context, h transport.Header, send, recv []byte) error {
	c, count, nt, _, err := t.prepare(transport.CollBroadcast, h, send, recv)
	if err != nil || count == 0 {
		return err
	}
	if t.rank != int(h.Root) {
		send = nil
	}
	return wrap(t, c.run(ctx, "broadcast", send, len(recv), recv, func(s, r uintptr) (string, int32) {
		return "ncclBroadcast", c.a.ncclBroadcast(s, r, count, nt, h.Root, c.h, c.stream)
	}))
}

// Reduce reduces send over all ranks with h.Op into recv on h.Root with
// ncclReduce; recv is left alone on the other ranks. send and recv hold
// h.Count elements.
func (t *Transport) Reduce(ctx context.Context, h transport.Header, send, recv []byte) error {
	c, count, nt, no, err := t.prepare(transport.CollReduce, h, send, recv)
	if err != nil || count == 0 {
		return err
	}
	out := recv
	if t.rank != int(h.Root) {
		out = nil
	}
	return wrap(t, c.run(ctx, "reduce", send, len(recv), out, func(s, r uintptr) (string, int32) {
		return "ncclReduce", c.a.ncclReduce(s, r, count, nt, no, h.Root, c.h, c.stream)
	}))
}

// AllGather concatenates every rank's send, in rank order, into recv with
// ncclAllGather. recv holds h.Count elements and send h.Count/Size().
func (t *Transport) AllGather(ctx context.Context, h transport.Header, send, recv []byte) error {
	c, count, nt, _, err := t.prepare(transport.CollAllGather, h, send, recv)
	if err != nil || count == 0 {
		return err
	}
	return wrap(t, c.run(ctx, "allgather", send, len(recv), recv, func(s, r uintptr) (string, int32) {
		return "ncclAllGather", c.a.ncclAllGather(s, r, count, nt, c.h, c.stream)
	}))
}

// ReduceScatter reduces send over all ranks with h.Op and leaves block
// Rank() of the result in recv, with ncclReduceScatter. send holds h.Count
// elements and recv h.Count/Size().
func (t *Transport) ReduceScatter(ctx context.Context, h transport.Header, send, recv []byte) error {
	c, count, nt, no, err := t.prepare(transport.CollReduceScatter, h, send, recv)
	if err != nil || count == 0 {
		return err
	}
	return wrap(t, c.run(ctx, "reducescatter", send, len(recv), recv, func(s, r uintptr) (string, int32) {
		return "ncclReduceScatter", c.a.ncclReduceScatter(s, r, count, nt, no, c.h, c.stream)
	}))
}

// Transfer is one point-to-point transfer of an Exchange: bytes sent to or
// received from Peer.
type Transfer struct {
	Peer int
	Data []byte
}

// Exchange runs sends and receives with any peers as one NCCL group
// (ncclGroupStart, ncclSend and ncclRecv for each, ncclGroupEnd) on the
// communicator of all ranks, so they progress together and cannot
// deadlock on each other. Each receive must be as long as the matching send
// on its peer; transfers with one peer match in order. Peers may include
// this rank itself.
func (t *Transport) Exchange(ctx context.Context, sends, recvs []Transfer) error {
	const what = "exchange"
	c, err := t.ready(what)
	if err != nil {
		return err
	}
	var sendLen, recvLen int
	for _, x := range sends {
		if x.Peer < 0 || x.Peer >= t.size {
			return t.badArg(what, "send to rank %d outside [0, %d): %w", x.Peer, t.size, transport.ErrBadPeer)
		}
		sendLen += len(x.Data)
	}
	for _, x := range recvs {
		if x.Peer < 0 || x.Peer >= t.size {
			return t.badArg(what, "receive from rank %d outside [0, %d): %w", x.Peer, t.size, transport.ErrBadPeer)
		}
		recvLen += len(x.Data)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		return wrap(t, fmt.Errorf("%s: %w", what, err))
	}
	var call string
	var r int32
	err = c.onDevice(func() error {
		if err := c.reserve(sendLen, recvLen); err != nil {
			return err
		}
		off := 0
		for _, x := range sends {
			if err := c.upload(x.Data, off); err != nil {
				return err
			}
			off += len(x.Data)
		}
		if r = c.a.ncclGroupStart(); r != ncclSuccess {
			call = "ncclGroupStart"
			return nil
		}
		off = 0
		for _, x := range sends {
			if len(x.Data) > 0 {
				if r = c.a.ncclSend(c.sendD.p+uintptr(off), uintptr(len(x.Data)), ncclUint8, int32(x.Peer), c.h, c.stream); r != ncclSuccess && r != ncclInProgress {
					call = "ncclSend"
					c.a.ncclGroupEnd()
					return nil
				}
			}
			off += len(x.Data)
		}
		off = 0
		for _, x := range recvs {
			if len(x.Data) > 0 {
				if r = c.a.ncclRecv(c.recvD.p+uintptr(off), uintptr(len(x.Data)), ncclUint8, int32(x.Peer), c.h, c.stream); r != ncclSuccess && r != ncclInProgress {
					call = "ncclRecv"
					c.a.ncclGroupEnd()
					return nil
				}
			}
			off += len(x.Data)
		}
		call, r = "ncclGroupEnd", c.a.ncclGroupEnd()
		return nil
	})
	if err != nil {
		c.abort(err)
		return wrap(t, fmt.Errorf("%s: %w", what, err))
	}
	if err := c.settle(ctx, call, r); err != nil {
		return wrap(t, fmt.Errorf("%s: %w", what, err))
	}
	if err := c.onDevice(func() error { return c.download(0, recvLen) }); err != nil {
		c.abort(err)
		return wrap(t, fmt.Errorf("%s: %w", what, err))
	}
	if err := c.poll(ctx, what, true); err != nil {
		return wrap(t, err)
	}
	off := 0
	for _, x := range recvs {
		c.fetch(x.Data, off)
		off += len(x.Data)
	}
	return nil
}

// Split makes a sub-communicator with ncclCommSplit: the ranks that pass
// the same color form one, ordered by key (then by rank). A negative color
// leaves this rank out; Split then returns nil and no error. Every rank of
// the communicator calls Split, in the same order relative to its other
// collectives. The sub-communicator shares the GPU and the bootstrap store;
// closing this Transport closes it too.
func (t *Transport) Split(ctx context.Context, color, key int) (*Transport, error) {
	const what = "split"
	c, err := t.ready(what)
	if err != nil {
		return nil, err
	}
	if t.a.ncclCommSplit == nil {
		return nil, fmt.Errorf("nccl: rank %d: split: ncclCommSplit needs NCCL 2.18 or newer, this is %s: %w", t.rank, versionString(t.version), ErrUnsupported)
	}
	t.mu.Lock()
	seq := t.splits
	t.splits++
	t.mu.Unlock()
	nc := &comm{a: t.a, version: t.version, dev: t.dev, life: t.life, blocking: c.blocking}
	ncolor := int32(color)
	if color < 0 {
		ncolor = ncclSplitNoColor
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		return nil, wrap(t, fmt.Errorf("%s: %w", what, err))
	}
	var r int32
	err = c.onDevice(func() error {
		var cfg *commConfig
		if !c.blocking {
			cfg = nonBlockingConfig()
		}
		r = t.a.ncclCommSplit(c.h, ncolor, int32(key), &nc.h, cfg)
		return nil
	})
	if err != nil {
		return nil, wrap(t, fmt.Errorf("%s: %w", what, err))
	}
	switch {
	case r == ncclInProgress && nc.h != 0:
		// Progress is reported on the new communicator.
		if err := nc.poll(ctx, "ncclCommSplit", false); err != nil {
			return nil, wrap(t, fmt.Errorf("%s: %w", what, err))
		}
	case r == ncclInProgress:
		if err := c.poll(ctx, "ncclCommSplit", false); err != nil {
			return nil, wrap(t, fmt.Errorf("%s: %w", what, err))
		}
	case r != ncclSuccess:
		err := c.ncclErr("ncclCommSplit", r)
		c.abort(err)
		return nil, wrap(t, fmt.Errorf("%s: %w", what, err))
	}
	if color < 0 {
		if nc.h != 0 {
			nc.destroy(t.cfg.CloseTimeout)
		}
		return nil, nil
	}
	var n, rank int32
	if r := t.a.ncclCommCount(nc.h, &n); r != ncclSuccess {
		err := nc.ncclErr("ncclCommCount", r)
		nc.abort(err)
		return nil, wrap(t, err)
	}
	if r := t.a.ncclCommUserRank(nc.h, &rank); r != ncclSuccess {
		err := nc.ncclErr("ncclCommUserRank", r)
		nc.abort(err)
		return nil, wrap(t, err)
	}
	nc.rank = int(rank)
	if err := nc.onDevice(func() error {
		if r := t.a.cudaStreamCreate(&nc.stream, cudaStreamNonBlocking); r != cudaSuccess {
			return nc.cudaErr("cudaStreamCreateWithFlags", r)
		}
		return nil
	}); err != nil {
		nc.destroy(t.cfg.CloseTimeout)
		return nil, wrap(t, err)
	}
	cfg := t.cfg
	cfg.Rank, cfg.Size = int(rank), int(n)
	cfg.Name = fmt.Sprintf("%s/split%d/color%d", t.cfg.Name, seq, color)
	life, kill := context.WithCancel(t.life)
	nc.life = life
	sub := &Transport{
		cfg: cfg, a: t.a, version: t.version, dev: t.dev, prefix: "nccl/" + cfg.Name,
		store: t.store, rank: cfg.Rank, size: cfg.Size, main: nc, life: life, kill: kill,
		started: true, pairs: make(map[[2]int]*pairEntry),
	}
	t.mu.Lock()
	t.children = append(t.children, sub)
	t.mu.Unlock()
	return sub, nil
}
