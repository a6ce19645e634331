package bootstrap

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// A rendezvous through an external store runs the same on any store with
// Create and Add: here a MemStore behind a test scheme, so that it runs
// without etcd (bootstrap/etcdstore tests it over a real etcd).
func TestRendezvousExternalMemStore(t *testing.T) {
	store := NewMemStore()
	RegisterStoreScheme("memtest", func(context.Context, StoreURL, Env) (Store, io.Closer, error) {
		return store, io.NopCloser(nil), nil
	})
	t.Cleanup(func() { RegisterStoreScheme("memtest", nil) })
	env := func(rank, size int) Env {
		e := jobEnv(freePort(t), rank, size, "j")
		e.Store = "memtest://nowhere:1/x"
		return e
	}
	ps := []*rdzv{{env: env(0, 3), ctx: 10 * time.Second}, {env: env(1, 3), ctx: 10 * time.Second}, {env: env(2, 3), ctx: 10 * time.Second}}
	rendezvousAll(t, ps)
	for _, p := range ps {
		if p.err != nil {
			t.Fatalf("rank %d: %v", p.env.Rank, p.err)
		}
	}
	// A fourth process claiming rank 1 afterwards is refused, naming both.
	late := []*rdzv{{env: env(1, 3), ctx: 10 * time.Second}}
	rendezvousAll(t, late)
	if !errors.Is(late[0].err, ErrDuplicateRank) || !strings.Contains(late[0].err.Error(), "memtest://nowhere:1/x") {
		t.Fatalf("late claim of rank 1: %v, want ErrDuplicateRank naming the store", late[0].err)
	}
	// A process of another job is turned away without stopping anyone.
	other := env(2, 3)
	other.JobID = "k"
	stranger := []*rdzv{{env: other, ctx: 10 * time.Second}}
	rendezvousAll(t, stranger)
	if !errors.Is(stranger[0].err, ErrJobMismatch) || !strings.Contains(stranger[0].err.Error(), `job "j"`) {
		t.Fatalf("process of job k: %v, want ErrJobMismatch naming job j", stranger[0].err)
	}
}

func TestRendezvousUnknownStoreScheme(t *testing.T) {
	e := jobEnv(freePort(t), 0, 1, "j")
	e.Store = "zk://10.0.0.1:2181/x"
	_, _, err := Rendezvous(context.Background(), e)
	var ee *EnvError
	if !errors.As(err, &ee) || ee.Var != "COLLKIT_STORE" || !strings.Contains(err.Error(), "bootstrap/etcdstore") {
		t.Fatalf("unknown scheme: %v, want an EnvError on COLLKIT_STORE saying what to import", err)
	}
}

func TestParseStoreURL(t *testing.T) {
	u, err := ParseStoreURL("ETCD://10.0.0.5:2379,[::1]:2379/jobs/42")
	if err != nil || u.Scheme != "etcd" || len(u.Hosts) != 2 || u.Hosts[1] != "[::1]:2379" || u.Path != "jobs/42" {
		t.Fatalf("ParseStoreURL = %+v, %v", u, err)
	}
	for _, bad := range []string{"10.0.0.5:2379", "etcd://", "etcd://a:1,,b:2/x", "://a:1"} {
		if _, err := ParseStoreURL(bad); err == nil {
			t.Errorf("ParseStoreURL(%q) accepted it", bad)
		}
	}
	if _, err := FromEnv(getenv(map[string]string{"RANK": "0", "WORLD_SIZE": "1", "COLLKIT_STORE": "etcd:/x"})); err == nil ||
		!strings.Contains(err.Error(), "COLLKIT_STORE") {
		t.Errorf("FromEnv with a malformed COLLKIT_STORE: %v", err)
	}
	env, err := FromEnv(getenv(map[string]string{"RANK": "0", "WORLD_SIZE": "1", "COLLKIT_STORE": "etcd://h:1/j"}))
	if err != nil || env.Store != "etcd://h:1/j" {
		t.Errorf("FromEnv: Store = %q, %v", env.Store, err)
	}
}
