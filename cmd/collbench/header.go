package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/collkit/collkit/algo/adaptive"
	"github.com/collkit/collkit/bench"
	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/gpu"
)

// rankInfoKey is where each rank publishes its host, pid and device for
// rank 0's header.
const rankInfoKey = "collbench/rankinfo/"

// rankLine describes this rank for the header: nccl-tests' "Rank r Pid p
// on host device d".
func rankLine(env bootstrap.Env, cpu int, transports []string) string {
	host, _ := os.Hostname()
	device := "cpu, not bound to a core"
	if cpu >= 0 {
		device = "cpu core " + strconv.Itoa(cpu)
	}
	if slices.Contains(transports, "nccl") {
		device += "; nccl: " + gpuOf(env.LocalRank)
	}
	return fmt.Sprintf("#  Rank %2d Pid %7d on %10s device %s", env.Rank, os.Getpid(), host, device)
}

// gpuOf names the GPU the nccl transport uses for a local rank: CUDA
// device LocalRank modulo the visible ones.
func gpuOf(localRank int) string {
	topo, err := gpu.Discover()
	if err != nil || len(topo.Devices) == 0 {
		return fmt.Sprintf("CUDA device %d modulo the visible devices (no NVML here to name it)", localRank)
	}
	d := topo.Devices[localRank%len(topo.Devices)]
	return fmt.Sprintf("GPU %d [%s] %s", localRank%len(topo.Devices), d.BusID, d.Name)
}

// rankLines publishes this rank's line and, on rank 0, returns every
// rank's in rank order (the others return nil without waiting).
func rankLines(ctx context.Context, store bootstrap.Store, env bootstrap.Env, line string) ([]string, error) {
	if err := store.Set(ctx, rankInfoKey+strconv.Itoa(env.Rank), []byte(line)); err != nil {
		return nil, fmt.Errorf("publishing this rank's host and device: %w", err)
	}
	if env.Rank != 0 {
		return nil, nil
	}
	lines := make([]string, env.Size)
	for r := range env.Size {
		b, err := store.Get(ctx, rankInfoKey+strconv.Itoa(r))
		if err != nil {
			return nil, fmt.Errorf("waiting for rank %d's host and device: %w", r, err)
		}
		lines[r] = string(b)
	}
	return lines, nil
}

// writeRunHeader prints, once before the tables, what the run is: the
// parameters in nccl-tests' words, the statistic of the time column, the
// memory estimate and every rank's host, pid and device.
func writeRunHeader(w io.Writer, opts options, env bootstrap.Env, ranks []string) {
	cfg := opts.bench
	fmt.Fprintf(w, "# collbench (collkit %s): %s over %s, algorithms %s; %d ranks, %d on this host\n",
		bench.CurrentEnvironment().CollkitVersion, opts.coll, strings.Join(opts.transports, ","), strings.Join(opts.algos, ","),
		env.Size, max(env.LocalSize, 1))
	if opts.autoWhy != "" {
		fmt.Fprintf(w, "# transport %s (--transport auto: %s; --transport tcp or shm to choose)\n", opts.transports[0], opts.autoWhy)
	}
	step := fmt.Sprintf("%d(factor)", max(cfg.StepFactor, 2))
	if cfg.StepBytes > 0 {
		step = fmt.Sprintf("%d(bytes)", cfg.StepBytes)
	}
	iters := strconv.Itoa(cfg.Iters)
	if cfg.Iters == 0 {
		iters = fmt.Sprintf("adaptive (min-time %v, at most %d)", cfg.MinTime, cfg.MaxIters)
	}
	agg := max(cfg.Group, 1) // nccl-tests' -m; the table header says whether times are per group or per operation
	fmt.Fprintf(w, "# nThread 1 nGpus 1 minBytes %d maxBytes %d step: %s warmup iters: %d iters: %s agg iters: %d validation: %d graph: 0\n",
		cfg.MinBytes, cfg.MaxBytes, step, cfg.Warmup, iters, agg, cfg.Check)
	var dts, ops []string
	for _, d := range opts.dtypes {
		dts = append(dts, d.String())
	}
	for _, o := range opts.ops {
		ops = append(ops, o.String())
	}
	what := "datatype " + strings.Join(dts, ",")
	if bench.Reduces(opts.coll) {
		what += ", op " + strings.Join(ops, ",")
	}
	if bench.Rooted(opts.coll) {
		what += ", root " + strconv.Itoa(opts.root)
		if opts.rootAll {
			what = strings.TrimSuffix(what, strconv.Itoa(opts.root)) + "all"
		}
	}
	if opts.cycles > 1 {
		what += fmt.Sprintf(", %d cycles (-N)", opts.cycles)
	}
	fmt.Fprintf(w, "# %s\n", what)
	fmt.Fprintf(w, "# time column: %s; blocking: -z %d%s\n", cfg.RankTime.Describe(), cfg.Sync.NCCL(),
		map[bench.Sync]string{bench.SyncNone: " (no barrier between iterations)", bench.SyncBarrier: " (a barrier after each iteration, timed)",
			bench.SyncBarrierUntimed: " (a barrier after each iteration, not timed)"}[cfg.Sync])
	per := bench.BufferBytes(opts.coll, cfg, env.Size)
	local := max(env.LocalSize, 1)
	avail := "MemAvailable unknown"
	if a, ok := memAvailable("/proc/meminfo"); ok {
		avail = "MemAvailable " + formatBytes(a)
	}
	fmt.Fprintf(w, "# memory: about %s of buffers per rank at the largest size, %s for the %d ranks on this host (%s; transports add their own)\n",
		formatBytes(per), formatBytes(per*int64(local)), local, avail)
	if line := tuningLine(opts, env.Size); line != "" {
		fmt.Fprintln(w, line)
	}
	fmt.Fprintf(w, "#\n# Using devices\n")
	for _, l := range ranks {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintf(w, "#\n")
}

// formatBytes prints a byte count in binary units.
func formatBytes(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}

// memAvailable reads MemAvailable (bytes) from a meminfo file.
func memAvailable(path string) (int64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return 0, false
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, false
		}
		return kb << 10, true
	}
	return 0, false
}

