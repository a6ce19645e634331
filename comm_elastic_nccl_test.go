package collkit

import (
	"os"
	"testing"

	"github.com/ebitengine/purego"

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
	setDevices                                                         func(int32)
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
func (d fakeCounts) ended(t *testing.T) {
	t.Helper()
	if made := d.inits + d.shrinks + d.grows; d.aborts+d.destroys != made || d.live != 0 || d.endedTwice != 0 {
		t.Errorf("%d communicators made (%+v), %d aborted and %d destroyed, %d still live, %d ended twice; want each ended once",
			made, d, d.aborts, d.destroys, d.live, d.endedTwice)
	}
}

// elasticNCCL runs the cases in the child process, on the fake at so.
func elasticNCCL(t *testing.T, full bool, so string) {
	fc := openFakeCounter(t, so)
	fc.setDevices(8) // the hybrid's simulated nodes put their ranks on GPUs 0, 1, ...
	// Over --transport nccl: rank 2 dies in the fourth all-reduce; the
	// others shrink and go on with exact results. The old communicators are
	// aborted and new ones made through the store.
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
	// The hybrid (TCP between simulated nodes, NCCL inside them): the
	// node communicators are made anew over the new layout.
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
