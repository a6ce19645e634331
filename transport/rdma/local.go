package rdma

import (
	"context"

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
	return bootstrap.ConnectLocal(ctx, size, func(r int) (*Transport, error) {
		c := cfg
		c.Rank, c.Size = r, size
		return New(c)
	})
}
