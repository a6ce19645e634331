package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

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
// and per size the winner (lowest median out-of-place time).
func writeMatrix(w io.Writer, reports []bench.Report, skipped []unavailable) {
	fmt.Fprintf(w, "#\n# Summary per combination (out-of-place; latency = median iteration time of the slowest rank)\n")
	fmt.Fprintf(w, "# %-36s %10s %14s %10s %12s %10s\n", "combination", "avg busbw", "best latency", "at size", "fit latency", "fit busbw")
	fmt.Fprintf(w, "# %-36s %10s %14s %10s %12s %10s\n", "", "(GB/s)", "(us)", "(B)", "(us)", "(GB/s)")
	for _, r := range reports {
		fmt.Fprintf(w, "  %-36s %10s %14.2f %10d %12.2f %10s\n", r.Label(), bench.FormatGB(r.AvgBusBW),
			r.BestLatencyUS, r.BestLatencyBytes, r.FitLatencyUS, bench.FormatGB(r.FitBusBW))
	}
	writeSkipped(w, skipped)

	fmt.Fprintf(w, "#\n# Per size: median out-of-place time in us (* = fastest)\n# %10s", "size")
	for _, r := range reports {
		fmt.Fprintf(w, " %22s", shortLabel(r, reports))
	}
	fmt.Fprintf(w, "  %s\n", "winner")
	for i, row := range reports[0].Rows {
		best := -1
		for j, r := range reports {
			if i < len(r.Rows) && r.Rows[i].Bytes == row.Bytes &&
				(best < 0 || r.Rows[i].OutOfPlace.Typical() < reports[best].Rows[i].OutOfPlace.Typical()) {
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
			cell := fmt.Sprintf("%.2f%s", r.Rows[i].OutOfPlace.Typical(), mark)
			if r.Algorithm == "adaptive" {
				cell = fmt.Sprintf("(%s) %s", r.Rows[i].Algorithm, cell)
			}
			fmt.Fprintf(w, " %22s", cell)
		}
		fmt.Fprintf(w, "  %s\n", shortLabel(reports[best], reports))
	}
}

// shortLabel names a combination by what differs between the reports:
// the algorithm, and the transport when there are several.
func shortLabel(r bench.Report, all []bench.Report) string {
	transports := map[string]bool{}
	for _, o := range all {
		transports[o.Transport] = true
	}
	if len(transports) > 1 {
		return r.Algorithm + "/" + r.Transport
	}
	return r.Algorithm
}

// transportSettings records the transport flags in a report.
func transportSettings(opts options) map[string]string {
	return map[string]string{
		"streams":   fmt.Sprint(opts.streams),
		"spin_wait": spinFlag{&opts.spinWait}.String(),
		"bind":      opts.bind,
	}
}
