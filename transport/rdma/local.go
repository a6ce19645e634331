package rdma

import (
	"context"
	"errors"
	"sync"

	"github.com/collkit/collkit/bootstrap"
)

// Local connects size ranks inside this process, each with its own UCX
// worker, for tests and benchmarks that want the real UCX path without
// processes. cfg's Rank and Size are ignored; a missing JobID becomes
// "local". Without the rdma build tag it returns ErrNotBuilt.
func Local(ctx context.Context, size int, cfg Config) ([]*Transport, error) {
	if cfg.JobID == "" {
		cfg.JobID = "local"
	}
	store := bootstrap.NewMemStore()
	ts := make([]*Transport, size)
	for r := range ts {
		c := cfg
		c.Rank, c.Size = r, size
		t, err := New(c)
		if err != nil {
			return nil, err
		}
		ts[r] = t
	}
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r, t := range ts {
		wg.Go(func() { errs[r] = t.Connect(ctx, store) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, t := range ts {
			t.Close()
		}
		return nil, err
	}
	return ts, nil
}
