package collkit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ebitengine/purego"
	"go.uber.org/goleak"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/transport/nccl"
)

// Elastic communicators over NCCL, against the fake library of
// transport/nccl's tests, which runs any number of ranks in this process.
// NCCL loads once per process, so each case runs this test binary again
// with the fake built two ways:
//
//   - "full": it exports ncclCommShrink, ncclCommGetUniqueId and
//     ncclCommGrow (NCCL 2.27 and 2.29);
//   - "old": it does not (-DFAKE_NO_SHRINK_GROW), as NCCL before 2.27.
//
// The fake counts what collkit made it do, so each case checks which way
// the next generation was made as well as every element after it.

const elasticNCCLVar = "COLLKIT_ELASTIC_NCCL_CHILD"

func TestElasticNCCLFake(t *testing.T) {
	switch v := os.Getenv(elasticNCCLVar); v {
	case "full", "old":
		elasticNCCL(t, v == "full", os.Getenv(nccl.EnvNCCLLib))
		return
	case "":
	default:
		t.Skip("a child of another case")
	}
	for _, variant := range []struct {
		name  string
		flags []string
	}{{"full", nil}, {"old", []string{"-DFAKE_NO_SHRINK_GROW"}}} {
		t.Run(variant.name, func(t *testing.T) {
			so := buildFakeNCCL(t, variant.flags...)
			out := runChild(t, "TestElasticNCCLFake", elasticNCCLVar+"="+variant.name, nccl.EnvNCCLLib+"="+so, nccl.EnvCUDALib+"="+so)
			if testing.Verbose() {
				t.Log(out)
			}
		})
	}
}

// fakeCounts is what the fake library counted.
type fakeCounts struct {
	inits, shrinks, grows, growIDs, aborts, destroys, live, endedTwice int32
}

// fakeCounter reads the fake library's counters.
type fakeCounter struct {
	inits, shrinks, grows, growIDs, aborts, destroys, live, endedTwice func() int32
	lastShrink                                                         func(*[66]int32)
	setDevices, peerErrors, setMode                                    func(int32)
}

