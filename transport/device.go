package transport

import (
	"context"
	"errors"
	"fmt"
)

var (
	// ErrHostMemoryOnly is wrapped when device memory is handed to a
	// transport that moves host memory only (tcp, shm, rdma, mem): such a
	// transport does not implement DeviceCollectives.
	ErrHostMemoryOnly = errors.New("transport takes host memory only")
	// ErrBadDeviceBuffer is wrapped by a transport that takes device memory
	// when a DeviceBuffer is not usable: not device memory the driver
	// knows (host memory, freed), on another GPU, or shorter than it says.
	ErrBadDeviceBuffer = errors.New("invalid device buffer")
)

// DeviceBuffer is GPU memory: Len bytes from the device pointer Ptr
// (a CUdeviceptr) on CUDA device Device. It does not own the memory. Wrap
// a pointer from another CUDA library in one, or take it from memory
// collkit allocated (nccl.Alloc).
type DeviceBuffer struct {
	Ptr    uintptr
	Len    int
	Device int
}

// Slice is b's bytes [from, to), as b[from:to] for a slice.
func (b DeviceBuffer) Slice(from, to int) DeviceBuffer {
	if from < 0 || to < from || to > b.Len {
		panic(fmt.Sprintf("transport: DeviceBuffer.Slice(%d, %d) of a %d-byte buffer", from, to, b.Len))
	}
	return DeviceBuffer{Ptr: b.Ptr + uintptr(from), Len: to - from, Device: b.Device}
}

func (b DeviceBuffer) String() string {
	return fmt.Sprintf("%d bytes at %#x on GPU %d", b.Len, b.Ptr, b.Device)
}

// DeviceCollectives is implemented by transports whose library runs
// collectives on GPU memory (NCCL). The methods are NativeCollectives'
// with DeviceBuffers: same headers, same rules on lengths (CheckNativeLen),
// and nothing passes through host memory. A transport without it returns
// errors wrapping ErrHostMemoryOnly when asked for device memory.
type DeviceCollectives interface {
	AllReduceDevice(ctx context.Context, h Header, send, recv DeviceBuffer) error
	BroadcastDevice(ctx context.Context, h Header, send, recv DeviceBuffer) error
	ReduceDevice(ctx context.Context, h Header, send, recv DeviceBuffer) error
	AllGatherDevice(ctx context.Context, h Header, send, recv DeviceBuffer) error
	ReduceScatterDevice(ctx context.Context, h Header, send, recv DeviceBuffer) error
}

// DeviceTransfer is one point-to-point transfer of device memory: Buf
// sent to or received from rank Peer.
type DeviceTransfer struct {
	Peer int
	Buf  DeviceBuffer
}

// DeviceExchanger is implemented by transports that send and receive
// device memory. ExchangeDevice runs sends and receives with any peers as
// one group (ncclGroupStart/End), so they progress together and cannot
// deadlock on each other; a receive is as long as the matching send, and
// transfers with one peer match in order.
type DeviceExchanger interface {
	ExchangeDevice(ctx context.Context, sends, recvs []DeviceTransfer) error
}

// DeviceOp is one operation of a group on device memory: a collective
// (Coll one of CollAllReduce, CollBroadcast, CollReduce, CollAllGather,
// CollReduceScatter, described by Header and reading Send into Recv as
// DeviceCollectives' methods do), or, with Coll CollSendRecv, a send of
// Send to rank Peer or a receive into Recv from rank Peer (one of the two).
type DeviceOp struct {
	Coll       Coll
	Header     Header
	Send, Recv DeviceBuffer
	Peer       int
}

// DeviceGrouper is implemented by transports that run several operations
// on device memory as one group (ncclGroupStart/End): NCCL launches them
// together, and sends and receives in one group cannot deadlock on each
// other. Every rank groups the same collectives in the same order.
type DeviceGrouper interface {
	GroupDevice(ctx context.Context, ops []DeviceOp) error
}
