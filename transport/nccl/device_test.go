//go:build linux && (amd64 || arm64)

package nccl

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/verify"
)

// deviceCopy allocates device memory on the fake's GPU dev holding p.
func deviceCopy(t *testing.T, a *api, dev int, p []byte) *Memory {
	t.Helper()
	m, err := alloc(a, dev, max(len(p), 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Free() })
	if err := m.CopyFromHost(p); err != nil {
		t.Fatal(err)
	}
	return m
}

func hostCopy(t *testing.T, m *Memory, n int) []byte {
	t.Helper()
	p := make([]byte, n)
	if err := m.CopyToHost(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFakeDeviceCollectives runs every collective on device memory, for
// every dtype and op, out of place and in place, and compares the result,
// copied back, element by element; nothing may go through the staging
// buffers (the host path's).
func TestFakeDeviceCollectives(t *testing.T) {
	a, ctl := loadFake(t)
	for _, nonBlocking := range []bool{false, true} {
		tr := connectFakeWith(t, a, Config{Rank: 0, Size: 1, NonBlocking: nonBlocking})
		ctx := context.Background()
		const n = 41
		for _, dt := range reduce.DTypes {
			for _, op := range reduce.Ops {
				in := make([]byte, n*dt.Size())
				verify.Fill(dt, op, in, 5, 0)
				want := make([]byte, len(in))
				verify.Expect(dt, op, want, 5, 1)
				send := deviceCopy(t, a, 0, in)
				recv := deviceCopy(t, a, 0, bytes.Repeat([]byte{0xA5}, len(in)))
				h := header(n, dt, op, 0)
				for _, c := range []struct {
					name string
					call int64
					run  func(ctx context.Context, h transport.Header, s, r transport.DeviceBuffer) error
				}{
					{"allreduce", 1, tr.AllReduceDevice}, {"broadcast", 2, tr.BroadcastDevice}, {"reduce", 3, tr.ReduceDevice},
					{"allgather", 4, tr.AllGatherDevice}, {"reducescatter", 5, tr.ReduceScatterDevice},
				} {
					if err := recv.Fill(0xA5); err != nil {
						t.Fatal(err)
					}
					if err := c.run(ctx, h, send.Buffer(), recv.Buffer()); err != nil {
						t.Fatalf("%s %v %v (non-blocking %v): %v", c.name, dt, op, nonBlocking, err)
					}
					if w := verify.Wrong(dt, hostCopy(t, recv, len(in)), want); w != 0 {
						t.Errorf("%s %v %v (non-blocking %v): %d of %d elements wrong", c.name, dt, op, nonBlocking, w, n)
					}
					var last [8]int64
					ctl.last(&last)
					if last[0] != c.call || last[1] != n || last[2] != int64(dtypes[dt]) {
						t.Errorf("%s: C saw call %d count %d dtype %d, want %d %d %d", c.name, last[0], last[1], last[2], c.call, n, dtypes[dt])
					}
					// In place: the result replaces the input.
					inPlace := deviceCopy(t, a, 0, in)
					if err := c.run(ctx, h, inPlace.Buffer(), inPlace.Buffer()); err != nil {
						t.Fatalf("%s in place: %v", c.name, err)
					}
					if w := verify.Wrong(dt, hostCopy(t, inPlace, len(in)), want); w != 0 {
						t.Errorf("%s %v %v in place: %d wrong elements", c.name, dt, op, w)
					}
				}
			}
		}
		main := tr.main
		if main.sendD.p != 0 || main.recvD.p != 0 || main.hostS.p != nil {
			t.Errorf("device collectives allocated staging buffers: %+v %+v", main.sendD, main.recvD)
		}
	}
}

// TestFakeDeviceBadBuffers: each wrong buffer gets one error at the call
// naming the rank, the buffer and what to do; no NCCL call is made and the
// communicator stays usable.
func TestFakeDeviceBadBuffers(t *testing.T) {
	a, ctl := loadFake(t)
	ctl.setDevices(2)
	tr := connectFake(t, a)
	ctx := context.Background()
	good := deviceCopy(t, a, 0, make([]byte, 64))
	freed := deviceCopy(t, a, 0, make([]byte, 64))
	freedBuf := freed.Buffer()
	other := deviceCopy(t, a, 1, make([]byte, 64)) // before the free, which lets malloc reuse the address
	if err := freed.Free(); err != nil {
		t.Fatal(err)
	}
	hostMem := make([]byte, 64)
	host := transport.DeviceBuffer{Ptr: uintptr(unsafe.Pointer(&hostMem[0])), Len: 64}
	lying := other.Buffer()
	lying.Device = 0
	h := header(16, reduce.Float32, reduce.Sum, 0)
	var before [8]int64
	ctl.last(&before)
	for _, c := range []struct {
		name       string
		send, recv transport.DeviceBuffer
		want       string
		sentinel   error
	}{
		{"host memory", host, good.Buffer(), "send buffer (64 bytes at", transport.ErrBadDeviceBuffer},
		{"host memory", good.Buffer(), host, "the CUDA driver does not know it as device memory (host memory, or freed)", transport.ErrBadDeviceBuffer},
		{"freed", freedBuf, good.Buffer(), "does not know it as device memory (host memory, or freed)", transport.ErrBadDeviceBuffer},
		{"other GPU", other.Buffer(), good.Buffer(), "it says GPU 1 but this rank runs on GPU 0", transport.ErrBadDeviceBuffer},
		{"other GPU, buffer lies", lying, good.Buffer(), "the memory is on GPU 1, not GPU 0", transport.ErrBadDeviceBuffer},
		{"longer than its allocation", good.Buffer().Slice(32, 64), transport.DeviceBuffer{Ptr: good.Buffer().Ptr + 32, Len: 64}, "recv buffer", transport.ErrBadDeviceBuffer},
		{"null", transport.DeviceBuffer{Len: 64}, good.Buffer(), "not a device buffer", transport.ErrBadDeviceBuffer},
	} {
		err := tr.AllReduceDevice(ctx, h, c.send, c.recv)
		if c.name == "longer than its allocation" {
			// send 32 bytes and recv 64 disagree with the header first.
			h2 := header(8, reduce.Float32, reduce.Sum, 0)
			err = tr.AllReduceDevice(ctx, h2, good.Buffer().Slice(32, 64), transport.DeviceBuffer{Ptr: good.Buffer().Ptr + 32, Len: 32 + 8})
			if err == nil || !strings.Contains(err.Error(), "both must hold") {
				t.Errorf("lengths that disagree: %v", err)
			}
			err = tr.AllReduceDevice(ctx, header(16, reduce.Float32, reduce.Sum, 0), good.Buffer(), c.recv)
			c.want = "its allocation ends 32 bytes after its start"
		}
		if !errors.Is(err, c.sentinel) || !strings.HasPrefix(err.Error(), "nccl: rank 0: allreduce: rank 0: ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %v and %q", c.name, err, c.sentinel, c.want)
		}
	}
	var after [8]int64
	if ctl.last(&after); after != before {
		t.Errorf("bad buffers reached NCCL: last call %v, was %v", after, before)
	}
	if err := tr.AllReduceDevice(ctx, h, good.Buffer(), good.Buffer()); err != nil {
		t.Errorf("the communicator is unusable after bad buffers: %v", err)
	}
	// Broadcast reads send on the root only, Reduce writes recv there only:
	// the checks follow.
	sub := header(16, reduce.Float32, reduce.Sum, 0)
	if err := tr.BroadcastDevice(ctx, sub, host, good.Buffer()); !errors.Is(err, transport.ErrBadDeviceBuffer) {
		t.Errorf("broadcast from host memory on the root: %v", err)
	}
	if _, err := alloc(a, 2, 64); !errors.Is(err, ErrNoDevice) {
		t.Errorf("alloc on GPU 2 of 2: %v, want ErrNoDevice", err)
	}
	if err := freed.CopyFromHost(make([]byte, 4)); err == nil || !strings.Contains(err.Error(), "was freed") {
		t.Errorf("copy into freed memory: %v", err)
	}
	if err := good.CopyFromHost(make([]byte, 65)); err == nil || !strings.Contains(err.Error(), "holds 64 bytes") {
		t.Errorf("copy of 65 bytes into 64: %v", err)
	}
}

func TestFakeExchangeDevice(t *testing.T) {
	a, ctl := loadFake(t)
	tr := connectFake(t, a)
	s1, s2 := []byte("first device message"), []byte("second, longer device message")
	d1, d2 := deviceCopy(t, a, 0, s1), deviceCopy(t, a, 0, s2)
	r1, r2 := deviceCopy(t, a, 0, make([]byte, len(s1))), deviceCopy(t, a, 0, make([]byte, len(s2)))
	err := tr.ExchangeDevice(context.Background(),
		[]transport.DeviceTransfer{{Peer: 0, Buf: d1.Buffer()}, {Peer: 0, Buf: d2.Buffer()}},
		[]transport.DeviceTransfer{{Peer: 0, Buf: r1.Buffer()}, {Peer: 0, Buf: r2.Buffer()}})
	if err != nil {
		t.Fatal(err)
	}
	if g1, g2 := hostCopy(t, r1, len(s1)), hostCopy(t, r2, len(s2)); !bytes.Equal(g1, s1) || !bytes.Equal(g2, s2) {
		t.Errorf("exchange with self: got %q, %q", g1, g2)
	}
	var last [8]int64
	ctl.last(&last)
	if last[0] != 7 || last[1] != int64(len(s2)) || last[5] != 0 {
		t.Errorf("last call %v, want ncclRecv of %d bytes from rank 0", last, len(s2))
	}
	err = tr.ExchangeDevice(context.Background(), []transport.DeviceTransfer{{Peer: 1, Buf: d1.Buffer()}}, nil)
	if !errors.Is(err, transport.ErrBadPeer) {
		t.Errorf("exchange with rank 1 of 1: %v, want ErrBadPeer", err)
	}
	err = tr.ExchangeDevice(context.Background(), nil, []transport.DeviceTransfer{{Peer: 0, Buf: transport.DeviceBuffer{Ptr: 8, Len: 4}}})
	if !errors.Is(err, transport.ErrBadDeviceBuffer) || !strings.Contains(err.Error(), "receive from rank 0 buffer") {
		t.Errorf("receive into a bad pointer: %v", err)
	}
}

// TestFakeWrongStream: the fake refuses a launch on a stream that is not
// the communicator's, so the other tests, which check that no launch was
// refused, show collkit always launches on its own stream.
func TestFakeWrongStream(t *testing.T) {
	a, ctl := loadFake(t)
	tr := connectFake(t, a)
	buf := deviceCopy(t, a, 0, make([]byte, 16))
	if err := tr.AllReduceDevice(context.Background(), header(4, reduce.Float32, reduce.Sum, 0), buf.Buffer(), buf.Buffer()); err != nil {
		t.Fatal(err)
	}
	c := tr.main
	before := ctl.wrongStreams()
	var r int32
	c.onDevice(func() error {
		var other uintptr
		if e := a.cuStreamCreate(&other, cuStreamNonBlocking); e != cuSuccess {
			t.Fatalf("cuStreamCreate: %d", e)
		}
		r = a.ncclAllReduce(buf.Buffer().Ptr, buf.Buffer().Ptr, 4, 7, 0, c.h, other)
		return nil
	})
	if r != ncclInvalidUsage || ctl.wrongStreams() != before+1 {
		t.Errorf("launch on another stream: code %d, wrong-stream count %d -> %d; want ncclInvalidUsage and one more", r, before, ctl.wrongStreams())
	}
}

// TestFakeSplitLate: a non-blocking ncclCommSplit returns ncclInProgress
// with no child; the child appears once the parent's polling ends.
func TestFakeSplitLate(t *testing.T) {
	a, _ := loadFake(t)
	tr := connectFakeWith(t, a, Config{Rank: 0, Size: 1, NonBlocking: true})
	sub, err := tr.Split(context.Background(), 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	if sub == nil || sub.main.h == 0 || sub.Size() != 1 {
		t.Fatalf("split returned %+v", sub)
	}
	buf := deviceCopy(t, a, 0, []byte{1, 2, 3, 4})
	if err := sub.AllReduceDevice(context.Background(), header(4, reduce.Uint8, reduce.Sum, 0), buf.Buffer(), buf.Buffer()); err != nil {
		t.Errorf("allreduce on the late child: %v", err)
	}
	if got := hostCopy(t, buf, 4); !bytes.Equal(got, []byte{1, 2, 3, 4}) {
		t.Errorf("allreduce on the late child left %v", got)
	}
}

// TestFakeInitHangBounded: a blocking ncclCommInitRank that never returns
// (a missing rank) does not hang Connect; when NCCL returns later, the
// communicator nobody waits for is aborted.
func TestFakeInitHangBounded(t *testing.T) {
	a, ctl := loadFake(t)
	ctl.setMode(fakeHangInit)
	tr, err := newWith(Config{Rank: 0, Size: 1}, a)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	before := ctl.aborts()
	err = tr.Connect(ctx, newStore())
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "ncclCommInitRank did not return") {
		t.Fatalf("connect with init stuck: %v", err)
	}
	ctl.release()
	deadline := time.Now().Add(10 * time.Second)
	for ctl.aborts() == before && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	if ctl.aborts() != before+1 {
		t.Errorf("the late communicator was aborted %d times, want 1", ctl.aborts()-before)
	}
}

// TestFakeBlockedLaunchWatchdog: an NCCL call that blocks (a blocking
// communicator connecting to a dead peer) is ended by the watchdog's
// ncclCommAbort when the context ends, and by Close.
func TestFakeBlockedLaunchWatchdog(t *testing.T) {
	a, ctl := loadFake(t)
	tr := connectFake(t, a)
	buf := deviceCopy(t, a, 0, make([]byte, 16))
	ctl.setMode(fakeBlockLaunch)
	before := ctl.aborts()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := tr.AllReduceDevice(ctx, header(4, reduce.Float32, reduce.Sum, 0), buf.Buffer(), buf.Buffer())
	if !errors.Is(err, transport.ErrClosed) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("blocked launch: %v, want the deadline and ErrClosed", err)
	}
	if got := ctl.aborts() - before; got != 1 {
		t.Errorf("ncclCommAbort called %d times, want 1", got)
	}

	tr2 := connectFake(t, a)
	done := make(chan error, 1)
	go func() {
		done <- tr2.AllReduceDevice(context.Background(), header(4, reduce.Float32, reduce.Sum, 0), buf.Buffer(), buf.Buffer())
	}()
	for !tr2.main.inLaunch.Load() {
		runtime.Gosched()
	}
	tr2.Close()
	select {
	case err := <-done:
		if !errors.Is(err, transport.ErrClosed) {
			t.Errorf("launch ended by Close: %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end a blocked launch")
	}
}

// TestFakeNoLeak: Close frees the staging and device buffers the
// transport made.
func TestFakeNoLeak(t *testing.T) {
	a, ctl := loadFake(t)
	before := ctl.liveAllocs()
	tr := connectFake(t, a)
	p := make([]byte, 256)
	if err := tr.AllReduce(context.Background(), header(64, reduce.Float32, reduce.Sum, -1), p, p); err != nil {
		t.Fatal(err)
	}
	if ctl.liveAllocs() <= before {
		t.Fatal("the host path staged nothing on the device")
	}
	tr.Close()
	if got := ctl.liveAllocs(); got != before {
		t.Errorf("%d device allocations left after Close, want %d", got, before)
	}
}

// TestFakeDeviceAllocs: a device all-reduce allocates only what purego
// allocates per C call (8 bytes for SyscallN's arguments): here
// cuCtxSetCurrent, cuPointerGetAttributes, ncclAllReduce, cuCtxSetCurrent
// again for polling, and three polling rounds of ncclCommGetAsyncError and
// cuStreamQuery (the fake answers "not ready" twice), 10 calls.
// RegisterFunc's reflection made it 37.
func TestFakeDeviceAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	a, _ := loadFake(t)
	tr := connectFake(t, a)
	m := deviceCopy(t, a, 0, make([]byte, 64))
	h := header(16, reduce.Float32, reduce.Sum, 0)
	buf := m.Buffer()
	ctx := context.Background()
	got := testing.AllocsPerRun(100, func() {
		if err := tr.AllReduceDevice(ctx, h, buf, buf); err != nil {
			t.Fatal(err)
		}
	})
	if got > 10 {
		t.Errorf("%v allocations per device all-reduce, want at most 10 (one per C call)", got)
	}
}

