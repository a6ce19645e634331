package collkit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/nccl"
	"github.com/collkit/collkit/verify"
)

// The hybrid hierarchical all-reduce (IntraNode "nccl") against NCCL. NCCL
// is loaded once per process, so each case runs this test binary again
// with the libraries it names in COLLKIT_NCCL_LIB/COLLKIT_CUDART_LIB:
//
//   - fake: the fake library of transport/nccl's tests (built here with
//     gcc), which runs the ranks of this process: two simulated nodes of
//     one rank each, NCCL inside each node, TCP between them.
//   - missing: libraries that do not exist: Connect fails on every rank
//     with an error wrapping nccl.ErrNotAvailable that says what to do.
//
// With COLLKIT_GPU_CHECK=1 (gpu-kit/run.sh sets it) the same check runs
// in this process on the NCCL and GPU the search finds, and it fails,
// never skips, when there are none.

const hybridChildVar = "COLLKIT_HYBRID_CHILD"

// runChild runs test name again in a child process with env added (the
// NCCL libraries load once per process), and returns its output; it fails
// the test when the child fails or does not pass.
func runChild(t *testing.T, name string, env ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child %s (%s): %v\n%s", name, strings.Join(env, " "), err, out)
	}
	if !strings.Contains(string(out), "--- PASS: "+name) {
		t.Fatalf("child %s did not pass (skipped or not run):\n%s", name, out)
	}
	return string(out)
}

// buildFakeNCCL compiles transport/nccl's fake library, with gcc's flags
// added (-DFAKE_NO_SHRINK_GROW), into a temporary directory, or skips the
// test when there is no C compiler.
func buildFakeNCCL(t *testing.T, flags ...string) string {
	t.Helper()
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		t.Skipf("NCCL loads on linux/amd64 and linux/arm64 only, not %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skipf("no gcc to build the fake NCCL library: %v", err)
	}
	so := filepath.Join(t.TempDir(), "libfake_nccl_for_tests.so")
	src := filepath.Join("transport", "nccl", "testdata", "fake_nccl_for_tests.c")
	if out, err := exec.Command(gcc, append([]string{"-shared", "-fPIC", "-O1", "-o", so, src}, flags...)...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", src, err, out)
	}
	return so
}

func TestHybridNCCLFake(t *testing.T) {
	switch os.Getenv(hybridChildVar) {
	case "fake":
		hybridAllReduces(t, os.Getenv(nccl.EnvNCCLLib))
		return
	case "":
	default:
		t.Skip("a child of another case")
	}
	so := buildFakeNCCL(t)
	runChild(t, "TestHybridNCCLFake", hybridChildVar+"=fake", nccl.EnvNCCLLib+"="+so, nccl.EnvCUDALib+"="+so)
}

func TestHybridNCCLMissing(t *testing.T) {
	switch os.Getenv(hybridChildVar) {
	case "missing":
		hybridMissing(t)
		return
	case "":
	default:
		t.Skip("a child of another case")
	}
	missing := filepath.Join(t.TempDir(), "no-such-libnccl.so.2")
	runChild(t, "TestHybridNCCLMissing", hybridChildVar+"=missing", nccl.EnvNCCLLib+"="+missing, nccl.EnvCUDALib+"="+missing)
}

// gpuCheckVar, set to 1, makes the GPU checks run and fail where NCCL or
// the GPU is missing, instead of skipping.
const gpuCheckVar = "COLLKIT_GPU_CHECK"

// TestNCCLDiscovery reports which NCCL and CUDA runtime collkit's search
// loads here (no GPU is touched), or where it looked.
func TestNCCLDiscovery(t *testing.T) {
	if os.Getenv(gpuCheckVar) != "1" {
		t.Skip("set " + gpuCheckVar + "=1 on a machine with NCCL (gpu-kit/run.sh does)")
	}
	tr, err := nccl.New(nccl.Config{Rank: 0, Size: 1})
	if err != nil {
		t.Fatalf("collkit's search did not load NCCL: %v", err)
	}
	defer tr.Close()
	t.Logf("collkit loads %s", tr.Version())
}

