package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/bench"
)

// unavailable is a transport that was asked for but cannot run here.
type unavailable struct {
	name   string
	reason error
}

// parseTransports expands --transport: a name, a comma-separated list or
// "all". Transports that cannot run here are returned apart with the
// reason; it is an error when none is left.
func parseTransports(s string, known []string, available func(string) error) (run []string, skipped []unavailable, err error) {
	names := known
	if s != "all" {
		names = nil
		for _, t := range strings.Split(s, ",") {
			t = strings.TrimSpace(t)
			if t == collkit.AutoTransport {
				return nil, nil, fmt.Errorf("--transport %s: auto picks one transport and stands alone; list the transports to run instead (%s)", s, strings.Join(known, ", "))
			}
			if !slices.Contains(known, t) {
				return nil, nil, fmt.Errorf("--transport %q: unknown transport (use one of %s, a comma-separated list, or all)", t, strings.Join(known, ", "))
			}
			if !slices.Contains(names, t) {
				names = append(names, t)
			}
		}
	}
	for _, t := range names {
		if err := available(t); err != nil {
			skipped = append(skipped, unavailable{t, err})
			continue
		}
		run = append(run, t)
	}
	if len(run) == 0 {
		reasons := make([]string, len(skipped))
		for i, u := range skipped {
			reasons[i] = u.reason.Error()
		}
		return nil, skipped, fmt.Errorf("--transport %s: nothing can run here: %s", s, strings.Join(reasons, "; "))
	}
	return run, skipped, nil
}

// writeSkipped lists the transports that were asked for but not run.
func writeSkipped(w io.Writer, skipped []unavailable) {
	for _, u := range skipped {
		fmt.Fprintf(w, "# transport %s not run: %v\n", u.name, u.reason)
	}
}

// writeMatrix prints, for several combinations, a summary per combination
// and per size the winner (lowest out-of-place time), all from the time
// column, the statistic the tables show.
func writeMatrix(w io.Writer, reports []bench.Report, skipped []unavailable) {
	labels := bench.DistinctLabels(reports, nil)
	stat := timeStatistic(reports)
	fmt.Fprintf(w, "#\n# Summary per combination (out-of-place; time = %s)\n", stat)
	width := 36
	for _, l := range labels {
		width = max(width, len(l))
	}
	fmt.Fprintf(w, "# %-*s %10s %14s %10s %12s %10s\n", width, "combination", "avg busbw", "best time", "at size", "fit latency", "fit busbw")
	fmt.Fprintf(w, "# %-*s %10s %14s %10s %12s %10s\n", width, "", "(GB/s)", "(us)", "(B)", "(us)", "(GB/s)")
	noFit, noLatency := false, false
	for i, r := range reports {
		lat, bw := "-", "-"
		switch {
		case !r.HasFit():
			noFit = true
		case r.FitNoLatency:
			noLatency = true
			bw = bench.FormatGB(r.FitBusBW)
		default:
			lat, bw = fmt.Sprintf("%.2f", r.FitLatencyUS), bench.FormatGB(r.FitBusBW)
		}
		fmt.Fprintf(w, "  %-*s %10s %14.2f %10d %12s %10s\n", width, labels[i], bench.FormatGB(r.AvgBusBW),
			r.BestLatencyUS, r.BestLatencyBytes, lat, bw)
	}
	if noFit {
		fmt.Fprintf(w, "# fit -: no line t = latency + bytes/bandwidth fits (fewer than two sizes, or times that do not grow with size)\n")
	}
	if noLatency {
		fmt.Fprintf(w, "# fit latency -: times grew faster than linearly with size, so the line goes through the origin and has no latency term\n")
	}
	writeSkipped(w, skipped)

	fmt.Fprintf(w, "#\n# Per size: out-of-place time in us (%s; * = fastest)\n# %10s", stat, "size")
	short := shortLabels(reports, labels)
	for _, l := range short {
		fmt.Fprintf(w, " %22s", l)
	}
	fmt.Fprintf(w, "  %s\n", "winner")
	for i, row := range reports[0].Rows {
		best := -1
		for j, r := range reports {
			if i < len(r.Rows) && r.Rows[i].Bytes == row.Bytes &&
				(best < 0 || r.Rows[i].OutOfPlace.TimeUS < reports[best].Rows[i].OutOfPlace.TimeUS) {
				best = j
			}
		}
		fmt.Fprintf(w, "  %10d", row.Bytes)
		for j, r := range reports {
			if i >= len(r.Rows) || r.Rows[i].Bytes != row.Bytes {
				fmt.Fprintf(w, " %22s", "-")
				continue
			}
			mark := " "
			if j == best {
				mark = "*"
			}
			cell := fmt.Sprintf("%.2f%s", r.Rows[i].OutOfPlace.TimeUS, mark)
			if r.Algorithm == "adaptive" {
				cell = fmt.Sprintf("(%s) %s", r.Rows[i].Algorithm, cell)
			}
			fmt.Fprintf(w, " %22s", cell)
		}
		fmt.Fprintf(w, "  %s\n", short[best])
	}
}

// timeStatistic names the reports' time column, or says it differs.
func timeStatistic(reports []bench.Report) string {
	t, _ := bench.ParseRankTime(reports[0].RankTime)
	for _, r := range reports {
		if r.RankTime != reports[0].RankTime {
			return "each combination's own -a"
		}
	}
	return t.Short()
}

// shortLabels names the combinations by what differs between them: of
// collective, algorithm, transports and ranks the parts that are not the
// same for all, then what DistinctLabels added.
func shortLabels(reports []bench.Report, labels []string) []string {
	parts := []func(bench.Report) string{
		func(r bench.Report) string { return r.Collective },
		func(r bench.Report) string { return r.Algorithm },
		func(r bench.Report) string { return r.TransportsRan() },
		func(r bench.Report) string { return fmt.Sprintf("%dr", r.Ranks) },
	}
	out := make([]string, len(labels))
	for i, r := range reports {
		var keep []string
		for _, part := range parts {
			for _, o := range reports {
				if part(o) != part(reports[0]) {
					keep = append(keep, part(r))
					break
				}
			}
		}
		out[i] = strings.TrimSpace(strings.Join(keep, "/") + strings.TrimPrefix(labels[i], r.Label()))
		if out[i] == "" {
			out[i] = r.Algorithm
		}
	}
	return out
}

// transportSettings records the transport flags in a report.
func transportSettings(opts options) map[string]string {
	return map[string]string{
		"streams":        fmt.Sprint(opts.streams),
		"tcp_congestion": cmp.Or(opts.congestion, "default"),
		"spin_wait":      spinFlag{&opts.spinWait}.String(),
		"bind":           opts.bind,
	}
}
