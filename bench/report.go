package bench

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// SchemaVersion names the JSON layout of File (documented in SCHEMA.md); it
// changes whenever a field changes meaning or disappears.
const SchemaVersion = "collkit.bench/v3"

// SchemaV2 is the previous layout, which ReadJSONFile still reads: time_us
// was always the slowest rank's mean, and the summary's latencies and fit
// came from the median iteration.
const SchemaV2 = "collkit.bench/v2"

// SchemaV1 is the first layout, which ReadJSONFile still reads: v2's fields
// less the environment, the per-iteration statistics and the fits.
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

// WithoutSamples is f with every measurement's samples left out (a
// copy; f is unchanged).
func WithoutSamples(f File) File {
	out := f
	out.Reports = slices.Clone(f.Reports)
	for i := range out.Reports {
		rows := slices.Clone(out.Reports[i].Rows)
		for j := range rows {
			rows[j].OutOfPlace.SamplesUS, rows[j].InPlace.SamplesUS = nil, nil
		}
		out.Reports[i].Rows = rows
	}
	return out
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
	switch f.Schema {
	case SchemaVersion:
	case SchemaV2, SchemaV1:
		upgrade(&f)
	default:
		return f, fmt.Errorf("%s: schema %q, this build reads %q, %q and %q: is it a collbench --json file?",
			path, f.Schema, SchemaVersion, SchemaV2, SchemaV1)
	}
	return f, nil
}

