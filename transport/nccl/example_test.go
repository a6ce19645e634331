package nccl_test

import (
	"context"
	"fmt"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/nccl"
)

// A one-rank all-reduce on the first GPU, from host memory. Without NCCL
// or a GPU it prints why. (No Output: the result depends on the machine.)
func Example() {
	t, err := nccl.New(nccl.Config{Rank: 0, Size: 1})
	if err != nil {
		fmt.Println(err) // errors.Is(err, nccl.ErrNotAvailable) without NCCL
		return
	}
	defer t.Close()
	ctx := context.Background()
	if err := t.Connect(ctx, bootstrap.NewMemStore()); err != nil {
		fmt.Println(err)
		return
	}
	send := []byte{1, 2, 3, 4}
	recv := make([]byte, len(send))
	h := transport.Header{Count: uint64(len(send)), DType: reduce.Uint8, Op: reduce.Sum}
	if err := t.AllReduce(ctx, h, send, recv); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(recv)
}

// An all-reduce on GPU memory: the data stays on the GPU. A pointer from
// another CUDA library works the same, wrapped as
// transport.DeviceBuffer{Ptr: ptr, Len: bytes, Device: gpu}.
func ExampleTransport_AllReduceDevice() {
	t, err := nccl.New(nccl.Config{Rank: 0, Size: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer t.Close()
	ctx := context.Background()
	if err := t.Connect(ctx, bootstrap.NewMemStore()); err != nil {
		fmt.Println(err)
		return
	}
	data := []float32{1, 2, 3, 4}
	mem, err := nccl.Alloc(t.Device(), 4*len(data))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mem.Free()
	if err := mem.CopyFromHost(reduce.Bytes(data)); err != nil {
		fmt.Println(err)
		return
	}
	h := transport.Header{Count: uint64(len(data)), DType: reduce.Float32, Op: reduce.Sum}
	if err := t.AllReduceDevice(ctx, h, mem.Buffer(), mem.Buffer()); err != nil { // in place
		fmt.Println(err)
		return
	}
	if err := mem.CopyToHost(reduce.Bytes(data)); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(data)
}
