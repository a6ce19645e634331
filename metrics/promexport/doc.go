// Package promexport exports a communicator's statistics (package metrics)
// to Prometheus: a Collector reads a fresh snapshot at every scrape, so
// nothing is copied between scrapes.
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(promexport.New(comm.StatsRegistry(), prometheus.Labels{"rank": "0"}))
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
package promexport
