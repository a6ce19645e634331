//go:build linux && (amd64 || arm64)

package nccl

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ebitengine/purego"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/verify"
)

// The fake library (testdata/fake_nccl_for_tests.c) lets these tests run
// the binding itself on a machine without a GPU: every NCCL and CUDA call
// collkit makes goes through purego into C, with the real signatures.

type fakeControl struct {
	setMode      func(int32)
	release      func()
	setDevices   func(int32)
	aborts       func() int32
	destroys     func() int32
	wrongStreams func() int32
	liveAllocs   func() int32
	last         func(*[8]int64)
	inits        func() int32
	shrinks      func() int32
	grows        func() int32
	growIDs      func() int32
	liveComms    func() int32
	endedTwice   func() int32
	lastShrink   func(*[66]int32)
	peerErrors   func(int32)
}

// The fake's modes (fake_set_mode).
const (
	fakeOK          = 0
	fakeHangStream  = 1
	fakeAsyncError  = 2
	fakeHangInit    = 3
	fakeBlockLaunch = 4
)

// fakeLib is one build of the fake library, loaded once per process.
type fakeLib struct {
	flags []string
	once  sync.Once
	api   *api
	ctl   fakeControl
	err   error
}

var (
	// fullFake exports every symbol collkit binds, ncclCommShrink and
	// ncclCommGrow included; oldFake lacks those, as NCCL before 2.27.
	fullFake = &fakeLib{}
	oldFake  = &fakeLib{flags: []string{"-DFAKE_NO_SHRINK_GROW"}}
	fakeMu   sync.Mutex // the fakes have global state: one test at a time
)

func loadFake(t *testing.T) (*api, fakeControl) { return fullFake.load(t) }

func (f *fakeLib) load(t *testing.T) (*api, fakeControl) {
	t.Helper()
	f.once.Do(func() {
		gcc, err := exec.LookPath("gcc")
		if err != nil {
			f.err = err
			return
		}
		dir, err := mkdirTemp()
		if err != nil {
			f.err = err
			return
		}
		so := filepath.Join(dir, "libfake_nccl_for_tests.so")
		args := append([]string{"-shared", "-fPIC", "-O1", "-o", so, filepath.Join("testdata", "fake_nccl_for_tests.c")}, f.flags...)
		out, err := exec.Command(gcc, args...).CombinedOutput()
		if err != nil {
			f.err = errors.New("gcc: " + err.Error() + ": " + string(out))
			return
		}
		env := searchEnv{
			getenv: func(k string) string {
				if k == EnvNCCLLib || k == EnvCUDALib {
					return so
				}
				return ""
			},
			glob:   filepath.Glob,
			exists: func(string) bool { return false },
		}
		if f.api, f.err = load(env); f.err != nil {
			return
		}
		h, err := purego.Dlopen(so, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			f.err = err
			return
		}
		ctl := &f.ctl
		for name, fn := range map[string]any{
			"fake_set_mode": &ctl.setMode, "fake_aborts": &ctl.aborts, "fake_destroys": &ctl.destroys, "fake_last": &ctl.last,
			"fake_release": &ctl.release, "fake_set_devices": &ctl.setDevices, "fake_wrong_streams": &ctl.wrongStreams,
			"fake_live_device_allocs": &ctl.liveAllocs, "fake_inits": &ctl.inits, "fake_shrinks": &ctl.shrinks,
			"fake_grows": &ctl.grows, "fake_grow_ids": &ctl.growIDs, "fake_live_comms": &ctl.liveComms,
			"fake_ended_twice": &ctl.endedTwice, "fake_last_shrink": &ctl.lastShrink, "fake_set_peer_errors": &ctl.peerErrors,
		} {
			purego.RegisterLibFunc(fn, h, name)
		}
	})
	if f.err != nil {
		t.Skipf("cannot build the fake NCCL library for the binding tests: %v", f.err)
	}
	fakeMu.Lock()
	ctl := f.ctl
	before := ctl.wrongStreams()
	t.Cleanup(func() {
		ctl.setMode(fakeOK)
		ctl.setDevices(1)
		ctl.peerErrors(1)
		if n := ctl.wrongStreams() - before; n > 0 && !strings.Contains(t.Name(), "WrongStream") {
			t.Errorf("%d NCCL launches on a stream that is not the communicator's", n)
		}
		fakeMu.Unlock()
	})
	return f.api, ctl
}

