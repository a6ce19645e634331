package bootstrap

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// rdzv is one in-process participant of a rendezvous test.
type rdzv struct {
	env  Env
	cfg  RendezvousConfig
	ctx  time.Duration // its setup timeout
	err  error
	took time.Duration
	cl   *Closer
	s    Store
}

// rendezvousAll runs every participant's Rendezvous at once, each on its own
// goroutine, and returns when all have returned. Participants that
// succeed are closed at the end of the test.
func rendezvousAll(t *testing.T, ps []*rdzv) {
	t.Helper()
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), p.ctx)
			defer cancel()
			start := time.Now()
			p.s, p.cl, p.err = RendezvousWith(ctx, p.env, p.cfg)
			p.took = time.Since(start)
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, p := range slices.Backward(ps) { // rank 0, which hosts the store, last
			if p.cl != nil {
				p.cl.Abort(errors.New("test over"))
			}
		}
	})
}

func jobEnv(port, rank, size int, job string) Env {
	return Env{Rank: rank, Size: size, MasterAddr: "127.0.0.1", MasterPort: port, JobID: job, Source: "pytorch"}
}

// Ranks started with different world sizes fail at once, every one of
// them, with an error that names both sizes.
func TestRendezvousSizeMismatchFailsEveryRank(t *testing.T) {
	port := freePort(t)
	ps := []*rdzv{
		{env: jobEnv(port, 0, 2, "j"), ctx: 20 * time.Second},
		{env: jobEnv(port, 1, 3, "j"), ctx: 20 * time.Second},
	}
	rendezvousAll(t, ps)
	for _, p := range ps {
		if !errors.Is(p.err, ErrSizeMismatch) {
			t.Errorf("rank %d (WORLD_SIZE=%d): err = %v, want ErrSizeMismatch", p.env.Rank, p.env.Size, p.err)
			continue
		}
		for _, want := range []string{"WORLD_SIZE=2", "WORLD_SIZE=3", "same world size", "127.0.0.1:"} {
			if !strings.Contains(p.err.Error(), want) {
				t.Errorf("rank %d: error %q does not say %q", p.env.Rank, p.err, want)
			}
		}
		if p.took > 10*time.Second {
			t.Errorf("rank %d failed after %v: the mismatch should be found at once, not after a timeout", p.env.Rank, p.took)
		}
	}
}

// Two processes that claim one rank stop the rendezvous: every rank, both
// claimants included, learns of it and of both claimants.
func TestRendezvousDuplicateRankFailsEveryRank(t *testing.T) {
	port := freePort(t)
	// Rank 2 never comes, so only the duplicate can end the rendezvous.
	ps := []*rdzv{
		{env: jobEnv(port, 0, 3, "default"), ctx: 20 * time.Second},
		{env: jobEnv(port, 1, 3, "default"), ctx: 20 * time.Second},
		{env: jobEnv(port, 1, 3, "default"), ctx: 20 * time.Second},
	}
	rendezvousAll(t, ps)
	for i, p := range ps {
		if !errors.Is(p.err, ErrDuplicateRank) {
			t.Errorf("participant %d (rank %d): err = %v, want ErrDuplicateRank", i, p.env.Rank, p.err)
			continue
		}
		for _, want := range []string{"rank 1 was claimed twice", "pid", "MASTER_PORT", "COLLKIT_JOB_ID", "COLLKIT_SECRET"} {
			if !strings.Contains(p.err.Error(), want) {
				t.Errorf("participant %d: error %q does not say %q", i, p.err, want)
			}
		}
		if p.took > 10*time.Second {
			t.Errorf("participant %d failed after %v, want at once", i, p.took)
		}
	}
}

