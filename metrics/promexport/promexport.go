package promexport

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/collkit/collkit/metrics"
)

// Collector turns a metrics.Registry into Prometheus metrics.
type Collector struct {
	reg                                  *metrics.Registry
	ops, errors, sent, received, seconds *prometheus.Desc
	p50, p99                             *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// New returns a collector of reg; constant labels (a rank, a job) are added
// to every metric.
func New(reg *metrics.Registry, constant prometheus.Labels) *Collector {
	labels := []string{"collective", "algorithm", "transport"}
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("collkit_"+name, help, labels, constant)
	}
	return &Collector{
		reg:      reg,
		ops:      d("operations_total", "Collective operations run."),
		errors:   d("errors_total", "Collective operations that failed."),
		sent:     d("sent_bytes_total", "Payload bytes this rank sent."),
		received: d("received_bytes_total", "Payload bytes this rank received."),
		seconds:  d("seconds_total", "Time spent in collective operations."),
		p50:      d("latency_p50_seconds", "Median time of one operation."),
		p99:      d("latency_p99_seconds", "99th percentile time of one operation."),
	}
}

// Describe sends the descriptors of every metric.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.ops, c.errors, c.sent, c.received, c.seconds, c.p50, c.p99} {
		ch <- d
	}
}

// Collect sends the current statistics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.reg.Snapshot() {
		l := []string{r.Collective, r.Algorithm, r.Transport}
		ch <- prometheus.MustNewConstMetric(c.ops, prometheus.CounterValue, float64(r.Ops), l...)
		ch <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue, float64(r.Errors), l...)
		ch <- prometheus.MustNewConstMetric(c.sent, prometheus.CounterValue, float64(r.Sent), l...)
		ch <- prometheus.MustNewConstMetric(c.received, prometheus.CounterValue, float64(r.Received), l...)
		ch <- prometheus.MustNewConstMetric(c.seconds, prometheus.CounterValue, r.Total.Seconds(), l...)
		ch <- prometheus.MustNewConstMetric(c.p50, prometheus.GaugeValue, r.P50.Seconds(), l...)
		ch <- prometheus.MustNewConstMetric(c.p99, prometheus.GaugeValue, r.P99.Seconds(), l...)
	}
}
