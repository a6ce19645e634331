package transporttest

import (
	"context"
	"testing"
	"time"

	"github.com/collkit/collkit/transport"
)

// LocalWorld is the World that connect builds: a transport's in-process
// constructor, such as
//
//	transporttest.LocalWorld(func(ctx context.Context, n int) ([]*tcp.Transport, error) {
//		return tcp.Local(ctx, n, cfg)
//	})
//
// It fails the test when connect fails and closes every rank when the test
// ends.
func LocalWorld[T transport.Transport](connect func(ctx context.Context, size int) ([]T, error)) World {
	return func(t testing.TB, size int) []transport.Transport {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ts, err := connect(ctx, size)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]transport.Transport, len(ts))
		for i, tr := range ts {
			t.Cleanup(func() { tr.Close() })
			out[i] = tr
		}
		return out
	}
}