// connectFake connects a one-rank Transport to the fake library.
func connectFake(t *testing.T, a *api) *Transport {
	t.Helper()
	return connectFakeWith(t, a, Config{Rank: 0, Size: 1})
}

func connectFakeWith(t *testing.T, a *api, cfg Config) *Transport {
	t.Helper()
	tr, err := newWith(cfg, a)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.Connect(ctx, bootstrap.NewMemStore()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func TestFakeVersionAndPaths(t *testing.T) {
	a, _ := loadFake(t)
	tr, err := newWith(Config{Rank: 0, Size: 1}, a)
	if err != nil {
		t.Fatal(err)
	}
	if v := tr.Version(); !bytes.Contains([]byte(v), []byte("NCCL 2.21.5")) || !bytes.Contains([]byte(v), []byte("libfake_nccl_for_tests.so")) {
		t.Errorf("Version() = %q, want NCCL 2.21.5 from the fake library", v)
	}
}

// TestFakeCollectives runs every native collective through the binding and
// checks both the data, element by element (a one-rank world copies), and
// the arguments the C side received: count, NCCL dtype and op codes, root.
func TestFakeCollectives(t *testing.T) {
	a, ctl := loadFake(t)
	tr := connectFake(t, a)
	ctx := context.Background()
	const n = 37
	for _, dt := range reduce.DTypes {
		for _, op := range reduce.Ops {
			send := make([]byte, n*dt.Size())
			verify.Fill(dt, op, send, 7, 0)
			want := make([]byte, len(send))
			verify.Expect(dt, op, want, 7, 1)
			recv := make([]byte, len(send))
			if err := tr.AllReduce(ctx, header(n, dt, op, -1), send, recv); err != nil {
				t.Fatalf("%v %v: %v", dt, op, err)
			}
			if w := verify.Wrong(dt, recv, want); w != 0 {
				t.Errorf("allreduce %v %v: %d wrong elements", dt, op, w)
			}
			var last [8]int64
			ctl.last(&last)
			if last[0] != 1 || last[1] != n || last[2] != int64(dtypes[dt]) || last[3] != int64(ops[op]) {
				t.Errorf("allreduce %v %v: C saw call %d count %d dtype %d op %d, want 1 %d %d %d",
					dt, op, last[0], last[1], last[2], last[3], n, dtypes[dt], ops[op])
			}
		}
	}
	dt := reduce.Float32
	send := make([]byte, n*4)
	verify.Fill(dt, reduce.Sum, send, 3, 0)
	check := func(name string, call, op, root int64, err error, got []byte) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if w := verify.Wrong(dt, got, send); w != 0 {
			t.Errorf("%s: %d elements differ from the one rank's input", name, w)
		}
		var last [8]int64
		ctl.last(&last)
		if last[0] != call || last[1] != n || last[2] != 7 || last[4] != root || (op >= 0 && last[3] != op) {
			t.Errorf("%s: C saw call %d count %d dtype %d op %d root %d, want %d %d 7 %d %d", name, last[0], last[1], last[2], last[3], last[4], call, n, op, root)
		}
	}
	recv := make([]byte, len(send))
	check("broadcast", 2, -1, 0, tr.Broadcast(ctx, header(n, dt, 0, 0), send, recv), recv)
	recv = make([]byte, len(send))
	check("reduce", 3, int64(ops[reduce.Max]), 0, tr.Reduce(ctx, header(n, dt, reduce.Max, 0), send, recv), recv)
	recv = make([]byte, len(send))
	check("allgather", 4, -1, -1, tr.AllGather(ctx, header(n, dt, 0, -1), send, recv), recv)
	recv = make([]byte, len(send))
	check("reducescatter", 5, int64(ops[reduce.Prod]), -1, tr.ReduceScatter(ctx, header(n, dt, reduce.Prod, -1), send, recv), recv)

	// In place.
	buf := append([]byte{}, send...)
	if err := tr.AllReduce(ctx, header(n, dt, reduce.Sum, -1), buf, buf); err != nil || verify.Wrong(dt, buf, send) != 0 {
		t.Errorf("in-place allreduce: err %v, %d wrong elements", err, verify.Wrong(dt, buf, send))
	}
	// Empty buffers need no call.
	var before, after [8]int64
	ctl.last(&before)
	if err := tr.AllReduce(ctx, header(0, dt, reduce.Sum, -1), nil, nil); err != nil {
		t.Errorf("empty allreduce: %v", err)
	}
	if ctl.last(&after); after != before {
		t.Errorf("empty allreduce called NCCL: last call %v, was %v", after, before)
	}
}

// TestFakeBadArguments: arguments that do not fit the header or the world
// get one clear error naming the rank and the collective, and no call into
// NCCL.
func TestFakeBadArguments(t *testing.T) {
	a, ctl := loadFake(t)
	tr := connectFake(t, a)
	ctx := context.Background()
	const n = 5
	dt := reduce.Float32
	buf := func(elems int) []byte { return make([]byte, elems*dt.Size()) }
	// A known last call, which no bad call below may replace.
	if err := tr.Broadcast(ctx, header(3, reduce.Uint8, 0, 0), make([]byte, 3), make([]byte, 3)); err != nil {
		t.Fatal(err)
	}
	var before, after [8]int64
	ctl.last(&before)
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"allreduce count", tr.AllReduce(ctx, header(n+1, dt, reduce.Sum, -1), buf(n), buf(n)), "allreduce: send is 20 bytes and recv 20 bytes; both must hold the header's count of 6 float32"},
		{"allreduce lengths", tr.AllReduce(ctx, header(n, dt, reduce.Sum, -1), buf(n), buf(1)), "send is 20 bytes and recv 4 bytes"},
		{"allreduce partial element", tr.AllReduce(ctx, header(n, dt, reduce.Sum, -1), buf(n)[1:], buf(n)[1:]), "send is 19 bytes"},
		{"allreduce dtype", tr.AllReduce(ctx, header(n, 0, reduce.Sum, -1), buf(n), buf(n)), "allreduce: invalid dtype"},
		{"allreduce op", tr.AllReduce(ctx, header(n, dt, 0, -1), buf(n), buf(n)), "allreduce: invalid reduction op"},
		{"reducescatter op", tr.ReduceScatter(ctx, header(n, dt, 0, -1), buf(n), buf(n)), "reducescatter: invalid reduction op"},
		{"broadcast root past the end", tr.Broadcast(ctx, header(n, dt, 0, 1), buf(n), buf(n)), "broadcast: root 1 is outside [0, 1)"},
		{"broadcast negative root", tr.Broadcast(ctx, header(n, dt, 0, -1), buf(n), buf(n)), "broadcast: root -1 is outside [0, 1)"},
		{"reduce root", tr.Reduce(ctx, header(n, dt, reduce.Sum, 3), buf(n), buf(n)), "reduce: root 3 is outside [0, 1)"},
		{"allgather shares", tr.AllGather(ctx, header(n, dt, 0, -1), buf(n), buf(n+1)), "allgather: recv is 24 bytes and send 20 bytes; recv must hold the header's count of 5 float32 elements (4 bytes each) and send one of 1 equal shares"},
		{"reducescatter count", tr.ReduceScatter(ctx, header(n+1, dt, reduce.Sum, -1), buf(n), buf(n)), "reducescatter: send is 20 bytes and recv 20 bytes; send must hold the header's count of 6"},
	} {
		if c.err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		if msg := c.err.Error(); !strings.HasPrefix(msg, "nccl: rank 0: ") || !strings.Contains(msg, c.want) {
			t.Errorf("%s: %q, want \"nccl: rank 0: ...%s...\"", c.name, msg, c.want)
		}
	}
	if ctl.last(&after); after != before {
		t.Errorf("bad arguments reached NCCL: last call %v, was %v", after, before)
	}
}

