package nccl

import (
	"context"
	"fmt"

	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
)

// prepare checks a collective's arguments and maps its dtype and op.
// op 0 means the collective has none.
func (t *Transport) prepare(what string, dt reduce.DType, op reduce.Op) (*comm, int32, int32, error) {
	c, err := t.ready(what)
	if err != nil {
		return nil, 0, 0, err
	}
	nt, err := ncclType(dt, t.version)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("nccl: rank %d: %s: %w", t.rank, what, err)
	}
	var no int32
	if op != 0 {
		if no, err = ncclOp(op, t.version); err != nil {
			return nil, 0, 0, fmt.Errorf("nccl: rank %d: %s: %w", t.rank, what, err)
		}
	}
	return c, nt, no, nil
}

func (t *Transport) badArg(what, format string, args ...any) error {
	return fmt.Errorf("nccl: rank %d: %s: "+format, append([]any{t.rank, what}, args...)...)
}

func (t *Transport) checkRoot(what string, root int) error {
	if root < 0 || root >= t.size {
		return t.badArg(what, "root %d is outside [0, %d)", root, t.size)
	}
	return nil
}

func wrap(t *Transport, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("nccl: rank %d: %w", t.rank, err)
}

// AllReduce reduces send over all ranks into recv with ncclAllReduce.
// send and recv have the same length, a multiple of dt.Size(); recv may be
// send itself.
func (t *Transport) AllReduce(ctx context.Context, dt reduce.DType, op reduce.Op, send, recv []byte) error {
	const what = "allreduce"
	c, nt, no, err := t.prepare(what, dt, op)
	if err != nil {
		return err
	}
	if len(send) != len(recv) || len(send)%dt.Size() != 0 {
		return t.badArg(what, "send %d bytes and recv %d bytes must be equal and a multiple of %d (%v)", len(send), len(recv), dt.Size(), dt)
	}
	if len(send) == 0 {
		return nil
	}
	count := uintptr(len(send) / dt.Size())
	return wrap(t, c.run(ctx, what, send, len(recv), recv, func(s, r uintptr) (string, int32) {
		return "ncclAllReduce", c.a.ncclAllReduce(s, r, count, nt, no, c.h, c.stream)
	}))
}

// Broadcast copies root's send into recv on every rank with ncclBroadcast.
// send is read on the root only; send and recv have the same length.
func (t *Transport) Broadcast(ctx context.Context, dt reduce.DType, root int, send, recv []byte) error {
	const what = "broadcast"
	c, nt, _, err := t.prepare(what, dt, 0)
	if err != nil {
		return err
	}
	if err := t.checkRoot(what, root); err != nil {
		return err
	}
	if len(send) != len(recv) || len(recv)%dt.Size() != 0 {
		return t.badArg(what, "send %d bytes and recv %d bytes must be equal and a multiple of %d (%v)", len(send), len(recv), dt.Size(), dt)
	}
	if len(recv) == 0 {
		return nil
	}
	if t.rank != root {
		send = nil
	}
	count := uintptr(len(recv) / dt.Size())
	return wrap(t, c.run(ctx, what, send, len(recv), recv, func(s, r uintptr) (string, int32) {
		return "ncclBroadcast", c.a.ncclBroadcast(s, r, count, nt, int32(root), c.h, c.stream)
	}))
}

// Reduce reduces send over all ranks into recv on root with ncclReduce;
// recv is left alone on the other ranks. send and recv have the same
// length.
func (t *Transport) Reduce(ctx context.Context, dt reduce.DType, op reduce.Op, root int, send, recv []byte) error {
	const what = "reduce"
	c, nt, no, err := t.prepare(what, dt, op)
	if err != nil {
		return err
	}
	if err := t.checkRoot(what, root); err != nil {
		return err
	}
	if len(send) != len(recv) || len(send)%dt.Size() != 0 {
		return t.badArg(what, "send %d bytes and recv %d bytes must be equal and a multiple of %d (%v)", len(send), len(recv), dt.Size(), dt)
	}
	if len(send) == 0 {
		return nil
	}
	out := recv
	if t.rank != root {
		out = nil
	}
	count := uintptr(len(send) / dt.Size())
	return wrap(t, c.run(ctx, what, send, len(recv), out, func(s, r uintptr) (string, int32) {
		return "ncclReduce", c.a.ncclReduce(s, r, count, nt, no, int32(root), c.h, c.stream)
	}))
}

// AllGather concatenates every rank's send, in rank order, into recv with
// ncclAllGather. recv is Size() times as long as send.
func (t *Transport) AllGather(ctx context.Context, dt reduce.DType, send, recv []byte) error {
	const what = "allgather"
	c, nt, _, err := t.prepare(what, dt, 0)
	if err != nil {
		return err
	}
	if len(recv) != t.size*len(send) || len(send)%dt.Size() != 0 {
		return t.badArg(what, "recv has %d bytes, want %d ranks x %d bytes of send, a multiple of %d (%v)", len(recv), t.size, len(send), dt.Size(), dt)
	}
	if len(send) == 0 {
		return nil
	}
	count := uintptr(len(send) / dt.Size())
	return wrap(t, c.run(ctx, what, send, len(recv), recv, func(s, r uintptr) (string, int32) {
		return "ncclAllGather", c.a.ncclAllGather(s, r, count, nt, c.h, c.stream)
	}))
}

// ReduceScatter reduces send over all ranks and leaves block Rank() of the
// result in recv, with ncclReduceScatter. send is Size() times as long as
// recv.
func (t *Transport) ReduceScatter(ctx context.Context, dt reduce.DType, op reduce.Op, send, recv []byte) error {
	const what = "reducescatter"
	c, nt, no, err := t.prepare(what, dt, op)
	if err != nil {
		return err
	}
	if len(send) != t.size*len(recv) || len(recv)%dt.Size() != 0 {
		return t.badArg(what, "send has %d bytes, want %d ranks x %d bytes of recv, a multiple of %d (%v)", len(send), t.size, len(recv), dt.Size(), dt)
	}
	if len(recv) == 0 {
		return nil
	}
	count := uintptr(len(recv) / dt.Size())
	return wrap(t, c.run(ctx, what, send, len(recv), recv, func(s, r uintptr) (string, int32) {
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
