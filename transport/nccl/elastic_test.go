//go:build linux && (amd64 || arm64)

package nccl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/verify"
)

// onRanks runs f for every rank at once, as the ranks of a job do, and
// returns their errors.
func onRanks(n int, f func(r int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { errs[r] = f(r) })
	}
	wg.Wait()
	return errs
}

// connectRanks connects n ranks of the fake library (goroutines of this
// process) through one store.
func connectRanks(t *testing.T, a *api, n int, cfg Config) []*Transport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	store := newStore()
	ts := make([]*Transport, n)
	err := errors.Join(onRanks(n, func(r int) (err error) {
		c := cfg
		c.Rank, c.Size = r, n
		if ts[r], err = newWith(c, a); err != nil {
			return err
		}
		return ts[r].Connect(ctx, store)
	})...)
	t.Cleanup(func() {
		for _, tr := range ts {
			if tr != nil {
				tr.Close()
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// checkAllReduce runs an all-reduce of count elements of dt with op on
// every transport of ts, whose ranks are the processes ids (inputs seeded
// by id), and checks every element on every rank.
func checkAllReduce(t *testing.T, ts []*Transport, ids []int, dt reduce.DType, op reduce.Op, count int, seed uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := make([][]byte, len(ts))
	err := errors.Join(onRanks(len(ts), func(r int) error {
		if ts[r].Rank() != r || ts[r].Size() != len(ts) {
			return fmt.Errorf("transport %d is rank %d of %d, want %d of %d", r, ts[r].Rank(), ts[r].Size(), r, len(ts))
		}
		in := make([]byte, count*dt.Size())
		verify.Fill(dt, op, in, seed, ids[r])
		got[r] = make([]byte, len(in))
		return ts[r].AllReduce(ctx, header(count, dt, op, -1), in, got[r])
	})...)
	if err != nil {
		t.Fatalf("allreduce %v %v of %d over ids %v: %v", dt, op, count, ids, err)
	}
	// The reference: verify.Expect over ranks 0..n-1 when ids are those.
	want := make([]byte, count*dt.Size())
	if slices.Equal(ids, rankIDs(len(ids))) {
		verify.Expect(dt, op, want, seed, len(ids))
	} else {
		want = expectOver(dt, op, count, seed, ids)
	}
	for r := range ts {
		if w := verify.Wrong(dt, got[r], want); w != 0 {
			t.Errorf("allreduce %v %v of %d over ids %v: rank %d has %d wrong elements", dt, op, count, ids, r, w)
		}
	}
}

func rankIDs(n int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i
	}
	return ids
}

// expectOver is the sum, element by element, of the int64 inputs of ids.
func expectOver(dt reduce.DType, op reduce.Op, count int, seed uint64, ids []int) []byte {
	if dt != reduce.Int64 || op != reduce.Sum {
		panic("expectOver takes int64 sums")
	}
	want := make([]byte, count*8)
	for i := range count {
		var v int64
		for _, id := range ids {
			v += verify.Value(seed, id, i, op)
		}
		for k := range 8 {
			want[i*8+k] = byte(uint64(v) >> (8 * k))
		}
	}
	return want
}

// TestFakeRanks runs every collective over 1 to 5 ranks of the fake library
// and checks every element: the fake computes what NCCL would, so the tests
// of shrinking and growing below can trust it.
func TestFakeRanks(t *testing.T) {
	a, ctl := loadFake(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for n := 1; n <= 5; n++ {
		ts := connectRanks(t, a, n, Config{})
		seed := uint64(n)
		for _, dt := range reduce.DTypes {
			for _, op := range reduce.Ops {
				for _, count := range []int{1, 7, 1000} {
					seed++
					checkAllReduce(t, ts, rankIDs(n), dt, op, count, seed)
				}
			}
		}
		// The rooted and sharded collectives, on 3n float32 elements.
		dt, count := reduce.Float32, 3*n
		in := make([][]byte, n)
		for r := range n {
			in[r] = make([]byte, count*4)
			verify.Fill(dt, reduce.Sum, in[r], 99, r)
		}
		sum := make([]byte, count*4)
		verify.Expect(dt, reduce.Sum, sum, 99, n)
		out := make([][]byte, n)
		run := func(name string, f func(r int) error, want func(r int) []byte) {
			t.Helper()
			for r := range n {
				out[r] = nil
			}
			if err := errors.Join(onRanks(n, f)...); err != nil {
				t.Fatalf("%d ranks, %s: %v", n, name, err)
			}
			for r := range n {
				if w := want(r); w != nil && verify.Wrong(dt, out[r], w) != 0 {
					t.Errorf("%d ranks, %s: rank %d has %d wrong elements", n, name, r, verify.Wrong(dt, out[r], w))
				}
			}
		}
		root := n - 1
		run("broadcast", func(r int) error {
			out[r] = make([]byte, count*4)
			return ts[r].Broadcast(ctx, header(count, dt, 0, root), in[r], out[r])
		}, func(int) []byte { return in[root] })
		run("reduce", func(r int) error {
			out[r] = make([]byte, count*4)
			return ts[r].Reduce(ctx, header(count, dt, reduce.Sum, root), in[r], out[r])
		}, func(r int) []byte {
			if r == root {
				return sum
			}
			return nil
		})
		run("allgather", func(r int) error {
			out[r] = make([]byte, count*4)
			return ts[r].AllGather(ctx, header(count, dt, 0, -1), in[r][r*12:(r+1)*12], out[r])
		}, func(int) []byte {
			var w []byte
			for r := range n {
				w = append(w, in[r][r*12:(r+1)*12]...)
			}
			return w
		})
		run("reducescatter", func(r int) error {
			out[r] = make([]byte, 12)
			return ts[r].ReduceScatter(ctx, header(count, dt, reduce.Sum, -1), in[r], out[r])
		}, func(r int) []byte { return sum[r*12 : (r+1)*12] })
		if n > 1 {
			msg := []byte("from rank 0 to the last rank")
			run("send and recv", func(r int) error {
				switch r {
				case 0:
					return ts[0].Send(ctx, n-1, transport.Header{}, msg)
				case n - 1:
					out[r] = make([]byte, len(msg))
					return ts[r].Recv(ctx, 0, transport.Header{}, out[r])
				}
				return nil
			}, func(r int) []byte {
				if r == n-1 {
					return msg
				}
				return nil
			})
		}
		for _, tr := range ts {
			tr.Close()
		}
	}
	if live, twice := ctl.liveComms(), ctl.endedTwice(); live != 0 || twice != 0 {
		t.Errorf("%d communicators left live, %d ended twice", live, twice)
	}
}

// failRanks makes the ranks of ts but dead fail an all-reduce because dead
// closed its transport (its process died): NCCL reports the remote error
// when remote is set (a network), and otherwise the all-reduce hangs (as
// over NVLink) until its context ends.
func failRanks(t *testing.T, ctl fakeControl, ts []*Transport, dead int, remote bool) {
	t.Helper()
	if !remote {
		ctl.peerErrors(0)
		defer ctl.peerErrors(1)
	}
	ts[dead].Close()
	wait := 20 * time.Second
	if !remote {
		wait = 100 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for r, err := range onRanks(len(ts), func(r int) error {
		if r == dead {
			return nil
		}
		buf := make([]byte, 64)
		return ts[r].AllReduce(ctx, header(16, reduce.Float32, reduce.Sum, -1), buf, buf)
	}) {
		if r != dead && remote && !errors.Is(err, transport.ErrPeerGone) {
			t.Fatalf("rank %d, all-reduce beside a dead rank: %v, want an error wrapping transport.ErrPeerGone", r, err)
		}
		if r != dead && !remote && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("rank %d, all-reduce beside a dead rank: %v, want the deadline", r, err)
		}
	}
}

// TestFakeShrinkAfterDeath: rank 2 of 4 dies and the survivors' all-reduce
// hangs until its context ends (no remote error, as over NVLink); their
// communicators, kept (Config.KeepForShrink), shrink with ncclCommShrink
// and NCCL_SHRINK_ABORT into ranks 0-2 of 3 in their old order, with exact
// all-reduces after; closing the old ones aborts each once.
func TestFakeShrinkAfterDeath(t *testing.T) {
	a, ctl := loadFake(t)
	ts := connectRanks(t, a, 4, Config{KeepForShrink: true})
	checkAllReduce(t, ts, []int{0, 1, 2, 3}, reduce.Int64, reduce.Sum, 1001, 1)
	failRanks(t, ctl, ts, 2, false)
	survivors := []int{0, 1, 3}
	for _, r := range survivors {
		if ok, abort := ts[r].CanShrink(); !ok || !abort {
			t.Fatalf("rank %d after the failure: CanShrink %v, %v; want true, true (kept, with unfinished work)", r, ok, abort)
		}
	}
	// A failed all-reduce does not make the communicator usable again.
	if err := ts[0].AllReduce(context.Background(), header(1, reduce.Int64, reduce.Sum, -1), make([]byte, 8), make([]byte, 8)); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("all-reduce on a kept communicator: %v, want ErrClosed", err)
	}
	shrinksBefore, abortsBefore, destroysBefore := ctl.shrinks(), ctl.aborts(), ctl.destroys()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	store := newStore()
	next := make([]*Transport, len(survivors))
	err := errors.Join(onRanks(len(survivors), func(i int) (err error) {
		next[i], err = ts[survivors[i]].Shrink(ctx, store, []int{2}, true)
		return err
	})...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, tr := range next {
			tr.Close()
		}
	})
	if got := ctl.shrinks() - shrinksBefore; got != 3 {
		t.Errorf("%d ncclCommShrink calls succeeded, want 3", got)
	}
	var last [66]int32
	ctl.lastShrink(&last)
	if last[0] != ncclShrinkAbort || last[1] != 1 || last[2] != 2 {
		t.Errorf("ncclCommShrink got flags %d and excluded %v, want NCCL_SHRINK_ABORT and [2]", last[0], last[2:2+last[1]])
	}
	checkAllReduce(t, next, survivors, reduce.Int64, reduce.Sum, 1001, 2)
	// Messages too: the new Transport makes its own pair communicators.
	msg := []byte("after the shrink")
	got := make([]byte, len(msg))
	if err := errors.Join(onRanks(2, func(i int) error {
		if i == 0 {
			return next[0].Send(ctx, 2, transport.Header{}, msg)
		}
		return next[2].Recv(ctx, 0, transport.Header{}, got)
	})...); err != nil || string(got) != string(msg) {
		t.Errorf("message on the shrunk transport: %v, %q", err, got)
	}
	for _, r := range survivors {
		if err := ts[r].Close(); err != nil {
			t.Errorf("closing the old transport of rank %d: %v", r, err)
		}
	}
	if a, d := ctl.aborts()-abortsBefore, ctl.destroys()-destroysBefore; a != 3 || d != 0 {
		t.Errorf("closing the 3 old communicators: %d aborts and %d destroys, want 3 aborts (they had unfinished work)", a, d)
	}
}

// TestFakeShrinkAfterRemoteError: a peer's death that NCCL reports
// (ncclRemoteError) leaves an asynchronous error, with which NCCL refuses
// to shrink whatever the flag: CanShrink says so, and a Shrink tried
// anyway returns the error rather than hang.
func TestFakeShrinkAfterRemoteError(t *testing.T) {
	a, ctl := loadFake(t)
	ts := connectRanks(t, a, 3, Config{KeepForShrink: true})
	failRanks(t, ctl, ts, 0, true)
	if ok, abort := ts[1].CanShrink(); ok || !abort {
		t.Errorf("CanShrink after a remote error: %v, %v; want false, true", ok, abort)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, abort := range []bool{true, false} {
		_, err := ts[1].Shrink(ctx, newStore(), []int{0}, abort)
		var ce *CallError
		if !errors.As(err, &ce) || ce.Call != "ncclCommShrink" || !ce.Remote() {
			t.Errorf("Shrink (abort %v) after a remote error: %v, want ncclCommShrink's remote error", abort, err)
		}
	}
}

// TestFakeShrinkClean: a shrink of sound communicators (a rank left on
// purpose) passes NCCL_SHRINK_DEFAULT; NCCL_SHRINK_DEFAULT on one with
// unfinished work is refused by the fake, as NCCL warns it may deadlock.
func TestFakeShrinkClean(t *testing.T) {
	a, ctl := loadFake(t)
	ts := connectRanks(t, a, 3, Config{KeepForShrink: true})
	for r, tr := range ts {
		if ok, abort := tr.CanShrink(); !ok || abort {
			t.Fatalf("rank %d: CanShrink %v, %v; want true, false", r, ok, abort)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	store := newStore()
	next := make([]*Transport, 2)
	if err := errors.Join(onRanks(2, func(i int) (err error) {
		next[i], err = ts[i+1].Shrink(ctx, store, []int{0}, false)
		return err
	})...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { next[0].Close(); next[1].Close() })
	var last [66]int32
	ctl.lastShrink(&last)
	if last[0] != ncclShrinkDefault || last[1] != 1 || last[2] != 0 {
		t.Errorf("ncclCommShrink got flags %d, excluded %v; want NCCL_SHRINK_DEFAULT, [0]", last[0], last[2:2+last[1]])
	}
	checkAllReduce(t, next, rankIDs(2), reduce.Int32, reduce.Max, 17, 3)
	// Arguments checked before NCCL.
	for _, excl := range [][]int{nil, {1}, {5}} {
		if _, err := ts[1].Shrink(ctx, store, excl, false); err == nil {
			t.Errorf("rank 1 excluding %v: no error", excl)
		}
	}
	// Unfinished work and the default flag: the error, not a hang.
	short, scancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer scancel()
	ctl.setMode(fakeHangStream)
	if err := next[0].AllReduce(short, header(4, reduce.Uint8, reduce.Sum, -1), make([]byte, 4), make([]byte, 4)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stuck all-reduce: %v", err)
	}
	ctl.setMode(fakeOK)
	if _, err := next[0].Shrink(ctx, newStore(), []int{1}, false); err == nil || !strings.Contains(err.Error(), "ncclCommShrink") {
		t.Errorf("NCCL_SHRINK_DEFAULT with unfinished work: %v, want the fake's refusal", err)
	}
}

// TestFakeShrinkStuckPeer: a survivor that never comes to the shrink does
// not hang the others: ctx ends it by aborting the old communicator.
func TestFakeShrinkStuckPeer(t *testing.T) {
	a, ctl := loadFake(t)
	ts := connectRanks(t, a, 3, Config{KeepForShrink: true})
	before := ctl.aborts()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := ts[0].Shrink(ctx, newStore(), []int{2}, false) // rank 1 never comes
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, transport.ErrClosed) {
		t.Errorf("shrink without rank 1: %v, want the deadline and ErrClosed", err)
	}
	if got := ctl.aborts() - before; got != 1 {
		t.Errorf("%d aborts, want 1 (the old communicator)", got)
	}
	if ok, _ := ts[0].CanShrink(); ok {
		t.Error("CanShrink after the abort: true")
	}
}

// TestFakeGrow: two ranks grow to three with ncclCommGrow; the new rank
// joins with the coordinator's id; every element of an all-reduce over the
// three is exact; the old communicators close with ncclCommDestroy.
func TestFakeGrow(t *testing.T) {
	a, ctl := loadFake(t)
	ts := connectRanks(t, a, 2, Config{KeepForShrink: true})
	for r, tr := range ts {
		if !tr.CanGrow() {
			t.Fatalf("rank %d: CanGrow false", r)
		}
	}
	grows, ids := ctl.grows(), ctl.growIDs()
	id, err := ts[0].GrowID()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	store := newStore()
	next := make([]*Transport, 3)
	err = errors.Join(onRanks(3, func(r int) (err error) {
		switch r {
		case 0:
			next[0], err = ts[0].Grow(ctx, store, 3, &id)
		case 1:
			next[1], err = ts[1].Grow(ctx, store, 3, nil)
		case 2:
			if next[2], err = newWith(Config{Rank: 2, Size: 3}, a); err == nil {
				err = next[2].ConnectGrow(ctx, store, id)
			}
		}
		return err
	})...)
	t.Cleanup(func() {
		for _, tr := range next {
			if tr != nil {
				tr.Close()
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if g, i := ctl.grows()-grows, ctl.growIDs()-ids; g != 3 || i != 1 {
		t.Errorf("%d ncclCommGrow and %d ncclCommGetUniqueId calls succeeded, want 3 and 1", g, i)
	}
	checkAllReduce(t, next, rankIDs(3), reduce.Int64, reduce.Sum, 513, 4)
	destroys := ctl.destroys()
	ts[0].Close()
	ts[1].Close()
	if d := ctl.destroys() - destroys; d != 2 {
		t.Errorf("closing the old communicators destroyed %d, want 2", d)
	}
	// The joiner's rank must be past the old ones.
	bad, err := newWith(Config{Rank: 1, Size: 3}, a)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	short, scancel := context.WithTimeout(ctx, time.Second)
	defer scancel()
	if err := bad.ConnectGrow(short, newStore(), id); err == nil {
		t.Error("joining as rank 1 of a grow from 2 ranks (with a used id): no error")
	}
}

// TestFakeFail: Fail keeps the communicator for Shrink only where it can
// shrink; elsewhere it closes the Transport. Later calls fail with the
// reason.
func TestFakeFail(t *testing.T) {
	a, ctl := loadFake(t)
	kept := connectRanks(t, a, 1, Config{KeepForShrink: true})[0]
	destroys := ctl.destroys()
	if !kept.Fail("rank 5 died") {
		t.Error("Fail with KeepForShrink: not kept")
	}
	err := kept.AllReduce(context.Background(), header(1, reduce.Uint8, reduce.Sum, -1), []byte{1}, []byte{0})
	if !errors.Is(err, transport.ErrClosed) || !strings.Contains(err.Error(), "rank 5 died") {
		t.Errorf("all-reduce after Fail: %v, want ErrClosed and the reason", err)
	}
	if ok, abort := kept.CanShrink(); !ok || abort {
		t.Errorf("CanShrink after Fail: %v, %v; want true, false (nothing was left running)", ok, abort)
	}
	if kept.CanGrow() {
		t.Error("CanGrow after Fail: true")
	}
	kept.Close()
	if d := ctl.destroys() - destroys; d != 1 {
		t.Errorf("Close after Fail destroyed %d communicators, want 1", d)
	}
	plain := connectRanks(t, a, 1, Config{})[0]
	if plain.Fail("no reason") {
		t.Error("Fail without KeepForShrink: kept")
	}
	if ok, _ := plain.CanShrink(); ok {
		t.Error("CanShrink after Fail closed the Transport: true")
	}
}

// TestFakeWithoutShrinkGrow: an NCCL without ncclCommShrink and
// ncclCommGrow (before 2.27) loads, says it cannot shrink or grow, and
// Fail closes the Transport, so that collkit makes the next communicator
// anew.
func TestFakeWithoutShrinkGrow(t *testing.T) {
	a, ctl := oldFake.load(t)
	if a.ncclCommShrink != nil || a.ncclCommGrow != nil || a.ncclCommGetUniqueId != nil {
		t.Fatal("the old fake's shrink or grow was bound")
	}
	ts := connectRanks(t, a, 2, Config{KeepForShrink: true})
	if ok, _ := ts[0].CanShrink(); ok || ts[0].CanGrow() {
		t.Errorf("CanShrink %v, CanGrow %v; want false", ok, ts[0].CanGrow())
	}
	if _, err := ts[0].Shrink(context.Background(), newStore(), []int{1}, false); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Shrink: %v, want ErrUnsupported", err)
	}
	if _, err := ts[0].GrowID(); !errors.Is(err, ErrUnsupported) {
		t.Errorf("GrowID: %v, want ErrUnsupported", err)
	}
	destroys := ctl.destroys()
	if ts[0].Fail("gone") {
		t.Error("Fail kept a communicator that cannot shrink")
	}
	if d := ctl.destroys() - destroys; d != 1 {
		t.Errorf("Fail destroyed %d communicators, want 1 (it closes the Transport)", d)
	}
	checkOld := connectRanks(t, a, 3, Config{})
	checkAllReduce(t, checkOld, rankIDs(3), reduce.Float64, reduce.Avg, 31, 5)
}