// preflightError is a mistake every rank finds alike (perHost false: rank
// 0 reports it) or each host for itself (perHost: its first local rank
// reports it).
type preflightError struct {
	err     error
	perHost bool
}

func (e preflightError) Error() string { return e.err.Error() }
func (e preflightError) Unwrap() error { return e.err }

// preflight checks what can be checked before any rank connects, with size
// ranks of which local run on this host: the root, the memory the buffers
// need, and that a tuning file fits the run. meminfo is /proc/meminfo.
func preflight(opts options, size, local int, meminfo string) error {
	if !opts.rootAll && opts.root >= size {
		return preflightError{err: fmt.Errorf("--root %d is not a rank of %d (0 to %d); give a rank, or all for one sweep per root", opts.root, size, size-1)}
	}
	if opts.nodes > size {
		return preflightError{err: fmt.Errorf("--nodes %d: more nodes than the %d ranks", opts.nodes, size)}
	}
	per := bench.BufferBytes(opts.coll, opts.bench, size)
	what := fmt.Sprintf("sizes up to %s need about %s of buffers per rank (send, receive and expected result)", formatBytes(opts.bench.MaxBytes), formatBytes(per))
	if opts.memLimit > 0 && per > opts.memLimit {
		return preflightError{err: fmt.Errorf("%s, more than -M %s allows; lower -e (or --size)", what, formatBytes(opts.memLimit))}
	}
	if avail, ok := memAvailable(meminfo); ok && per*int64(local) > avail {
		return preflightError{perHost: true, err: fmt.Errorf("%s, %s for the %d ranks on this host, more than its %s MemAvailable; lower -e (or --size) or --np, or spread the ranks over more hosts",
			what, formatBytes(per*int64(local)), local, formatBytes(avail))}
	}
	if err := checkTuning(opts, size); err != nil {
		return preflightError{err: err}
	}
	return nil
}

// tuningPath is the tuning file adaptive would use, or "".
func tuningPath(opts options) string {
	if !slices.Contains(opts.algos, "adaptive") || opts.tune {
		return ""
	}
	return cmp.Or(opts.tuningIn, os.Getenv("COLLKIT_TUNING"))
}

// checkTuning refuses a tuning file that has nothing for this run's rank
// count and transports: adaptive would silently fall back to built-in
// costs.
func checkTuning(opts options, size int) error {
	path := tuningPath(opts)
	if path == "" {
		return nil
	}
	t, err := adaptive.Load(path)
	if err != nil {
		return err
	}
	for _, tr := range opts.transports {
		if coverage(t, tr, size) == 0 {
			return fmt.Errorf("tuning file %s has no entry for %d ranks over %s (it has %s): adaptive would fall back to built-in costs; run collbench tune --np %d --transport %s --output %s, or drop --tuning / COLLKIT_TUNING",
				path, size, tr, tableHas(t), size, tr, path)
		}
	}
	return nil
}

// coverage counts the adaptive candidates the table has fits for.
func coverage(t *adaptive.Table, transport string, ranks int) int {
	n := 0
	for _, e := range t.Entries {
		if e.Transport == transport && e.Ranks == ranks && len(e.Fits) > 0 {
			n++
		}
	}
	return n
}

// tableHas lists a table's rank counts and transports.
func tableHas(t *adaptive.Table) string {
	var have []string
	for _, e := range t.Entries {
		h := fmt.Sprintf("%d ranks over %s", e.Ranks, e.Transport)
		if !slices.Contains(have, h) {
			have = append(have, h)
		}
	}
	if len(have) == 0 {
		return "no entries"
	}
	return strings.Join(have, ", ")
}

// tuningLine says which tuning file adaptive uses and, when it lacks some
// candidates for this run, which.
func tuningLine(opts options, size int) string {
	path := tuningPath(opts)
	if path == "" {
		return ""
	}
	t, err := adaptive.Load(path)
	if err != nil {
		return ""
	}
	line := fmt.Sprintf("# tuning: %s (made on %s at %s, %s)", path, cmp.Or(t.Host, "an unnamed host"), t.Created.Format("2006-01-02 15:04"), tableHas(t))
	for _, tr := range opts.transports {
		if n, want := coverage(t, tr, size), len(bench.Candidates(tr)); n < want {
			line += fmt.Sprintf("\n# warning: the tuning file fits %d of adaptive's %d candidates for %d ranks over %s; adaptive does not choose the others (collbench tune measures them all)", n, want, size, tr)
		}
	}
	return line
}

// speaks reports whether this rank prints err, a preflight error found by
// every rank alike.
func speaks(err error, env bootstrap.Env) bool {
	var pe preflightError
	if errors.As(err, &pe) && pe.perHost {
		return env.LocalRank == 0
	}
	return env.Rank == 0
}
