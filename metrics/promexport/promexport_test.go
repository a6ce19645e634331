package promexport_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/collkit/collkit/metrics"
	"github.com/collkit/collkit/metrics/promexport"
)

func TestCollector(t *testing.T) {
	reg := metrics.NewRegistry()
	k := metrics.Key{Collective: "allreduce", Algorithm: "ring", Transport: "tcp"}
	reg.Record(k, 2*time.Millisecond, metrics.Bytes{Sent: 100, Received: 200}, nil)
	reg.Record(k, 4*time.Millisecond, metrics.Bytes{Sent: 100, Received: 200}, nil)
	c := promexport.New(reg, prometheus.Labels{"rank": "3"})
	want := `
# HELP collkit_received_bytes_total Payload bytes this rank received.
# TYPE collkit_received_bytes_total counter
collkit_received_bytes_total{algorithm="ring",collective="allreduce",rank="3",transport="tcp"} 400
# HELP collkit_operations_total Collective operations run.
# TYPE collkit_operations_total counter
collkit_operations_total{algorithm="ring",collective="allreduce",rank="3",transport="tcp"} 2
# HELP collkit_seconds_total Time spent in collective operations.
# TYPE collkit_seconds_total counter
collkit_seconds_total{algorithm="ring",collective="allreduce",rank="3",transport="tcp"} 0.006
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "collkit_received_bytes_total", "collkit_operations_total", "collkit_seconds_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c); n != 7 {
		t.Fatalf("%d metrics, want 7", n)
	}
}
