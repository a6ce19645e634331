package collkit

import (
	"context"
	"fmt"

	"github.com/collkit/collkit/transport"
)

// DeviceBuffer is GPU memory: a device pointer, its length in bytes and
// its CUDA device (see transport.DeviceBuffer). Take one from
// nccl.Alloc(...).Buffer(), or wrap a pointer another CUDA library gave
// you, such as a PyTorch tensor's data_ptr(), nbytes and device index.
type DeviceBuffer = transport.DeviceBuffer

// DeviceTransfer is one send or receive of ExchangeDevice.
type DeviceTransfer = transport.DeviceTransfer

// ErrHostMemoryOnly is wrapped by the Device methods of a Comm whose
// transport moves host memory only (every transport but nccl).
var ErrHostMemoryOnly = transport.ErrHostMemoryOnly

// deviceOps runs ops through the transport's device capabilities, in
// their turn among this Comm's calls, with the Comm's timeout: one
// operation through DeviceCollectives, several as one group through
// DeviceGrouper. argErr, an invalid argument on this rank, fails the
// communicator as for the []byte methods. A transport without device
// support is an error at the call that leaves the Comm usable.
func (c *Comm) deviceOps(ctx context.Context, name callName, argErr error, grouped bool, ops ...transport.DeviceOp) error {
	return c.call(ctx, name, funcOp(func(ctx context.Context) error {
		if err := c.usable(); err != nil {
			return err
		}
		colls, _ := c.t.(transport.DeviceCollectives)
		group, _ := c.t.(transport.DeviceGrouper)
		single := !grouped && len(ops) == 1
		if single && colls == nil || !single && group == nil {
			return fmt.Errorf("collkit: rank %d: %s: %w: transport %q cannot take GPU memory; connect with Options.Transport \"nccl\", or pass host memory ([]byte) to the method without Device",
				c.Rank(), name, ErrHostMemoryOnly, c.transportName)
		}
		h := transport.Header{Coll: transport.CollSendRecv, DType: Uint8, Root: -1}
		if single {
			h = ops[0].Header
		}
		return c.runColl(ctx, name.String(), h, func(ctx context.Context, _ transport.Transport, _ transport.Header) error {
			if !single {
				return group.GroupDevice(ctx, ops)
			}
			o := ops[0]
			switch o.Coll {
			case transport.CollAllReduce:
				return colls.AllReduceDevice(ctx, o.Header, o.Send, o.Recv)
			case transport.CollBroadcast:
				return colls.BroadcastDevice(ctx, o.Header, o.Send, o.Recv)
			case transport.CollReduce:
				return colls.ReduceDevice(ctx, o.Header, o.Send, o.Recv)
			case transport.CollAllGather:
				return colls.AllGatherDevice(ctx, o.Header, o.Send, o.Recv)
			}
			return colls.ReduceScatterDevice(ctx, o.Header, o.Send, o.Recv)
		})
	}), argErr)
}

// deviceColl describes one collective on device memory after checking its
// arguments: dt, op where it reduces (op 0 where it does not), root where
// it has one (-1 where not), and the buffer lengths, where sendShare and
// recvShare say how many ranks' shares send and recv hold.
func (c *Comm) deviceColl(name callName, coll transport.Coll, dt DType, op Op, send, recv DeviceBuffer, root, sendShares, recvShares int) (transport.DeviceOp, error) {
	o := transport.DeviceOp{Coll: coll, Send: send, Recv: recv, Peer: -1}
	what := name.String()
	switch {
	case op != 0 && !op.Valid():
		return o, c.badArg(what, "reduction op %v", op)
	case !dt.Valid():
		return o, c.badArg(what, "data type %v", dt)
	case root != -1:
		if err := c.checkRoot(what, root); err != nil {
			return o, err
		}
	}
	for _, b := range []DeviceBuffer{send, recv} {
		if b.Len < 0 || b.Len%dt.Size() != 0 {
			return o, c.badArg(what, "device buffer of %d bytes is not a whole number of %v elements (%d bytes each)", b.Len, dt, dt.Size())
		}
	}
	if send.Len*recvShares != recv.Len*sendShares {
		return o, c.badArg(what, "send is %d bytes and recv %d; recv must be %d/%d of send", send.Len, recv.Len, recvShares, sendShares)
	}
	whole := max(send.Len, recv.Len)
	o.Header = header(coll, dt, op, whole/dt.Size(), root, 0)
	return o, nil
}

