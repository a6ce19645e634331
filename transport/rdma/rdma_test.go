//go:build rdma

package rdma_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/rdma"
	"github.com/collkit/collkit/transport/transporttest"
)

// world connects n ranks over UCX with whatever UCX_TLS the environment
// sets (CI runs the package with UCX_TLS=tcp and with UCX_TLS=sm).
func world(t testing.TB, n int) []transport.Transport {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ts, err := rdma.Local(ctx, n, rdma.Config{ConnectTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]transport.Transport, n)
	for i, tr := range ts {
		t.Cleanup(func() { tr.Close() })
		out[i] = tr
	}
	return out
}

func TestConformance(t *testing.T) {
	t.Logf("UCX_TLS=%q", os.Getenv("UCX_TLS"))
	transporttest.Run(t, world)
}
