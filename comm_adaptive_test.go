package collkit_test

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/algo/adaptive"
	"github.com/collkit/collkit/metrics"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/mem"
	"github.com/collkit/collkit/verify"
)

// algoRecorder notes the algorithm id in the header of every message a rank
// sends: what actually ran, whatever the statistics say.
type algoRecorder struct {
	transport.Transport
	mu  sync.Mutex
	ids []uint8
}

func (a *algoRecorder) Send(ctx context.Context, peer int, h transport.Header, p []byte) error {
	a.mu.Lock()
	if !slices.Contains(a.ids, h.Algo) {
		a.ids = append(a.ids, h.Algo)
	}
	a.mu.Unlock()
	return a.Transport.Send(ctx, peer, h, p)
}

// take returns the ids seen since the last take.
func (a *algoRecorder) take() []uint8 {
	a.mu.Lock()
	defer a.mu.Unlock()
	ids := a.ids
	a.ids = nil
	return ids
}

// With a tuning table that makes adaptive pick a different candidate in
// each size band, every call's statistics row names the candidate whose id
// went out in the headers, and the result is exact.
func TestAdaptiveStatsNameWhatRan(t *testing.T) {
	const n = 4
	// Each band is cheap for one candidate only.
	bands := []struct {
		min, max int64
		algo     string
	}{{0, 1 << 10, "tree"}, {1 << 10, 32 << 10, "halvingdoubling"}, {32 << 10, 0, "ring"}}
	table := &adaptive.Table{Schema: adaptive.Schema}
	for _, a := range adaptive.Defaults() {
		e := adaptive.Entry{Transport: "mem", Ranks: n, Algorithm: a.Name}
		for _, b := range bands {
			f := adaptive.Fit{MinBytes: b.min, MaxBytes: b.max, LatencyUS: 1000, BandwidthGBs: 1e6}
			if b.algo == a.Name {
				f.LatencyUS = 1
			}
			e.Fits = append(e.Fits, f)
		}
		table.Entries = append(table.Entries, e)
	}
	path := filepath.Join(t.TempDir(), "tune.json")
	if err := table.Save(path); err != nil {
		t.Fatal(err)
	}

	net := mem.NewNetwork(n, mem.Config{})
	t.Cleanup(func() { net.Close() })
	recs := make([]*algoRecorder, n)
	cs := make([]*collkit.Comm, n)
	for r, tr := range net.Transports() {
		recs[r] = &algoRecorder{Transport: tr}
		c, err := collkit.New(recs[r], collkit.Options{Algorithm: "adaptive", Transport: "mem", Tuning: path})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cs[r] = c
	}

	names := adaptive.Defaults()
	// The last two calls come back to the first band after the others:
	// the choice a communicator keeps for a stream of one size (ring's,
	// here) must not outlive its size.
	for _, tc := range []struct {
		bytes      int
		want       string
		rows, runs int // statistics rows after the call, and calls of want
	}{{8, "tree", 1, 1}, {4 << 10, "halvingdoubling", 2, 1}, {64<<10 + 4, "ring", 3, 1}, {8, "tree", 3, 2}, {12, "tree", 3, 3}} {
		const seed = 7
		want := make([]byte, tc.bytes)
		verify.Expect(collkit.Int32, collkit.Sum, want, seed, n)
		errs := each(cs, func(r int, c *collkit.Comm) error {
			send, recv := make([]byte, tc.bytes), make([]byte, tc.bytes)
			verify.Fill(collkit.Int32, collkit.Sum, send, seed, r)
			if err := c.AllReduce(context.Background(), collkit.Int32, collkit.Sum, send, recv); err != nil {
				return err
			}
			if w := verify.Wrong(collkit.Int32, recv, want); w != 0 {
				t.Errorf("rank %d, %d bytes: %d elements wrong", r, tc.bytes, w)
			}
			return nil
		})
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		for r, c := range cs {
			ids := recs[r].take()
			if len(ids) != 1 || ids[0]&0x80 == 0 || int(ids[0]&0x7f) >= len(names) {
				t.Fatalf("rank %d, %d bytes: header algorithm ids %v, want one adaptive candidate", r, tc.bytes, ids)
			}
			ran := names[ids[0]&0x7f].Name
			stats := c.Stats()
			if len(stats) != tc.rows {
				t.Fatalf("rank %d, %d bytes: %d statistics rows, want %d: %+v", r, tc.bytes, len(stats), tc.rows, stats)
			}
			k := slices.IndexFunc(stats, func(s metrics.Row) bool { return s.Algorithm == ran })
			if ran != tc.want || k < 0 || stats[k].Ops != uint64(tc.runs) || stats[k].Errors != 0 {
				t.Errorf("rank %d, %d bytes: ran %s, statistics %+v; want %s, %d calls of it", r, tc.bytes, ran, stats, tc.want, tc.runs)
			}
		}
	}
}