// TestFakeNonBlockingHostPath: on a non-blocking communicator the fake's
// collectives and init return ncclInProgress; the host path polls them to
// the end and the data still arrives element by element.
func TestFakeNonBlockingHostPath(t *testing.T) {
	a, ctl := loadFake(t)
	tr := connectFakeWith(t, a, Config{Rank: 0, Size: 1, NonBlocking: true})
	if tr.main.blocking {
		t.Fatal("NonBlocking made a blocking communicator")
	}
	const n = 29
	for _, dt := range reduce.DTypes {
		send := make([]byte, n*dt.Size())
		verify.Fill(dt, reduce.Min, send, 4, 0)
		recv := make([]byte, len(send))
		if err := tr.AllReduce(context.Background(), header(n, dt, reduce.Min, -1), send, recv); err != nil {
			t.Fatalf("%v: %v", dt, err)
		}
		if w := verify.Wrong(dt, recv, send); w != 0 {
			t.Errorf("%v: %d wrong elements", dt, w)
		}
	}
	s, r := []byte("non-blocking exchange"), make([]byte, 21)
	if err := tr.Exchange(context.Background(), []Transfer{{0, s}}, []Transfer{{0, r}}); err != nil || !bytes.Equal(s, r) {
		t.Errorf("exchange: %v, %q", err, r)
	}
	before := ctl.destroys()
	if err := tr.Close(); err != nil {
		t.Errorf("close (ncclCommFinalize polled, then destroy): %v", err)
	}
	if ctl.destroys() != before+1 {
		t.Errorf("close destroyed %d communicators, want 1", ctl.destroys()-before)
	}
}