// TestHybridNCCLGPU is the check on a GPU machine: the hybrid all-reduce on
// the real NCCL, two simulated nodes of one rank each on GPU 0.
func TestHybridNCCLGPU(t *testing.T) {
	if os.Getenv(gpuCheckVar) != "1" {
		t.Skip("set " + gpuCheckVar + "=1 on a machine with NCCL and a GPU (gpu-kit/run.sh does)")
	}
	if err := nccl.Available(); err != nil {
		t.Fatalf("%s=1 but NCCL does not load: %v", gpuCheckVar, err)
	}
	hybridAllReduces(t, "")
}

// hybridComms connects n ranks as goroutines: TCP between nodes numbered
// by SimulatedNodes, NCCL inside each.
func hybridComms(t *testing.T, n, nodes int) ([]*Comm, []error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store := bootstrap.NewMemStore()
	cs := make([]*Comm, n)
	errs := onEvery(cs, func(r int, _ *Comm) (err error) {
		cs[r], err = ConnectStore(ctx, bootstrap.Env{Rank: r, Size: n, JobID: "hybrid"}, store, Options{
			Transport: "tcp", Algorithm: "hierarchical", SimulatedNodes: nodes, IntraNode: "nccl", Timeout: 20 * time.Second,
		})
		return err
	})
	t.Cleanup(func() {
		for _, c := range cs {
			if c != nil {
				c.Close()
			}
		}
	})
	return cs, errs
}

// hybridAllReduces checks every dtype and op, out of place and in place,
// element by element, on two nodes of one rank each, on host and on GPU
// memory (simulated by the fake library); with the fake library at fake
// it also checks that each all-reduce ended with NCCL's intra-node
// all-gather.
func hybridAllReduces(t *testing.T, fake string) {
	cs, errs := hybridComms(t, 2, 2)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for r, c := range cs {
		if _, ok := c.intra.(*ncclIntra); !ok {
			t.Fatalf("rank %d: the intra-node transport is %T, want *ncclIntra (NCCL)", r, c.intra)
		}
		if c.intra.Size() != 1 || c.intra.Rank() != 0 {
			t.Fatalf("rank %d: the intra-node NCCL communicator is rank %d of %d, want 0 of 1", r, c.intra.Rank(), c.intra.Size())
		}
	}
	var last func(*[8]int64)
	if fake != "" {
		h, err := purego.Dlopen(fake, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			t.Fatal(err)
		}
		purego.RegisterLibFunc(&last, h, "fake_last")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// All GPU memory is allocated here, one rank at a time: the fake
	// library's table of allocations has no lock, and two ranks run in
	// this process. Each one-rank intra-node communicator grows its
	// staging buffers alone, and the device buffers are made once.
	const most = 4099 * 8
	type gpuBufs struct{ send, recv *nccl.Memory }
	bufs := make([]gpuBufs, len(cs))
	for r, c := range cs {
		in := c.intra.(*ncclIntra)
		if _, err := in.stageFor(most); err != nil {
			t.Fatal(err)
		}
		warm := make([]byte, most)
		if err := in.AllReduce(ctx, transport.Header{Count: most / 8, DType: Float64, Op: Sum}, warm, warm); err != nil {
			t.Fatal(err)
		}
		for _, m := range []**nccl.Memory{&bufs[r].send, &bufs[r].recv} {
			var err error
			if *m, err = nccl.Alloc(0, most); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { (*m).Free() })
		}
	}
	checkHybrid(t, cs, last, "host", func(c *Comm, dt DType, op Op, in []byte, inPlace bool) ([]byte, error) {
		recv := in
		if !inPlace {
			recv = make([]byte, len(in))
		}
		return recv, c.AllReduce(ctx, dt, op, in, recv)
	})
	checkHybrid(t, cs, last, "device", func(c *Comm, dt DType, op Op, in []byte, inPlace bool) ([]byte, error) {
		b := bufs[c.Rank()]
		if err := b.send.CopyFromHost(in); err != nil {
			return nil, err
		}
		send, recv := b.send.Buffer().Slice(0, len(in)), b.recv.Buffer().Slice(0, len(in))
		if inPlace {
			recv = send
		}
		if err := c.AllReduceDevice(ctx, dt, op, send, recv); err != nil {
			return nil, err
		}
		out := make([]byte, len(in))
		m := b.recv
		if inPlace {
			m = b.send
		}
		return out, m.CopyToHost(out)
	})
	// Device memory on the hybrid is all-reduce only: the other
	// collectives say the main transport takes host memory.
	for r, err := range onEvery(cs, func(r int, c *Comm) error { return c.BroadcastDevice(ctx, Float32, bufs[r].send.Buffer(), 0) }) {
		if !errors.Is(err, ErrHostMemoryOnly) {
			t.Errorf("rank %d: BroadcastDevice on the hybrid: %v, want ErrHostMemoryOnly", r, err)
		}
	}
	if fake == "" {
		return
	}
	// Host memory passed as GPU memory on rank 0: rank 0 says so, and rank
	// 1 learns of it at once, not at its timeout.
	host := make([]byte, 64)
	start := time.Now()
	errs = onEvery(cs, func(r int, c *Comm) error {
		b := bufs[r].send.Buffer().Slice(0, 64)
		if r == 0 {
			b = DeviceBuffer{Ptr: uintptr(unsafe.Pointer(&host[0])), Len: 64}
		}
		return c.AllReduceDevice(ctx, Float32, Sum, b, b)
	})
	if !errors.Is(errs[0], transport.ErrBadDeviceBuffer) || !strings.Contains(errs[0].Error(), "rank 0") {
		t.Errorf("rank 0, host memory as GPU memory: %v, want an error naming rank 0 and wrapping transport.ErrBadDeviceBuffer", errs[0])
	}
	if errs[1] == nil || time.Since(start) > 10*time.Second {
		t.Errorf("rank 1 beside a bad buffer on rank 0: %v after %v, want an error well before the 20 s timeout", errs[1], time.Since(start))
	}
	t.Logf("rank 0: %v\nrank 1: %v", errs[0], errs[1])
}

