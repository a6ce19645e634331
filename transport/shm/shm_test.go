//go:build linux

package shm_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/collkit/collkit/algo/algotest"
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
		return transporttest.LocalWorld(func(ctx context.Context, n int) ([]*shm.Transport, error) {
			return shm.Local(ctx, n, cfg)
		})(t, n)
	}
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, world(shm.Config{}))
}

func TestConformanceSmallRing(t *testing.T) {
	transporttest.Run(t, world(shm.Config{RingBytes: shm.MinRingBytes, Spin: -1, Yield: -1}))
}

// Each kind of store carries the conformance suite's messages (rings from
// 4 KiB up stream or not) and the native all-reduce's sums, and a forced
// kind is what the transport reports; an unknown kind is refused.
func TestStores(t *testing.T) {
	for _, st := range []shm.Stores{shm.StoresOrdinary, shm.StoresStreaming} {
		t.Run(fmt.Sprint(st), func(t *testing.T) {
			cfg := shm.Config{Stores: st, NativeBytes: 64 << 10}
			transporttest.Run(t, world(cfg))
			algotest.AllReduceWith(t, algotest.Native, algotest.ShmWorldWith(cfg), algotest.Options{
				Sizes: []int{2, 3}, Counts: []int{1, 5000, 70000},
			})
			for r, tr := range world(cfg)(t, 2) {
				if got, want := tr.(*shm.Transport).Streaming(), st == shm.StoresStreaming && runtime.GOARCH == "amd64"; got != want {
					t.Errorf("rank %d: Streaming() = %v, want %v", r, got, want)
				}
			}
		})
	}
	if _, err := shm.New(shm.Config{Size: 1, Stores: shm.StoresOrdinary + 1}); err == nil || !strings.Contains(err.Error(), "Stores") {
		t.Errorf("Stores %d: got %v, want an error naming Stores", shm.StoresOrdinary+1, err)
	}
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

// A rank that aborts leaves its reason in its segment: a peer waiting on it
// gets a *transport.AbortError quoting it, not a bare "closed".
func TestAbortReasonReachesPeer(t *testing.T) {
	ts := world(shm.Config{})(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	h := transport.Header{Seq: 1, Count: 2, Root: -1, Coll: transport.CollAllReduce}
	go func() { errc <- ts[1].Recv(ctx, 0, h, make([]byte, 8)) }()
	if err := ts[0].(transport.Aborter).Abort("rank 0 gave up: rank 5 died"); err != nil {
		t.Fatal(err)
	}
	err := <-errc
	var ae *transport.AbortError
	if !errors.As(err, &ae) || ae.Rank != 0 || ae.Reason != "rank 0 gave up: rank 5 died" || !errors.Is(err, transport.ErrPeerGone) {
		t.Fatalf("Recv from an aborted rank: %v, want its reason", err)
	}
}