func openFakeCounter(t *testing.T, so string) *fakeCounter {
	t.Helper()
	h, err := purego.Dlopen(so, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeCounter{}
	for name, fn := range map[string]*func() int32{
		"fake_inits": &f.inits, "fake_shrinks": &f.shrinks, "fake_grows": &f.grows, "fake_grow_ids": &f.growIDs,
		"fake_aborts": &f.aborts, "fake_destroys": &f.destroys, "fake_live_comms": &f.live, "fake_ended_twice": &f.endedTwice,
	} {
		purego.RegisterLibFunc(fn, h, name)
	}
	purego.RegisterLibFunc(&f.lastShrink, h, "fake_last_shrink")
	purego.RegisterLibFunc(&f.setDevices, h, "fake_set_devices")
	purego.RegisterLibFunc(&f.peerErrors, h, "fake_set_peer_errors")
	purego.RegisterLibFunc(&f.setMode, h, "fake_set_mode")
	return f
}

func (f *fakeCounter) now() fakeCounts {
	return fakeCounts{f.inits(), f.shrinks(), f.grows(), f.growIDs(), f.aborts(), f.destroys(), f.live(), f.endedTwice()}
}

func (a fakeCounts) minus(b fakeCounts) fakeCounts {
	return fakeCounts{a.inits - b.inits, a.shrinks - b.shrinks, a.grows - b.grows, a.growIDs - b.growIDs,
		a.aborts - b.aborts, a.destroys - b.destroys, a.live - b.live, a.endedTwice - b.endedTwice}
}

// ended checks that every NCCL communicator the fake made during d was
// ended (ncclCommDestroy or ncclCommAbort) exactly once.
// shrankOrMade checks how a 4-rank job shrank to 3: with the full fake,
// 3 ncclCommShrink with flags excluding rank out and no communicator made
// anew; without it, the 3 survivors' made anew.
func (d fakeCounts) shrankOrMade(t *testing.T, fc *fakeCounter, full bool, flags, out int32) {
	t.Helper()
	if !full {
		if d.shrinks != 0 || d.inits != 4+3 {
			t.Errorf("%d ncclCommShrink and %d ncclCommInitRank, want 0 and 7 (3 survivors made anew)", d.shrinks, d.inits)
		}
		return
	}
	var last [66]int32
	fc.lastShrink(&last)
	if d.shrinks != 3 || d.inits != 4 || last[0] != flags || last[1] != 1 || last[2] != out {
		t.Errorf("%d ncclCommShrink (flags %d, excluded %v) and %d ncclCommInitRank; want 3 with flags %d excluding [%d], and 4",
			d.shrinks, last[0], last[2:2+last[1]], d.inits, flags, out)
	}
}

func (d fakeCounts) ended(t *testing.T) {
	t.Helper()
	if made := d.inits + d.shrinks + d.grows; d.aborts+d.destroys != made || d.live != 0 || d.endedTwice != 0 {
		t.Errorf("%d communicators made (%+v), %d aborted and %d destroyed, %d still live, %d ended twice; want each ended once",
			made, d, d.aborts, d.destroys, d.live, d.endedTwice)
	}
}

// elasticNCCL runs the cases in the child process, on the fake at so,
// which has ncclCommShrink and ncclCommGrow when full.
func elasticNCCL(t *testing.T, full bool, so string) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	fc := openFakeCounter(t, so)
	fc.setDevices(8) // the hybrid's simulated nodes put their ranks on GPUs 0, 1, ...
	// Over --transport nccl, rank 2 of 4 dies in the fourth all-reduce and
	// NCCL reports it (ncclRemoteError, as over a network); the others
	// shrink and go on with exact results. NCCL refuses to shrink a
	// communicator with an asynchronous error, so on either build the old
	// communicators are aborted and new ones made through the store.
	t.Run("shrink/nccl", func(t *testing.T) {
		before := fc.now()
		s := trialSpec{n: 4, transport: "nccl", algo: "ring", victim: 2, at: 3, second: -1, elems: 1001}
		if err := elasticTrial(t, s); err != nil {
			t.Fatal(err)
		}
		d := fc.now().minus(before)
		t.Logf("counts: %+v", d)
		if d.shrinks != 0 || d.inits != 4+3 {
			t.Errorf("%d ncclCommShrink and %d ncclCommInitRank, want 0 and 7 (3 survivors made anew)", d.shrinks, d.inits)
		}
		d.ended(t)
	})
	// The same death unreported (the survivors' all-reduce hangs, as over
	// NVLink, until Options.Timeout): with ncclCommShrink their
	// communicators, kept after the failed all-reduce with work left
	// unfinished, shrink with NCCL_SHRINK_ABORT excluding rank 2; without
	// it they are aborted and made anew.
	t.Run("shrink/nccl-hang", func(t *testing.T) {
		fc.peerErrors(0)
		defer fc.peerErrors(1)
		before := fc.now()
		_, cs := elasticJob(t, 4, Options{Transport: "nccl", Timeout: 300 * time.Millisecond, ElasticWait: 2 * time.Second})
		runSteps(t, cs, []int{0, 1, 2, 3}, 2)
		kill(cs[2])
		survivors := []*Comm{cs[0], cs[1], cs[3]}
		for r, err := range onEvery(survivors, func(_ int, c *Comm) error {
			return checkStep(context.Background(), c, c.ID(), 2, 64) // no deadline: Options.Timeout ends it
		}) {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("survivor %d beside a dead rank that NCCL does not report: %v, want the timeout", r, err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		next := make([]*Comm, 3)
		if err := errors.Join(onEvery(survivors, func(i int, c *Comm) (err error) {
			next[i], err = c.Shrink(ctx)
			return err
		})...); err != nil {
			t.Fatal(err)
		}
		runSteps(t, next, []int{0, 1, 3}, 3)
		for _, c := range append(next, cs[2]) {
			c.Close()
		}
		d := fc.now().minus(before)
		t.Logf("counts: %+v", d)
		d.shrankOrMade(t, fc, full, 1, 2) // NCCL_SHRINK_ABORT
		d.ended(t)
	})
	// Every survivor's ncclCommShrink fails at once (the fake's mode 5): no
	// member died, but the next round makes the communicator anew rather
	// than give up, since it does not try NCCL's shrink.
	t.Run("shrink/nccl-refused", func(t *testing.T) {
		if !full {
			t.Skip("the fake without ncclCommShrink never tries it")
		}
		fc.peerErrors(0)
		fc.setMode(5)
		defer fc.peerErrors(1)
		defer fc.setMode(0)
		before := fc.now()
		_, cs := elasticJob(t, 3, Options{Transport: "nccl", Timeout: 300 * time.Millisecond, ElasticWait: time.Second})
		kill(cs[0])
		survivors := cs[1:]
		onEvery(survivors, func(_ int, c *Comm) error { return checkStep(context.Background(), c, c.ID(), 0, 8) })
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		next := make([]*Comm, 2)
		if err := errors.Join(onEvery(survivors, func(i int, c *Comm) (err error) {
			next[i], err = c.Shrink(ctx)
			return err
		})...); err != nil {
			t.Fatal(err)
		}
		runSteps(t, next, []int{1, 2}, 2)
		for _, c := range append(next, cs[0]) {
			c.Close()
		}
		d := fc.now().minus(before)
		t.Logf("counts: %+v", d)
		if d.shrinks != 0 || d.inits != 3+2 || next[0].Generation() != 2 {
			t.Errorf("%d ncclCommShrink, %d ncclCommInitRank, generation %d; want 0, 5 and 2 (a second round made it anew)", d.shrinks, d.inits, next[0].Generation())
		}
		d.ended(t)
	})
	// A second rank dies during the shrink, before, in or after
	// ncclCommShrink, both deaths reported by NCCL or not: the survivors
	// never hang (a shrink waiting for the dead rank is ended by aborting the
	// old communicator within ElasticWait), every element after is exact,
	// and the next round makes the communicator anew if this one failed.
	for _, c := range []struct {
		reported bool
		after    time.Duration
	}{{true, 300 * time.Microsecond}, {false, 0}, {false, 2 * time.Millisecond}} {
		t.Run(fmt.Sprintf("shrink/nccl-second-dies-after-%v-reported-%v", c.after, c.reported), func(t *testing.T) {
			if !c.reported {
				fc.peerErrors(0)
				defer fc.peerErrors(1)
			}
			before := fc.now()
			s := trialSpec{n: 5, transport: "nccl", algo: "ring", victim: 1, at: 2, second: 3, secondAfter: c.after, elems: 257,
				unbounded: !c.reported, tmo: 300 * time.Millisecond}
			if err := elasticTrial(t, s); err != nil {
				t.Fatal(err)
			}
			d := fc.now().minus(before)
			t.Logf("counts: %+v", d)
			d.ended(t)
		})
	}
	// A revoke and a rank too slow to come: the others shrink without it.
	// Nothing failed in NCCL, so the flag is NCCL_SHRINK_DEFAULT.
	t.Run("shrink/late", func(t *testing.T) {
		before := fc.now()
		opts := Options{Transport: "nccl", ElasticWait: 300 * time.Millisecond}
		_, cs := elasticJob(t, 4, opts)
		cs[1].Revoke("a bad batch")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		next := make([]*Comm, 3)
		errs := onEvery(cs[:3], func(r int, c *Comm) (err error) {
			next[r], err = c.Shrink(ctx)
			return err
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		_, lateErr := cs[3].Shrink(ctx)
		if !errors.Is(lateErr, ErrExcluded) {
			t.Errorf("the late rank: %v, want ErrExcluded", lateErr)
		}
		runSteps(t, next, []int{0, 1, 2}, 3)
		for _, c := range append(next, cs[3]) {
			c.Close()
		}
		d := fc.now().minus(before)
		t.Logf("counts: %+v", d)
		d.shrankOrMade(t, fc, full, 0, 3) // NCCL_SHRINK_DEFAULT
		d.ended(t)
	})
	// A revoke with every rank alive: the same members again, which
	// ncclCommShrink cannot express (it excludes at least one rank), so
	// the communicators are made anew on either build.
	t.Run("shrink/same", func(t *testing.T) {
		before := fc.now()
		_, cs := elasticJob(t, 3, Options{Transport: "nccl", ElasticWait: 5 * time.Second})
		cs[0].Revoke("start over")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		next := make([]*Comm, 3)
		if err := errors.Join(onEvery(cs, func(r int, c *Comm) (err error) {
			next[r], err = c.Shrink(ctx)
			return err
		})...); err != nil {
			t.Fatal(err)
		}
		runSteps(t, next, []int{0, 1, 2}, 2)
		for _, c := range next {
			c.Close()
		}
		d := fc.now().minus(before)
		if d.shrinks != 0 || d.inits != 3+3 {
			t.Errorf("%d ncclCommShrink and %d ncclCommInitRank, want 0 and 6", d.shrinks, d.inits)
		}
		d.ended(t)
	})
	// A process joins three: with ncclCommGrow the three grow their
	// communicator and the joiner joins it with rank 0's grow id as rank 3;
	// without it all four make one anew.
	t.Run("grow/nccl", func(t *testing.T) {
		before := fc.now()
		opts := Options{Transport: "nccl", ElasticWait: 5 * time.Second}
		store, cs := elasticJob(t, 3, opts)
		runSteps(t, cs, []int{0, 1, 2}, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var joined *Comm
		var joinErr error
		var jw sync.WaitGroup
		jw.Go(func() { joined, joinErr = JoinStore(ctx, bootstrap.Env{JobID: "elastic"}, store, opts) })
		next := make([]*Comm, 3)
		errs := onEvery(cs, func(r int, c *Comm) error {
			for {
				n, err := c.JoinersWaiting(ctx)
				if err != nil || n > 0 {
					if err == nil {
						next[r], err = c.Grow(ctx)
					}
					return err
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
		jw.Wait()
		if err := errors.Join(append(errs, joinErr)...); err != nil {
			t.Fatal(err)
		}
		all := append(next, joined)
		for i, c := range all {
			if c.Size() != 4 || c.Rank() != i || c.Generation() != 1 {
				t.Fatalf("communicator %d: rank %d of %d, generation %d; want rank %d of 4, generation 1", i, c.Rank(), c.Size(), c.Generation(), i)
			}
		}
		runSteps(t, all, []int{0, 1, 2, joined.ID()}, 3)
		for _, c := range all {
			c.Close()
		}
		d := fc.now().minus(before)
		t.Logf("counts: %+v", d)
		if full && (d.grows != 4 || d.growIDs != 1 || d.inits != 3) {
			t.Errorf("%d ncclCommGrow, %d ncclCommGetUniqueId, %d ncclCommInitRank; want 4, 1 and 3", d.grows, d.growIDs, d.inits)
		}
		if !full && (d.grows != 0 || d.inits != 3+4) {
			t.Errorf("%d ncclCommGrow and %d ncclCommInitRank, want 0 and 7", d.grows, d.inits)
		}
		d.ended(t)
	})
	// The hybrid (TCP between simulated nodes, NCCL inside them): the
	// node communicators are made anew over the new layout on either build.
	t.Run("shrink/hybrid", func(t *testing.T) {
		before := fc.now()
		s := trialSpec{n: 4, transport: "tcp", algo: "hierarchical", intra: "nccl", victim: 1, at: 2, second: -1, elems: 1001}
		if err := elasticTrial(t, s); err != nil {
			t.Fatal(err)
		}
		d := fc.now().minus(before)
		t.Logf("counts: %+v", d)
		if d.shrinks != 0 || d.inits != 4+3 {
			t.Errorf("%d ncclCommShrink and %d ncclCommInitRank, want 0 and 7 (two nodes of 2, then of 2 and 1)", d.shrinks, d.inits)
		}
		d.ended(t)
	})
}
