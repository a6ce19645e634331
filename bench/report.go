package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"
)

// SchemaVersion names the JSON layout of File (documented in SCHEMA.md); it
// changes whenever a field changes meaning or disappears.
const SchemaVersion = "collkit.bench/v2"

// SchemaV1 is the previous layout, which ReadJSONFile still reads: the same
// fields less the environment, the per-iteration statistics and the fits.
const SchemaV1 = "collkit.bench/v1"

// File is what collbench --json writes: the machine, then one Report per
// combination run.
type File struct {
	Schema      string      `json:"schema"`
	Environment Environment `json:"environment"`
	Reports     []Report    `json:"reports"`
}

// WriteJSONFile saves reports to path as a File with this machine's
// environment, indented.
func WriteJSONFile(path string, reports []Report) error {
	return WriteFile(path, File{Schema: SchemaVersion, Environment: CurrentEnvironment(), Reports: reports})
}

// WriteFile saves f to path, indented.
func WriteFile(path string, f File) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing results: %w", err)
	}
	return nil
}

// ReadJSONFile loads a File written by WriteJSONFile.
func ReadJSONFile(path string) (File, error) {
	var f File
	b, err := os.ReadFile(path)
	if err != nil {
		return f, err
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("%s: %w", path, err)
	}
	if f.Schema != SchemaVersion && f.Schema != SchemaV1 {
		return f, fmt.Errorf("%s: schema %q, this build reads %q and %q: is it a collbench --json file?", path, f.Schema, SchemaVersion, SchemaV1)
	}
	return f, nil
}

// Report is one sweep of one algorithm: what ran, where, and the rows.
type Report struct {
	Collective string `json:"collective"`
	Algorithm  string `json:"algorithm"`
	Transport  string `json:"transport"`
	Ranks      int    `json:"ranks"`
	Streams    int    `json:"streams,omitempty"`
	// TransportSettings are the transport's knobs as they were set
	// (streams, spin wait, ...), by name.
	TransportSettings map[string]string `json:"transport_settings,omitempty"`
	Iters             int               `json:"iters"`                 // fixed iterations; 0 means adaptive
	MinTimeMS         float64           `json:"min_time_ms,omitempty"` // adaptive: minimum timed time per size
	MaxIters          int               `json:"max_iters,omitempty"`   // adaptive: iteration cap per size
	Warmup            int               `json:"warmup"`
	Check             int               `json:"check"`
	Seed              uint64            `json:"seed"`
	Started           time.Time         `json:"started"`
	Rows              []Row             `json:"rows"`
	AvgBusBW          float64           `json:"avg_busbw_gbs"`
	Wrong             int64             `json:"wrong"`
	Summary
}

// NewReport starts a report now.
func NewReport() Report {
	return Report{Started: time.Now().UTC()}
}

// Finish sets the rows and the totals derived from them. Set Ranks first:
// the fitted bus bandwidth depends on it.
func (r *Report) Finish(rows []Row) {
	r.Rows = rows
	r.AvgBusBW = AvgBusBW(rows)
	r.Wrong = Wrong(rows)
	r.Summary = SummarizeRows(rows, r.Ranks)
}

// Label names the combination a report measured, for tables, legends and
// comparisons: collective, algorithm, transport and ranks.
func (r Report) Label() string {
	return fmt.Sprintf("%s/%s/%s/%dr", r.Collective, r.Algorithm, r.Transport, r.Ranks)
}

// WriteHeader prints the nccl-tests style preamble and column titles.
func (r Report) WriteHeader(w io.Writer) {
	fmt.Fprintf(w, "# collbench: %s, algorithm %s, transport %s, %d ranks\n", r.Collective, r.Algorithm, r.Transport, r.Ranks)
	iters := fmt.Sprintf("iters %d", r.Iters)
	if r.Iters == 0 {
		iters = fmt.Sprintf("iters adaptive (min-time %gms, at most %d)", r.MinTimeMS, r.MaxIters)
	}
	fmt.Fprintf(w, "# %s, warmup %d, check %d, seed %d; times are the slowest rank's per iteration\n#\n", iters, r.Warmup, r.Check, r.Seed)
	fmt.Fprintf(w, "# %10s %12s %8s %6s %5s   %-33s   %-33s   %s\n", "", "", "", "", "", "out-of-place", "in-place", "out-of-place per-iteration statistics")
	fmt.Fprintf(w, "# %10s %12s %8s %6s %5s   %9s %7s %7s %6s   %9s %7s %7s %6s   %6s %9s %9s %9s %9s %6s  %s\n",
		"size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong",
		"iters", "min", "p50", "p99", "max", "cv", "algo")
	fmt.Fprintf(w, "# %10s %12s %8s %6s %5s   %9s %7s %7s %6s   %9s %7s %7s %6s   %6s %9s %9s %9s %9s %6s\n",
		"(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "",
		"", "(us)", "(us)", "(us)", "(us)", "(%)")
}

// WriteRow prints one row in the columns of WriteHeader.
func WriteRow(w io.Writer, row Row) {
	o := row.OutOfPlace
	fmt.Fprintf(w, "  %10d %12d %8s %6s %5d   %9.2f %7s %7s %6d   %9.2f %7s %7s %6d   %6d %9.2f %9.2f %9.2f %9.2f %6.1f  %s\n",
		row.Bytes, row.Count, row.DType, row.Op, row.Root,
		o.TimeUS, FormatGB(o.AlgBW), FormatGB(o.BusBW), o.Wrong,
		row.InPlace.TimeUS, FormatGB(row.InPlace.AlgBW), FormatGB(row.InPlace.BusBW), row.InPlace.Wrong,
		o.Iters, o.MinUS, o.P50US, o.P99US, o.MaxUS, 100*o.CV, row.Algorithm)
}

// WriteFooter prints the closing lines.
func (r Report) WriteFooter(w io.Writer) {
	status := "OK"
	if r.Wrong > 0 {
		status = "FAILED"
	}
	fmt.Fprintf(w, "# Out of bounds values : %d %s\n", r.Wrong, status)
	fmt.Fprintf(w, "# Avg bus bandwidth    : %.4g\n#\n", r.AvgBusBW)
}
