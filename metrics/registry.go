package metrics

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"sync"
	"text/tabwriter"
	"time"
)

// Key names what a statistic is about.
type Key struct {
	Collective string // "allreduce", "broadcast", ...
	Algorithm  string // what ran: adaptive's choice, not "adaptive"
	Transport  string
}

// Bytes moved by one rank.
type Bytes struct {
	Sent, Received int64
}

// Sub returns b minus o.
func (b Bytes) Sub(o Bytes) Bytes { return Bytes{b.Sent - o.Sent, b.Received - o.Received} }

type entry struct {
	ops, errors uint64
	bytes       Bytes
	time        Histogram
}

// Registry holds the statistics of one communicator. Safe for concurrent
// use. The zero value is not ready: use NewRegistry.
type Registry struct {
	mu    sync.Mutex
	m     map[Key]*entry
	lastK Key    // the key of the last Record, which a training loop
	lastE *entry // repeats, found without hashing its strings
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{m: make(map[Key]*entry)} }

// Record adds one operation: how long it took, what it moved and whether it
// failed.
func (r *Registry) Record(k Key, d time.Duration, moved Bytes, err error) {
	r.mu.Lock()
	e := r.lastE
	if e == nil || r.lastK != k {
		if e = r.m[k]; e == nil {
			e = new(entry)
			r.m[k] = e
		}
		r.lastK, r.lastE = k, e
	}
	e.ops++
	if err != nil {
		e.errors++
	}
	e.bytes.Sent += moved.Sent
	e.bytes.Received += moved.Received
	e.time.Add(d)
	r.mu.Unlock()
}

// Row is the statistics of one Key.
type Row struct {
	Key
	Ops, Errors uint64
	Bytes
	Total, P50, P99, Max time.Duration
}

// Snapshot is a copy of a registry's rows, sorted by key.
type Snapshot []Row

// Snapshot copies the current statistics.
func (r *Registry) Snapshot() Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := make(Snapshot, 0, len(r.m))
	for k, e := range r.m {
		s = append(s, Row{
			Key: k, Ops: e.ops, Errors: e.errors, Bytes: e.bytes,
			Total: e.time.Sum(), P50: e.time.Quantile(0.5), P99: e.time.Quantile(0.99), Max: e.time.Max(),
		})
	}
	slices.SortFunc(s, func(a, b Row) int {
		return cmp.Or(cmp.Compare(a.Collective, b.Collective), cmp.Compare(a.Algorithm, b.Algorithm), cmp.Compare(a.Transport, b.Transport))
	})
	return s
}

// WriteText prints the snapshot as an aligned table.
func (s Snapshot) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "collective\talgorithm\ttransport\tops\terrors\tsent (B)\treceived (B)\ttotal (ms)\tp50 (us)\tp99 (us)\tmax (us)\t")
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	for _, r := range s {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%.3f\t%.1f\t%.1f\t%.1f\t\n",
			r.Collective, r.Algorithm, r.Transport, r.Ops, r.Errors, r.Sent, r.Received,
			us(r.Total)/1e3, us(r.P50), us(r.P99), us(r.Max))
	}
	return tw.Flush()
}
