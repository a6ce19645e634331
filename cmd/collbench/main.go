package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/algo/adaptive"
	"github.com/collkit/collkit/bench"
	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/launch"
	"github.com/collkit/collkit/reduce"
)

// Exit statuses.
const (
	exitFailed = 1 // a run failed or produced wrong results
	exitUsage  = 2 // bad flags, bad environment or setup failure
)

// options are collbench's flags after validation.
type options struct {
	tune           bool          // the tune subcommand
	algos          []string      // --algo, expanded
	tuningIn       string        // --tuning: tuning file for adaptive
	tuneOut        string        // tune --output
	transports     []string      // --transport, expanded to those that can run here
	skipped        []unavailable // --transport names that cannot run here, with why
	np             int
	npSet          bool
	streams        int
	nodes          int // --nodes: simulated nodes
	spinWait       time.Duration
	bind           string // --bind: core or none
	interleave     bool   // --interleave: size by size, the algorithms in turn
	rounds         int    // --rounds: interleaved sweeps, the median kept
	bench          bench.Config
	coll           string // --coll: the collective measured
	root           int    // --root: the root of rooted collectives
	jsonPath       string
	stats          bool   // --stats
	tracePath      string // --trace
	metricsAddr    string // --metrics-addr
	metrics        *metricsServer
	csvPath        string
	plotPath       string
	quiet          bool
	gates          gates
	baseline       *bench.File // --baseline, read before the run
	timeout        time.Duration
	connectTimeout time.Duration
	tls            tlsFiles // --tls-cert, --tls-key, --tls-ca
}

// usageError marks errors that are the user's input, not a failed run.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if len(args) > 0 {
		switch args[0] {
		case "compare":
			return runCompare(args[1:], stdout, stderr)
		case "topo":
			return topo(args[1:], stdout, stderr)
		case "plot":
			return runPlot(args[1:], stdout, stderr)
		}
	}
	opts, err := parseFlags(args, stderr)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "collbench: %v\n", err)
		return exitUsage
	}

	env, err := bootstrap.FromEnv(os.Getenv)
	switch {
	case errors.Is(err, bootstrap.ErrNoEnv):
		return launchLocal(ctx, opts, args, stderr)
	case err != nil:
		fmt.Fprintf(stderr, "collbench: %v\n", err)
		return exitUsage
	}
	if opts.npSet && opts.np != env.Size {
		fmt.Fprintf(stderr, "collbench: rank %d: --np %d but the launcher started %d ranks (%s); drop --np or make them agree\n",
			env.Rank, opts.np, env.Size, env.Source)
		return exitUsage
	}
	report := &failReport{w: stderr, rank: env.Rank}
	if err := worker(ctx, env, opts, stdout, report); err != nil {
		report.print(err)
		var u usageError
		if errors.As(err, &u) {
			return exitUsage
		}
		return exitFailed
	}
	return 0
}

// failReport prints a rank's error once, as soon as it is known: before
// the cleanup that follows it (closing connections; rank 0 waiting for the
// other ranks to leave its store), so that the user sees the cause when it
// happens and a stuck peer cannot delay it.
type failReport struct {
	once sync.Once
	w    io.Writer
	rank int
}

func (f *failReport) print(err error) {
	f.once.Do(func() { fmt.Fprintf(f.w, "collbench: rank %d: %v\n", f.rank, err) })
}

// setupContext bounds a setup step (the rendezvous, connecting a
// transport) by --connect-timeout, saying so when it passes.
func setupContext(ctx context.Context, opts options) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, opts.connectTimeout, fmt.Errorf(
		"--connect-timeout %v passed (raise it if ranks start further apart)", opts.connectTimeout))
}

// launchLocal starts opts.np ranks of this program on this machine.
func launchLocal(ctx context.Context, opts options, args []string, stderr io.Writer) int {
	err := launch.Run(ctx, launch.Config{N: opts.np, Args: args, Grace: opts.timeout})
	var re *launch.RankError
	if errors.As(err, &re) {
		reportKilled(stderr, re) // the other ranks have printed their own errors
		return re.ExitCode()
	}
	if err != nil {
		fmt.Fprintf(stderr, "collbench: %v\n", err)
		return exitUsage
	}
	return 0
}

