package tracing_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/collkit/collkit/algo/ring"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/tracing"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/mem"
)

// Three ranks run a traced ring all-reduce; rank 0's file must hold every
// rank's process, and exactly the sends and receives the ring makes.
func TestTraceRingAllReduce(t *testing.T) {
	const n = 3
	net := mem.NewNetwork(n, mem.Config{})
	defer net.Close()
	ts := net.Transports()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "trace.json")
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = traceOne(ctx, ts[r], path)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	f, err := tracing.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sends, recvs, colls := map[int]int{}, map[int]int{}, map[int]int{}
	names := map[int]string{}
	for _, e := range f.TraceEvents {
		switch {
		case e.Phase == "M" && e.Name == "process_name":
			names[e.PID], _ = e.Args["name"].(string)
		case e.Phase == "X" && e.Name == "send":
			sends[e.PID]++
		case e.Phase == "X" && e.Name == "recv":
			recvs[e.PID]++
		case e.Phase == "X" && e.Name == "allreduce":
			colls[e.PID]++
			if e.Dur <= 0 || e.TS <= 0 {
				t.Errorf("rank %d: allreduce span at %v for %v us", e.PID, e.TS, e.Dur)
			}
		}
	}
	for r := range n {
		// 2(n-1) ring steps, one message each at this size.
		if sends[r] != 2*(n-1) || recvs[r] != 2*(n-1) || colls[r] != 1 {
			t.Errorf("rank %d: %d sends, %d recvs, %d allreduce spans; want %d, %d, 1", r, sends[r], recvs[r], colls[r], 2*(n-1), 2*(n-1))
		}
		if want := "rank " + string(rune('0'+r)); names[r] != want {
			t.Errorf("rank %d process name %q, want %q", r, names[r], want)
		}
	}
}

func traceOne(ctx context.Context, t transport.Transport, path string) error {
	rec := tracing.NewRecorder(t.Rank(), 0)
	h := transport.Header{Seq: 1}
	off, err := tracing.Align(ctx, t, h, 4)
	if err != nil {
		return err
	}
	// All ranks share one clock here: the offset is at most a round trip.
	if off < -time.Second || off > time.Second {
		return context.DeadlineExceeded
	}
	rec.SetOffset(off)
	buf := make([]byte, 3*4*10)
	h = transport.Header{Seq: 2, Coll: transport.CollAllReduce, Count: 30, DType: reduce.Float32, Op: reduce.Sum}
	start := time.Now()
	if err := ring.AllReduce(ctx, tracing.Wrap(t, rec), h, buf, buf); err != nil {
		return err
	}
	rec.Add(tracing.TrackCollective, "allreduce", start, time.Since(start), "bytes", len(buf))
	events, err := tracing.Gather(ctx, t, transport.Header{Seq: 3}, rec)
	if err != nil || t.Rank() != 0 {
		return err
	}
	return tracing.WriteFile(path, events)
}

func TestRecorderLimit(t *testing.T) {
	rec := tracing.NewRecorder(0, 2)
	for range 5 {
		rec.Add(tracing.TrackCompute, "reduce", time.Now(), time.Microsecond)
	}
	if rec.Dropped() != 3 {
		t.Fatalf("dropped %d, want 3", rec.Dropped())
	}
	x := 0
	for _, e := range rec.Events() {
		if e.Phase == "X" {
			x++
		}
	}
	if x != 2 {
		t.Fatalf("%d spans kept, want 2", x)
	}
}
