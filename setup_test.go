package collkit

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/collkit/collkit/bootstrap"
)

// setupRank is one in-process rank of a setup test: its own Env, its own
// Connect, the real TCP store on loopback.
type setupRank struct {
	env  bootstrap.Env
	opts Options
	comm *Comm
	err  error
	took time.Duration
}

// connectAll runs Connect for every rank at once, with a context that has
// no deadline (so Options.SetupTimeout applies), and waits for all.
// Communicators that connect are closed at the end of the test.
func connectAll(t *testing.T, ranks []*setupRank) {
	t.Helper()
	var wg sync.WaitGroup
	for _, r := range ranks {
		wg.Go(func() {
			start := time.Now()
			r.comm, r.err = Connect(context.Background(), r.env, r.opts)
			r.took = time.Since(start)
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, r := range slices.Backward(ranks) { // rank 0, which hosts the store, last
			if r.comm != nil {
				r.comm.Close()
			}
		}
	})
}

func setupPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// torchEnv is rank of a job of size started torchrun-style on port.
func torchEnv(port, rank, size int) bootstrap.Env {
	return bootstrap.Env{Rank: rank, Size: size, MasterAddr: "127.0.0.1", MasterPort: port, JobID: "default", Source: "pytorch"}
}

// assertEveryRank checks that every rank failed with want, saying every
// one of says, within limit.
func assertEveryRank(t *testing.T, ranks []*setupRank, want error, limit time.Duration, says ...string) {
	t.Helper()
	for i, r := range ranks {
		if !errors.Is(r.err, want) {
			t.Errorf("process %d (rank %d): err = %v, want %v", i, r.env.Rank, r.err, want)
			continue
		}
		for _, s := range says {
			if !strings.Contains(r.err.Error(), s) {
				t.Errorf("process %d (rank %d): error %q does not say %q", i, r.env.Rank, r.err, s)
			}
		}
		if r.took > limit {
			t.Errorf("process %d (rank %d) got its error after %v, want within %v", i, r.env.Rank, r.took, limit)
		}
	}
}

// With a rank missing, every rank that came logs the missing rank while it
// waits and fails when its SetupTimeout passes (or when rank 0 gives up),
// naming the missing rank, the store and the setup timeout.
func TestSetupMissingRankNamedOnEveryRank(t *testing.T) {
	setupProgress = 50 * time.Millisecond
	defer func() { setupProgress = 0 }()
	port := setupPort(t)
	logs := &lockedLog{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ranks := []*setupRank{
		{env: torchEnv(port, 0, 3), opts: Options{SetupTimeout: time.Second, Logger: log}},
		{env: torchEnv(port, 2, 3), opts: Options{SetupTimeout: 2 * time.Second, Logger: log}},
	}
	connectAll(t, ranks)
	store := "127.0.0.1:" + strconv.Itoa(port)
	assertEveryRank(t, ranks, bootstrap.ErrMissingRanks, 5*time.Second, "rank 1 of 3", store, "Options.SetupTimeout of 1s")
	out := logs.String()
	for _, rank := range []string{"rank=0", "rank=2"} {
		found := false
		for line := range strings.Lines(out) {
			if strings.Contains(line, "level=INFO") && strings.Contains(line, "waiting for ranks to join the store") &&
				strings.Contains(line, rank) && strings.Contains(line, `missing="rank 1 of 3"`) && strings.Contains(line, "store="+store) {
				found = true
			}
		}
		if !found {
			t.Errorf("no INFO progress line from %s naming rank 1 and the store:\n%s", rank, out)
		}
	}
}

// Ranks started with different world sizes all fail at once, and each
// error names both sizes.
func TestSetupWorldSizeMismatchFailsEveryRank(t *testing.T) {
	port := setupPort(t)
	ranks := []*setupRank{
		{env: torchEnv(port, 0, 2), opts: Options{SetupTimeout: time.Minute}},
		{env: torchEnv(port, 1, 3), opts: Options{SetupTimeout: time.Minute}},
	}
	connectAll(t, ranks)
	assertEveryRank(t, ranks, bootstrap.ErrSizeMismatch, 10*time.Second,
		"says WORLD_SIZE=3", "says WORLD_SIZE=2", "every rank must be started with the same world size")
}

// Two jobs without a job id or secret started on one MASTER_PORT while a
// rank of the store's job is still missing: one rank 0 holds the port and
// the other is told it is taken; the two rank 1s collide, and every
// process of the job they meet in fails at once, naming both claimants.
func TestSetupTwoJobsOnOnePortFail(t *testing.T) {
	port := setupPort(t)
	opts := Options{SetupTimeout: 20 * time.Second}
	ranks := []*setupRank{
		{env: torchEnv(port, 0, 3), opts: opts}, // job A
		{env: torchEnv(port, 1, 3), opts: opts},
		{env: torchEnv(port, 0, 3), opts: opts}, // job B
		{env: torchEnv(port, 1, 3), opts: opts},
	}
	connectAll(t, ranks)
	// One rank 0 hosts the store. The other finds the port taken or, when
	// it comes after that store was stopped by the duplicate claim and
	// closed, hosts a store of its own that nobody joins, and says so at
	// its setup timeout.
	var other, met []*setupRank
	for _, r := range ranks {
		if r.env.Rank == 0 && (errors.Is(r.err, syscall.EADDRINUSE) || errors.Is(r.err, bootstrap.ErrMissingRanks)) {
			other = append(other, r)
		} else {
			met = append(met, r)
		}
	}
	if len(other) != 1 || !strings.Contains(other[0].err.Error(), "MASTER_PORT") {
		t.Fatalf("want one rank 0 told that the port is taken, or that no rank joined it; errors: %v, %v, %v, %v",
			ranks[0].err, ranks[1].err, ranks[2].err, ranks[3].err)
	}
	assertEveryRank(t, met, bootstrap.ErrDuplicateRank, 10*time.Second,
		"rank 1 was claimed twice", "pid", "MASTER_PORT", "COLLKIT_JOB_ID")
}

// Jobs with their own job ids are kept apart: a rank of another job is
// turned away at once, and the store's job runs.
func TestSetupAnotherJobTurnedAway(t *testing.T) {
	port := setupPort(t)
	opts := Options{SetupTimeout: time.Minute, Timeout: 20 * time.Second, IntraNode: "group"}
	job := func(rank int, id string) *setupRank {
		env := torchEnv(port, rank, 2)
		env.JobID, env.JobIDVar = id, "COLLKIT_JOB_ID"
		return &setupRank{env: env, opts: opts}
	}
	a0, a1, b1 := job(0, "a"), job(1, "a"), job(1, "b")
	done := make(chan struct{})
	go func() {
		defer close(done)
		a0.comm, a0.err = Connect(context.Background(), a0.env, a0.opts)
	}()
	t.Cleanup(func() {
		<-done
		if a0.comm != nil {
			a0.comm.Close()
		}
	})
	connectAll(t, []*setupRank{b1}) // the stranger comes first
	assertEveryRank(t, []*setupRank{b1}, bootstrap.ErrJobMismatch, 10*time.Second,
		`job "a"`, `job "b" (from COLLKIT_JOB_ID)`, "MASTER_PORT")
	connectAll(t, []*setupRank{a1}) // its Close comes before a0's, which hosts the store
	<-done
	for _, r := range []*setupRank{a0, a1} {
		if r.err != nil {
			t.Fatalf("rank %d of job a: %v", r.env.Rank, r.err)
		}
	}
	errs := onEvery([]*Comm{a0.comm, a1.comm}, func(r int, c *Comm) error {
		buf := []float32{float32(r + 1)}
		if err := AllReduce(context.Background(), c, buf, buf, Sum); err != nil {
			return err
		}
		if buf[0] != 3 {
			t.Errorf("rank %d: all-reduce gave %v, want 3", r, buf[0])
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d of job a: %v", r, err)
		}
	}
}

// A failed communicator's Close does not wait the store's full shutdown
// grace for a peer that is stuck (here: never calls the collective and
// never closes).
func TestFailedCommCloseIsBounded(t *testing.T) {
	port := setupPort(t)
	opts := Options{SetupTimeout: time.Minute, Timeout: 300 * time.Millisecond, IntraNode: "group"}
	ranks := []*setupRank{{env: torchEnv(port, 0, 2), opts: opts}, {env: torchEnv(port, 1, 2), opts: opts}}
	connectAll(t, ranks)
	for _, r := range ranks {
		if r.err != nil {
			t.Fatalf("rank %d: %v", r.env.Rank, r.err)
		}
	}
	buf := make([]float32, 4)
	if err := AllReduce(context.Background(), ranks[0].comm, buf, buf, Sum); err == nil {
		t.Fatal("an all-reduce without its peer succeeded")
	}
	start := time.Now()
	ranks[0].comm.Close()
	if took := time.Since(start); took > bootstrap.ShutdownGrace/2 {
		t.Fatalf("rank 0's Close after a failure took %v; it waits for a stuck peer (grace %v)", took, bootstrap.ShutdownGrace)
	}
}

func TestSetupContext(t *testing.T) {
	ctx, cancel := setupContext(context.Background(), Options{})
	defer cancel()
	if d, ok := ctx.Deadline(); !ok || time.Until(d) < DefaultSetupTimeout-time.Minute {
		t.Errorf("zero SetupTimeout: deadline %v, want about %v from now", d, DefaultSetupTimeout)
	}
	if ctx, _ := setupContext(context.Background(), Options{SetupTimeout: -1}); ctx.Done() != nil {
		t.Error("negative SetupTimeout: the setup has a deadline")
	}
	parent, pcancel := context.WithTimeout(context.Background(), time.Hour)
	defer pcancel()
	if ctx, _ := setupContext(parent, Options{SetupTimeout: time.Second}); ctx != parent {
		t.Error("a context with its own deadline was bounded by SetupTimeout")
	}
}
