package nccl

import (
	"context"
	"fmt"

	"github.com/collkit/collkit/transport"
)

// prepare checks the arguments of collective coll, of sendLen and recvLen
// bytes, against h (transport.CheckNativeLen) and maps h's dtype and, for
// the collectives that reduce, its op. It returns the element count a rank
// passes to NCCL: its send count for all-gather, its recv count for
// reduce-scatter and the whole buffer's for the others.
func (t *Transport) prepare(coll transport.Coll, h transport.Header, sendLen, recvLen int) (c *comm, count uintptr, nt, no int32, err error) {
	what := coll.String()
	if c, err = t.ready(what); err != nil {
		return nil, 0, 0, 0, err
	}
	es, err := transport.CheckNativeLen(coll, h, t.size, sendLen, recvLen)
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
	return c, uintptr(min(sendLen, recvLen) / es), nt, no, nil
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

// launcher enqueues one NCCL collective from device send to device recv
// on c.
type launcher func(c *comm, count uintptr, nt, no int32, h transport.Header, send, recv uintptr) (string, int32)

// The NCCL call of each collective.
var (
	launchAllReduce launcher = func(c *comm, n uintptr, nt, no int32, _ transport.Header, s, r uintptr) (string, int32) {
		return "ncclAllReduce", c.a.ncclAllReduce(s, r, n, nt, no, c.h, c.stream)
	}
	launchBroadcast launcher = func(c *comm, n uintptr, nt, _ int32, h transport.Header, s, r uintptr) (string, int32) {
		return "ncclBroadcast", c.a.ncclBroadcast(s, r, n, nt, h.Root, c.h, c.stream)
	}
	launchReduce launcher = func(c *comm, n uintptr, nt, no int32, h transport.Header, s, r uintptr) (string, int32) {
		return "ncclReduce", c.a.ncclReduce(s, r, n, nt, no, h.Root, c.h, c.stream)
	}
	launchAllGather launcher = func(c *comm, n uintptr, nt, _ int32, _ transport.Header, s, r uintptr) (string, int32) {
		return "ncclAllGather", c.a.ncclAllGather(s, r, n, nt, c.h, c.stream)
	}
	launchReduceScatter launcher = func(c *comm, n uintptr, nt, no int32, _ transport.Header, s, r uintptr) (string, int32) {
		return "ncclReduceScatter", c.a.ncclReduceScatter(s, r, n, nt, no, c.h, c.stream)
	}
)

// host runs collective coll on host memory: send staged to the GPU, the
// result copied back into recv where this rank has one (out).
func (t *Transport) host(ctx context.Context, coll transport.Coll, h transport.Header, send, recv []byte, launch launcher) error {
	c, count, nt, no, err := t.prepare(coll, h, len(send), len(recv))
	if err != nil || count == 0 {
		return err
	}
	root := t.rank == int(h.Root)
	if coll == transport.CollBroadcast && !root {
		send = nil // read on the root only
	}
	out := recv
	if coll == transport.CollReduce && !root {
		out = nil // written on the root only
	}
	return wrap(t, c.run(ctx, coll.String(), send, len(recv), out, func(s, r uintptr) (string, int32) {
		return launch(c, count, nt, no, h, s, r)
	}))
}

// device runs collective coll on device memory, after checking that the
// buffers NCCL reads and writes on this rank are device memory on its GPU.
func (t *Transport) device(ctx context.Context, coll transport.Coll, h transport.Header, send, recv transport.DeviceBuffer, launch launcher) error {
	c, count, nt, no, err := t.prepare(coll, h, send.Len, recv.Len)
	if err != nil || count == 0 {
		return err
	}
	return wrap(t, c.runDevice(ctx, coll.String(), t.deviceBuffers(coll, h, send, recv), func() (string, int32) {
		return launch(c, count, nt, no, h, send.Ptr, recv.Ptr)
	}))
}

// deviceBuffers are the buffers collective coll reads or writes on this
// rank, to check: send is read on the root only by broadcast, recv
// written on the root only by reduce.
func (t *Transport) deviceBuffers(coll transport.Coll, h transport.Header, send, recv transport.DeviceBuffer) []namedBuffer {
	root := t.rank == int(h.Root)
	bufs := make([]namedBuffer, 0, 2)
	if coll != transport.CollBroadcast || root {
		bufs = append(bufs, namedBuffer{role: "send", buf: send})
	}
	if (coll != transport.CollReduce || root) && recv != send {
		bufs = append(bufs, namedBuffer{role: "recv", buf: recv})
	}
	return bufs
}

// AllReduce reduces send over all ranks into recv with ncclAllReduce,
// h.DType and h.Op. send and recv hold h.Count elements; recv may be send
// itself.
func (t *Transport) AllReduce(ctx context.Context, h transport.Header, send, recv []byte) error {
	return t.host(ctx, transport.CollAllReduce, h, send, recv, launchAllReduce)
}

// Broadcast copies h.Root's send into recv on every rank with
// ncclBroadcast. send is read on the root only; send and recv hold h.Count
// elements.
func (t *Transport) Broadcast(ctx context.Context, h transport.Header, send, recv []byte) error {
	return t.host(ctx, transport.CollBroadcast, h, send, recv, launchBroadcast)
}

// Reduce reduces send over all ranks with h.Op into recv on h.Root with
// ncclReduce; recv is left alone on the other ranks. send and recv hold
// h.Count elements.
func (t *Transport) Reduce(ctx context.Context, h transport.Header, send, recv []byte) error {
	return t.host(ctx, transport.CollReduce, h, send, recv, launchReduce)
}

// AllGather concatenates every rank's send, in rank order, into recv with
// ncclAllGather. recv holds h.Count elements and send h.Count/Size().
func (t *Transport) AllGather(ctx context.Context, h transport.Header, send, recv []byte) error {
	return t.host(ctx, transport.CollAllGather, h, send, recv, launchAllGather)
}

// ReduceScatter reduces send over all ranks with h.Op and leaves block
// Rank() of the result in recv, with ncclReduceScatter. send holds h.Count
// elements and recv h.Count/Size().
func (t *Transport) ReduceScatter(ctx context.Context, h transport.Header, send, recv []byte) error {
	return t.host(ctx, transport.CollReduceScatter, h, send, recv, launchReduceScatter)
}

// AllReduceDevice is AllReduce on device memory: no copy, NCCL reads send
// and writes recv on the GPU. recv may be send itself.
func (t *Transport) AllReduceDevice(ctx context.Context, h transport.Header, send, recv transport.DeviceBuffer) error {
	return t.device(ctx, transport.CollAllReduce, h, send, recv, launchAllReduce)
}

// BroadcastDevice is Broadcast on device memory; send is read on the root
// only and may be recv (in place).
func (t *Transport) BroadcastDevice(ctx context.Context, h transport.Header, send, recv transport.DeviceBuffer) error {
	return t.device(ctx, transport.CollBroadcast, h, send, recv, launchBroadcast)
}

// ReduceDevice is Reduce on device memory; recv is written on the root
// only.
func (t *Transport) ReduceDevice(ctx context.Context, h transport.Header, send, recv transport.DeviceBuffer) error {
	return t.device(ctx, transport.CollReduce, h, send, recv, launchReduce)
}

// AllGatherDevice is AllGather on device memory. send may be block Rank()
// of recv (in place).
func (t *Transport) AllGatherDevice(ctx context.Context, h transport.Header, send, recv transport.DeviceBuffer) error {
	return t.device(ctx, transport.CollAllGather, h, send, recv, launchAllGather)
}

// ReduceScatterDevice is ReduceScatter on device memory. recv may be block
// Rank() of send (in place).
func (t *Transport) ReduceScatterDevice(ctx context.Context, h transport.Header, send, recv transport.DeviceBuffer) error {
	return t.device(ctx, transport.CollReduceScatter, h, send, recv, launchReduceScatter)
}

// Transfer is one point-to-point transfer of an Exchange: bytes sent to or
// received from Peer.
type Transfer struct {
	Peer int
	Data []byte
}

// checkPeers checks the peers of an exchange's transfers and returns the
// bytes they move.
func (t *Transport) checkPeers(what, dir string, peers func(yield func(peer, n int) bool)) (int, error) {
	total := 0
	var err error
	peers(func(peer, n int) bool {
		if peer < 0 || peer >= t.size {
			err = t.badArg(what, "%s rank %d outside [0, %d): %w", dir, peer, t.size, transport.ErrBadPeer)
			return false
		}
		total += n
		return true
	})
	return total, err
}

// group enqueues ncclSend and ncclRecv of every transfer, at the device
// addresses send and recv give, between ncclGroupStart and ncclGroupEnd.
func (c *comm) group(nsend, nrecv int, send, recv func(i int) (peer int, p uintptr, n int)) (string, int32) {
	if r := c.a.ncclGroupStart(); r != ncclSuccess {
		return "ncclGroupStart", r
	}
	for i := range nsend {
		if peer, p, n := send(i); n > 0 {
			if r := c.a.ncclSend(p, uintptr(n), ncclUint8, int32(peer), c.h, c.stream); r != ncclSuccess && r != ncclInProgress {
				c.a.ncclGroupEnd()
				return "ncclSend", r
			}
		}
	}
	for i := range nrecv {
		if peer, p, n := recv(i); n > 0 {
			if r := c.a.ncclRecv(p, uintptr(n), ncclUint8, int32(peer), c.h, c.stream); r != ncclSuccess && r != ncclInProgress {
				c.a.ncclGroupEnd()
				return "ncclRecv", r
			}
		}
	}
	return "ncclGroupEnd", c.a.ncclGroupEnd()
}

// Exchange runs sends and receives with any peers as one NCCL group
// (ncclGroupStart, ncclSend and ncclRecv for each, ncclGroupEnd) on the
// communicator of all ranks, so they progress together and cannot
// deadlock on each other. Each receive must be as long as the matching send
// on its peer; transfers with one peer match in order. Peers may include
// this rank itself. The data is staged through the GPU.
func (t *Transport) Exchange(ctx context.Context, sends, recvs []Transfer) error {
	const what = "exchange"
	c, err := t.ready(what)
	if err != nil {
		return err
	}
	each := func(xs []Transfer) func(func(int, int) bool) {
		return func(yield func(int, int) bool) {
			for _, x := range xs {
				if !yield(x.Peer, len(x.Data)) {
					return
				}
			}
		}
	}
	sendLen, err := t.checkPeers(what, "send to", each(sends))
	if err != nil {
		return err
	}
	recvLen, err := t.checkPeers(what, "receive from", each(recvs))
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		return wrap(t, fmt.Errorf("%s: %w", what, err))
	}
	offsets := func(xs []Transfer, base uintptr) func(int) (int, uintptr, int) {
		off := 0
		return func(i int) (int, uintptr, int) {
			if i == 0 {
				off = 0
			}
			p := base + uintptr(off)
			off += len(xs[i].Data)
			return xs[i].Peer, p, len(xs[i].Data)
		}
	}
	prep := func() error {
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
		return nil
	}
	if err := c.enqueue(ctx, prep, func() (string, int32) {
		return c.group(len(sends), len(recvs), offsets(sends, c.sendD.p), offsets(recvs, c.recvD.p))
	}); err != nil {
		return wrap(t, fmt.Errorf("%s: %w", what, err))
	}
	if err := c.onDevice(func() error { return c.download(0, recvLen) }); err != nil {
		c.fault(err)
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

// ExchangeDevice is Exchange on device memory: one NCCL group of ncclSend
// and ncclRecv straight from and into the buffers, no copy.
func (t *Transport) ExchangeDevice(ctx context.Context, sends, recvs []transport.DeviceTransfer) error {
	ops := make([]transport.DeviceOp, 0, len(sends)+len(recvs))
	for _, x := range sends {
		ops = append(ops, transport.DeviceOp{Coll: transport.CollSendRecv, Send: x.Buf, Peer: x.Peer})
	}
	for _, x := range recvs {
		ops = append(ops, transport.DeviceOp{Coll: transport.CollSendRecv, Recv: x.Buf, Peer: x.Peer})
	}
	return t.GroupDevice(ctx, ops)
}

// launchers are the NCCL calls of the collectives a group may hold.
var launchers = map[transport.Coll]launcher{
	transport.CollAllReduce:     launchAllReduce,
	transport.CollBroadcast:     launchBroadcast,
	transport.CollReduce:        launchReduce,
	transport.CollAllGather:     launchAllGather,
	transport.CollReduceScatter: launchReduceScatter,
}

// GroupDevice runs ops on device memory as one NCCL group: ncclGroupStart,
// each collective, ncclSend and ncclRecv in order, ncclGroupEnd. Every
// buffer is checked before NCCL is called. See transport.DeviceOp.
func (t *Transport) GroupDevice(ctx context.Context, ops []transport.DeviceOp) error {
	const what = "group"
	c, err := t.ready(what)
	if err != nil {
		return err
	}
	type step struct {
		launch  launcher
		count   uintptr
		nt, no  int32
		skipped bool // a collective of no elements
	}
	steps := make([]step, len(ops))
	var bufs []namedBuffer
	for i, op := range ops {
		if op.Coll == transport.CollSendRecv {
			if op.Peer < 0 || op.Peer >= t.size {
				return t.badArg(what, "operation %d: peer rank %d outside [0, %d): %w", i, op.Peer, t.size, transport.ErrBadPeer)
			}
			switch {
			case op.Send.Len > 0 && op.Recv.Len > 0:
				return t.badArg(what, "operation %d: a send or a receive, not both (Send %v, Recv %v)", i, op.Send, op.Recv)
			case op.Send.Len > 0:
				bufs = append(bufs, namedBuffer{role: "send to", buf: op.Send, peer: op.Peer})
			case op.Recv.Len > 0:
				bufs = append(bufs, namedBuffer{role: "receive from", buf: op.Recv, peer: op.Peer})
			}
			continue
		}
		launch, ok := launchers[op.Coll]
		if !ok {
			return t.badArg(what, "operation %d: %v is not a collective NCCL runs on device memory", i, op.Coll)
		}
		_, count, nt, no, err := t.prepare(op.Coll, op.Header, op.Send.Len, op.Recv.Len)
		if err != nil {
			return err
		}
		steps[i] = step{launch: launch, count: count, nt: nt, no: no, skipped: count == 0}
		bufs = append(bufs, t.deviceBuffers(op.Coll, op.Header, op.Send, op.Recv)...)
	}
	return wrap(t, c.runDevice(ctx, what, bufs, func() (string, int32) {
		if r := c.a.ncclGroupStart(); r != ncclSuccess {
			return "ncclGroupStart", r
		}
		for i, op := range ops {
			var call string
			var r int32
			switch {
			case op.Coll != transport.CollSendRecv:
				if steps[i].skipped {
					continue
				}
				s := steps[i]
				call, r = s.launch(c, s.count, s.nt, s.no, op.Header, op.Send.Ptr, op.Recv.Ptr)
			case op.Send.Len > 0:
				call, r = "ncclSend", c.a.ncclSend(op.Send.Ptr, uintptr(op.Send.Len), ncclUint8, int32(op.Peer), c.h, c.stream)
			case op.Recv.Len > 0:
				call, r = "ncclRecv", c.a.ncclRecv(op.Recv.Ptr, uintptr(op.Recv.Len), ncclUint8, int32(op.Peer), c.h, c.stream)
			default:
				continue
			}
			if r != ncclSuccess && r != ncclInProgress {
				c.a.ncclGroupEnd()
				return call, r
			}
		}
		return "ncclGroupEnd", c.a.ncclGroupEnd()
	}))
}
