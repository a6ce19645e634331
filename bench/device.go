package bench

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/transport/nccl"
	"github.com/collkit/collkit/verify"
)

// deviceBuffers are the GPU copies of a sweep's send and recv buffers
// (Config.Device). The host buffers of a call stay its mirrors: the
// checked iterations fill them, upload them, run, and download recv.
type deviceBuffers struct {
	run        deviceRun
	send, recv *nccl.Memory
}

// deviceRun runs collective coll on the device copies of a call's buffers.
type deviceRun func(ctx context.Context, x *call, send, recv collkit.DeviceBuffer) error

// deviceRuns are the collectives NCCL runs on device memory.
var deviceRuns = map[string]deviceRun{
	"allreduce": func(ctx context.Context, x *call, send, recv collkit.DeviceBuffer) error {
		return x.c.AllReduceDevice(ctx, x.cfg.DType, x.cfg.Op, send, recv)
	},
	"broadcast": func(ctx context.Context, x *call, _, buf collkit.DeviceBuffer) error {
		return x.c.BroadcastDevice(ctx, x.cfg.DType, buf, x.root)
	},
	"reduce": func(ctx context.Context, x *call, send, recv collkit.DeviceBuffer) error {
		return x.c.ReduceDevice(ctx, x.cfg.DType, x.cfg.Op, send, recv, x.root)
	},
	"allgather": func(ctx context.Context, x *call, send, recv collkit.DeviceBuffer) error {
		return x.c.AllGatherDevice(ctx, x.cfg.DType, send, recv)
	},
	"reducescatter": func(ctx context.Context, x *call, send, recv collkit.DeviceBuffer) error {
		return x.c.ReduceScatterDevice(ctx, x.cfg.DType, x.cfg.Op, send, recv)
	},
	"sendrecv": func(ctx context.Context, x *call, send, recv collkit.DeviceBuffer) error {
		return x.c.ExchangeDevice(ctx, []collkit.DeviceTransfer{{Peer: (x.r + 1) % x.n, Buf: send}},
			[]collkit.DeviceTransfer{{Peer: (x.r - 1 + x.n) % x.n, Buf: recv}})
	},
}

// allReduceSpec runs all-reduce through RunCollective, for device memory
// (Run keeps host memory).
var allReduceSpec = collective{
	reduces: true,
	sizes:   sameSizes,
	args:    inPlaceInRecv,
	run: func(ctx context.Context, x *call, send, recv []byte) error {
		return x.c.AllReduce(ctx, x.cfg.DType, x.cfg.Op, send, recv)
	},
	wrong: func(x *call, seed uint64, recv []byte) int {
		return verify.WrongExpect(x.cfg.DType, x.cfg.Op, recv, seed, x.n, 0)
	},
}

// newDeviceBuffers allocates send and recv bytes on the GPU of c's NCCL
// transport.
func newDeviceBuffers(c *collkit.Comm, coll string, send, recv int) (*deviceBuffers, error) {
	run, ok := deviceRuns[coll]
	if !ok {
		return nil, fmt.Errorf("%s has no device-memory path (NCCL has no %s of its own); use --mem host", coll, coll)
	}
	dev, ok := c.GPU()
	if !ok {
		return nil, fmt.Errorf("device memory needs NCCL (--transport nccl, or --intra nccl with --algo hierarchical), not %T; use --mem host", c.Transport())
	}
	d := &deviceBuffers{run: run}
	var err error
	if d.send, err = nccl.Alloc(dev, max(send, 1)); err != nil {
		return nil, err
	}
	if d.recv, err = nccl.Alloc(dev, max(recv, 1)); err != nil {
		d.send.Free()
		return nil, err
	}
	return d, nil
}

func (d *deviceBuffers) free() {
	d.send.Free()
	d.recv.Free()
}

// upload copies a call's host send and recv buffers to the GPU.
func (d *deviceBuffers) upload(x *call) error {
	if d == nil {
		return nil
	}
	if err := d.send.CopyFromHost(x.send); err != nil {
		return err
	}
	return d.recv.CopyFromHost(x.recv)
}

// download copies the GPU's recv back into the call's host recv.
func (d *deviceBuffers) download(x *call) error {
	if d == nil {
		return nil
	}
	return d.recv.CopyToHost(x.recv)
}

// on is the device copy of b, which is x.send, x.recv or part of one.
func (d *deviceBuffers) on(x *call, b []byte) collkit.DeviceBuffer {
	for _, m := range []struct {
		host []byte
		dev  *nccl.Memory
	}{{x.send, d.send}, {x.recv, d.recv}} {
		if len(b) == 0 || len(m.host) == 0 {
			continue
		}
		off := uintptr(unsafe.Pointer(unsafe.SliceData(b))) - uintptr(unsafe.Pointer(unsafe.SliceData(m.host)))
		if off <= uintptr(len(m.host)-len(b)) {
			return m.dev.Buffer().Slice(int(off), int(off)+len(b))
		}
	}
	return d.send.Buffer().Slice(0, 0)
}

// runner is one iteration of spec on x, in place or not: on the GPU when
// x has device buffers, with the buffers worked out once, outside the
// timed loop.
func (x *call) runner(ctx context.Context, spec collective, inPlace bool) func() error {
	send, recv := spec.args(x, inPlace)
	if x.dev == nil {
		return func() error { return spec.run(ctx, x, send, recv) }
	}
	ds, dr := x.dev.on(x, send), x.dev.on(x, recv)
	return func() error { return x.dev.run(ctx, x, ds, dr) }
}
