package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/metrics/promexport"
)

// metricsServer serves the statistics of this rank's communicators to
// Prometheus (--metrics-addr); nil when off.
type metricsServer struct {
	reg *prometheus.Registry
	srv *http.Server
}

// startMetrics listens on addr with its port moved up by the local rank, so
// that the ranks of one host do not collide (rank 0 on the port given).
func startMetrics(addr string, env bootstrap.Env) (*metricsServer, error) {
	if addr == "" {
		return nil, nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %q: want host:port, e.g. :9400", addr)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %q: port is not a number", addr)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p+env.LocalRank)))
	if err != nil {
		return nil, fmt.Errorf("rank %d: --metrics-addr: %w (pick a free port)", env.Rank, err)
	}
	m := &metricsServer{reg: prometheus.NewRegistry()}
	m.srv = &http.Server{Handler: promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 10 * time.Second}
	go m.srv.Serve(ln)
	return m, nil
}

// add exports comm's statistics, labelled with its rank and transport.
func (m *metricsServer) add(comm *collkit.Comm, tr string) {
	if m == nil || comm.StatsRegistry() == nil {
		return
	}
	m.reg.Register(promexport.New(comm.StatsRegistry(), prometheus.Labels{"rank": strconv.Itoa(comm.Rank()), "run": tr}))
}

func (m *metricsServer) Close() error {
	if m == nil {
		return nil
	}
	return m.srv.Close()
}

// finishObserving prints rank 0's statistics (--stats) and writes the trace
// of the run over one transport (--trace; with several transports each gets
// its own file, named after it).
func finishObserving(ctx context.Context, comm *collkit.Comm, tr string, opts options, out io.Writer) error {
	if opts.stats {
		fmt.Fprintf(out, "#\n# Statistics of rank %d over %s (every collective it ran, the harness's own included):\n", comm.Rank(), tr)
		if err := comm.Stats().WriteText(out); err != nil {
			return err
		}
	}
	if opts.tracePath == "" {
		return nil
	}
	path := opts.tracePath
	if len(opts.transports) > 1 {
		ext := filepath.Ext(path)
		path = strings.TrimSuffix(path, ext) + "-" + tr + ext
	}
	if err := comm.WriteTrace(ctx, path); err != nil {
		return err
	}
	if comm.Rank() == 0 {
		fmt.Fprintf(out, "# trace of %d ranks over %s written to %s (open it in ui.perfetto.dev)\n", comm.Size(), tr, path)
	}
	return nil
}