// A claim that comes after every rank joined is refused, and it stops the
// rendezvous for the ranks still using the store (their setup is not
// over), so a job that a stranger completed does not pass unnoticed.
func TestLateDuplicateStopsRanksStillInSetup(t *testing.T) {
	port := freePort(t)
	ps := []*rdzv{
		{env: jobEnv(port, 0, 2, "default"), ctx: 20 * time.Second},
		{env: jobEnv(port, 1, 2, "default"), ctx: 20 * time.Second},
	}
	rendezvousAll(t, ps)
	for _, p := range ps {
		if p.err != nil {
			t.Fatalf("rank %d: %v", p.env.Rank, p.err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Rank 0 is still setting up: it waits for a key rank 1 has not set.
	got := make(chan error, 1)
	go func() {
		_, err := ps[0].s.Get(ctx, "tcp/addr/1")
		got <- err
	}()
	_, _, err := RendezvousWith(ctx, jobEnv(port, 1, 2, "default"), RendezvousConfig{})
	if !errors.Is(err, ErrDuplicateRank) || !strings.Contains(err.Error(), "rank 1 was claimed twice") {
		t.Fatalf("late claimant: err = %v, want ErrDuplicateRank naming rank 1", err)
	}
	if err := <-got; !errors.Is(err, ErrDuplicateRank) {
		t.Fatalf("rank 0's Get during setup = %v, want ErrDuplicateRank", err)
	}
	if err := ps[1].s.Set(ctx, "tcp/addr/1", []byte("x")); !errors.Is(err, ErrDuplicateRank) {
		t.Fatalf("rank 1's Set after the duplicate = %v, want ErrDuplicateRank", err)
	}
	// Rank 0, which hosts the store, says so when it closes it, for the
	// ranks that were past their setup and never heard.
	ps[1].cl.Close()
	if err := ps[0].cl.Close(); !errors.Is(err, ErrDuplicateRank) || !strings.Contains(err.Error(), "after every rank had joined") {
		t.Fatalf("rank 0's Close = %v, want the late duplicate", err)
	}
}

// A process of another job is turned away at once; the job's own ranks go
// on and finish their rendezvous, and name the stranger while they wait.
func TestRendezvousTurnsAwayAnotherJob(t *testing.T) {
	port := freePort(t)
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type result struct {
		cl  *Closer
		err error
	}
	rank0 := make(chan result, 1)
	go func() {
		_, cl, err := RendezvousWith(ctx, jobEnv(port, 0, 2, "jobA"), RendezvousConfig{Log: log, Progress: 20 * time.Millisecond})
		rank0 <- result{cl, err}
	}()
	stranger := jobEnv(port, 1, 2, "jobB")
	stranger.JobIDVar = "TORCHELASTIC_RUN_ID"
	_, _, err := RendezvousWith(ctx, stranger, RendezvousConfig{})
	if !errors.Is(err, ErrJobMismatch) {
		t.Fatalf("stranger: err = %v, want ErrJobMismatch", err)
	}
	for _, want := range []string{`job "jobA"`, `job "jobB" (from TORCHELASTIC_RUN_ID)`, "MASTER_PORT", "COLLKIT_JOB_ID"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("stranger's error %q does not say %q", err, want)
		}
	}
	// Rank 0 names the stranger in its progress lines while it waits.
	c := dial(t, "127.0.0.1:"+strconv.Itoa(port))
	for {
		r, err := c.Roster(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.TurnedAway) == 1 && strings.Contains(logs.String(), "turned away") {
			if r.TurnedAway[0].JobID != "jobB" || !reflect.DeepEqual(r.Missing, []int{1}) {
				t.Fatalf("roster = %+v, want rank 1 missing and jobB turned away", r)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("rank 0 never logged the stranger: %s", logs)
		}
	}
	s1, cl1, err := RendezvousWith(ctx, jobEnv(port, 1, 2, "jobA"), RendezvousConfig{})
	if err != nil {
		t.Fatalf("the real rank 1 after the stranger: %v", err)
	}
	defer cl1.Abort(errors.New("test over"))
	if err := s1.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	r := <-rank0
	if r.err != nil {
		t.Fatalf("rank 0: %v", r.err)
	}
	r.cl.Abort(errors.New("test over"))
}

// Ranks whose peers never come fail when their context ends, each naming
// the missing ranks and the store; while they wait they log the same.
func TestRendezvousMissingRanksNamedOnEveryRank(t *testing.T) {
	port := freePort(t)
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	cfg := RendezvousConfig{Log: log, Progress: 50 * time.Millisecond}
	ps := []*rdzv{
		{env: jobEnv(port, 0, 4, "j"), ctx: 1500 * time.Millisecond, cfg: cfg},
		{env: jobEnv(port, 2, 4, "j"), ctx: 3 * time.Second, cfg: cfg},
	}
	rendezvousAll(t, ps)
	for _, p := range ps {
		if !errors.Is(p.err, ErrMissingRanks) {
			t.Errorf("rank %d: err = %v, want ErrMissingRanks", p.env.Rank, p.err)
			continue
		}
		for _, want := range []string{"ranks 1, 3 of 4", "127.0.0.1:" + strconv.Itoa(port)} {
			if !strings.Contains(p.err.Error(), want) {
				t.Errorf("rank %d: error %q does not say %q", p.env.Rank, p.err, want)
			}
		}
		if p.took > p.ctx+3*time.Second {
			t.Errorf("rank %d failed after %v with a timeout of %v", p.env.Rank, p.took, p.ctx)
		}
	}
	// Rank 0 gave up first and told rank 2, which did not wait out its own
	// timeout.
	if p := ps[1]; p.took >= p.ctx {
		t.Errorf("rank 2 failed after %v: rank 0 gave up at %v and should have told it", p.took, ps[0].ctx)
	}
	out := logs.String()
	if !strings.Contains(out, "waiting for ranks to join the store") || !strings.Contains(out, `missing="ranks 1, 3 of 4"`) ||
		!strings.Contains(out, "store=127.0.0.1:"+strconv.Itoa(port)) {
		t.Errorf("progress log does not name the missing ranks and the store:\n%s", out)
	}
}

// A rank that registered and went away before the others came (it was
// restarted, say) may register again with a new process.
func TestRegistrationForgottenOnDisconnectBeforeComplete(t *testing.T) {
	s, _ := startServer(t, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first := dial(t, s.Addr())
	if err := first.Register(ctx, NewIdentity(jobEnv(0, 1, 3, "j"))); err != nil {
		t.Fatal(err)
	}
	first.Close()
	watcher := dial(t, s.Addr())
	for {
		r, err := watcher.Roster(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.Joined == 0 {
			break
		}
	}
	again := dial(t, s.Addr())
	if err := again.Register(ctx, NewIdentity(jobEnv(0, 1, 3, "j"))); err != nil {
		t.Fatalf("rank 1 registering again after its first process left: %v", err)
	}
	// The same process registering twice is not a duplicate.
	id := NewIdentity(jobEnv(0, 2, 3, "j"))
	c := dial(t, s.Addr())
	for range 2 {
		if err := c.Register(ctx, id); err != nil {
			t.Fatalf("registering the same identity again: %v", err)
		}
	}
	r, err := watcher.Roster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.Joined != 2 || !reflect.DeepEqual(r.Missing, []int{0}) || r.MissingCount != 1 || r.Size != 3 || r.JobID != "j" {
		t.Fatalf("roster = %+v, want ranks 1 and 2 of 3 in job j", r)
	}
	if err := c.Set(ctx, rosterKey, nil); err == nil {
		t.Fatal("a client set the store's own roster key")
	}
}

func TestRankList(t *testing.T) {
	for _, c := range []struct {
		in   []int
		want string
	}{
		{nil, ""},
		{[]int{3}, "3"},
		{[]int{5, 1, 2, 3, 9}, "1-3, 5, 9"},
		{[]int{0, 1}, "0-1"},
	} {
		if got := rankList(c.in); got != c.want {
			t.Errorf("rankList(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

func FuzzDecodeRegistration(f *testing.F) {
	id, _ := json.Marshal(NewIdentity(jobEnv(1, 1, 4, "job")))
	f.Add(id)
	r, _ := json.Marshal(Roster{JobID: "j", Size: 4, Joined: 2, Missing: []int{1, 3}, MissingCount: 2,
		TurnedAway: []Identity{NewIdentity(jobEnv(1, 0, 2, "x"))}})
	f.Add(r)
	f.Add([]byte(`{"rank":-1,"size":2,"nonce":"n"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if id, err := decodeIdentity(b); err == nil {
			if err := id.validate(); err != nil {
				t.Fatalf("decodeIdentity accepted an invalid identity: %v", err)
			}
			re, _ := json.Marshal(id)
			if back, err := decodeIdentity(re); err != nil || back != id {
				t.Fatalf("identity does not survive a round trip: %+v -> %+v, %v", id, back, err)
			}
		}
		if r, err := decodeRoster(b); err == nil {
			for _, m := range r.Missing {
				if m < 0 || m >= r.Size {
					t.Fatalf("decodeRoster accepted missing rank %d of %d", m, r.Size)
				}
			}
			_ = r.missingText() + r.turnedAwayText()
		}
	})
}

// A claim of a rank whose process already finished its part and left is
// refused, but it does not stop the rendezvous: the job's results no longer
// depend on that rank.
func TestClaimAfterRankLeftRefusedOnly(t *testing.T) {
	port := freePort(t)
	ps := []*rdzv{
		{env: jobEnv(port, 0, 2, "default"), ctx: 20 * time.Second},
		{env: jobEnv(port, 1, 2, "default"), ctx: 20 * time.Second},
	}
	rendezvousAll(t, ps)
	for _, p := range ps {
		if p.err != nil {
			t.Fatalf("rank %d: %v", p.env.Rank, p.err)
		}
	}
	ps[1].cl.Close()
	srv := ps[0].cl.srv
	for left := false; !left; runtime.Gosched() { // until the store has seen rank 1 go
		srv.mu.Lock()
		left = srv.members[1].left
		srv.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, _, err := RendezvousWith(ctx, jobEnv(port, 1, 2, "default"), RendezvousConfig{}); !errors.Is(err, ErrDuplicateRank) {
		t.Fatalf("claim of a rank that left: err = %v, want ErrDuplicateRank", err)
	}
	if err := ps[0].s.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatalf("rank 0 after the refused claim: %v", err)
	}
	if err := ps[0].cl.Close(); err != nil {
		t.Fatalf("rank 0's Close = %v, want nil: the claim came after rank 1 had finished", err)
	}
}
