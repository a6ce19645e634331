package collkit

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"unsafe"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/transport/mem"
	"github.com/collkit/collkit/transport/nccl"
	"github.com/collkit/collkit/verify"
)

// TestDeviceOnHostTransport: device memory on a transport that moves host
// memory only is one clear error at the call, and the Comm stays usable.
func TestDeviceOnHostTransport(t *testing.T) {
	c, err := New(mem.NewNetwork(1, mem.Config{}).Transport(0), Options{Transport: "mem"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	buf := DeviceBuffer{Ptr: 0x1000, Len: 64}
	for name, err := range map[string]error{
		"allreduce":     c.AllReduceDevice(ctx, Float32, Sum, buf, buf),
		"broadcast":     c.BroadcastDevice(ctx, Float32, buf, 0),
		"reduce":        c.ReduceDevice(ctx, Float32, Sum, buf, buf, 0),
		"allgather":     c.AllGatherDevice(ctx, Float32, buf, buf),
		"reducescatter": c.ReduceScatterDevice(ctx, Float32, Sum, buf, buf),
		"send":          c.SendDevice(ctx, buf, 0),
	} {
		if !errors.Is(err, ErrHostMemoryOnly) || !strings.Contains(err.Error(), `transport "mem" cannot take GPU memory; connect with Options.Transport "nccl"`) {
			t.Errorf("%s on mem: %v, want ErrHostMemoryOnly naming the transport and nccl", name, err)
		}
	}
	p := []float32{1, 2}
	if err := AllReduce(ctx, c, p, p, Sum); err != nil {
		t.Errorf("host all-reduce after the device errors: %v", err)
	}
}

// TestDeviceBadArguments: lengths that do not fit are argument errors, as
// for the []byte methods.
func TestDeviceBadArguments(t *testing.T) {
	net := mem.NewNetwork(1, mem.Config{})
	for _, call := range []func(c *Comm) error{
		func(c *Comm) error {
			return c.AllReduceDevice(context.Background(), Float32, Sum, DeviceBuffer{Ptr: 1, Len: 8}, DeviceBuffer{Ptr: 1, Len: 4})
		},
		func(c *Comm) error {
			return c.AllReduceDevice(context.Background(), Float32, Sum, DeviceBuffer{Ptr: 1, Len: 6}, DeviceBuffer{Ptr: 1, Len: 6})
		},
		func(c *Comm) error {
			return c.BroadcastDevice(context.Background(), Float32, DeviceBuffer{Ptr: 1, Len: 8}, 3)
		},
	} {
		c, err := New(net.Transport(0), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := call(c); !errors.Is(err, ErrBadArgument) {
			t.Errorf("%v, want ErrBadArgument", err)
		}
	}
}

// TestNCCLDeviceComm runs the Comm's device methods over the NCCL
// transport on the fake NCCL and CUDA driver of transport/nccl's tests, in
// a child process (the libraries load once per process), element by
// element.
func TestNCCLDeviceComm(t *testing.T) {
	if os.Getenv("COLLKIT_TEST_FAKE_NCCL") == "1" {
		ncclDeviceChild(t)
		return
	}
	so := buildFakeNCCL(t)
	runChild(t, "TestNCCLDeviceComm", "COLLKIT_TEST_FAKE_NCCL=1", nccl.EnvNCCLLib+"="+so, nccl.EnvCUDALib+"="+so)
}

func ncclDeviceChild(t *testing.T) {
	tr, err := nccl.New(nccl.Config{Rank: 0, Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := tr.Connect(ctx, bootstrap.NewMemStore()); err != nil {
		t.Fatal(err)
	}
	c, err := New(tr, Options{Transport: "nccl"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 33
	in := make([]byte, n*4)
	verify.Fill(Float32, Max, in, 9, 0)
	alloc := func(p []byte) *nccl.Memory {
		m, err := nccl.Alloc(0, len(p))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Free() })
		if err := m.CopyFromHost(p); err != nil {
			t.Fatal(err)
		}
		return m
	}
	send, recv := alloc(in), alloc(make([]byte, len(in)))
	check := func(name string, m *nccl.Memory, want []byte) {
		t.Helper()
		got := make([]byte, len(want))
		if err := m.CopyToHost(got); err != nil {
			t.Fatal(err)
		}
		if w := verify.Wrong(Float32, got, want); w != 0 {
			t.Errorf("%s: %d of %d elements wrong", name, w, n)
		}
	}
	for name, call := range map[string]func() error{
		"allreduce":     func() error { return c.AllReduceDevice(ctx, Float32, Max, send.Buffer(), recv.Buffer()) },
		"reduce":        func() error { return c.ReduceDevice(ctx, Float32, Max, send.Buffer(), recv.Buffer(), 0) },
		"allgather":     func() error { return c.AllGatherDevice(ctx, Float32, send.Buffer(), recv.Buffer()) },
		"reducescatter": func() error { return c.ReduceScatterDevice(ctx, Float32, Min, send.Buffer(), recv.Buffer()) },
		"exchange": func() error {
			return c.ExchangeDevice(ctx, []DeviceTransfer{{Peer: 0, Buf: send.Buffer()}}, []DeviceTransfer{{Peer: 0, Buf: recv.Buffer()}})
		},
	} {
		if err := recv.Fill(0); err != nil {
			t.Fatal(err)
		}
		if err := call(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		check(name, recv, in)
	}
	// A group: an all-reduce and an all-gather launched together, and a
	// send to self with its receive.
	other := alloc(make([]byte, len(in)))
	if err := recv.Fill(0); err != nil {
		t.Fatal(err)
	}
	g := c.DeviceGroup()
	g.AllReduce(Float32, Max, send.Buffer(), recv.Buffer())
	g.AllGather(Float32, send.Buffer(), other.Buffer())
	back := alloc(make([]byte, len(in)))
	g.Send(send.Buffer(), 0)
	g.Recv(back.Buffer(), 0)
	if err := g.Run(ctx); err != nil {
		t.Fatalf("device group: %v", err)
	}
	check("group allreduce", recv, in)
	check("group allgather", other, in)
	check("group send/recv", back, in)
	bad := c.DeviceGroup()
	bad.Send(send.Buffer(), 3)
	if err := bad.Run(ctx); !errors.Is(err, ErrBadArgument) || !strings.Contains(err.Error(), "operation 0") {
		t.Errorf("group send to rank 3 of 1: %v", err)
	}
	// That argument error fails the communicator, as for the []byte
	// methods; the rest runs on a new one.
	tr2, err := nccl.New(nccl.Config{Rank: 0, Size: 1, Name: "second"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr2.Connect(ctx, bootstrap.NewMemStore()); err != nil {
		t.Fatal(err)
	}
	if c, err = New(tr2, Options{Transport: "nccl"}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.BroadcastDevice(ctx, Float32, send.Buffer(), 0); err != nil {
		t.Fatal(err)
	}
	check("broadcast", send, in)
	// A host pointer passed as device memory: one error naming the rank
	// and the buffer.
	host := make([]byte, 64)
	err = c.AllReduceDevice(ctx, Float32, Sum, DeviceBuffer{Ptr: uintptrOf(host), Len: 64}, recv.Buffer().Slice(0, 64))
	if err == nil || !strings.Contains(err.Error(), "rank 0") || !strings.Contains(err.Error(), "does not know it as device memory") {
		t.Errorf("host memory as device memory: %v", err)
	}
}

func uintptrOf(p []byte) uintptr { return uintptr(unsafe.Pointer(&p[0])) }
