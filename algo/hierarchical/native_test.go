package hierarchical_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/collkit/collkit/algo/algotest"
	"github.com/collkit/collkit/algo/hierarchical"
	"github.com/collkit/collkit/algo/ring"
	"github.com/collkit/collkit/transport"
)

// ringNative is a TEST DOUBLE of a library that runs collectives itself
// (transport.NativeCollectives, as NCCL does): its collectives are
// collkit's rings over an in-memory transport of one node. It lets the
// native path's phases and layouts be checked element by element at many
// node sizes without building the fake NCCL library; the real binding is
// tested against that library in transport/nccl and package collkit.
type ringNative struct {
	transport.Transport
	calls *atomic.Int64 // native collectives run, over every rank
}

var _ transport.NativeCollectives = ringNative{}

func (n ringNative) count() { n.calls.Add(1) }

func (n ringNative) AllReduce(ctx context.Context, h transport.Header, send, recv []byte) error {
	n.count()
	return ring.AllReduce(ctx, n.Transport, h, send, recv)
}

func (n ringNative) Broadcast(ctx context.Context, h transport.Header, send, recv []byte) error {
	n.count()
	copy(recv, send)
	return ring.Broadcast(ctx, n.Transport, h, recv, int(h.Root))
}

func (n ringNative) Reduce(ctx context.Context, h transport.Header, send, recv []byte) error {
	n.count()
	out := slices.Clone(send)
	if err := ring.AllReduce(ctx, n.Transport, h, send, out); err != nil {
		return err
	}
	if n.Rank() == int(h.Root) {
		copy(recv, out)
	}
	return nil
}

func (n ringNative) AllGather(ctx context.Context, h transport.Header, send, recv []byte) error {
	n.count()
	return ring.AllGather(ctx, n.Transport, h, send, recv, equalCounts(n.Size(), int(h.Count)))
}

func (n ringNative) ReduceScatter(ctx context.Context, h transport.Header, send, recv []byte) error {
	n.count()
	scratch := slices.Clone(send) // NCCL leaves send alone; the ring uses it as scratch
	return ring.ReduceScatter(ctx, n.Transport, h, scratch, recv, equalCounts(n.Size(), int(h.Count)))
}

func equalCounts(n, count int) []int {
	counts := make([]int, n)
	for i := range counts {
		counts[i] = count / n
	}
	return counts
}

// nativeWorld is a world whose ranks have an intra-node transport of
// native collectives (ringNative over one in-memory network per node), as
// collkit.Connect gives them with Options.IntraNode "nccl".
func nativeWorld(nodes []int, calls *atomic.Int64, configs map[transport.Transport]hierarchical.Config) algotest.World {
	return func(t testing.TB, n int) []transport.Transport {
		ts := algotest.MemWorld(t, n)
		byNode := map[int][]int{}
		for r, id := range nodes {
			byNode[id] = append(byNode[id], r)
		}
		for _, ranks := range byNode {
			local := algotest.MemWorld(t, len(ranks))
			for l, r := range ranks {
				configs[ts[r]] = hierarchical.Config{Nodes: nodes, IntraTransport: ringNative{local[l], calls}}
			}
		}
		return ts
	}
}

// The native path on every layout: one rank per node (the intra level is a
// copy, but runs), even nodes with counts divisible by the node size and
// not (three phases, or leaders), uneven nodes, ranks of a node not
// consecutive; every dtype and op, checked element by element against the
// reference, and the library's collectives are what ran inside the nodes.
func TestAllReduceNativeIntra(t *testing.T) {
	for _, nodes := range [][]int{{0, 1}, {0, 1, 2}, {0, 0, 1, 1}, {0, 0, 0, 1, 1, 1}, {5, 9, 5, 9}, {0, 0, 0, 1, 1, 2}, {0, 0, 1}} {
		t.Run(fmt.Sprint(nodes), func(t *testing.T) {
			var calls atomic.Int64
			configs := map[transport.Transport]hierarchical.Config{}
			fn := func(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error {
				return configs[t].AllReduce(ctx, t, h, send, recv)
			}
			algotest.AllReduceWith(t, fn, nativeWorld(nodes, &calls, configs), algotest.Options{
				Sizes:  []int{len(nodes)},
				Counts: []int{0, 1, 2, 3, 6, 7, 1000, 4099},
			})
			if calls.Load() == 0 {
				t.Fatal("no native collective ran inside the nodes: the intra-node library was bypassed")
			}
		})
	}
}

// hostDevice is a TEST DOUBLE of GPU memory: "device pointers" index Go
// byte slices, so that ringNative can take DeviceBuffers and the device
// path's phases can be checked at many node sizes without the fake NCCL
// library.
type hostDevice struct {
	mu   sync.Mutex
	mem  map[uintptr][]byte
	next uintptr
}

func (d *hostDevice) alloc(n int) transport.DeviceBuffer {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.next += 1 << 32
	d.mem[d.next] = make([]byte, n)
	return transport.DeviceBuffer{Ptr: d.next, Len: n}
}

// bytes is the memory of b: base allocations are 4 GiB apart.
func (d *hostDevice) bytes(b transport.DeviceBuffer) []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	base := b.Ptr &^ (1<<32 - 1)
	off := int(b.Ptr - base)
	return d.mem[base][off : off+b.Len]
}