// autoSpin is --spin-wait auto: the transport learns the budget per peer.
const autoSpin time.Duration = -1

// spinFlag is --spin-wait: auto, or a duration (0 disables polling).
type spinFlag struct{ d *time.Duration }

func (f spinFlag) String() string {
	if f.d == nil || *f.d == autoSpin {
		return "auto"
	}
	return f.d.String()
}

func (f spinFlag) Type() string { return "auto|duration" }

func (f spinFlag) Set(v string) error {
	if v == "auto" {
		*f.d = autoSpin
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return fmt.Errorf("want auto or a duration of at least 0 (0 disables polling), such as 200us")
	}
	*f.d = d
	return nil
}

// spinWait maps the flag (auto, or a duration where 0 disables) to
// collkit.Options (0 learns, negative disables).
func spinWait(d time.Duration) time.Duration {
	switch d {
	case autoSpin:
		return 0
	case 0:
		return -1
	}
	return d
}

// shareCores gives each of the ranks on this host an equal share of its
// cores (at least one) unless the user set GOMAXPROCS. Idle Go scheduler
// threads spin looking for work; with more threads than cores across the
// ranks they steal the cores the other ranks need to move data (measured:
// --np 2 on 2 cores, 1 MiB, busbw 2.7 GB/s with GOMAXPROCS=2 per rank,
// 3.4 with 1).
func shareCores(env bootstrap.Env) {
	if os.Getenv("GOMAXPROCS") != "" || env.LocalSize <= 0 {
		return
	}
	runtime.GOMAXPROCS(max(1, runtime.NumCPU()/env.LocalSize))
}

func worker(ctx context.Context, env bootstrap.Env, opts options, stdout io.Writer, report *failReport) (err error) {
	shareCores(env)
	if opts.bind == "core" && env.LocalSize > 0 {
		if _, err := launch.BindCore(env.LocalRank); err != nil {
			return err
		}
	}
	log, err := collkit.LoggerFromEnv(os.Getenv)
	if err != nil {
		return usageError{err}
	}
	setup, cancel := setupContext(ctx, opts)
	store, closer, err := bootstrap.RendezvousWith(setup, env, bootstrap.RendezvousConfig{Log: log.With("rank", env.Rank)})
	cancel()
	if err != nil {
		return usageError{fmt.Errorf("collkit: rank %d: %w", env.Rank, err)}
	}
	defer func() {
		if err != nil {
			// The error first: then rank 0 stops its store, telling the
			// ranks still setting up, and waits for the others only
			// briefly, since a stuck one would hold it for the whole
			// bootstrap.ShutdownGrace.
			report.print(err)
			closer.Abort(err)
			return
		}
		// A rank claimed twice after the setup: this run may have been
		// joined by a process of another job.
		var se *bootstrap.StoreError
		if cerr := closer.Close(); errors.As(cerr, &se) {
			err = se
		}
	}()
	if opts.metrics, err = startMetrics(opts.metricsAddr, env); err != nil {
		return usageError{err}
	}
	defer opts.metrics.Close()

	lead := env.Rank == 0
	out := io.Discard
	prog := newProgress(lead && !opts.quiet, len(opts.transports)*len(opts.algos)*len(opts.bench.Sizes())*max(opts.rounds, 1))
	defer prog.Finish()
	if lead {
		out = prog.Writer(stdout)
	}
	writeSkipped(out, opts.skipped)
	var reports []bench.Report
	for _, tr := range opts.transports {
		rs, err := runTransport(ctx, env, store, tr, opts, out, prog, report)
		reports = append(reports, rs...)
		if err != nil {
			return err
		}
	}
	prog.Finish()
	if opts.tune {
		return writeTuning(opts, reports, lead)
	}
	if len(reports) > 1 {
		writeMatrix(out, reports, opts.skipped)
	}
	var wrong int64
	for _, r := range reports {
		wrong += r.Wrong
	}
	if lead {
		file := bench.File{Schema: bench.SchemaVersion, Environment: bench.CurrentEnvironment(), Reports: reports}
		if err := writeOutputs(opts.jsonPath, opts.csvPath, opts.plotPath, file); err != nil {
			return err
		}
		if wrong == 0 {
			if err := applyGates(out, opts.gates, opts.baseline, file); err != nil {
				return err
			}
		}
	}
	if wrong > 0 {
		return fmt.Errorf("%d wrong elements summed over all ranks: the results are incorrect", wrong)
	}
	return nil
}

