package tracing

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Tracks inside a rank's process: collectives on one, and sends and
// receives on their own so overlap shows.
const (
	TrackCollective = 0
	TrackSend       = 1
	TrackRecv       = 2
	TrackCompute    = 3
)

var trackNames = []string{"collectives", "send", "recv", "reduce"}

// DefaultLimit is the number of spans a Recorder keeps when NewRecorder is
// given zero; later spans are counted but dropped.
const DefaultLimit = 1 << 20

// Event is one entry of a Chrome trace ("X" complete events and "M"
// metadata). Times are microseconds on rank 0's clock.
type Event struct {
	Name  string         `json:"name"`
	Cat   string         `json:"cat,omitempty"`
	Phase string         `json:"ph"`
	TS    float64        `json:"ts"`
	Dur   float64        `json:"dur,omitempty"`
	PID   int            `json:"pid"`
	TID   int            `json:"tid"`
	Args  map[string]any `json:"args,omitempty"`
}

// Recorder collects one rank's spans. Safe for concurrent use.
type Recorder struct {
	rank  int
	limit int

	mu      sync.Mutex
	offset  time.Duration
	events  []Event
	dropped int
}

// NewRecorder returns a recorder for rank keeping at most limit spans (zero
// means DefaultLimit).
func NewRecorder(rank, limit int) *Recorder {
	if limit <= 0 {
		limit = DefaultLimit
	}
	return &Recorder{rank: rank, limit: limit}
}

// SetOffset sets what to add to this rank's clock to get rank 0's (from
// Align). Spans already recorded are shifted too.
func (r *Recorder) SetOffset(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	shift := float64((d - r.offset).Nanoseconds()) / 1e3
	for i := range r.events {
		r.events[i].TS += shift
	}
	r.offset = d
}

// Add records a span on track that started at start and lasted dur. args
// are key, value pairs shown in the viewer.
func (r *Recorder) Add(track int, name string, start time.Time, dur time.Duration, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.events) >= r.limit {
		r.dropped++
		return
	}
	e := Event{
		Name: name, Cat: trackNames[track], Phase: "X", PID: r.rank, TID: track,
		TS:  float64(start.Add(r.offset).UnixNano()) / 1e3,
		Dur: float64(dur.Nanoseconds()) / 1e3,
	}
	if len(args) > 0 {
		e.Args = make(map[string]any, len(args)/2)
		for i := 0; i+1 < len(args); i += 2 {
			e.Args[fmt.Sprint(args[i])] = args[i+1]
		}
	}
	r.events = append(r.events, e)
}

// Dropped is the number of spans that did not fit.
func (r *Recorder) Dropped() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dropped
}

// Events returns a copy of the spans, preceded by the metadata that names
// the rank's process and tracks.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []Event{{Name: "process_name", Phase: "M", PID: r.rank, Args: map[string]any{"name": fmt.Sprintf("rank %d", r.rank)}},
		{Name: "process_sort_index", Phase: "M", PID: r.rank, Args: map[string]any{"sort_index": r.rank}}}
	for tid, name := range trackNames {
		out = append(out, Event{Name: "thread_name", Phase: "M", PID: r.rank, TID: tid, Args: map[string]any{"name": name}})
	}
	return append(out, r.events...)
}

// File is the layout of a trace file.
type File struct {
	TraceEvents     []Event `json:"traceEvents"`
	DisplayTimeUnit string  `json:"displayTimeUnit"`
}

// Write writes events as a Chrome trace.
func Write(w io.Writer, events []Event) error {
	return json.NewEncoder(w).Encode(File{TraceEvents: events, DisplayTimeUnit: "ns"})
}

// WriteFile writes events as a Chrome trace to path.
func WriteFile(path string, events []Event) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	if err := Write(f, events); err != nil {
		f.Close()
		return fmt.Errorf("tracing: writing %s: %w", path, err)
	}
	return f.Close()
}

// ReadFile reads a trace written by WriteFile.
func ReadFile(path string) (File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return File{}, fmt.Errorf("tracing: %w", err)
	}
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		return File{}, fmt.Errorf("tracing: %s is not a trace file: %w", path, err)
	}
	return f, nil
}
