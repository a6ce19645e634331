package bootstrap

import (
	"context"
	"errors"
	"sync"
)

// Connector is a rank of a transport before it is connected: what
// ConnectLocal builds and connects.
type Connector interface {
	Connect(ctx context.Context, store Store) error
	Close() error
}

// ConnectLocal runs a job of size ranks inside this process, for tests and
// benchmarks: it makes rank r with newRank(r), then connects every rank at
// once, each on its own goroutine, through one MemStore. If any rank fails
// to connect it closes them all and returns every rank's error.
func ConnectLocal[T Connector](ctx context.Context, size int, newRank func(rank int) (T, error)) ([]T, error) {
	ts := make([]T, size)
	for r := range ts {
		t, err := newRank(r)
		if err != nil {
			return nil, err
		}
		ts[r] = t
	}
	store := NewMemStore()
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
