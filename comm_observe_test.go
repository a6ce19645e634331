package collkit_test

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/tracing"
	"github.com/collkit/collkit/transport/mem"
	"github.com/collkit/collkit/transport/shm"
)

// Statistics count what really moved: a ring all-reduce of 4 KiB on 4 ranks
// sends and receives exactly 2(n-1)/n of it per rank.
func TestStatsCountBytesOnTheWire(t *testing.T) {
	const n, size = 4, 4096
	cs, _ := comms(t, n, mem.Config{}, collkit.Options{Algorithm: "ring", Transport: "mem"})
	errs := each(cs, func(r int, c *collkit.Comm) error {
		buf := make([]float32, size/4)
		for range 3 {
			if err := collkit.AllReduce(context.Background(), c, buf, buf, collkit.Sum); err != nil {
				return err
			}
		}
		return collkit.Broadcast(context.Background(), c, buf, 0)
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for r, c := range cs {
		rows := c.Stats()
		if len(rows) != 2 {
			t.Fatalf("rank %d: %d rows, want allreduce and broadcast: %+v", r, len(rows), rows)
		}
		ar := rows[0]
		want := int64(3 * size * 2 * (n - 1) / n)
		if ar.Collective != "allreduce" || ar.Algorithm != "ring" || ar.Transport != "mem" ||
			ar.Ops != 3 || ar.Errors != 0 || ar.Sent != want || ar.Received != want {
			t.Errorf("rank %d: allreduce row %+v, want 3 ops and %d bytes each way", r, ar, want)
		}
		if ar.P50 <= 0 || ar.P99 < ar.P50 || ar.Max < ar.P99 || ar.Total < ar.Max {
			t.Errorf("rank %d: times p50 %v p99 %v max %v total %v out of order", r, ar.P50, ar.P99, ar.Max, ar.Total)
		}
		if bc := rows[1]; bc.Collective != "broadcast" || bc.Ops != 1 || (r == 0 && bc.Sent == 0) || (r != 0 && bc.Received != size) {
			t.Errorf("rank %d: broadcast row %+v", r, bc)
		}
	}
}

func TestNoStats(t *testing.T) {
	cs, _ := comms(t, 1, mem.Config{}, collkit.Options{NoStats: true})
	if err := collkit.AllReduce(context.Background(), cs[0], []int32{1}, make([]int32, 1), collkit.Sum); err != nil {
		t.Fatal(err)
	}
	if s := cs[0].Stats(); s != nil {
		t.Fatalf("stats with NoStats: %+v", s)
	}
}

// A traced run writes a Chrome trace with every rank's collectives and
// messages.
func TestWriteTrace(t *testing.T) {
	const n = 3
	cs, _ := comms(t, n, mem.Config{}, collkit.Options{Algorithm: "ring", Trace: true})
	path := filepath.Join(t.TempDir(), "trace.json")
	errs := each(cs, func(r int, c *collkit.Comm) error {
		buf := make([]float64, 300)
		if err := collkit.AllReduce(context.Background(), c, buf, buf, collkit.Sum); err != nil {
			return err
		}
		return c.WriteTrace(context.Background(), path)
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	f, err := tracing.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	count := map[[2]any]int{}
	for _, e := range f.TraceEvents {
		if e.Phase == "X" {
			count[[2]any{e.PID, e.Name}]++
		}
	}
	for r := range n {
		if count[[2]any{r, "reduce"}] != n-1 {
			t.Errorf("rank %d: %d reduce spans, want one per reduce-scatter step (%d)", r, count[[2]any{r, "reduce"}], n-1)
		}
		if count[[2]any{r, "allreduce"}] != 1 || count[[2]any{r, "send"}] != 2*(n-1) || count[[2]any{r, "recv"}] != 2*(n-1) {
			t.Errorf("rank %d: %d allreduce, %d send, %d recv spans; want 1, %d, %d", r,
				count[[2]any{r, "allreduce"}], count[[2]any{r, "send"}], count[[2]any{r, "recv"}], 2*(n-1), 2*(n-1))
		}
	}
}

func TestTraceNeedsOption(t *testing.T) {
	cs, _ := comms(t, 1, mem.Config{}, collkit.Options{})
	if _, err := cs[0].Trace(context.Background()); err == nil || !strings.Contains(err.Error(), "Options.Trace") {
		t.Fatalf("Trace without Options.Trace: %v", err)
	}
}

// At INFO the communicator logs its setup, and adaptive's choice once.
func TestInfoLog(t *testing.T) {
	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cs, _ := comms(t, 1, mem.Config{}, collkit.Options{Algorithm: "adaptive", Logger: log})
	for range 3 {
		if err := collkit.AllReduce(context.Background(), cs[0], []int32{1}, make([]int32, 1), collkit.Sum); err != nil {
			t.Fatal(err)
		}
	}
	s := out.String()
	if !strings.Contains(s, "msg=communicator") || !strings.Contains(s, "size=1") || strings.Count(s, "adaptive choice") != 1 {
		t.Fatalf("log:\n%s", s)
	}
}

func TestLoggerFromEnv(t *testing.T) {
	env := map[string]string{}
	get := func(k string) string { return env[k] }
	if _, err := collkit.LoggerFromEnv(get); err != nil {
		t.Fatal(err)
	}
	env[collkit.LogEnv] = "loud"
	if _, err := collkit.LoggerFromEnv(get); err == nil || !strings.Contains(err.Error(), "WARN, INFO or DEBUG") {
		t.Fatalf("bad level: %v", err)
	}
	env[collkit.LogEnv] = "debug"
	l, err := collkit.LoggerFromEnv(get)
	if err != nil || !l.Enabled(context.Background(), slog.LevelDebug) {
		t.Fatalf("debug logger: %v", err)
	}
}

// The cost of statistics on the smallest all-reduce, on and off.
func BenchmarkAllReduce8B(b *testing.B) {
	for _, c := range []struct {
		name string
		opts collkit.Options
	}{{"stats", collkit.Options{}}, {"nostats", collkit.Options{NoStats: true}}} {
		b.Run(c.name, func(b *testing.B) {
			net := mem.NewNetwork(2, mem.Config{})
			defer net.Close()
			ts := net.Transports()
			var cs [2]*collkit.Comm
			for r := range cs {
				var err error
				if cs[r], err = collkit.New(ts[r], c.opts); err != nil {
					b.Fatal(err)
				}
			}
			done := make(chan error, 1)
			go func() {
				buf := make([]float32, 2)
				for range b.N {
					if err := collkit.AllReduce(context.Background(), cs[1], buf, buf, collkit.Sum); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			buf := make([]float32, 2)
			for range b.N {
				if err := collkit.AllReduce(context.Background(), cs[0], buf, buf, collkit.Sum); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// What a communicator costs a call around the transport's own work: one
// rank over shm, whose native all-reduce then only copies, so nothing is
// waited for (docs/measurements-history.md quotes it).
func BenchmarkCallOverhead(b *testing.B) {
	ts, err := shm.Local(context.Background(), 1, shm.Config{})
	if err != nil {
		b.Skip(err)
	}
	c, err := collkit.New(ts[0], collkit.Options{Algorithm: "native"})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]float32, 2)
	b.ResetTimer()
	for range b.N {
		if err := collkit.AllReduce(context.Background(), c, buf, buf, collkit.Sum); err != nil {
			b.Fatal(err)
		}
	}
}
