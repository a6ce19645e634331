//go:build linux

package shm

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
)

// segDir is a directory of the test's own for segments.
func segDir(t *testing.T) string {
	dir, err := os.MkdirTemp(DefaultDir, "collkit-test-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// deadPid is the pid of a process that has exited and been reaped.
func deadPid(t *testing.T) int {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skipf("cannot run a child process: %v", err)
	}
	pid := cmd.Process.Pid
	if alive(pid) {
		t.Skipf("pid %d was reused at once", pid)
	}
	return pid
}

func local(t *testing.T, n int, cfg Config) []*Transport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ts, err := Local(ctx, n, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range ts {
		t.Cleanup(func() { tr.Close() })
	}
	return ts
}

func files(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// A crashed job's segments are removed by the next job's Connect; segments
// of live processes and files that are not segments stay.
func TestReclaimStaleSegments(t *testing.T) {
	dir := segDir(t)
	l := layout{size: 2, ringBytes: MinRingBytes}
	stale, err := createSegment(filepath.Join(dir, segPrefix+"dead-0"), 0, l)
	if err != nil {
		t.Fatal(err)
	}
	stale.u64(offPid).Store(uint64(deadPid(t)))
	stale.unmap()
	live, err := createSegment(filepath.Join(dir, segPrefix+"live-0"), 0, l)
	if err != nil {
		t.Fatal(err)
	}
	live.unmap()
	if err := os.WriteFile(filepath.Join(dir, "other"), []byte("not a segment"), 0o600); err != nil {
		t.Fatal(err)
	}

	ts := local(t, 3, Config{Dir: dir, RingBytes: MinRingBytes, NativeBytes: 1 << 10})
	got := strings.Join(files(t, dir), " ")
	if got != segPrefix+"live-0 other" {
		t.Fatalf("after Connect the directory holds %q, want only the live segment and the other file (the stale segment reclaimed, the job's own removed once mapped)", got)
	}
	for _, tr := range ts {
		tr.Close()
	}
	if got := strings.Join(files(t, dir), " "); got != segPrefix+"live-0 other" {
		t.Fatalf("after Close the directory holds %q", got)
	}
}

// waitsOnRank1 are the operations of rank 0 (of 2, with rings of
// MinRingBytes) that wait on rank 1: a Recv, a Send into a full ring and
// the native all-reduce.
var waitsOnRank1 = map[string]func(ctx context.Context, tr *Transport) error{
	"recv": func(ctx context.Context, tr *Transport) error {
		return tr.Recv(ctx, 1, transport.Header{}, make([]byte, 8))
	},
	"send": func(ctx context.Context, tr *Transport) error {
		return tr.Send(ctx, 1, transport.Header{}, make([]byte, 4*MinRingBytes))
	},
	"allreduce": func(ctx context.Context, tr *Transport) error {
		h := transport.Header{Count: 2, DType: reduce.Float32, Op: reduce.Sum}
		return tr.AllReduce(ctx, h, make([]byte, 8), make([]byte, 8))
	},
}

// A peer whose process is gone without closing (a crash) is reported while
// a Recv, a Send into a full ring and the native all-reduce wait for it, well
// before their deadlines.
func TestDeadPeerDetected(t *testing.T) {
	dead := deadPid(t)
	for name, op := range waitsOnRank1 {
		t.Run(name, func(t *testing.T) {
			ts := local(t, 2, Config{Dir: segDir(t), RingBytes: MinRingBytes, LivenessInterval: 20 * time.Millisecond})
			pr := ts[0].peers[1]
			pr.pid, pr.checkPid = dead, true // rank 1 "crashed": its pid is gone, its closed flag unset
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			err := op(ctx, ts[0])
			if !errors.Is(err, transport.ErrPeerGone) {
				t.Fatalf("%s waiting on a dead peer returned %v, want an error wrapping transport.ErrPeerGone", name, err)
			}
			var pe *transport.PeerError
			if !errors.As(err, &pe) || pe.Rank != 1 {
				t.Errorf("error %v does not name rank 1 as a *transport.PeerError", err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("dead peer noticed after %v", d)
			}
		})
	}
}

// A peer's process that exits without closing its transport (SIGKILL) is
// seen at once by a Recv, a Send into a full ring and the native
// all-reduce that wait on it (its pidfd), not at the next liveness check,
// here 30 s away.
func TestPeerExitSeenAtOnce(t *testing.T) {
	for name, op := range waitsOnRank1 {
		t.Run(name, func(t *testing.T) {
			ts := local(t, 2, Config{Dir: segDir(t), RingBytes: MinRingBytes, LivenessInterval: 30 * time.Second})
			child := exec.Command("sleep", "30")
			if err := child.Start(); err != nil {
				t.Skip(err)
			}
			defer child.Wait()
			// Rank 1 "runs" in the child: watch that process instead.
			pr := ts[0].peers[1]
			pr.pid, pr.checkPid = child.Process.Pid, true
			ts[0].watchExits()
			if ts[0].exits.done == nil {
				t.Skip("no pidfd on this kernel")
			}
			killed := make(chan time.Time, 1)
			time.AfterFunc(200*time.Millisecond, func() { killed <- time.Now(); child.Process.Kill() })
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := op(ctx, ts[0])
			took := time.Since(<-killed)
			if !errors.Is(err, transport.ErrPeerGone) || !strings.Contains(err.Error(), "exited without closing") {
				t.Fatalf("%s waiting on a killed peer returned %v, want its exit (transport.ErrPeerGone)", name, err)
			}
			if took > time.Second {
				t.Errorf("the exit was seen %v after the kill; the liveness check is 30 s away, the watch should see it at once", took)
			}
			t.Logf("%s: seen %v after the kill", name, took)
		})
	}
}

// A rank that waits with nothing arriving sleeps instead of spinning: over
// a 400 ms wait the process uses well under half a core.
func TestIdleWaitSleeps(t *testing.T) {
	ts := local(t, 2, Config{Dir: segDir(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	c0, w0 := cpu(), time.Now()
	err := ts[0].Recv(ctx, 1, transport.Header{}, make([]byte, 8))
	used, wall := cpu()-c0, time.Since(w0)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Recv with nothing sent returned %v, want context.DeadlineExceeded", err)
	}
	if used > wall/2 {
		t.Errorf("waiting %v used %v of CPU: the wait spins instead of sleeping", wall, used)
	}
}

// Ranks that do not share a directory (as on different hosts) fail Connect
// with an error that says so, instead of hanging.
func TestOtherHost(t *testing.T) {
	store := bootstrap.NewMemStore()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		tr, err := New(Config{Rank: r, Size: 2, Dir: segDir(t)}) // a directory each
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		wg.Go(func() { errs[r] = tr.Connect(ctx, store) })
	}
	wg.Wait()
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "not on this host") {
			t.Errorf("rank %d: Connect returned %v, want an error saying the peer is not on this host", r, err)
		}
	}
}

// Ranks whose native all-reduce headers differ all get a mismatch error.
func TestNativeMismatch(t *testing.T) {
	ts := local(t, 3, Config{Dir: segDir(t)})
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r, tr := range ts {
		h := transport.Header{Count: 2, DType: reduce.Float32, Op: reduce.Sum}
		if r == 2 {
			h.Op = reduce.Max
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			errs[r] = tr.AllReduce(ctx, h, make([]byte, 8), make([]byte, 8))
		})
	}
	wg.Wait()
	for r, err := range errs {
		if !errors.Is(err, transport.ErrMismatch) {
			t.Errorf("rank %d: %v, want a mismatch error", r, err)
		}
	}
}

// A peer that closes while this rank waits at a native barrier ends the wait.
func TestNativePeerCloses(t *testing.T) {
	ts := local(t, 2, Config{Dir: segDir(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res := make(chan error, 1)
	go func() {
		h := transport.Header{Count: 2, DType: reduce.Float32, Op: reduce.Sum}
		res <- ts[0].AllReduce(ctx, h, make([]byte, 8), make([]byte, 8))
	}()
	ts[1].Close()
	if err := <-res; !errors.Is(err, transport.ErrPeerGone) {
		t.Fatalf("AllReduce with a closed peer returned %v, want transport.ErrPeerGone", err)
	}
}

// A rank asleep at the native all-reduce's barrier is woken by the rank
// that arrives last (see wakePeers: its store of the barrier word and its
// look at the sleeper's flag must not pass each other), not by the end of
// its sleep slice: each round it returns with the late rank, well within
// the 100 ms slice, with the right sums. The sleeper learns what its
// wake-ups cost from the time its waker left (wokenAt).
func TestNativeSleeperWoken(t *testing.T) {
	ts := local(t, 2, Config{Dir: segDir(t)})
	h := transport.Header{Count: 2, Root: -1, Coll: transport.CollAllReduce, DType: reduce.Float32, Op: reduce.Sum}
	for round := range 5 {
		h.Seq = uint64(round)
		var done [2]time.Time
		var errs [2]error
		out := [2][]float32{make([]float32, 2), make([]float32, 2)}
		var wg sync.WaitGroup
		for r, tr := range ts {
			wg.Go(func() {
				if r == 1 {
					time.Sleep(20 * time.Millisecond) // rank 0 has slept since its first millisecond
				}
				in := []float32{float32(r + 1), float32(10 * (r + 1))}
				errs[r] = tr.AllReduce(context.Background(), h, reduce.Bytes(in), reduce.Bytes(out[r]))
				done[r] = time.Now()
			})
		}
		wg.Wait()
		for r := range 2 {
			if errs[r] != nil {
				t.Fatalf("round %d rank %d: %v", round, r, errs[r])
			}
			if out[r][0] != 3 || out[r][1] != 30 {
				t.Fatalf("round %d rank %d: got %v, want [3 30]", round, r, out[r])
			}
		}
		late := done[0].Sub(done[1])
		if late > 40*time.Millisecond {
			t.Fatalf("round %d: the sleeping rank returned %v after the late one: it slept out its slice instead of being woken", round, late)
		}
		if b := &ts[0].native.wait; b.Wake() <= 0 || b.Wake() > 40*time.Millisecond {
			t.Fatalf("round %d: the sleeper learned a wake-up cost of %v, want more than 0 and at most 40 ms", round, b.Wake())
		}
	}
}

// Dead names a peer whose process exited without closing its transport,
// not one that aborted (its notice says why) and then exited, as a failing
// rank of a job does at once: the exit watch sees that exit while the
// other ranks still diagnose the same failure, and a rank named dead there
// hid the stopped rank that caused it (TestStopWorker/shm, 1 run in 2).
func TestDeadAfterExit(t *testing.T) {
	ts := local(t, 3, Config{Dir: segDir(t)})
	if err := ts[1].Abort("rank 1: gave up"); err != nil {
		t.Fatal(err)
	}
	ts[0].peers[1].exited.Store(true) // rank 1 aborted, then its process exited
	ts[0].peers[2].exited.Store(true) // rank 2's process exited without closing
	if got := ts[0].Dead(); len(got) != 1 || got[0] != 2 {
		t.Fatalf("Dead() = %v, want [2]: rank 1 aborted before it exited", got)
	}
}