// runTransport connects the named transport (with its own keys in the
// job's store) and sweeps every algorithm over it.
func runTransport(ctx context.Context, env bootstrap.Env, store bootstrap.Store, tr string, opts options, out io.Writer, prog *progress, report *failReport) (reports []bench.Report, err error) {
	setup, cancel := setupContext(ctx, opts)
	defer cancel()
	tlsConfig, err := opts.tls.load()
	if err != nil {
		return nil, usageError{err}
	}
	comm, err := collkit.ConnectStore(setup, env, bootstrap.WithPrefix(store, "collbench/"+tr+"/"), collkit.Options{
		TLS:            tlsConfig,
		Algorithm:      opts.algos[0],
		Transport:      tr,
		Streams:        opts.streams,
		Timeout:        opts.timeout,
		Tuning:         opts.tuningIn,
		SimulatedNodes: opts.nodes,
		SpinWait:       spinWait(opts.spinWait),
		Trace:          opts.tracePath != "",
	})
	if err != nil {
		return nil, usageError{err}
	}
	defer func() {
		if err != nil {
			report.print(err) // before Close, which may wait on peers
		}
		comm.Close()
	}()
	opts.metrics.add(comm, tr)
	if opts.root >= comm.Size() {
		return nil, usageError{fmt.Errorf("--root %d is not a rank of %d (0 to %d)", opts.root, comm.Size(), comm.Size()-1)}
	}
	if opts.interleave {
		reports, err = runInterleaved(ctx, comm, tr, opts, out, prog)
		if err != nil {
			return reports, err
		}
		return reports, finishObserving(ctx, comm, tr, opts, out)
	}
	for _, algo := range opts.algos {
		if err := comm.SetAlgorithm(algo); err != nil {
			return reports, usageError{err}
		}
		prog.Describe(algo + "/" + tr)
		report, err := runOne(ctx, comm, tr, opts, out, prog)
		if err != nil {
			return reports, err
		}
		reports = append(reports, report)
	}
	return reports, finishObserving(ctx, comm, tr, opts, out)
}

// runInterleaved measures size by size, every algorithm in turn at each
// size, so that the machine's slow drift (other load, frequency, the
// hypervisor) falls on the algorithms alike; each algorithm's table is
// printed once all sizes are done.
// With --rounds R it does all that R times and keeps, for each algorithm
// and size, the round with the median time.
func runInterleaved(ctx context.Context, comm *collkit.Comm, tr string, opts options, out io.Writer, prog *progress) ([]bench.Report, error) {
	sizes := opts.bench.Sizes()
	rounds := make([][][]bench.Row, len(opts.algos)) // algorithm, size, round
	for i := range rounds {
		rounds[i] = make([][]bench.Row, len(sizes))
	}
	for range max(opts.rounds, 1) {
		for k, size := range sizes {
			cfg := opts.bench
			cfg.MinBytes, cfg.MaxBytes = size, size
			for i, algo := range opts.algos {
				if err := comm.SetAlgorithm(algo); err != nil {
					return nil, usageError{err}
				}
				prog.Describe(algo + "/" + tr)
				got, err := bench.RunCollective(ctx, comm, opts.coll, cfg, opts.root, func(bench.Row) { prog.Add(1) })
				if err != nil {
					return nil, err
				}
				rounds[i][k] = append(rounds[i][k], got...)
			}
		}
	}
	rows := make([][]bench.Row, len(opts.algos))
	for i := range rounds {
		for _, rs := range rounds[i] {
			if len(rs) == 0 {
				continue
			}
			slices.SortFunc(rs, func(a, b bench.Row) int { return cmp.Compare(a.OutOfPlace.TimeUS, b.OutOfPlace.TimeUS) })
			rows[i] = append(rows[i], rs[len(rs)/2])
		}
	}
	reports := make([]bench.Report, len(opts.algos))
	for i, algo := range opts.algos {
		if err := comm.SetAlgorithm(algo); err != nil {
			return nil, usageError{err}
		}
		reports[i] = newReport(comm, tr, opts)
		reports[i].WriteHeader(out)
		for _, row := range rows[i] {
			bench.WriteRow(out, row)
		}
		reports[i].Finish(rows[i])
		reports[i].WriteFooter(out)
	}
	return reports, nil
}