func (c *Comm) allReduceDevice(dt DType, op Op, send, recv DeviceBuffer) (transport.DeviceOp, error) {
	return c.deviceColl(nameAllReduceDevice, transport.CollAllReduce, dt, op, send, recv, -1, 1, 1)
}

func (c *Comm) broadcastDevice(dt DType, buf DeviceBuffer, root int) (transport.DeviceOp, error) {
	return c.deviceColl(nameBroadcastDevice, transport.CollBroadcast, dt, 0, buf, buf, root, 1, 1)
}

func (c *Comm) reduceDevice(dt DType, op Op, send, recv DeviceBuffer, root int) (transport.DeviceOp, error) {
	return c.deviceColl(nameReduceDevice, transport.CollReduce, dt, op, send, recv, root, 1, 1)
}

func (c *Comm) allGatherDevice(dt DType, send, recv DeviceBuffer) (transport.DeviceOp, error) {
	return c.deviceColl(nameAllGatherDevice, transport.CollAllGather, dt, 0, send, recv, -1, 1, c.Size())
}

func (c *Comm) reduceScatterDevice(dt DType, op Op, send, recv DeviceBuffer) (transport.DeviceOp, error) {
	return c.deviceColl(nameReduceScatterDevice, transport.CollReduceScatter, dt, op, send, recv, -1, c.Size(), 1)
}

// AllReduceDevice is AllReduce on GPU memory: NCCL reads send and writes
// recv on the GPU, nothing is copied to the host. recv may be send (in
// place). The transport must take device memory (nccl); others return an
// error wrapping ErrHostMemoryOnly.
func (c *Comm) AllReduceDevice(ctx context.Context, dt DType, op Op, send, recv DeviceBuffer) error {
	o, err := c.allReduceDevice(dt, op, send, recv)
	if in, ok := c.intra.(*ncclIntra); ok && algorithmNames[c.algo] == "hierarchical" {
		return c.hybridAllReduceDevice(ctx, in, o.Header, send, recv, err) // comm_hybrid.go
	}
	return c.deviceOps(ctx, nameAllReduceDevice, err, false, o)
}

// BroadcastDevice is Broadcast on GPU memory: buf on rank root is copied
// into buf on every rank.
func (c *Comm) BroadcastDevice(ctx context.Context, dt DType, buf DeviceBuffer, root int) error {
	o, err := c.broadcastDevice(dt, buf, root)
	return c.deviceOps(ctx, nameBroadcastDevice, err, false, o)
}

// ReduceDevice is Reduce on GPU memory: recv is written on root only.
func (c *Comm) ReduceDevice(ctx context.Context, dt DType, op Op, send, recv DeviceBuffer, root int) error {
	o, err := c.reduceDevice(dt, op, send, recv, root)
	return c.deviceOps(ctx, nameReduceDevice, err, false, o)
}

// AllGatherDevice is AllGather on GPU memory: recv is Size() times send,
// every rank's send in rank order. send may be block Rank() of recv.
func (c *Comm) AllGatherDevice(ctx context.Context, dt DType, send, recv DeviceBuffer) error {
	o, err := c.allGatherDevice(dt, send, recv)
	return c.deviceOps(ctx, nameAllGatherDevice, err, false, o)
}

// ReduceScatterDevice is ReduceScatter on GPU memory: send is Size() times
// recv, and recv gets block Rank() of the reduction.
func (c *Comm) ReduceScatterDevice(ctx context.Context, dt DType, op Op, send, recv DeviceBuffer) error {
	o, err := c.reduceScatterDevice(dt, op, send, recv)
	return c.deviceOps(ctx, nameReduceScatterDevice, err, false, o)
}

// ExchangeDevice sends and receives GPU memory with any peers as one NCCL
// group (ncclGroupStart/End): they progress together, so ranks may send
// to each other both ways without deadlock. A receive is as long as the
// matching send; transfers with one peer match in order.
func (c *Comm) ExchangeDevice(ctx context.Context, sends, recvs []DeviceTransfer) error {
	g := c.DeviceGroup()
	for _, x := range sends {
		g.Send(x.Buf, x.Peer)
	}
	for _, x := range recvs {
		g.Recv(x.Buf, x.Peer)
	}
	return g.Run(ctx)
}

