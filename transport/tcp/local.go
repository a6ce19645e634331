package tcp

import (
	"context"

	"github.com/collkit/collkit/bootstrap"
)

// Local connects size ranks inside this process over loopback TCP, for tests
// and benchmarks that want the real socket path without processes. cfg's
// Rank and Size are ignored; a missing JobID becomes "local".
func Local(ctx context.Context, size int, cfg Config) ([]*Transport, error) {
	if cfg.JobID == "" {
		cfg.JobID = "local"
	}
	return bootstrap.ConnectLocal(ctx, size, func(r int) (*Transport, error) {
		cfg.Rank, cfg.Size = r, size
		return New(cfg)
	})
}