// TestFakeGroupDevice: collectives and a send/receive pair in one NCCL
// group on device memory, checked element by element; a bad operation is
// refused before NCCL is called.
func TestFakeGroupDevice(t *testing.T) {
	a, ctl := loadFake(t)
	tr := connectFake(t, a)
	const n = 19
	dt := reduce.Float64
	in := make([]byte, n*dt.Size())
	verify.Fill(dt, reduce.Sum, in, 8, 0)
	s1, s2 := deviceCopy(t, a, 0, in), deviceCopy(t, a, 0, in)
	r1, r2 := deviceCopy(t, a, 0, make([]byte, len(in))), deviceCopy(t, a, 0, make([]byte, len(in)))
	r3 := deviceCopy(t, a, 0, make([]byte, len(in)))
	h := header(n, dt, reduce.Sum, 0)
	ops := []transport.DeviceOp{
		{Coll: transport.CollAllReduce, Header: h, Send: s1.Buffer(), Recv: r1.Buffer()},
		{Coll: transport.CollAllGather, Header: h, Send: s2.Buffer(), Recv: r2.Buffer()},
		{Coll: transport.CollSendRecv, Send: s1.Buffer(), Peer: 0},
		{Coll: transport.CollSendRecv, Recv: r3.Buffer(), Peer: 0},
	}
	if err := tr.GroupDevice(context.Background(), ops); err != nil {
		t.Fatal(err)
	}
	for i, m := range []*Memory{r1, r2, r3} {
		if w := verify.Wrong(dt, hostCopy(t, m, len(in)), in); w != 0 {
			t.Errorf("operation %d of the group: %d wrong elements", i, w)
		}
	}
	var before, after [8]int64
	ctl.last(&before)
	for _, c := range []struct {
		op   transport.DeviceOp
		want string
	}{
		{transport.DeviceOp{Coll: transport.CollGather, Header: h, Send: s1.Buffer(), Recv: r1.Buffer()}, "gather is not a collective NCCL runs on device memory"},
		{transport.DeviceOp{Coll: transport.CollSendRecv, Send: s1.Buffer(), Recv: r1.Buffer()}, "a send or a receive, not both"},
		{transport.DeviceOp{Coll: transport.CollSendRecv, Send: s1.Buffer(), Peer: 4}, "peer rank 4 outside [0, 1)"},
		{transport.DeviceOp{Coll: transport.CollAllReduce, Header: header(n+1, dt, reduce.Sum, 0), Send: s1.Buffer(), Recv: r1.Buffer()}, "both must hold the header's count of 20"},
	} {
		err := tr.GroupDevice(context.Background(), append([]transport.DeviceOp{ops[0]}, c.op))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "nccl: rank 0: ") {
			t.Errorf("group with %+v: %v, want %q", c.op, err, c.want)
		}
	}
	if ctl.last(&after); after != before {
		t.Errorf("a refused group reached NCCL: %v, was %v", after, before)
	}
}
