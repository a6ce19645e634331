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

var (
	nameAllReduceDevice     = "allreduce (device memory)"
	nameBroadcastDevice     = "broadcast (device memory)"
	nameReduceDevice        = "reduce (device memory)"
	nameAllGatherDevice     = "allgather (device memory)"
	nameReduceScatterDevice = "reducescatter (device memory)"
	nameExchangeDevice      = "exchange (device memory)"
)

// device runs a collective on device memory through the transport's
// DeviceCollectives or DeviceExchanger, in its turn among this Comm's
// calls, with the Comm's timeout. argErr, an invalid argument on this rank,
// fails the communicator as for the []byte methods. A transport without
// device support is an error at the call that leaves the Comm usable.
func (c *Comm) device(ctx context.Context, name *string, h transport.Header, argErr error, fn func(ctx context.Context, t transport.Transport) error) error {
	return c.call(ctx, name, funcOp(func(ctx context.Context) error {
		if err := c.usable(); err != nil {
			return err
		}
		_, colls := c.t.(transport.DeviceCollectives)
		_, p2p := c.t.(transport.DeviceExchanger)
		if h.Coll == transport.CollSendRecv && !p2p || h.Coll != transport.CollSendRecv && !colls {
			return fmt.Errorf("collkit: rank %d: %s: %w: transport %q cannot take GPU memory; connect with Options.Transport \"nccl\", or pass host memory ([]byte) to the method without Device",
				c.Rank(), *name, ErrHostMemoryOnly, c.transportName)
		}
		return c.runColl(ctx, *name, h, func(ctx context.Context, _ transport.Transport, _ transport.Header) error {
			return fn(ctx, c.t)
		})
	}), argErr)
}

// checkDevice checks dt, op and that each buffer is whole elements of dt.
func (c *Comm) checkDevice(what string, dt DType, op Op, bufs ...DeviceBuffer) error {
	if op != 0 && !op.Valid() {
		return c.badArg(what, "reduction op %v", op)
	}
	if !dt.Valid() {
		return c.badArg(what, "data type %v", dt)
	}
	for _, b := range bufs {
		if b.Len < 0 || b.Len%dt.Size() != 0 {
			return c.badArg(what, "device buffer of %d bytes is not a whole number of %v elements (%d bytes each)", b.Len, dt, dt.Size())
		}
	}
	return nil
}

// AllReduceDevice is AllReduce on GPU memory: NCCL reads send and writes
// recv on the GPU, nothing is copied to the host. recv may be send (in
// place). The transport must take device memory (nccl); others return an
// error wrapping ErrHostMemoryOnly.
func (c *Comm) AllReduceDevice(ctx context.Context, dt DType, op Op, send, recv DeviceBuffer) error {
	err := c.checkDevice(nameAllReduceDevice, dt, op, send, recv)
	if err == nil && send.Len != recv.Len {
		err = c.badArg(nameAllReduceDevice, "send is %d bytes but recv is %d; they must be the same size", send.Len, recv.Len)
	}
	h := header(transport.CollAllReduce, dt, op, send.Len/max(dt.Size(), 1), -1, 0)
	if in, ok := c.intra.(*ncclIntra); ok && algorithmNames[c.algo] == "hierarchical" {
		return c.hybridAllReduceDevice(ctx, in, h, send, recv, err) // comm_hybrid.go
	}
	return c.device(ctx, &nameAllReduceDevice, h, err, func(ctx context.Context, t transport.Transport) error {
		return t.(transport.DeviceCollectives).AllReduceDevice(ctx, h, send, recv)
	})
}

// BroadcastDevice is Broadcast on GPU memory: buf on rank root is copied
// into buf on every rank.
func (c *Comm) BroadcastDevice(ctx context.Context, dt DType, buf DeviceBuffer, root int) error {
	err := c.checkDevice(nameBroadcastDevice, dt, 0, buf)
	if err == nil {
		err = c.checkRoot(nameBroadcastDevice, root)
	}
	h := header(transport.CollBroadcast, dt, 0, buf.Len/max(dt.Size(), 1), root, 0)
	return c.device(ctx, &nameBroadcastDevice, h, err, func(ctx context.Context, t transport.Transport) error {
		return t.(transport.DeviceCollectives).BroadcastDevice(ctx, h, buf, buf)
	})
}