func TestFakeExchangeGroup(t *testing.T) {
	a, ctl := loadFake(t)
	tr := connectFake(t, a)
	s1, s2 := []byte("first message"), []byte("second, longer message")
	r1, r2 := make([]byte, len(s1)), make([]byte, len(s2))
	err := tr.Exchange(context.Background(), []Transfer{{0, s1}, {0, s2}}, []Transfer{{0, r1}, {0, r2}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r1, s1) || !bytes.Equal(r2, s2) {
		t.Errorf("exchange with self: got %q, %q", r1, r2)
	}
	var last [8]int64
	ctl.last(&last)
	if last[0] != 7 || last[1] != int64(len(s2)) || last[2] != ncclUint8 || last[5] != 0 {
		t.Errorf("last call %v, want ncclRecv of %d uint8 from rank 0", last, len(s2))
	}
	if err := tr.Exchange(context.Background(), []Transfer{{1, s1}}, nil); !errors.Is(err, transport.ErrBadPeer) {
		t.Errorf("exchange with rank 1 of 1: %v, want ErrBadPeer", err)
	}
}

func TestFakeSplit(t *testing.T) {
	a, ctl := loadFake(t)
	tr := connectFake(t, a)
	ctx := context.Background()
	sub, err := tr.Split(ctx, 3, 7)
	if err != nil {
		t.Fatal(err)
	}
	var last [8]int64
	ctl.last(&last)
	if last[6] != 3 || last[7] != 7 {
		t.Errorf("ncclCommSplit saw color %d key %d, want 3 7", last[6], last[7])
	}
	if sub.Rank() != 0 || sub.Size() != 1 {
		t.Errorf("sub-communicator rank %d size %d, want 0 1", sub.Rank(), sub.Size())
	}
	in := []byte{1, 2, 3, 4}
	out := make([]byte, 4)
	if err := sub.AllReduce(ctx, header(len(in), reduce.Uint8, reduce.Sum, -1), in, out); err != nil || !bytes.Equal(in, out) {
		t.Errorf("allreduce on the sub-communicator: %v, %v", err, out)
	}
	none, err := tr.Split(ctx, -5, 0)
	if err != nil || none != nil {
		t.Errorf("split with a negative color: %v, %v; want nil, nil", none, err)
	}
	ctl.last(&last)
	if last[6] != ncclSplitNoColor {
		t.Errorf("negative color reached NCCL as %d, want NCCL_SPLIT_NOCOLOR", last[6])
	}
}

// TestFakeStuckStreamAborts: a collective whose stream never finishes
// returns an error when its context ends, after aborting the communicator;
// later calls fail at once.
func TestFakeStuckStreamAborts(t *testing.T) {
	a, ctl := loadFake(t)
	tr := connectFake(t, a)
	before := ctl.aborts()
	ctl.setMode(fakeHangStream)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	buf := make([]byte, 64)
	err := tr.AllReduce(ctx, header(16, reduce.Float32, reduce.Sum, -1), buf, buf)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stuck allreduce: %v, want a deadline error", err)
	}
	if got := ctl.aborts() - before; got != 1 {
		t.Errorf("ncclCommAbort called %d times, want 1", got)
	}
	err = tr.AllReduce(context.Background(), header(16, reduce.Float32, reduce.Sum, -1), buf, buf)
	if !errors.Is(err, transport.ErrClosed) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("allreduce after the abort: %v, want ErrClosed wrapping the first error", err)
	}
}

