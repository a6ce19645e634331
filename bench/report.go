package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"
)

// SchemaVersion names the JSON layout of Report; it changes whenever a field
// changes meaning or disappears.
const SchemaVersion = "collkit.bench/v1"

// File is what collbench --json writes: one Report per algorithm run.
type File struct {
	Schema  string   `json:"schema"`
	Reports []Report `json:"reports"`
}

// WriteJSONFile saves reports to path as a File, indented.
func WriteJSONFile(path string, reports []Report) error {
	b, err := json.MarshalIndent(File{Schema: SchemaVersion, Reports: reports}, "", "  ")
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
	if f.Schema != SchemaVersion {
		return f, fmt.Errorf("%s: schema %q, this build reads %q", path, f.Schema, SchemaVersion)
	}
	return f, nil
}

// Report is one sweep of one algorithm: what ran, where, and the rows.
type Report struct {
	Collective string    `json:"collective"`
	Algorithm  string    `json:"algorithm"`
	Transport  string    `json:"transport"`
	Ranks      int       `json:"ranks"`
	Streams    int       `json:"streams,omitempty"`
	Iters      int       `json:"iters"`
	Warmup     int       `json:"warmup"`
	Check      int       `json:"check"`
	Seed       uint64    `json:"seed"`
	GoVersion  string    `json:"go_version"`
	NumCPU     int       `json:"num_cpu"`
	Started    time.Time `json:"started"`
	Rows       []Row     `json:"rows"`
	AvgBusBW   float64   `json:"avg_busbw_gbs"`
	Wrong      int64     `json:"wrong"`
}

// NewReport fills in the fields that describe the machine.
func NewReport() Report {
	return Report{GoVersion: runtime.Version(), NumCPU: runtime.NumCPU(), Started: time.Now().UTC()}
}

// Finish sets the rows and the totals derived from them.
func (r *Report) Finish(rows []Row) {
	r.Rows = rows
	r.AvgBusBW = AvgBusBW(rows)
	r.Wrong = Wrong(rows)
}

// WriteHeader prints the nccl-tests style preamble and column titles.
func (r Report) WriteHeader(w io.Writer) {
	fmt.Fprintf(w, "# collbench: %s, algorithm %s, transport %s, %d ranks\n", r.Collective, r.Algorithm, r.Transport, r.Ranks)
	fmt.Fprintf(w, "# iters %d, warmup %d, check %d, seed %d\n#\n", r.Iters, r.Warmup, r.Check, r.Seed)
	fmt.Fprintf(w, "# %10s %12s %8s %6s %5s   %-33s   %-33s\n", "", "", "", "", "", "out-of-place", "in-place")
	fmt.Fprintf(w, "# %10s %12s %8s %6s %5s   %9s %7s %7s %6s   %9s %7s %7s %6s\n",
		"size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong  algo")
	fmt.Fprintf(w, "# %10s %12s %8s %6s %5s   %9s %7s %7s %6s   %9s %7s %7s %6s\n",
		"(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "")
}

// WriteRow prints one row in the columns of WriteHeader.
func WriteRow(w io.Writer, row Row) {
	fmt.Fprintf(w, "  %10d %12d %8s %6s %5d   %9.2f %7s %7s %6d   %9.2f %7s %7s %6d  %s\n",
		row.Bytes, row.Count, row.DType, row.Op, row.Root,
		row.OutOfPlace.TimeUS, FormatGB(row.OutOfPlace.AlgBW), FormatGB(row.OutOfPlace.BusBW), row.OutOfPlace.Wrong,
		row.InPlace.TimeUS, FormatGB(row.InPlace.AlgBW), FormatGB(row.InPlace.BusBW), row.InPlace.Wrong, row.Algorithm)
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