// runOne sweeps the sizes with the communicator's current algorithm.
func runOne(ctx context.Context, comm *collkit.Comm, tr string, opts options, out io.Writer, prog *progress) (bench.Report, error) {
	report := newReport(comm, tr, opts)
	report.WriteHeader(out)
	rows, err := bench.RunCollective(ctx, comm, opts.coll, opts.bench, opts.root, func(row bench.Row) {
		bench.WriteRow(out, row)
		prog.Add(1)
	})
	if err != nil {
		return report, err
	}
	report.Finish(rows)
	report.WriteFooter(out)
	return report, nil
}

// newReport describes a sweep with the communicator's current algorithm.
func newReport(comm *collkit.Comm, tr string, opts options) bench.Report {
	report := bench.NewReport()
	report.Collective, report.Algorithm, report.Transport = "allreduce", comm.Algorithm(), tr
	report.Ranks, report.Streams, report.TransportSettings = comm.Size(), opts.streams, transportSettings(opts)
	report.Iters, report.Warmup, report.Check, report.Seed = opts.bench.Iters, opts.bench.Warmup, opts.bench.Check, opts.bench.Seed
	report.Collective = opts.coll
	if opts.coll != "allreduce" {
		report.Algorithm = "per size (see the algo column)"
	}
	if report.Iters == 0 {
		report.MinTimeMS, report.MaxIters = float64(opts.bench.MinTime.Microseconds())/1e3, opts.bench.MaxIters
	}
	return report
}