// SendDevice sends buf to peer (ncclSend); the peer calls RecvDevice or
// receives in a group. It returns once the data has left, which needs the
// peer's receive: to send and receive at once, use ExchangeDevice.
func (c *Comm) SendDevice(ctx context.Context, buf DeviceBuffer, peer int) error {
	return c.ExchangeDevice(ctx, []DeviceTransfer{{Peer: peer, Buf: buf}}, nil)
}

// RecvDevice receives into buf from peer (ncclRecv); see SendDevice.
func (c *Comm) RecvDevice(ctx context.Context, buf DeviceBuffer, peer int) error {
	return c.ExchangeDevice(ctx, nil, []DeviceTransfer{{Peer: peer, Buf: buf}})
}

// DeviceGroup collects operations on GPU memory and runs them as one NCCL
// group (ncclGroupStart/End) when Run is called, in the order they were
// added: collectives NCCL launches together, sends and receives that
// cannot deadlock on each other. Every rank adds the same collectives in
// the same order. The first invalid argument is Run's error. A DeviceGroup
// is not safe for concurrent use; it can be Run once.
type DeviceGroup struct {
	c   *Comm
	ops []transport.DeviceOp
	err error
}

// DeviceGroup starts an empty group of operations on GPU memory.
func (c *Comm) DeviceGroup() *DeviceGroup { return &DeviceGroup{c: c} }

func (g *DeviceGroup) add(o transport.DeviceOp, err error) {
	switch {
	case err != nil && g.err == nil:
		g.err = fmt.Errorf("operation %d: %w", len(g.ops), err)
	case err == nil:
		g.ops = append(g.ops, o)
	}
}

// AllReduce adds an all-reduce (see Comm.AllReduceDevice).
func (g *DeviceGroup) AllReduce(dt DType, op Op, send, recv DeviceBuffer) {
	g.add(g.c.allReduceDevice(dt, op, send, recv))
}

// Broadcast adds a broadcast (see Comm.BroadcastDevice).
func (g *DeviceGroup) Broadcast(dt DType, buf DeviceBuffer, root int) {
	g.add(g.c.broadcastDevice(dt, buf, root))
}

// Reduce adds a reduce (see Comm.ReduceDevice).
func (g *DeviceGroup) Reduce(dt DType, op Op, send, recv DeviceBuffer, root int) {
	g.add(g.c.reduceDevice(dt, op, send, recv, root))
}

// AllGather adds an all-gather (see Comm.AllGatherDevice).
func (g *DeviceGroup) AllGather(dt DType, send, recv DeviceBuffer) {
	g.add(g.c.allGatherDevice(dt, send, recv))
}

// ReduceScatter adds a reduce-scatter (see Comm.ReduceScatterDevice).
func (g *DeviceGroup) ReduceScatter(dt DType, op Op, send, recv DeviceBuffer) {
	g.add(g.c.reduceScatterDevice(dt, op, send, recv))
}

// Send adds a send of buf to peer.
func (g *DeviceGroup) Send(buf DeviceBuffer, peer int) { g.p2p(buf, DeviceBuffer{}, peer) }

// Recv adds a receive into buf from peer.
func (g *DeviceGroup) Recv(buf DeviceBuffer, peer int) { g.p2p(DeviceBuffer{}, buf, peer) }

func (g *DeviceGroup) p2p(send, recv DeviceBuffer, peer int) {
	var err error
	switch {
	case peer < 0 || peer >= g.c.Size():
		err = g.c.badArg(nameGroupDevice.String(), "peer %d is not a rank of this communicator (0 to %d)", peer, g.c.Size()-1)
	case send.Len < 0 || recv.Len < 0:
		err = g.c.badArg(nameGroupDevice.String(), "device buffer of %d bytes", min(send.Len, recv.Len))
	}
	g.add(transport.DeviceOp{Coll: transport.CollSendRecv, Send: send, Recv: recv, Peer: peer}, err)
}

// Run runs the group's operations as one NCCL group and waits for them.
func (g *DeviceGroup) Run(ctx context.Context) error {
	if g.ops == nil && g.err == nil {
		return nil
	}
	ops := g.ops
	g.ops = nil
	return g.c.deviceOps(ctx, nameGroupDevice, g.err, true, ops...)
}
