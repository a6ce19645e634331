package collkit_test

import (
	"context"
	"fmt"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport/nccl"
)

// An all-reduce on GPU memory through a Comm over NCCL; the same Comm
// takes []byte (host memory) too. Without NCCL or a GPU it prints why.
// (No Output: the result depends on the machine.)
func ExampleComm_AllReduceDevice() {
	ctx := context.Background()
	t, err := nccl.New(nccl.Config{Rank: 0, Size: 1})
	if err != nil {
		fmt.Println(err) // wraps nccl.ErrNotAvailable
		return
	}
	if err := t.Connect(ctx, bootstrap.NewMemStore()); err != nil {
		fmt.Println(err)
		return
	}
	comm, err := collkit.New(t, collkit.Options{Transport: "nccl"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer comm.Close()

	grads := []float32{1, 2, 3, 4}
	mem, err := nccl.Alloc(t.Device(), 4*len(grads)) // or wrap a pointer: collkit.DeviceBuffer{Ptr: p, Len: n, Device: gpu}
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mem.Free()
	if err := mem.CopyFromHost(reduce.Bytes(grads)); err != nil {
		fmt.Println(err)
		return
	}
	buf := mem.Buffer()
	if err := comm.AllReduceDevice(ctx, collkit.Float32, collkit.Sum, buf, buf); err != nil { // in place, on the GPU
		fmt.Println(err)
		return
	}
	if err := mem.CopyToHost(reduce.Bytes(grads)); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(grads)
}
