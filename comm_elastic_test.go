package collkit

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/mem"
	"go.uber.org/goleak"
)

// "mem-store" is the in-memory transport connected through a store, so that
// elastic communicators of goroutines can make their next generations.
func init() {
	RegisterTransport("mem-store", TransportDriver{Connect: func(ctx context.Context, env bootstrap.Env, store bootstrap.Store, opts Options) (transport.Transport, error) {
		return mem.Connect(ctx, store, env.Rank, env.Size, mem.Config{})
	}})
}

// elasticJob connects n ranks through one MemStore.
func elasticJob(t *testing.T, n int, opts Options) (bootstrap.Store, []*Comm) {
	t.Helper()
	store := bootstrap.NewMemStore()
	return store, elasticJobOn(t, store, n, opts)
}

// elasticJobOn connects n ranks through store.
func elasticJobOn(t *testing.T, store bootstrap.Store, n int, opts Options) []*Comm {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs := make([]*Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			cs[r], errs[r] = ConnectStore(ctx, bootstrap.Env{Rank: r, Size: n, JobID: "elastic"}, store, opts)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return cs
}

// stepInput is process id's input to all-reduce step: distinct per process,
// step and element, so that a missing, doubled or stale contribution shows.
func stepInput(id, step, i int) int64 {
	return int64(id+1)*1_000_003 + int64(step)*7_919 + int64(i)
}

// checkStep runs all-reduce step on c (process id) and checks every element
// against the sum over members.
func checkStep(ctx context.Context, c *Comm, id, step, elems int) error {
	buf := make([]int64, elems)
	for i := range buf {
		buf[i] = stepInput(id, step, i)
	}
	if err := AllReduce(ctx, c, buf, buf, Sum); err != nil {
		return err
	}
	members := c.el.ids
	for i, got := range buf {
		var want int64
		for _, m := range members {
			want += stepInput(m, step, i)
		}
		if got != want {
			return fmt.Errorf("process %d, step %d, generation %d (members %v): element %d is %d, want %d",
				id, step, c.Generation(), members, i, got, want)
		}
	}
	return nil
}

func TestRevokeFailsEveryRank(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	_, cs := elasticJob(t, 4, Options{Transport: "mem-store", IntraNode: "group"})
	ctx := context.Background()
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for r := range 3 { // ranks 0-2 wait in an all-reduce that rank 3 never joins
		wg.Go(func() { errs[r] = AllReduce(ctx, cs[r], []int64{1}, make([]int64, 1), Sum) })
	}
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	cs[3].Revoke("checkpoint is corrupt")
	wg.Wait()
	took := time.Since(start)
	errs[3] = cs[3].Barrier(ctx)
	for r, err := range errs {
		if !errors.Is(err, ErrRevoked) || !strings.Contains(err.Error(), "revoked by rank 3: checkpoint is corrupt") {
			t.Errorf("rank %d: %v; want ErrRevoked with rank 3's reason", r, err)
		}
		var rv *RevokedError
		if !errors.As(err, &rv) || rv.Rank != 3 || rv.Reason != "checkpoint is corrupt" {
			t.Errorf("rank %d: RevokedError %+v", r, rv)
		}
	}
	if took > 5*time.Second {
		t.Errorf("the blocked ranks failed %v after the revoke: not promptly", took)
	}
	for r, c := range cs { // and the next call too
		if err := c.Barrier(ctx); !errors.Is(err, ErrRevoked) {
			t.Errorf("rank %d: next call after the revoke: %v", r, err)
		}
		c.Close()
	}
}

// A revoke reaches a rank that waits on a live rank outside the call,
// through the notice lying unread on another connection (NoticePeeker):
// ranks 0, 1 and 3 run a ring all-reduce that rank 2 never joins, rank 1
// revokes, and rank 3, waiting on rank 2, fails with the revocation rather
// than at its timeout, as do the others.
func TestRevokeReachesRankWaitingOnIdlePeer(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	_, cs := elasticJob(t, 4, Options{Transport: "tcp", Algorithm: "ring", IntraNode: "group", Timeout: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for _, r := range []int{0, 1, 3} {
		wg.Go(func() { errs[r] = AllReduce(ctx, cs[r], []int64{1}, make([]int64, 1), Sum) })
	}
	time.Sleep(50 * time.Millisecond)
	cs[1].Revoke("rank 2 is too slow")
	wg.Wait()
	for _, r := range []int{0, 1, 3} {
		if !errors.Is(errs[r], ErrRevoked) || !strings.Contains(errs[r].Error(), "rank 2 is too slow") {
			t.Errorf("rank %d: %v; want ErrRevoked with rank 1's reason", r, errs[r])
		}
	}
	for _, c := range cs {
		c.Close()
	}
}

// Every algorithm, over mem and tcp: a rank dies in the middle of a stream
// of all-reduces; the others shrink and go on from the same step with exact
// results, all with the same members.
func TestShrinkAfterDeath(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, tr := range []string{"mem-store", "tcp", "shm"} {
		if err := TransportAvailable(tr); err != nil {
			t.Logf("%s skipped: %v", tr, err)
			continue
		}
		for _, algo := range []string{"ring", "tree", "halvingdoubling", "adaptive", "hierarchical"} {
			t.Run(tr+"/"+algo, func(t *testing.T) {
				if err := elasticTrial(t, trialSpec{n: 5, transport: tr, algo: algo, victim: 2, at: 3, second: -1}); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

type trialSpec struct {
	n                int
	transport, algo  string
	intra            string // Options.IntraNode; empty means "group"
	victim, at       int    // the process killed, at which step
	second           int    // a process killed during the shrink, or -1
	secondAfter      time.Duration
	elems, steps     int
	seed             uint64
	elasticWait, tmo time.Duration
	// unbounded runs the steps with no deadline of their own, so that
	// Options.Timeout (tmo) ends one that waits on a dead rank nobody
	// reports (NCCL over NVLink); else tmo is at least 5 s.
	unbounded bool
}

// elasticTrial runs one kill-and-shrink trial and returns what went wrong.
func elasticTrial(t *testing.T, s trialSpec) error {
	s.elems = max(s.elems, 1)
	s.steps = max(s.steps, s.at+4)
	opts := Options{Transport: s.transport, Algorithm: s.algo, IntraNode: cmp.Or(s.intra, "group"), SimulatedNodes: 2,
		Timeout: max(s.tmo, 5*time.Second), ElasticWait: max(s.elasticWait, time.Second)}
	if s.algo != "hierarchical" {
		opts.SimulatedNodes = 0
	}
	if s.unbounded {
		opts.Timeout = s.tmo
	}
	_, cs := elasticJob(t, s.n, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stepCtx := ctx
	if s.unbounded {
		stepCtx = context.WithoutCancel(ctx) // Options.Timeout bounds each step
	}
	final := make([]*Comm, s.n)
	errs := make([]error, s.n)
	var wg sync.WaitGroup
	for id := range s.n {
		wg.Go(func() {
			c := cs[id]
			defer func() { final[id] = c }()
			for step := 0; step < s.steps; {
				if id == s.victim && step == s.at {
					kill(c)
					return
				}
				err := checkStep(stepCtx, c, id, step, s.elems)
				if err == nil {
					step++
					continue
				}
				if !errors.Is(err, transport.ErrPeerGone) && !errors.Is(err, ErrAborted) && !errors.Is(err, ErrRevoked) &&
					!errors.Is(err, transport.ErrClosed) && !errors.Is(err, context.DeadlineExceeded) {
					errs[id] = err
					return
				}
				if id == s.second { // dies during the shrink
					sctx, scancel := context.WithTimeout(ctx, s.secondAfter)
					nc, _ := c.Shrink(sctx)
					scancel()
					if nc != nil {
						c = nc
					}
					kill(c)
					return
				}
				if c, step, err = shrinkAndResume(ctx, c, step); err != nil {
					errs[id] = fmt.Errorf("process %d: %w", id, err)
					return
				}
			}
		})
	}
	wg.Wait()
	defer func() {
		for _, c := range final {
			c.Close()
		}
	}()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	var survivors []int
	for id := range s.n {
		if id != s.victim && id != s.second {
			survivors = append(survivors, id)
		}
	}
	for _, id := range survivors {
		if c := final[id]; !slices.Equal(c.el.ids, survivors) {
			return fmt.Errorf("process %d ended in generation %d with members %v, want exactly the survivors %v", id, c.Generation(), c.el.ids, survivors)
		}
	}
	return nil
}

// shrinkAndResume shrinks c and agrees with the other survivors on the
// step to go on from: the first that some survivor has not finished (the
// failed all-reduce may have finished on some ranks and not on others).
// A failure meanwhile shrinks again.
func shrinkAndResume(ctx context.Context, c *Comm, step int) (*Comm, int, error) {
	for {
		nc, err := c.Shrink(ctx)
		if err != nil {
			return c, step, fmt.Errorf("shrink after step %d failed: %w", step, err)
		}
		c = nc
		at := []int64{int64(step)}
		if err := AllReduce(ctx, c, at, at, Min); err == nil {
			return c, int(at[0]), nil
		}
	}
}

// kill makes c's process die: its connections close without an abort
// notice.
func kill(c *Comm) {
	for _, t := range []transport.Transport{c.base, c.intra} {
		switch tr := t.(type) {
		case *mem.Transport:
			tr.Kill()
		case nil:
		default:
			tr.Close()
		}
	}
}

// A rank that is alive but too slow to come to the shrink (as a stopped
// process) is left out: it gets ErrExcluded, never a world of its own, and
// the others go on.
func TestShrinkExcludesLateRank(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	_, cs := elasticJob(t, 4, Options{Transport: "mem-store", ElasticWait: 200 * time.Millisecond})
	ctx := context.Background()
	cs[0].Revoke("rank 0 found a bad batch")
	next := make([]*Comm, 4)
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Go(func() {
			if r == 3 {
				time.Sleep(time.Second) // slow: the others decide without it
			}
			next[r], errs[r] = cs[r].Shrink(ctx)
		})
	}
	wg.Wait()
	if !errors.Is(errs[3], ErrExcluded) || !strings.Contains(errs[3].Error(), "generation 1 without it") {
		t.Errorf("the late rank: %v; want ErrExcluded saying so", errs[3])
	}
	for r := range 3 {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
	}
	runSteps(t, next[:3], []int{0, 1, 2}, 3)
	// It cannot make a generation without them later either.
	if _, err := cs[3].Shrink(ctx); !errors.Is(err, ErrExcluded) {
		t.Errorf("the late rank's second shrink: %v; want ErrExcluded", err)
	}
	cs[3].Close()
	for _, c := range next[:3] {
		c.Close()
	}
}

// runSteps runs steps verified all-reduces on every communicator of cs,
// process ids ids.
func runSteps(t *testing.T, cs []*Comm, ids []int, steps int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() {
			for step := range steps {
				if errs[i] = checkStep(ctx, c, ids[i], step, 1000); errs[i] != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// A new process joins a running job: the members see it waiting, grow, and
// the communicator of the next generation includes it as the last rank.
func TestGrowAdmitsJoiner(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, tr := range []string{"mem-store", "tcp"} {
		t.Run(tr, func(t *testing.T) {
			opts := Options{Transport: tr, IntraNode: "group", ElasticWait: 5 * time.Second}
			store, cs := elasticJob(t, 3, opts)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var joined *Comm
			var joinErr error
			var jw sync.WaitGroup
			jw.Go(func() { joined, joinErr = JoinStore(ctx, bootstrap.Env{JobID: "elastic"}, store, opts) })
			next := make([]*Comm, 3)
			errs := make([]error, 3)
			var wg sync.WaitGroup
			for r := range 3 {
				wg.Go(func() {
					for {
						n, err := cs[r].JoinersWaiting(ctx)
						if err != nil {
							errs[r] = err
							return
						}
						if n > 0 {
							next[r], errs[r] = cs[r].Grow(ctx)
							return
						}
						time.Sleep(5 * time.Millisecond)
					}
				})
			}
			wg.Wait()
			jw.Wait()
			if err := errors.Join(append(errs, joinErr)...); err != nil {
				t.Fatal(err)
			}
			all := append(next, joined)
			for _, c := range all {
				if c.Size() != 4 || c.Generation() != 1 {
					t.Fatalf("rank %d: size %d generation %d; want 4 and 1", c.Rank(), c.Size(), c.Generation())
				}
			}
			if joined.Rank() != 3 {
				t.Errorf("the joiner is rank %d, want 3 (the last)", joined.Rank())
			}
			runSteps(t, all, []int{0, 1, 2, joined.el.ids[3]}, 3)
			for _, c := range all {
				c.Close()
			}
		})
	}
}

// elasticTrials is how many seeded trials TestElasticTrials runs:
// COLLKIT_ELASTIC_TRIALS, else 12 (scripts/elastic-trials.sh runs 500).
func elasticTrials(t *testing.T) int { return envCount(t, "COLLKIT_ELASTIC_TRIALS", 12) }

// Seeded fault-injection trials over the in-memory transport: every
// algorithm, a rank killed at a random step, and in some trials a second
// rank killed during the shrink. The survivors must agree on the members,
// every element after the shrink must be exact, nothing may hang, and no
// goroutine may be left behind.
func TestElasticTrials(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	trials := elasticTrials(t)
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("COLLKIT_ELASTIC_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("seed %d (COLLKIT_ELASTIC_SEED reruns these trials)", seed)
	algos := []string{"ring", "tree", "halvingdoubling", "adaptive", "hierarchical"}
	failed := 0
	for trial := range trials {
		rng := rand.New(rand.NewPCG(seed, uint64(trial)))
		s := trialSpec{n: 3 + rng.IntN(4), transport: "mem-store", algo: algos[rng.IntN(len(algos))],
			at: rng.IntN(6), second: -1, elems: 1 + rng.IntN(5000), seed: seed}
		s.victim = rng.IntN(s.n)
		if rng.IntN(3) == 0 {
			s.second = (s.victim + 1 + rng.IntN(s.n-1)) % s.n
			s.secondAfter = time.Duration(rng.IntN(3000)) * time.Microsecond
		}
		start := time.Now()
		if err := elasticTrial(t, s); err != nil {
			failed++
			t.Errorf("trial %d %+v: %v", trial, s, err)
		}
		t.Logf("trial %d: %d ranks, %s, kill %d at step %d, second %d after %v: %v",
			trial, s.n, s.algo, s.victim, s.at, s.second, s.secondAfter, time.Since(start).Round(time.Millisecond))
	}
	t.Logf("%d trials, %d failed", trials, failed)
}

// The same over the TCP store server a launcher hosts: Create and Add go
// over the wire, each rank through its own client.
func TestShrinkThroughStoreServer(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv, err := bootstrap.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 4
	cs := make([]*Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			client, err := bootstrap.Dial(ctx, srv.Addr())
			if err != nil {
				errs[r] = err
				return
			}
			if cs[r], errs[r] = ConnectStore(ctx, bootstrap.Env{Rank: r, Size: n, JobID: "elastic"}, client, Options{IntraNode: "group"}); errs[r] != nil {
				client.Close()
				return
			}
			cs[r].closers = append(cs[r].closers, joinedStore{client})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	kill(cs[1])
	next := survivorsShrink(ctx, t, cs, 1)
	runSteps(t, []*Comm{next[0], next[2], next[3]}, []int{0, 2, 3}, 3)
	for _, c := range next {
		if c != nil {
			c.Close()
		}
	}
	cs[1].Close()
}

// keyLog is a MemStore that records the keys set in it, and lets a test
// rewrite a value on its way in.
type keyLog struct {
	*bootstrap.MemStore
	edit func(key string, value []byte) []byte // nil: values go in as they are

	mu   sync.Mutex
	keys []string
}

func (s *keyLog) Set(ctx context.Context, key string, value []byte) error {
	s.mu.Lock()
	s.keys = append(s.keys, key)
	s.mu.Unlock()
	if s.edit != nil {
		value = s.edit(key, value)
	}
	return s.MemStore.Set(ctx, key, value)
}

// under lists the keys set that start with prefix.
func (s *keyLog) under(prefix string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ks []string
	for _, k := range s.keys {
		if strings.HasPrefix(k, prefix) {
			ks = append(ks, k)
		}
	}
	return ks
}

// survivorsShrink checks on every rank but victim (killed) that an
// all-reduce fails, then shrinks it; it returns the new communicators by
// old rank, nil at victim.
func survivorsShrink(ctx context.Context, t *testing.T, cs []*Comm, victim int) []*Comm {
	t.Helper()
	next := make([]*Comm, len(cs))
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for r := range cs {
		if r == victim {
			continue
		}
		wg.Go(func() {
			if err := checkStep(ctx, cs[r], r, 0, 10); err == nil {
				errs[r] = errors.New("all-reduce with a dead rank succeeded")
				return
			}
			next[r], errs[r] = cs[r].Shrink(ctx)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return next
}

// shrinkWithout connects n ranks through store, kills process victim, and
// returns the survivors' communicators of generation 1, with their ids.
func shrinkWithout(t *testing.T, store bootstrap.Store, n, victim int, opts Options) ([]*Comm, []int) {
	t.Helper()
	cs := elasticJobOn(t, store, n, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kill(cs[victim])
	t.Cleanup(func() { cs[victim].Close() })
	next := survivorsShrink(ctx, t, cs, victim)
	var out []*Comm
	var ids []int
	for r, c := range next {
		if c != nil {
			out, ids = append(out, c), append(ids, r)
			t.Cleanup(func() { c.Close() })
		}
	}
	return out, ids
}

// A shrink connects the new generation from the survivors' alive notes:
// over tcp the addresses the transport dials are the ones the notes give,
// the node names too, and nothing is exchanged under the generation's keys
// (no addresses, node names or, over shm, host names); a ring
// communicator gets no shared memory inside the node, a hierarchical one
// still does.
func TestShrinkConnectsFromNotes(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, c := range []struct{ transport, algo string }{{"tcp", "ring"}, {"tcp", "hierarchical"}, {"shm", "ring"}} {
		t.Run(c.transport+"/"+c.algo, func(t *testing.T) {
			intra := c.transport == "tcp" && c.algo == "hierarchical"
			if err := shmAvailable(); (intra || c.transport == "shm") && err != nil {
				t.Skipf("no shared memory here: %v", err)
			}
			store := &keyLog{MemStore: bootstrap.NewMemStore()}
			next, ids := shrinkWithout(t, store, 4, 1, Options{Transport: c.transport, Algorithm: c.algo, ElasticWait: 5 * time.Second})
			runSteps(t, next, ids, 3)
			for _, k := range store.under("collkit/elastic/1/c/") {
				if strings.Contains(k, "tcp/addr/") || strings.Contains(k, "collkit/node/") || strings.Contains(k, "collkit/shm/host/") ||
					(!intra && strings.Contains(k, "collkit/intra/")) {
					t.Errorf("generation 1 exchanged %s through the store", k)
				}
			}
			if keys := store.under("collkit/elastic/1/c/collkit/intra/"); intra && len(keys) == 0 {
				t.Error("hierarchical over tcp connected no shared memory inside the node")
			}
			for i, nc := range next {
				b, err := store.Get(context.Background(), elasticKey(1, "alive/"+strconv.Itoa(ids[i])))
				if err != nil {
					t.Fatal(err)
				}
				var note aliveNote
				if err := json.Unmarshal(b, &note); err != nil {
					t.Fatalf("process %d's alive note %q: %v", ids[i], b, err)
				}
				if c.transport == "tcp" {
					addr, _ := unwrap(nc.base).(interface{ Addr() string })
					if addr == nil || note.Addr == "" || note.Addr != addr.Addr() {
						t.Errorf("process %d's note gives address %q; its transport listens on %v", ids[i], note.Addr, addr)
					}
				} else if note.Addr != "" {
					t.Errorf("process %d's note gives address %q over %s", ids[i], note.Addr, c.transport)
				}
				if note.Node != nodeName() {
					t.Errorf("process %d's note names node %q, want %q", ids[i], note.Node, nodeName())
				}
				if (nc.intra != nil) != intra {
					t.Errorf("rank %d: intra-node transport %v with %s over %s, want one: %v", nc.Rank(), nc.intra, c.algo, c.transport, intra)
				}
				if nodes := nc.Nodes(); !slices.Equal(nodes, make([]int, len(next))) {
					t.Errorf("rank %d: nodes %v, want every rank on node 0", nc.Rank(), nodes)
				}
			}
		})
	}
}

// When the members' alive notes lack their addresses, or their node names
// (as from processes that could not listen, or of a version that did not
// say), the members exchange them through the store instead, and the
// results stay exact. (Every process's own note lacks them too as the
// others read it, so all see a note without them and connect alike.)
func TestShrinkExchangesWhatNotesLack(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for what, strip := range map[string]func(*aliveNote){
		"tcp/addr/":     func(n *aliveNote) { n.Addr = "" },
		"collkit/node/": func(n *aliveNote) { n.Node = "" },
	} {
		t.Run(what, func(t *testing.T) {
			store := &keyLog{MemStore: bootstrap.NewMemStore(), edit: func(key string, value []byte) []byte {
				if !strings.HasPrefix(key, elasticKey(1, "alive/")) {
					return value
				}
				var note aliveNote
				json.Unmarshal(value, &note)
				strip(&note)
				b, _ := json.Marshal(note)
				return b
			}}
			next, ids := shrinkWithout(t, store, 4, 1, Options{Transport: "tcp", IntraNode: "group", ElasticWait: 5 * time.Second})
			runSteps(t, next, ids, 3)
			for r := range next {
				key := "collkit/elastic/1/c/" + what + strconv.Itoa(r)
				if !slices.Contains(store.under(key), key) {
					t.Errorf("rank %d of generation 1 did not publish %s: the members connected without what the notes lacked", r, key)
				}
			}
		})
	}
}