// ReduceDevice is Reduce on GPU memory: recv is written on root only.
func (c *Comm) ReduceDevice(ctx context.Context, dt DType, op Op, send, recv DeviceBuffer, root int) error {
	err := c.checkDevice(nameReduceDevice, dt, op, send, recv)
	if err == nil {
		err = c.checkRoot(nameReduceDevice, root)
	}
	if err == nil && send.Len != recv.Len {
		err = c.badArg(nameReduceDevice, "send is %d bytes but recv is %d; they must be the same size", send.Len, recv.Len)
	}
	h := header(transport.CollReduce, dt, op, send.Len/max(dt.Size(), 1), root, 0)
	return c.device(ctx, &nameReduceDevice, h, err, func(ctx context.Context, t transport.Transport) error {
		return t.(transport.DeviceCollectives).ReduceDevice(ctx, h, send, recv)
	})
}

// AllGatherDevice is AllGather on GPU memory: recv is Size() times send,
// every rank's send in rank order. send may be block Rank() of recv.
func (c *Comm) AllGatherDevice(ctx context.Context, dt DType, send, recv DeviceBuffer) error {
	err := c.checkDevice(nameAllGatherDevice, dt, 0, send, recv)
	if err == nil && recv.Len != c.Size()*send.Len {
		err = c.badArg(nameAllGatherDevice, "recv is %d bytes; it must be %d ranks times send's %d", recv.Len, c.Size(), send.Len)
	}
	h := header(transport.CollAllGather, dt, 0, recv.Len/max(dt.Size(), 1), -1, 0)
	return c.device(ctx, &nameAllGatherDevice, h, err, func(ctx context.Context, t transport.Transport) error {
		return t.(transport.DeviceCollectives).AllGatherDevice(ctx, h, send, recv)
	})
}

// ReduceScatterDevice is ReduceScatter on GPU memory: send is Size() times
// recv, and recv gets block Rank() of the reduction.
func (c *Comm) ReduceScatterDevice(ctx context.Context, dt DType, op Op, send, recv DeviceBuffer) error {
	err := c.checkDevice(nameReduceScatterDevice, dt, op, send, recv)
	if err == nil && send.Len != c.Size()*recv.Len {
		err = c.badArg(nameReduceScatterDevice, "send is %d bytes; it must be %d ranks times recv's %d", send.Len, c.Size(), recv.Len)
	}
	h := header(transport.CollReduceScatter, dt, op, send.Len/max(dt.Size(), 1), -1, 0)
	return c.device(ctx, &nameReduceScatterDevice, h, err, func(ctx context.Context, t transport.Transport) error {
		return t.(transport.DeviceCollectives).ReduceScatterDevice(ctx, h, send, recv)
	})
}

// ExchangeDevice sends and receives GPU memory with any peers as one NCCL
// group (ncclGroupStart/End): they progress together, so ranks may send
// to each other both ways without deadlock. A receive is as long as the
// matching send; transfers with one peer match in order.
func (c *Comm) ExchangeDevice(ctx context.Context, sends, recvs []DeviceTransfer) error {
	var err error
	for _, x := range append(sends[:len(sends):len(sends)], recvs...) {
		if x.Peer < 0 || x.Peer >= c.Size() {
			err = c.badArg(nameExchangeDevice, "peer %d is not a rank of this communicator (0 to %d)", x.Peer, c.Size()-1)
			break
		}
		if x.Buf.Len < 0 {
			err = c.badArg(nameExchangeDevice, "device buffer of %d bytes", x.Buf.Len)
			break
		}
	}
	h := transport.Header{Coll: transport.CollSendRecv, Root: -1, DType: Uint8}
	return c.device(ctx, &nameExchangeDevice, h, err, func(ctx context.Context, t transport.Transport) error {
		return t.(transport.DeviceExchanger).ExchangeDevice(ctx, sends, recvs)
	})
}

// SendDevice sends buf to peer (ncclSend); the peer calls RecvDevice or
// receives in an ExchangeDevice. It returns once the data has left, which
// needs the peer's receive: to send and receive at once, use
// ExchangeDevice.
func (c *Comm) SendDevice(ctx context.Context, buf DeviceBuffer, peer int) error {
	return c.ExchangeDevice(ctx, []DeviceTransfer{{Peer: peer, Buf: buf}}, nil)
}

// RecvDevice receives into buf from peer (ncclRecv); see SendDevice.
func (c *Comm) RecvDevice(ctx context.Context, buf DeviceBuffer, peer int) error {
	return c.ExchangeDevice(ctx, nil, []DeviceTransfer{{Peer: peer, Buf: buf}})
}
