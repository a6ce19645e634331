package metrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/collkit/collkit/metrics"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/mem"
)

func TestHistogramQuantiles(t *testing.T) {
	var h metrics.Histogram
	if h.Quantile(0.5) != 0 {
		t.Fatalf("empty histogram p50 = %v, want 0", h.Quantile(0.5))
	}
	// 1..1000 us: p50 is 500 us, p99 990 us; buckets are 19% wide.
	for i := 1; i <= 1000; i++ {
		h.Add(time.Duration(i) * time.Microsecond)
	}
	if h.Count() != 1000 || h.Max() != time.Millisecond || h.Sum() != 500500*time.Microsecond {
		t.Fatalf("count %d max %v sum %v", h.Count(), h.Max(), h.Sum())
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}, {0.01, 10 * time.Microsecond}} {
		got := h.Quantile(c.q)
		if got < c.want*84/100 || got > c.want*119/100 {
			t.Errorf("p%g = %v, want %v within one bucket", c.q*100, got, c.want)
		}
	}
	if h.Quantile(1) != time.Millisecond {
		t.Errorf("p100 = %v, want the max", h.Quantile(1))
	}
}

func TestHistogramSmallAndHuge(t *testing.T) {
	var h metrics.Histogram
	h.Add(-5) // clock steps backwards: counted as zero
	h.Add(3)
	h.Add(100 * time.Hour)
	if h.Quantile(0) != 0 || h.Quantile(1) != 100*time.Hour {
		t.Fatalf("min %v max %v", h.Quantile(0), h.Quantile(1))
	}
}

func TestCountingAndRegistry(t *testing.T) {
	net := mem.NewNetwork(2, mem.Config{})
	defer net.Close()
	ts := net.Transports()
	a, b := metrics.Count(ts[0]), metrics.Count(ts[1])
	ctx := context.Background()
	h := transport.Header{Coll: transport.CollSendRecv}
	if err := a.Send(ctx, 1, h, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	if err := b.Recv(ctx, 0, h, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	if got := a.Totals(); got != (metrics.Bytes{Sent: 1000}) {
		t.Fatalf("sender totals %+v", got)
	}
	if got := b.Totals(); got != (metrics.Bytes{Received: 1000}) {
		t.Fatalf("receiver totals %+v", got)
	}

	reg := metrics.NewRegistry()
	k := metrics.Key{Collective: "allreduce", Algorithm: "ring", Transport: "mem"}
	reg.Record(k, 10*time.Microsecond, metrics.Bytes{Sent: 8, Received: 8}, nil)
	reg.Record(k, 30*time.Microsecond, metrics.Bytes{Sent: 8, Received: 8}, errors.New("boom"))
	reg.Record(metrics.Key{Collective: "broadcast", Algorithm: "tree", Transport: "mem"}, time.Microsecond, metrics.Bytes{}, nil)
	s := reg.Snapshot()
	if len(s) != 2 || s[0].Key != k {
		t.Fatalf("snapshot %+v", s)
	}
	r := s[0]
	if r.Ops != 2 || r.Errors != 1 || r.Sent != 16 || r.Received != 16 || r.Total != 40*time.Microsecond || r.Max != 30*time.Microsecond {
		t.Fatalf("row %+v", r)
	}
	var out strings.Builder
	if err := s.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "allreduce") || !strings.Contains(out.String(), "broadcast") {
		t.Fatalf("table:\n%s", out.String())
	}
}

// The cost of keeping statistics on: one Record per collective.
func BenchmarkRecord(b *testing.B) {
	reg := metrics.NewRegistry()
	k := metrics.Key{Collective: "allreduce", Algorithm: "ring", Transport: "tcp"}
	for b.Loop() {
		reg.Record(k, time.Microsecond, metrics.Bytes{Sent: 8, Received: 8}, nil)
	}
}
