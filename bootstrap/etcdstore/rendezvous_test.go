package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/collkit/collkit/bootstrap"
)

// rank is one in-process participant of a rendezvous through etcd.
type rank struct {
	env     bootstrap.Env
	timeout time.Duration
	s       bootstrap.Store
	cl      *bootstrap.Closer
	err     error
	took    time.Duration
}

// etcdEnv is what FromEnv makes of RANK, WORLD_SIZE and COLLKIT_STORE.
// MASTER_PORT names a port where nothing listens: with COLLKIT_STORE no
// rank hosts or dials the TCP store.
func etcdEnv(t *testing.T, store string, r, size int) bootstrap.Env {
	t.Helper()
	env, err := bootstrap.FromEnv(func(k string) string {
		return map[string]string{"RANK": fmt.Sprint(r), "WORLD_SIZE": fmt.Sprint(size), "COLLKIT_JOB_ID": "j",
			"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": fmt.Sprint(freePort(t)), "COLLKIT_STORE": store}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func rendezvousAll(t *testing.T, ps []*rank) {
	t.Helper()
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
			defer cancel()
			start := time.Now()
			p.s, p.cl, p.err = bootstrap.Rendezvous(ctx, p.env)
			p.took = time.Since(start)
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, p := range ps {
			if p.cl != nil {
				p.cl.Close()
			}
		}
	})
}

// Four ranks meet through etcd; rank 0 then leaves, and the others go on
// using the job's store: nothing of it lived in rank 0.
func TestRendezvousThroughEtcd(t *testing.T) {
	store := "etcd://" + startEtcd(t) + "/job-4"
	const n = 4
	ps := make([]*rank, n)
	for r := range n {
		ps[r] = &rank{env: etcdEnv(t, store, r, n), timeout: 20 * time.Second}
	}
	rendezvousAll(t, ps)
	for _, p := range ps {
		if p.err != nil {
			t.Fatalf("rank %d: %v", p.env.Rank, p.err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := ps[0].cl.Close(); err != nil {
		t.Fatalf("rank 0 Close: %v", err)
	}
	ps[0].cl = nil
	errs := make(chan error, n-1)
	for _, p := range ps[1:] {
		go func() {
			vals, err := bootstrap.Exchange(ctx, p.s, "after-rank-0", p.env.Rank-1, n-1, []byte{byte(p.env.Rank)})
			for i, v := range vals {
				if err == nil && (len(v) != 1 || v[0] != byte(i+1)) {
					err = fmt.Errorf("rank %d got %v from rank %d", p.env.Rank, v, i+1)
				}
			}
			errs <- err
		}()
	}
	for range n - 1 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// The job's keys stay in etcd after every rank has gone.
	for _, p := range ps[1:] {
		p.cl.Close()
		p.cl = nil
	}
	v, err := dial(t, startedEndpoint(store), "job-4/").Get(ctx, "after-rank-0/2")
	if err != nil || len(v) != 1 || v[0] != 3 {
		t.Fatalf("a key of the job after every rank left = %v, %v; want [3]", v, err)
	}
}

func startedEndpoint(store string) string {
	hosts, _, _ := strings.Cut(strings.TrimPrefix(store, "etcd://"), "/")
	return hosts
}

// Ranks of different world sizes fail at once, each naming both sizes.
func TestRendezvousSizeMismatch(t *testing.T) {
	store := "etcd://" + startEtcd(t) + "/job-size"
	ps := []*rank{
		{env: etcdEnv(t, store, 0, 2), timeout: 20 * time.Second},
		{env: etcdEnv(t, store, 1, 3), timeout: 20 * time.Second},
	}
	rendezvousAll(t, ps)
	for _, p := range ps {
		if !errors.Is(p.err, bootstrap.ErrSizeMismatch) {
			t.Errorf("rank %d (WORLD_SIZE=%d): err = %v, want ErrSizeMismatch", p.env.Rank, p.env.Size, p.err)
			continue
		}
		for _, want := range []string{"WORLD_SIZE=2", "WORLD_SIZE=3", "same world size", store} {
			if !strings.Contains(p.err.Error(), want) {
				t.Errorf("rank %d: error %q does not say %q", p.env.Rank, p.err, want)
			}
		}
		if p.took > 10*time.Second {
			t.Errorf("rank %d failed after %v, want at once", p.env.Rank, p.took)
		}
	}
}

// Two processes claiming one rank stop the rendezvous of every rank.
func TestRendezvousDuplicateRank(t *testing.T) {
	store := "etcd://" + startEtcd(t) + "/job-dup"
	// Rank 2 never comes, so only the duplicate can end the rendezvous.
	ps := []*rank{
		{env: etcdEnv(t, store, 0, 3), timeout: 20 * time.Second},
		{env: etcdEnv(t, store, 1, 3), timeout: 20 * time.Second},
		{env: etcdEnv(t, store, 1, 3), timeout: 20 * time.Second},
	}
	rendezvousAll(t, ps)
	for i, p := range ps {
		if !errors.Is(p.err, bootstrap.ErrDuplicateRank) {
			t.Errorf("participant %d (rank %d): err = %v, want ErrDuplicateRank", i, p.env.Rank, p.err)
			continue
		}
		for _, want := range []string{"rank 1 was claimed twice", "pid", "COLLKIT_STORE", "COLLKIT_JOB_ID"} {
			if !strings.Contains(p.err.Error(), want) {
				t.Errorf("participant %d: error %q does not say %q", i, p.err, want)
			}
		}
		if p.took > 10*time.Second {
			t.Errorf("participant %d failed after %v, want at once", i, p.took)
		}
	}
}

// Ranks whose peers never come fail naming them; the first to give up
// tells the others, which do not wait out their own timeouts.
func TestRendezvousMissingRanks(t *testing.T) {
	store := "etcd://" + startEtcd(t) + "/job-missing"
	ps := []*rank{
		{env: etcdEnv(t, store, 0, 4), timeout: 1500 * time.Millisecond},
		{env: etcdEnv(t, store, 2, 4), timeout: 15 * time.Second},
	}
	rendezvousAll(t, ps)
	for _, p := range ps {
		if !errors.Is(p.err, bootstrap.ErrMissingRanks) {
			t.Errorf("rank %d: err = %v, want ErrMissingRanks", p.env.Rank, p.err)
			continue
		}
		for _, want := range []string{"ranks 1, 3 of 4", "COLLKIT_STORE=" + store} {
			if !strings.Contains(p.err.Error(), want) {
				t.Errorf("rank %d: error %q does not say %q", p.env.Rank, p.err, want)
			}
		}
	}
	if p := ps[1]; p.took >= 10*time.Second {
		t.Errorf("rank 2 failed after %v: rank 0 gave up at %v and should have told it", p.took, ps[0].timeout)
	}
}