// deviceNative is ringNative taking DeviceBuffers of a hostDevice.
type deviceNative struct {
	ringNative
	d *hostDevice
}

var _ transport.DeviceCollectives = deviceNative{}

func (n deviceNative) AllReduceDevice(ctx context.Context, h transport.Header, send, recv transport.DeviceBuffer) error {
	return n.AllReduce(ctx, h, n.d.bytes(send), n.d.bytes(recv))
}
func (n deviceNative) BroadcastDevice(ctx context.Context, h transport.Header, send, recv transport.DeviceBuffer) error {
	return n.Broadcast(ctx, h, n.d.bytes(send), n.d.bytes(recv))
}
func (n deviceNative) ReduceDevice(ctx context.Context, h transport.Header, send, recv transport.DeviceBuffer) error {
	return n.Reduce(ctx, h, n.d.bytes(send), n.d.bytes(recv))
}
func (n deviceNative) AllGatherDevice(ctx context.Context, h transport.Header, send, recv transport.DeviceBuffer) error {
	return n.AllGather(ctx, h, n.d.bytes(send), n.d.bytes(recv))
}
func (n deviceNative) ReduceScatterDevice(ctx context.Context, h transport.Header, send, recv transport.DeviceBuffer) error {
	return n.ReduceScatter(ctx, h, n.d.bytes(send), n.d.bytes(recv))
}

// hostStage is a DeviceStage of a hostDevice.
type hostStage struct {
	d *hostDevice
	b transport.DeviceBuffer
}

func (s hostStage) Buffer() transport.DeviceBuffer { return s.b }
func (s hostStage) CopyToHost(p []byte) error      { copy(p, s.d.bytes(s.b)); return nil }
func (s hostStage) CopyFromHost(p []byte) error    { copy(s.d.bytes(s.b), p); return nil }

// AllReduceDevice on every layout: the host input is copied into "device"
// memory, the all-reduce runs there with only the crossing part staged
// through the host, and the result is checked element by element.
func TestAllReduceDeviceIntra(t *testing.T) {
	for _, nodes := range [][]int{{0, 0}, {0, 1}, {0, 1, 2}, {0, 0, 1, 1}, {0, 0, 0, 1, 1, 1}, {5, 9, 5, 9}, {0, 0, 0, 1, 1, 2}, {0, 0, 1}} {
		t.Run(fmt.Sprint(nodes), func(t *testing.T) {
			var calls atomic.Int64
			d := &hostDevice{mem: map[uintptr][]byte{}}
			configs := map[transport.Transport]hierarchical.Config{}
			world := func(t testing.TB, n int) []transport.Transport {
				ts := nativeWorld(nodes, &calls, configs)(t, n)
				for _, tr := range ts {
					c := configs[tr]
					c.IntraTransport = deviceNative{c.IntraTransport.(ringNative), d}
					configs[tr] = c
				}
				return ts
			}
			fn := func(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error {
				ds := d.alloc(len(send))
				copy(d.bytes(ds), send)
				dr := ds
				if len(send) == 0 || &send[0] != &recv[0] { // out of place
					dr = d.alloc(len(recv))
				}
				stage := hostStage{d, d.alloc(len(send))}
				if err := configs[t].AllReduceDevice(ctx, t, h, ds, dr, stage); err != nil {
					return err
				}
				copy(recv, d.bytes(dr))
				return nil
			}
			algotest.AllReduceWith(t, fn, world, algotest.Options{
				Sizes:  []int{len(nodes)},
				Counts: []int{0, 1, 2, 3, 6, 7, 1000, 4099},
			})
			if calls.Load() == 0 {
				t.Fatal("no native collective ran inside the nodes")
			}
		})
	}
}
