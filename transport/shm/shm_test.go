//go:build linux

package shm_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/shm"
	"github.com/collkit/collkit/transport/transporttest"
)

// world connects n ranks of this process over shared memory in a test's
// own directory, with small rings so that large messages wrap many times.
func world(cfg shm.Config) transporttest.World {
	return func(t testing.TB, n int) []transport.Transport {
		cfg := cfg
		if cfg.Dir == "" {
			cfg.Dir = testDir(t)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ts, err := shm.Local(ctx, n, cfg)
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
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, world(shm.Config{}))
}

func TestConformanceSmallRing(t *testing.T) {
	transporttest.Run(t, world(shm.Config{RingBytes: shm.MinRingBytes, Spin: -1, Yield: -1}))
}

// testDir is a directory of the test's own in /dev/shm (so that segments are
// in memory, as in production, and Reclaim sees only the test's), or in the
// test's temporary directory where there is no /dev/shm.
func testDir(t testing.TB) string {
	dir, err := os.MkdirTemp(shm.DefaultDir, "collkit-test-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