// upgrade fills in what older files imply: their time column is the
// slowest rank's mean, and a result was checked when the report says so.
func upgrade(f *File) {
	for i := range f.Reports {
		r := &f.Reports[i]
		r.RankTime = RankMax.String()
		for j := range r.Rows {
			for _, m := range []*Measurement{&r.Rows[j].OutOfPlace, &r.Rows[j].InPlace} {
				m.RankMaxUS, m.Checked = m.TimeUS, r.Check > 0
			}
		}
	}
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
	// RankTime is how each rank's mean time became the time column:
	// max, avg, min or rank0 (see RankTime).
	RankTime string `json:"rank_time"`
	// IntraTransport and InterTransport say what the hierarchical
	// algorithm ran inside a node and between nodes; InterTransport is
	// empty when all ranks were on one node. Empty for other algorithms.
	IntraTransport string `json:"intra_transport,omitempty"`
	InterTransport string `json:"inter_transport,omitempty"`
	Nodes          int    `json:"nodes,omitempty"` // hierarchical: nodes the ranks were grouped into
	// Group is the all-reduces per iteration (--group, nccl-tests -m);
	// PerOperation says times are per all-reduce rather than per group.
	Group        int       `json:"group,omitempty"`
	PerOperation bool      `json:"per_operation,omitempty"`
	Blocking     int       `json:"blocking,omitempty"`    // nccl-tests -z: 1 or 3 add a barrier after each iteration
	SkipIters    int       `json:"skip_iters,omitempty"`  // leading iterations left out of the per-iteration statistics
	Cycle        int       `json:"cycle,omitempty"`       // which repetition of the sweep (-N), from 1; 0 when there is one
	Iters        int       `json:"iters"`                 // fixed iterations; 0 means adaptive
	MinTimeMS    float64   `json:"min_time_ms,omitempty"` // adaptive: minimum timed time per size
	MaxIters     int       `json:"max_iters,omitempty"`   // adaptive: iteration cap per size
	Warmup       int       `json:"warmup"`
	Check        int       `json:"check"`
	Seed         uint64    `json:"seed"`
	Started      time.Time `json:"started"`
	Rows         []Row     `json:"rows"`
	AvgBusBW     float64   `json:"avg_busbw_gbs"`
	Wrong        int64     `json:"wrong"`
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
// comparisons: collective, algorithm, transport and ranks. For the
// hierarchical algorithm the transport part names what ran inside nodes
// and between them.
func (r Report) Label() string {
	return fmt.Sprintf("%s/%s/%s/%dr", r.Collective, r.Algorithm, r.TransportsRan(), r.Ranks)
}

// TransportsRan is the transport, or for the hierarchical algorithm
// "intra=X,inter=Y" (inter=none with all ranks on one node).
func (r Report) TransportsRan() string {
	if r.IntraTransport == "" {
		return r.Transport
	}
	return "intra=" + r.IntraTransport + ",inter=" + cmp.Or(r.InterTransport, "none")
}

// Variant is what a report's rows ran with beyond its Label: dtype, op and,
// for rooted collectives, the root, as "float32/sum" or "float32/root1".
func (r Report) Variant() string {
	if len(r.Rows) == 0 {
		return ""
	}
	row := r.Rows[0]
	v := row.DType
	if row.Op != "none" && row.Op != "" {
		v += "/" + row.Op
	}
	if row.Root >= 0 {
		v += fmt.Sprintf("/root%d", row.Root)
	}
	return v
}

// DistinctLabels names each report so that no two names are equal: the
// Label, then, where labels repeat, whatever tells those reports apart
// (variant, the time column's statistic, the cycle, and the source, such
// as the file it came from; sources may be nil), and as a last resort a
// number.
func DistinctLabels(reports []Report, sources []string) []string {
	labels := make([]string, len(reports))
	for i, r := range reports {
		labels[i] = r.Label()
	}
	parts := []func(i int) string{
		func(i int) string { return reports[i].Variant() },
		func(i int) string { return "-a " + strconv.Itoa(reports[i].rankTime().NCCL()) },
		func(i int) string {
			if reports[i].Cycle == 0 {
				return ""
			}
			return "cycle " + strconv.Itoa(reports[i].Cycle)
		},
		func(i int) string {
			if i < len(sources) {
				return sources[i]
			}
			return ""
		},
	}
	for _, part := range parts {
		groups := map[string][]int{}
		for i, l := range labels {
			groups[l] = append(groups[l], i)
		}
		for _, idx := range groups {
			if len(idx) < 2 {
				continue
			}
			values := map[string]bool{}
			for _, i := range idx {
				values[part(i)] = true
			}
			if len(values) < 2 {
				continue // the same for all of them: says nothing
			}
			for _, i := range idx {
				if v := part(i); v != "" {
					labels[i] += " " + v
				}
			}
		}
	}
	seen := map[string]int{}
	for i, l := range labels {
		if seen[l]++; seen[l] > 1 {
			labels[i] = fmt.Sprintf("%s #%d", l, seen[l])
		}
	}
	return labels
}

// rankTime is r.RankTime parsed; unknown names read as the slowest rank.
func (r Report) rankTime() RankTime {
	t, _ := ParseRankTime(r.RankTime)
	return t
}

// TableStyle picks the optional columns of the printed table.
type TableStyle struct {
	// NoPerIteration leaves out the per-iteration statistics (nccl-tests
	// -I 0).
	NoPerIteration bool
	// RankSpread adds each rank's mean time averaged over ranks, the
	// fastest and the slowest, out of place (OSU's -f).
	RankSpread bool
}

// WriteHeader prints the nccl-tests style preamble and column titles,
// naming the statistic of every time column.
func (r Report) WriteHeader(w io.Writer, st TableStyle) {
	fmt.Fprintf(w, "# collbench: %s, algorithm %s, transport %s, %d ranks\n", r.Collective, r.Algorithm, r.TransportsRan(), r.Ranks)
	iters := fmt.Sprintf("iters %d", r.Iters)
	if r.Iters == 0 {
		iters = fmt.Sprintf("iters adaptive (min-time %gms, at most %d)", r.MinTimeMS, r.MaxIters)
	}
	check := fmt.Sprintf("check %d", r.Check)
	if r.Check == 0 {
		check = "check 0 (results not verified: #wrong is N/A)"
	}
	fmt.Fprintf(w, "# %s, warmup %d, %s, seed %d\n", iters, r.Warmup, check, r.Seed)
	per := ""
	if r.Group > 1 {
		per = fmt.Sprintf(" (a group of %d all-reduces)", r.Group)
		if r.PerOperation {
			per = fmt.Sprintf(" (a group of %d all-reduces, divided by %d: per all-reduce)", r.Group, r.Group)
		}
	}
	fmt.Fprintf(w, "# time: %s%s; algbw and busbw come from it\n", r.rankTime().Describe(), per)
	if !st.NoPerIteration {
		skip := ""
		if r.SkipIters > 0 {
			skip = fmt.Sprintf(", leaving out the first %d", r.SkipIters)
		}
		fmt.Fprintf(w, "# per-iteration statistics (out-of-place): the slowest rank's time in each iteration%s\n", skip)
	}
	if st.RankSpread {
		fmt.Fprintf(w, "# ranks avg/min/max (out-of-place): each rank's mean time per iteration, averaged over ranks, the fastest rank's, the slowest rank's\n")
	}
	fmt.Fprintf(w, "#\n")
	var t1, t2, t3 strings.Builder
	fmt.Fprintf(&t1, "# %10s %12s %8s %6s %5s   %-33s   %-33s", "", "", "", "", "", "out-of-place", "in-place")
	fmt.Fprintf(&t2, "# %10s %12s %8s %6s %5s   %9s %7s %7s %6s   %9s %7s %7s %6s",
		"size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong")
	fmt.Fprintf(&t3, "# %10s %12s %8s %6s %5s   %9s %7s %7s %6s   %9s %7s %7s %6s",
		"(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "")
	if st.RankSpread {
		fmt.Fprintf(&t1, "   %-29s", "ranks (out-of-place)")
		fmt.Fprintf(&t2, "   %9s %9s %9s", "avg", "min", "max")
		fmt.Fprintf(&t3, "   %9s %9s %9s", "(us)", "(us)", "(us)")
	}
	if !st.NoPerIteration {
		fmt.Fprintf(&t1, "   %s", "out-of-place per-iteration statistics")
		fmt.Fprintf(&t2, "   %6s %9s %9s %9s %9s %6s", "iters", "min", "p50", "p99", "max", "cv")
		fmt.Fprintf(&t3, "   %6s %9s %9s %9s %9s %6s", "", "(us)", "(us)", "(us)", "(us)", "(%)")
	}
	fmt.Fprintf(&t2, "  %s", "algo")
	for _, t := range []*strings.Builder{&t1, &t2, &t3} {
		fmt.Fprintln(w, strings.TrimRight(t.String(), " "))
	}
}

// WriteRow prints one row in the columns of WriteHeader with the same
// style.
func WriteRow(w io.Writer, row Row, st TableStyle) {
	o, in := row.OutOfPlace, row.InPlace
	var b strings.Builder
	fmt.Fprintf(&b, "  %10d %12d %8s %6s %5d   %9.2f %7s %7s %6s   %9.2f %7s %7s %6s",
		row.Bytes, row.Count, row.DType, row.Op, row.Root,
		o.TimeUS, FormatGB(o.AlgBW), FormatGB(o.BusBW), o.wrongText(),
		in.TimeUS, FormatGB(in.AlgBW), FormatGB(in.BusBW), in.wrongText())
	if st.RankSpread {
		fmt.Fprintf(&b, "   %9.2f %9.2f %9.2f", o.RankAvgUS, o.RankMinUS, o.RankMaxUS)
	}
	if !st.NoPerIteration {
		fmt.Fprintf(&b, "   %6d %9.2f %9.2f %9.2f %9.2f %6.1f", o.Iters, o.MinUS, o.P50US, o.P99US, o.MaxUS, 100*o.CV)
	}
	fmt.Fprintf(&b, "  %s\n", row.Algorithm)
	io.WriteString(w, b.String())
}

// wrongText is the #wrong column: the count, or N/A when nothing was
// checked.
func (m Measurement) wrongText() string {
	if !m.Checked {
		return "N/A"
	}
	return strconv.FormatInt(m.Wrong, 10)
}

// WriteFooter prints the closing lines.
func (r Report) WriteFooter(w io.Writer) {
	switch {
	case !r.Checked():
		fmt.Fprintf(w, "# Out of bounds values : N/A (not checked: -c 0)\n")
	case r.Wrong > 0:
		fmt.Fprintf(w, "# Out of bounds values : %d FAILED\n", r.Wrong)
	default:
		fmt.Fprintf(w, "# Out of bounds values : %d OK\n", r.Wrong)
	}
	fmt.Fprintf(w, "# Avg bus bandwidth    : %.4g\n#\n", r.AvgBusBW)
}

// Checked reports whether the report's results were verified.
func (r Report) Checked() bool {
	for _, row := range r.Rows {
		if !row.OutOfPlace.Checked || !row.InPlace.Checked {
			return false
		}
	}
	return len(r.Rows) > 0 || r.Check > 0
}