// writeTuning fits the cost model to the sweep of every algorithm and saves
// the tuning file (rank 0).
func writeTuning(opts options, reports []bench.Report, lead bool) error {
	table := bench.Tune(reports, opts.transports[0])
	if !lead {
		return nil
	}
	if err := table.Save(opts.tuneOut); err != nil {
		return err
	}
	fmt.Printf("# tuning for %d ranks over %s written to %s (use: collbench --algo adaptive --tuning %s)\n",
		reports[0].Ranks, opts.transports[0], opts.tuneOut, opts.tuneOut)
	return nil
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := pflag.NewFlagSet("collbench", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = false
	var o options
	var size, minB, maxB, dtype, op, algo, transports, tolerance, baseline string
	if len(args) > 0 && args[0] == "tune" {
		o.tune, args = true, args[1:]
		fs.StringVar(&o.tuneOut, "output", "collkit-tune.json", "tune: where to write the tuning file")
	}
	fs.StringVar(&o.coll, "coll", "allreduce", "collective to measure: "+strings.Join(bench.Collectives(), ", "))
	fs.IntVarP(&o.root, "root", "r", 0, "root rank of broadcast, reduce, gather and scatter")
	fs.IntVar(&o.bench.Group, "group", 1, "all-reduces per iteration, issued as one fused group (like ncclGroupStart/End with Horovod's tensor fusion); times are for the whole group")
	fs.BoolVar(&o.bench.NoFusion, "no-fusion", false, "with --group: issue the all-reduces one by one instead, for comparison")
	fs.BoolVar(&o.stats, "stats", false, "print rank 0's communication statistics (ops, bytes, p50/p99 per collective and algorithm) after the run")
	fs.StringVar(&o.tracePath, "trace", "", "write a Chrome/Perfetto trace of every rank's collectives and messages to this file")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus metrics on this host:port during the run (local rank k on port+k)")
	fs.StringVarP(&algo, "algo", "a", "ring", "all-reduce algorithm, a comma-separated list, or all: "+strings.Join(collkit.Algorithms(), ", "))
	fs.BoolVar(&o.interleave, "interleave", false, "with several --algo: measure size by size, every algorithm in turn at each size, so that drift of a noisy machine hits them alike (tables print at the end)")
	fs.IntVar(&o.rounds, "rounds", 1, "with --interleave: repeat the sweep this many times and keep each size's median (tune: default 3)")
	fs.StringVar(&o.tuningIn, "tuning", "", "tuning file from 'collbench tune' for --algo adaptive (default $COLLKIT_TUNING)")
	fs.StringVarP(&transports, "transport", "t", "tcp", "transport, a comma-separated list, or all: "+strings.Join(collkit.Transports(), ", "))
	fs.IntVar(&o.np, "np", 4, "ranks to launch on this machine when no launcher set RANK/WORLD_SIZE")
	fs.StringVar(&size, "size", "", "one message size in bytes (K/M/G suffixes); sets -b and -e")
	fs.StringVarP(&minB, "minbytes", "b", "8", "smallest message size in bytes (K/M/G suffixes)")
	fs.StringVarP(&maxB, "maxbytes", "e", "64M", "largest message size in bytes (K/M/G suffixes)")
	fs.Int64VarP(&o.bench.StepFactor, "stepfactor", "f", 2, "multiply the size by this between steps")
	fs.IntVarP(&o.bench.Iters, "iters", "n", 0, "timed iterations per size (default: as many as --min-time takes)")
	fs.DurationVar(&o.bench.MinTime, "min-time", 100*time.Millisecond, "without -n: iterate each size until this much time is spent timing it")
	fs.IntVar(&o.bench.MaxIters, "max-iters", 1000, "without -n: at most this many iterations per size")
	fs.IntVarP(&o.bench.Warmup, "warmup_iters", "w", 5, "untimed warm-up iterations per size")
	fs.IntVarP(&o.bench.Check, "check", "c", 1, "verified iterations per size (0 disables the check)")
	fs.StringVarP(&dtype, "datatype", "d", "float32", "element type: float32, float64, int32, int64, uint8, float16, bfloat16")
	fs.StringVarP(&op, "op", "o", "sum", "reduction: sum, prod, min, max, avg")
	fs.Uint64Var(&o.bench.Seed, "seed", 1, "seed of the checked inputs")
	fs.IntVar(&o.streams, "streams", 1, "TCP connections per peer")
	o.spinWait = autoSpin
	fs.Var(spinFlag{&o.spinWait}, "spin-wait", "how long a TCP receive polls, yielding the core between polls, before sleeping: auto (learned per peer from its recent waits) or a duration (0 disables)")
	fs.StringVar(&o.bind, "bind", "core", "bind each local rank to one core, as mpirun --bind-to core (left alone when a launcher already bound it), or none")
	fs.IntVar(&o.nodes, "nodes", 0, "split the ranks into this many simulated nodes for --algo hierarchical (default: group by host name or $COLLKIT_NODE)")
	fs.StringVar(&o.jsonPath, "json", "", "write the results as JSON to this file (rank 0; schema in bench/SCHEMA.md)")
	fs.StringVar(&o.csvPath, "csv", "", "write the results as CSV to this file (rank 0)")
	fs.StringVar(&o.plotPath, "plot", "", "draw busbw and latency against size to this .png or .svg file (rank 0)")
	fs.StringVar(&baseline, "baseline", "", "compare with this earlier --json result and fail (exit 1) on a regression beyond --tolerance")
	addGateFlags(fs, &tolerance, &o.gates.minBW)
	fs.BoolVarP(&o.quiet, "quiet", "q", false, "no progress bar on stderr")
	fs.DurationVar(&o.timeout, "timeout", 60*time.Second, "fail a collective that takes longer than this (a dead or stuck peer)")
	fs.DurationVar(&o.connectTimeout, "connect-timeout", 30*time.Second, "give up setting up after this long: all ranks joining the store (the missing ones are named; COLLKIT_DEBUG=INFO logs them every 5 s), and then connecting each transport")
	o.tls.flags(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: collbench [flags]\n       collbench tune [flags]\n       collbench compare BASE.json NEW.json [--tolerance 10%%] [--min-bw GB/s]\n       collbench plot RESULT.json... [-o FILE.png|FILE.svg]\n\n"+
			"Measures and verifies collectives (all-reduce by default) between local ranks (or ranks started by torchrun, mpirun or srun).\n\nFlags:\n%s", fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return o, err
		}
		return o, fmt.Errorf("%v (see collbench --help)", err)
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q (see collbench --help)", fs.Arg(0))
	}
	o.npSet = fs.Changed("np")
	o.interleave = o.interleave || o.tune || o.rounds > 1 // tune compares its candidates size by size
	if o.tune && !fs.Changed("rounds") {
		o.rounds = 3
	}
	if size != "" {
		minB, maxB = size, size
	}
	var err error
	if o.bench.DType, err = reduce.ParseDType(dtype); err != nil {
		return o, fmt.Errorf("--datatype: %w", err)
	}
	if o.bench.Op, err = reduce.ParseOp(op); err != nil {
		return o, fmt.Errorf("--op: %w", err)
	}
	if o.tune && !fs.Changed("algo") {
		algo = strings.Join(adaptiveCandidates(), ",") // what adaptive chooses among
	}
	if o.algos, err = parseAlgos(algo, o.tune); err != nil {
		return o, err
	}
	if o.bench.Group < 1 {
		return o, fmt.Errorf("--group %d: must be at least 1", o.bench.Group)
	}
	if o.bench.Group > 1 && o.coll != "allreduce" {
		return o, fmt.Errorf("--group applies to --coll allreduce only")
	}
	if !bench.IsCollective(o.coll) {
		return o, fmt.Errorf("--coll %q: unknown collective (use one of %s)", o.coll, strings.Join(bench.Collectives(), ", "))
	}
	if o.coll != "allreduce" {
		o.algos = o.algos[:1] // --algo picks the all-reduce algorithm only
	}
	if o.tune && o.coll != "allreduce" {
		return o, fmt.Errorf("--coll %s: tune fits the all-reduce cost model only; drop --coll", o.coll)
	}
	if o.root < 0 || o.npSet && o.np >= 1 && o.root >= o.np {
		return o, fmt.Errorf("--root %d: must be a rank, 0 to the number of ranks - 1", o.root)
	}
	if o.transports, o.skipped, err = parseTransports(transports, collkit.Transports(), collkit.TransportAvailable); err != nil {
		return o, err
	}
	if o.tune && len(o.transports) > 1 {
		return o, fmt.Errorf("--transport %s: tune fits one transport at a time; name one", transports)
	}
	if o.gates.tolerance, err = parseTolerance(tolerance); err != nil {
		return o, err
	}
	if o.plotPath != "" {
		if err := checkPlotPath(o.plotPath); err != nil {
			return o, err
		}
	}
	if baseline != "" {
		f, err := bench.ReadJSONFile(baseline)
		if err != nil {
			return o, fmt.Errorf("--baseline: %w", err)
		}
		o.gates.baseline, o.baseline = baseline, &f
	}
	o.bench.KeepSamples = true // for --json and --baseline comparisons
	es := int64(o.bench.DType.Size())
	flagName := map[bool]string{true: "--size", false: "--minbytes"}[size != ""]
	if o.bench.MinBytes, err = parseSize(flagName, minB, es); err != nil {
		return o, err
	}
	flagName = map[bool]string{true: "--size", false: "--maxbytes"}[size != ""]
	if o.bench.MaxBytes, err = parseSize(flagName, maxB, es); err != nil {
		return o, err
	}
	switch {
	case o.bench.MaxBytes < o.bench.MinBytes:
		return o, fmt.Errorf("--maxbytes %d is smaller than --minbytes %d", o.bench.MaxBytes, o.bench.MinBytes)
	case o.np < 1:
		return o, fmt.Errorf("--np %d: the number of ranks must be at least 1", o.np)
	case o.bench.StepFactor < 2:
		return o, fmt.Errorf("--stepfactor %d: must be at least 2", o.bench.StepFactor)
	case o.bench.Iters < 0:
		return o, fmt.Errorf("--iters %d: must be at least 1 (or left out for --min-time)", o.bench.Iters)
	case o.bench.Iters == 0 && (o.bench.MinTime <= 0 || o.bench.MaxIters < 1):
		return o, fmt.Errorf("--min-time %v, --max-iters %d: without -n both must be positive", o.bench.MinTime, o.bench.MaxIters)
	case o.gates.minBW < 0:
		return o, fmt.Errorf("--min-bw %g: must not be negative", o.gates.minBW)
	case o.bench.Warmup < 0 || o.bench.Check < 0:
		return o, fmt.Errorf("--warmup_iters and --check must not be negative")
	case o.nodes < 0 || o.nodes > o.np && o.npSet:
		return o, fmt.Errorf("--nodes %d: must be between 1 and the number of ranks", o.nodes)
	case o.streams < 1:
		return o, fmt.Errorf("--streams %d: must be at least 1", o.streams)
	case o.rounds < 1:
		return o, fmt.Errorf("--rounds %d: must be at least 1", o.rounds)
	case o.bind != "core" && o.bind != "none":
		return o, fmt.Errorf("--bind %q: want core or none", o.bind)
	case !o.tls.complete():
		return o, fmt.Errorf("--tls-cert, --tls-key and --tls-ca go together: give all three or none")
	case o.timeout <= 0 || o.connectTimeout <= 0:
		return o, fmt.Errorf("--timeout and --connect-timeout must be positive durations such as 30s")
	}
	return o, nil
}

