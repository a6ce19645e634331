package nccl

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/transporttest"
	"github.com/collkit/collkit/verify"
)

// These tests need real NCCL and a GPU; they skip with the reason otherwise.
// gpu-kit/run.sh (built by scripts/gpu-build.sh) runs them on a GPU machine.

// gpuWorld connects size ranks as goroutines of this process, one GPU each.
func gpuWorld(t testing.TB, size int) []*Transport {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("%v", err)
	}
	a, _ := loadDefault()
	if n, err := a.devices(); err != nil || n < size {
		t.Skipf("needs %d CUDA devices, have %d (%v)", size, n, err)
	}
	store := bootstrap.NewMemStore()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ts := make([]*Transport, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		tr, err := New(Config{Rank: r, Size: size, LocalRank: r, Name: t.Name()})
		if err != nil {
			t.Fatal(err)
		}
		ts[r] = tr
		t.Cleanup(func() { tr.Close() })
		wg.Go(func() { errs[r] = tr.Connect(ctx, store) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		if errors.Is(err, ErrNoDevice) {
			t.Skipf("%v", err)
		}
		t.Fatal(err)
	}
	return ts
}

func each(ts []*Transport, f func(r int, tr *Transport) error) error {
	errs := make([]error, len(ts))
	var wg sync.WaitGroup
	for r, tr := range ts {
		wg.Go(func() { errs[r] = f(r, tr) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func testCollectives(t *testing.T, size int) {
	ts := gpuWorld(t, size)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, count := range []int{1, 7, 1023, 1 << 16} {
		for _, dt := range reduce.DTypes {
			for _, op := range reduce.Ops {
				wrong := make([]int, size)
				err := each(ts, func(r int, tr *Transport) error {
					send := make([]byte, count*dt.Size())
					verify.Fill(dt, op, send, 11, r)
					want := make([]byte, len(send))
					verify.Expect(dt, op, want, 11, size)
					recv := make([]byte, len(send))
					if err := tr.AllReduce(ctx, header(count, dt, op, -1), send, recv); err != nil {
						return err
					}
					wrong[r] = verify.Wrong(dt, recv, want)
					return nil
				})
				if err != nil {
					t.Fatalf("allreduce %d x %v %v: %v", count, dt, op, err)
				}
				for r, w := range wrong {
					if w != 0 {
						t.Errorf("allreduce %d x %v %v: rank %d has %d wrong elements", count, dt, op, r, w)
					}
				}
			}
		}
	}
	// Broadcast and all-gather of rank-tagged bytes.
	const n = 4099
	err := each(ts, func(r int, tr *Transport) error {
		mine := make([]byte, n)
		for i := range mine {
			mine[i] = byte(r*31 + i)
		}
		all := make([]byte, n*size)
		if err := tr.AllGather(ctx, header(len(all), reduce.Uint8, 0, -1), mine, all); err != nil {
			return err
		}
		for q := range size {
			for i := range n {
				if all[q*n+i] != byte(q*31+i) {
					t.Errorf("allgather: rank %d sees byte %d of rank %d = %d", r, i, q, all[q*n+i])
					return nil
				}
			}
		}
		got := make([]byte, n)
		if err := tr.Broadcast(ctx, header(n, reduce.Uint8, 0, size-1), mine, got); err != nil {
			return err
		}
		for i := range n {
			if got[i] != byte((size-1)*31+i) {
				t.Errorf("broadcast: rank %d byte %d = %d", r, i, got[i])
				return nil
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestGPUCollectivesOneRank(t *testing.T)  { testCollectives(t, 1) }
func TestGPUCollectivesTwoRanks(t *testing.T) { testCollectives(t, 2) }

func TestGPUExchangeAndSplit(t *testing.T) {
	ts := gpuWorld(t, 1)
	tr := ts[0]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := []byte("to myself through ncclSend/ncclRecv")
	got := make([]byte, len(s))
	if err := tr.Exchange(ctx, []Transfer{{0, s}}, []Transfer{{0, got}}); err != nil {
		t.Fatal(err)
	}
	if string(got) != string(s) {
		t.Errorf("exchange with self: %q", got)
	}
	sub, err := tr.Split(ctx, 0, 0)
	if errors.Is(err, ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	in := []byte{1, 2, 3}
	out := make([]byte, 3)
	if err := sub.AllReduce(ctx, header(len(in), reduce.Uint8, reduce.Sum, -1), in, out); err != nil || string(in) != string(out) {
		t.Errorf("allreduce on a split communicator: %v %v", err, out)
	}
}

// TestGPUTransportConformance runs the transport suite over Send and Recv.
func TestGPUTransportConformance(t *testing.T) {
	gpuWorld(t, 2) // skips without two GPUs
	transporttest.Run(t, func(t testing.TB, size int) []transport.Transport {
		ts := gpuWorld(t, size)
		out := make([]transport.Transport, size)
		for i, tr := range ts {
			out[i] = tr
		}
		return out
	})
}

// TestGPUMissingPeerTimesOut: rank 1 never joins the all-reduce; rank 0
// must return an error when its context ends, not hang.
func TestGPUMissingPeerTimesOut(t *testing.T) {
	ts := gpuWorld(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	buf := make([]byte, 1<<20)
	start := time.Now()
	err := ts[0].AllReduce(ctx, header(len(buf)/4, reduce.Float32, reduce.Sum, -1), buf, buf)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("allreduce without its peer: %v, want a deadline error", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %v to give up", d)
	}
}

// testDeviceCollectives runs every collective on device memory with size
// ranks, one GPU each, and checks every element after copying back.
func testDeviceCollectives(t *testing.T, size int) {
	ts := gpuWorld(t, size)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type coll struct {
		name  string
		run   func(tr *Transport) func(context.Context, transport.Header, transport.DeviceBuffer, transport.DeviceBuffer) error
		count func(n int) (send, recv int) // elements of the buffers for a header count n
	}
	same := func(n int) (int, int) { return n, n }
	for _, count := range []int{1, 7, 1 << 20} {
		for _, dt := range []reduce.DType{reduce.Float32, reduce.Int64, reduce.BFloat16} {
			op := reduce.Sum
			n := count * size
			err := each(ts, func(r int, tr *Transport) error {
				for _, c := range []coll{
					{"allreduce", func(tr *Transport) func(context.Context, transport.Header, transport.DeviceBuffer, transport.DeviceBuffer) error {
						return tr.AllReduceDevice
					}, same},
					{"reducescatter", func(tr *Transport) func(context.Context, transport.Header, transport.DeviceBuffer, transport.DeviceBuffer) error {
						return tr.ReduceScatterDevice
					}, func(n int) (int, int) { return n, n / size }},
				} {
					sn, rn := c.count(n)
					in := make([]byte, sn*dt.Size())
					verify.Fill(dt, op, in, 3, r)
					send, err := Alloc(tr.Device(), len(in))
					if err != nil {
						return err
					}
					defer send.Free()
					recv, err := Alloc(tr.Device(), rn*dt.Size())
					if err != nil {
						return err
					}
					defer recv.Free()
					if err := send.CopyFromHost(in); err != nil {
						return err
					}
					if err := c.run(tr)(ctx, header(n, dt, op, 0), send.Buffer(), recv.Buffer()); err != nil {
						return err
					}
					got := make([]byte, rn*dt.Size())
					if err := recv.CopyToHost(got); err != nil {
						return err
					}
					first := 0
					if c.name == "reducescatter" {
						first = r * rn
					}
					if w := verify.WrongExpect(dt, op, got, 3, size, first); w != 0 {
						t.Errorf("%s %d x %v on device memory: rank %d has %d wrong elements", c.name, n, dt, r, w)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatalf("%d x %v: %v", n, dt, err)
			}
		}
	}
}

func TestGPUDeviceCollectivesOneRank(t *testing.T)  { testDeviceCollectives(t, 1) }
func TestGPUDeviceCollectivesTwoRanks(t *testing.T) { testDeviceCollectives(t, 2) }

// TestGPUDeviceBadBuffers checks, against the real driver, that host
// memory and freed memory are told apart from device memory.
func TestGPUDeviceBadBuffers(t *testing.T) {
	tr := gpuWorld(t, 1)[0]
	ctx := context.Background()
	host := make([]byte, 64)
	hostBuf := transport.DeviceBuffer{Ptr: uintptr(unsafe.Pointer(&host[0])), Len: 64, Device: tr.Device()}
	m, err := Alloc(tr.Device(), 64)
	if err != nil {
		t.Fatal(err)
	}
	good := m.Buffer()
	h := header(16, reduce.Float32, reduce.Sum, 0)
	if err := tr.AllReduceDevice(ctx, h, good, good); err != nil {
		t.Fatal(err)
	}
	if err := tr.AllReduceDevice(ctx, h, hostBuf, good); !errors.Is(err, transport.ErrBadDeviceBuffer) {
		t.Errorf("host memory as device memory: %v, want ErrBadDeviceBuffer", err)
	}
	m.Free()
	if err := tr.AllReduceDevice(ctx, h, good, good); !errors.Is(err, transport.ErrBadDeviceBuffer) {
		t.Errorf("freed memory: %v, want ErrBadDeviceBuffer", err)
	}
	m2, err := Alloc(tr.Device(), 64)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Free()
	long := m2.Buffer().Slice(32, 64)
	long.Len = 64
	if err := tr.AllReduceDevice(ctx, h, long, long); !errors.Is(err, transport.ErrBadDeviceBuffer) {
		t.Errorf("buffer past its allocation: %v, want ErrBadDeviceBuffer", err)
	}
}

// TestGPUInitWithoutPeerBounded: a rank whose peer never comes returns
// from Connect when its context ends (blocking init on its own goroutine).
func TestGPUInitWithoutPeerBounded(t *testing.T) {
	gpuWorld(t, 1) // skips without NCCL and a GPU
	tr, err := New(Config{Rank: 0, Size: 2, Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	if err := tr.Connect(ctx, bootstrap.NewMemStore()); err == nil {
		t.Fatal("connected without the second rank")
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("took %v to give up", d)
	}
}

// BenchmarkGPUAllReduceDevice times one all-reduce on device memory,
// launch to stream completion, on one rank: ns/op is collkit's cost per
// call, to compare with a C loop of ncclAllReduce and cudaStreamSynchronize.
func BenchmarkGPUAllReduceDevice(b *testing.B) {
	tr := gpuWorld(b, 1)[0]
	ctx := context.Background()
	for _, bytes := range []int{8, 256 << 20} {
		b.Run(fmt.Sprintf("%dB", bytes), func(b *testing.B) {
			m, err := Alloc(tr.Device(), bytes)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Free()
			h := header(bytes/4, reduce.Float32, reduce.Sum, 0)
			buf := m.Buffer()
			b.SetBytes(int64(bytes))
			b.ReportAllocs()
			for b.Loop() {
				if err := tr.AllReduceDevice(ctx, h, buf, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
