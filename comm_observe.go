package collkit

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/internal/clock"
	"github.com/collkit/collkit/metrics"
	"github.com/collkit/collkit/tracing"
	"github.com/collkit/collkit/transport"
)

// observer is what a communicator measures about itself: statistics (on
// unless Options.NoStats), spans (with Options.Trace) and the debug log.
type observer struct {
	stats *metrics.Registry // nil with Options.NoStats
	rec   *tracing.Recorder // nil unless Options.Trace
	log   *slog.Logger

	// counting wraps the transport the collectives run over; rebuilt when
	// that transport changes (the first Split moves it onto a mux view),
	// as Comm.tGen tells: countingGen is tGen+1 when it was built (an
	// integer compare, where comparing the interfaces was 3% of
	// BenchmarkCallOverhead).
	counting    *metrics.Counting
	countingGen uint64
	// choices is what adaptive last ran per power-of-two size, so INFO logs
	// each choice once rather than every call.
	choices map[int]string
}

func newObserver(opts Options, rank int) (observer, error) {
	o := observer{log: opts.Logger, choices: map[int]string{}}
	if o.log == nil {
		var err error
		if o.log, err = LoggerFromEnv(os.Getenv); err != nil {
			return o, err
		}
	}
	o.log = o.log.With("rank", rank)
	if !opts.NoStats {
		o.stats = metrics.NewRegistry()
	}
	if opts.Trace {
		o.rec = tracing.NewRecorder(rank, 0)
	}
	return o, nil
}

// observed runs one collective's body fn over c.t as seen through the
// counting and tracing wrappers, and records what it cost, from the start
// withTimeout read. The caller holds c.mu and called withTimeout.
func (c *Comm) observed(coll, algo string, h transport.Header, bytes int, fn func(transport.Transport) error) error {
	o := &c.obs
	t := c.t
	var before metrics.Bytes
	if o.stats != nil {
		if o.countingGen != c.tGen+1 {
			o.counting, o.countingGen = metrics.Count(c.t), c.tGen+1
		}
		t, before = o.counting, o.counting.Totals()
	}
	if o.rec != nil {
		t = tracing.Wrap(t, o.rec)
	}
	c.watch.begin(c, h)
	defer c.watch.end()
	if o.stats == nil && o.rec == nil {
		return fn(t)
	}
	// The call's start is the clock withTimeout read; the end, a second
	// monotonic read (time.Since costs half of time.Now).
	start := c.began
	err := fn(t)
	d := clock.Since() - start
	if o.stats != nil {
		o.stats.Record(metrics.Key{Collective: coll, Algorithm: algo, Transport: c.transportName}, d, o.counting.Totals().Sub(before), err)
	}
	if o.rec != nil {
		o.rec.Add(tracing.TrackCollective, coll, clock.Base().Add(start), d, "seq", h.Seq, "algorithm", algo, "bytes", bytes, "failed", err != nil)
	}
	return err
}

// noteChoice logs, once per size class, the algorithm adaptive ran.
func (c *Comm) noteChoice(bytes int, algo string) {
	class := 0
	for b := bytes; b > 1; b >>= 1 {
		class++
	}
	if c.obs.choices[class] != algo {
		c.obs.choices[class] = algo
		c.obs.log.Info("adaptive choice", "bytes", bytes, "algorithm", algo, "ranks", c.size, "transport", c.transportName)
	}
}

// Stats returns a copy of this communicator's statistics: per collective,
// algorithm (what actually ran) and transport, the calls, errors, bytes
// this rank sent and received, and time with p50 and p99. Nil with
// Options.NoStats.
func (c *Comm) Stats() metrics.Snapshot {
	if c.obs.stats == nil {
		return nil
	}
	return c.obs.stats.Snapshot()
}

// StatsRegistry is the live registry behind Stats, for exporters such as a
// Prometheus collector. Nil with Options.NoStats.
func (c *Comm) StatsRegistry() *metrics.Registry { return c.obs.stats }

// Trace aligns every rank's clock with rank 0's, brings all ranks' spans to
// rank 0 and returns them there (nil on the other ranks). Every rank must
// call it, like a collective. Without Options.Trace it returns nil and an
// ErrBadArgument error.
func (c *Comm) Trace(ctx context.Context) ([]tracing.Event, error) {
	var events []tracing.Event
	err := c.call(ctx, nameTrace, funcOp(func(ctx context.Context) (err error) {
		events, err = c.trace(ctx)
		return err
	}), nil)
	return events, err
}

// trace is Trace in its turn. The caller holds c.mu.
func (c *Comm) trace(ctx context.Context) ([]tracing.Event, error) {
	if c.obs.rec == nil {
		return nil, c.badArg("trace", "the communicator was created without Options.Trace")
	}
	if err := c.usable(); err != nil {
		return nil, err
	}
	h := transport.Header{Seq: c.seq, Root: 0}
	c.seq++
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	// Over the bare transport: these messages are not part of the trace.
	off, err := tracing.Align(ctx, c.t, h, 8)
	var events []tracing.Event
	if err == nil {
		c.obs.rec.SetOffset(off)
		events, err = tracing.Gather(ctx, c.t, h, c.obs.rec)
	}
	if err != nil {
		return nil, c.fail(fmt.Errorf("collkit: rank %d: trace #%d: %w", c.Rank(), h.Seq, explain(ctx, err)))
	}
	return events, err
}

// WriteTrace is Trace, with rank 0 writing the spans to path as a Chrome
// trace (open it in ui.perfetto.dev or chrome://tracing).
func (c *Comm) WriteTrace(ctx context.Context, path string) error {
	events, err := c.Trace(ctx)
	if err != nil || c.Rank() != 0 {
		return err
	}
	return tracing.WriteFile(path, events)
}

// logSetup logs, once per communicator, what Connect built: at INFO the
// transport's settings and the node grouping, at DEBUG the connection event.
func (c *Comm) logSetup(env bootstrap.Env, opts Options, took time.Duration, intra bool) {
	log := c.obs.log
	attrs := []any{"transport", c.transportName, "local_rank", env.LocalRank, "local_size", env.LocalSize,
		"store", env.StoreAddr(), "nodes", c.nodes, "shm_inside_nodes", intra && opts.IntraNode != "nccl", "secret", env.Secret != "", "tls", opts.TLS != nil}
	if intra && opts.IntraNode == "nccl" {
		attrs = append(attrs, "nccl_inside_nodes", true)
	}
	if t, ok := c.t.(interface{ Addr() string }); ok {
		attrs = append(attrs, "address", t.Addr())
	}
	if c.transportName == "tcp" || c.transportName == "" {
		attrs = append(attrs, "streams", max(opts.Streams, 1), "spin_wait", opts.SpinWait)
	}
	if t, ok := c.t.(interface{ Congestion() string }); ok {
		attrs = append(attrs, "congestion", t.Congestion())
	}
	if t, ok := c.t.(interface{ Streaming() bool }); ok {
		attrs = append(attrs, "streaming_stores", t.Streaming()) // shm: what Connect timed faster
	}
	if b, ok := c.t.(transport.Buffered); ok {
		attrs = append(attrs, "send_buffer", b.SendBuffer())
	}
	log.Info("transport", attrs...)
	log.Debug("connected", "peers", c.size-1, "took", took)
}