// parseAlgos expands --algo: a name, a comma-separated list or "all". Tune
// measures the fixed algorithms only, so adaptive is left out of its "all".
// adaptiveCandidates names the algorithms the adaptive algorithm chooses
// among, which tune measures unless --algo says otherwise.
func adaptiveCandidates() []string {
	var names []string
	for _, a := range adaptive.Defaults() {
		names = append(names, a.Name)
	}
	return names
}

func parseAlgos(s string, tune bool) ([]string, error) {
	known := collkit.Algorithms()
	if s == "all" {
		if tune {
			return slices.DeleteFunc(known, func(a string) bool { return a == "adaptive" }), nil
		}
		return known, nil
	}
	var algos []string
	for _, a := range strings.Split(s, ",") {
		a = strings.TrimSpace(a)
		if !slices.Contains(known, a) {
			return nil, fmt.Errorf("--algo %q: unknown algorithm (use one of %s, or all)", a, strings.Join(known, ", "))
		}
		algos = append(algos, a)
	}
	return algos, nil
}

// parseSize reads a byte count with an optional K, M or G suffix (powers of
// 1024, as nccl-tests reads them) that must be a whole number of elements.
func parseSize(flag, s string, elemSize int64) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	t = strings.TrimSuffix(t, "B")
	mult := int64(1)
	switch {
	case strings.HasSuffix(t, "K"):
		mult, t = 1<<10, strings.TrimSuffix(t, "K")
	case strings.HasSuffix(t, "M"):
		mult, t = 1<<20, strings.TrimSuffix(t, "M")
	case strings.HasSuffix(t, "G"):
		mult, t = 1<<30, strings.TrimSuffix(t, "G")
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("%s %q: not a positive byte count (examples: 8, 64K, 16M, 1G)", flag, s)
	}
	b := v * mult
	if b%elemSize != 0 {
		return 0, fmt.Errorf("%s %s: %d bytes is not a multiple of the element size %d; pick a size divisible by %d",
			flag, s, b, elemSize, elemSize)
	}
	return b, nil
}
