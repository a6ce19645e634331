package collkit

import (
	"context"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/rdma"
)

// connectRDMA connects the UCX transport, giving it the interface that
// reaches the bootstrap store so that it can pick that interface's RDMA
// device. Without the rdma build tag it returns rdma.ErrNotBuilt.
func connectRDMA(ctx context.Context, env bootstrap.Env, store bootstrap.Store, opts Options) (transport.Transport, error) {
	ifname, _ := rdma.InterfaceForAddr(bootstrap.LocalAddrFor(env.StoreAddr()))
	t, err := rdma.New(rdma.Config{
		Rank:      env.Rank,
		Size:      env.Size,
		JobID:     env.JobID,
		Interface: ifname,
		SpinWait:  opts.SpinWait,
	})
	if err := connect(ctx, store, t, err); err != nil {
		return nil, err
	}
	return t, nil
}

// rdmaAvailable says why --transport rdma cannot run in this build.
func rdmaAvailable() error {
	if !rdma.Built {
		return rdma.ErrNotBuilt
	}
	return nil
}