// checkHybrid runs allReduce, which returns the result on the host, on
// every rank for every dtype, op, count and placement, and checks every
// element against the reference.
func checkHybrid(t *testing.T, cs []*Comm, last func(*[8]int64), mem string,
	allReduce func(c *Comm, dt DType, op Op, in []byte, inPlace bool) ([]byte, error)) {
	t.Helper()
	seed := uint64(7)
	for _, dt := range reduce.DTypes {
		for _, op := range reduce.Ops {
			for _, count := range []int{0, 1, 2, 7, 1000, 4099} {
				for _, inPlace := range []bool{false, true} {
					seed++
					name := fmt.Sprintf("%s %v/%v/count=%d/inPlace=%v", mem, dt, op, count, inPlace)
					got := make([][]byte, len(cs))
					err := errors.Join(onEvery(cs, func(r int, c *Comm) (err error) {
						in := make([]byte, count*dt.Size())
						verify.Fill(dt, op, in, seed, r)
						got[r], err = allReduce(c, dt, op, in, inPlace)
						return err
					})...)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					want := make([]byte, count*dt.Size())
					verify.Expect(dt, op, want, seed, len(cs))
					for r := range cs {
						if wrong := verify.Wrong(dt, got[r], want); wrong > 0 {
							t.Fatalf("%s: rank %d: %d of %d elements wrong", name, r, wrong, count)
						}
					}
					if last != nil && count > 0 {
						var calls [8]int64
						last(&calls)
						if calls[0] != 4 || calls[1] != int64(count) { // ncclAllGather of the whole buffer
							t.Fatalf("%s: the last NCCL call was %d with count %d, want the intra-node all-gather (4) of %d elements", name, calls[0], calls[1], count)
						}
					}
				}
			}
		}
	}
}

// hybridMissing: without NCCL, Connect fails on every rank, saying where
// NCCL was looked for and what to do instead.
func hybridMissing(t *testing.T) {
	_, errs := hybridComms(t, 2, 2)
	t.Logf("rank 0: %v", errs[0])
	for r, err := range errs {
		if !errors.Is(err, nccl.ErrNotAvailable) {
			t.Fatalf("rank %d: %v, want an error wrapping nccl.ErrNotAvailable", r, err)
		}
		for _, says := range []string{fmt.Sprintf("rank %d", r), "inside node", nccl.EnvNCCLLib, `IntraNode "shm" or "group"`} {
			if !strings.Contains(err.Error(), says) {
				t.Errorf("rank %d: error does not say %q: %v", r, says, err)
			}
		}
	}
}