func TestFakeAsyncErrorAborts(t *testing.T) {
	a, ctl := loadFake(t)
	tr := connectFake(t, a)
	before := ctl.aborts()
	ctl.setMode(fakeAsyncError)
	buf := make([]byte, 64)
	err := tr.AllReduce(context.Background(), header(16, reduce.Float32, reduce.Sum, -1), buf, buf)
	var ce *CallError
	if !errors.As(err, &ce) || !ce.Remote() || ce.Call != "ncclCommGetAsyncError" {
		t.Fatalf("allreduce with an asynchronous remote error: %v, want a remote *CallError", err)
	}
	if got := ctl.aborts() - before; got != 1 {
		t.Errorf("ncclCommAbort called %d times, want 1", got)
	}
}

func TestFakeCloseDestroysAndUnblocks(t *testing.T) {
	a, ctl := loadFake(t)
	tr := connectFake(t, a)
	ctl.setMode(fakeHangStream)
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 64)
		done <- tr.AllReduce(context.Background(), header(16, reduce.Float32, reduce.Sum, -1), buf, buf)
	}()
	// The collective is stuck with no deadline; Close must end it.
	time.AfterFunc(20*time.Millisecond, func() { tr.Close() })
	select {
	case err := <-done:
		if !errors.Is(err, transport.ErrClosed) {
			t.Errorf("collective ended by Close: %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end a stuck collective")
	}
	ctl.setMode(fakeOK)
	tr2 := connectFake(t, a)
	before := ctl.destroys()
	if err := tr2.Close(); err != nil {
		t.Fatal(err)
	}
	if got := ctl.destroys() - before; got != 1 {
		t.Errorf("Close destroyed %d communicators, want 1", got)
	}
	if err := tr2.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestFakeSendRecvBadPeer(t *testing.T) {
	a, _ := loadFake(t)
	tr := connectFake(t, a)
	err := tr.Send(context.Background(), 0, transport.Header{}, nil)
	var pe *transport.PeerError
	if !errors.As(err, &pe) || !errors.Is(err, transport.ErrBadPeer) {
		t.Errorf("send to self: %v, want a PeerError wrapping ErrBadPeer", err)
	}
}
