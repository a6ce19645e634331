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
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/bench"
	"github.com/collkit/collkit/bootstrap"
	_ "github.com/collkit/collkit/bootstrap/etcdstore" // COLLKIT_STORE=etcd://...
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
	autoWhy        string        // why --transport auto chose transports[0]
	skipped        []unavailable // --transport names that cannot run here, with why
	np             int
	npSet          bool
	mem            string // --mem: where --transport nccl's buffers live
	store          string // --store: the ranks' COLLKIT_STORE when collbench launches them
	streams        int
	congestion     string // --tcp-congestion
	nodes          int    // --nodes: simulated nodes
	intra          string // --intra: Options.IntraNode
	spinWait       time.Duration
	warmupTime     time.Duration // --warmup-time: bench.WarmUp before the first size
	bind           string        // --bind: core or none
	interleave     bool          // --interleave: size by size, the algorithms in turn
	rounds         int           // --rounds: interleaved sweeps, the median kept
	bench          bench.Config
	coll           string         // --coll: the collective measured
	root           int            // --root: the root of rooted collectives
	rootAll        bool           // --root all: one sweep per root
	rootText       string         // OSU's -k fixed:N, as --root
	dtypes         []reduce.DType // --datatype, expanded; bench.DType is the first
	ops            []reduce.Op    // --op, expanded; bench.Op is the first
	cycles         int            // -N: sweeps of everything
	samples        bool           // --samples, -I 1: every iteration's time in --json
	style          bench.TableStyle
	memLimit       int64 // OSU's -M: bytes per rank
	version        bool  // --version
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
		case "elastic":
			return runElastic(ctx, args[1:], stdout, stderr)
		}
	}
	opts, err := parseFlags(args, stderr)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	env, envErr := bootstrap.FromEnv(os.Getenv)
	if err != nil {
		// Under a launcher every rank parses the same flags: rank 0 says
		// what is wrong, once.
		if envErr != nil || env.Rank == 0 {
			fmt.Fprintf(stderr, "collbench: %v\n", err)
		}
		return exitUsage
	}
	if opts.version {
		fmt.Fprintf(stdout, "collbench (collkit %s)\n", bench.CurrentEnvironment().CollkitVersion)
		return 0
	}
	switch {
	case errors.Is(envErr, bootstrap.ErrNoEnv):
		// Checked here, once, before any rank starts.
		if err := gpuRanks(&opts); err != nil {
			fmt.Fprintf(stderr, "collbench: %v\n", err)
			return exitUsage
		}
		if err := preflight(opts, opts.np, opts.np, "/proc/meminfo"); err != nil {
			fmt.Fprintf(stderr, "collbench: %v\n", err)
			return exitUsage
		}
		return launchLocal(ctx, opts, args, stderr)
	case envErr != nil:
		fmt.Fprintf(stderr, "collbench: %v\n", envErr)
		return exitUsage
	}
	if opts.store != "" && opts.store != env.Store {
		fmt.Fprintf(stderr, "collbench: rank %d: --store %s but COLLKIT_STORE=%q: under a launcher other than collbench --np, set COLLKIT_STORE on every rank instead\n",
			env.Rank, opts.store, env.Store)
		return exitUsage
	}
	if opts.npSet && opts.np != env.Size {
		fmt.Fprintf(stderr, "collbench: rank %d: --np %d but the launcher started %d ranks (%s); drop --np or make them agree\n",
			env.Rank, opts.np, env.Size, env.Source)
		return exitUsage
	}
	if err := preflight(opts, env.Size, max(env.LocalSize, 1), "/proc/meminfo"); err != nil {
		if speaks(err, env) {
			fmt.Fprintf(stderr, "collbench: rank %d: %v\n", env.Rank, err)
		}
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
	err := launch.Run(ctx, launch.Config{N: opts.np, Args: args, Grace: max(opts.timeout, 0), Store: opts.store})
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
	cpu := -1
	if opts.bind == "core" && env.LocalSize > 0 {
		if cpu, err = launch.BindCore(env.LocalRank); err != nil {
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
	setup, cancel = setupContext(ctx, opts)
	ranks, err := rankLines(setup, store, env, rankLine(env, cpu, opts.transports))
	cancel()
	if err != nil {
		return err
	}
	out := io.Discard
	prog := newProgress(lead && !opts.quiet, os.Stderr, runWork(opts, env.Size), runSizes(opts, env.Size))
	defer prog.Finish()
	if lead {
		out = prog.Writer(stdout)
		writeRunHeader(out, opts, env, ranks)
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
		if err := writeOutputs(opts.jsonPath, opts.csvPath, opts.plotPath, file, opts.samples); err != nil {
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

// variant is one dtype, op and root of a run (-d all, -o all, -r all).
type variant struct {
	dtype reduce.DType
	op    reduce.Op
	root  int
}

// variants lists the run's dtypes, ops and roots, as nccl-tests loops
// over them: ops only for reducing collectives, roots only for rooted
// ones.
func variants(opts options, size int) []variant {
	ops := opts.ops
	if !bench.Reduces(opts.coll) {
		ops = ops[:1]
	}
	roots := []int{opts.root}
	if opts.rootAll && bench.Rooted(opts.coll) {
		roots = roots[:0]
		for r := range size {
			roots = append(roots, r)
		}
	}
	var vs []variant
	for _, d := range opts.dtypes {
		for _, o := range ops {
			for _, r := range roots {
				vs = append(vs, variant{d, o, r})
			}
		}
	}
	return vs
}

// runWork is the run's estimated work for the progress display, and
// runSizes its number of sizes.
func runWork(opts options, size int) float64 {
	return float64(runRepeats(opts, size)) * sweepWork(opts.bench)
}

func runSizes(opts options, size int) int {
	return runRepeats(opts, size) * int(opts.bench.NumSizes())
}

func runRepeats(opts options, size int) int {
	return len(opts.transports) * len(opts.algos) * max(opts.rounds, 1) * max(opts.cycles, 1) * len(variants(opts, size))
}

// runTransport connects the named transport (with its own keys in the
// job's store) and sweeps every variant and algorithm over it, -N times.
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
		IntraNode:      opts.intra,
		SpinWait:       spinWait(opts.spinWait),
		TCPCongestion:  opts.congestion,
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
	if err := bench.WarmUp(ctx, comm, opts.warmupTime); err != nil {
		return nil, err
	}
	opts.metrics.add(comm, tr)
	for cycle := 1; cycle <= max(opts.cycles, 1); cycle++ {
		for _, v := range variants(opts, comm.Size()) {
			cfg := opts.bench
			cfg.DType, cfg.Op = v.dtype, v.op
			cfg.Device = opts.onDevice(tr)
			var rs []bench.Report
			if opts.interleave {
				rs, err = runInterleaved(ctx, comm, tr, opts, cfg, v.root, out, prog)
			} else {
				rs, err = runEach(ctx, comm, tr, opts, cfg, v.root, out, prog)
			}
			for i := range rs {
				if opts.cycles > 1 {
					rs[i].Cycle = cycle
				}
			}
			reports = append(reports, rs...)
			if err != nil {
				return reports, err
			}
		}
	}
	return reports, finishObserving(ctx, comm, tr, opts, out)
}

// runEach sweeps the sizes with each algorithm in turn.
func runEach(ctx context.Context, comm *collkit.Comm, tr string, opts options, cfg bench.Config, root int, out io.Writer, prog *progress) ([]bench.Report, error) {
	var reports []bench.Report
	for _, algo := range opts.algos {
		if err := comm.SetAlgorithm(algo); err != nil {
			return reports, usageError{err}
		}
		prog.Describe(algo + "/" + tr)
		report, err := runOne(ctx, comm, tr, opts, cfg, root, out, prog)
		if err != nil {
			return reports, err
		}
		reports = append(reports, report)
	}
	return reports, nil
}

// runInterleaved measures size by size, every algorithm in turn at each
// size, so that the machine's slow drift (other load, frequency, the
// hypervisor) falls on the algorithms alike, starting from another one at
// every size and round; each algorithm's table is printed once all sizes
// are done.
// With --rounds R it does all that R times and keeps, for each algorithm
// and size, the round with the median time.
func runInterleaved(ctx context.Context, comm *collkit.Comm, tr string, opts options, base bench.Config, root int, out io.Writer, prog *progress) ([]bench.Report, error) {
	sizes := base.Sizes()
	rounds := make([][][]bench.Row, len(opts.algos)) // algorithm, size, round
	for i := range rounds {
		rounds[i] = make([][]bench.Row, len(sizes))
	}
	for q := range max(opts.rounds, 1) {
		for k, size := range sizes {
			cfg := base
			cfg.MinBytes, cfg.MaxBytes = size, size
			// The algorithm measured first at a size runs faster on some
			// machines (on a 2-core VM, 1 MiB at 4 ranks: the first 100 ms
			// of load 1.35x as fast as the rest, whichever algorithm it
			// is), so which one goes first turns with the size, the round
			// and the seed.
			for _, i := range turnOrder(len(opts.algos), q, k, base.Seed) {
				algo := opts.algos[i]
				if err := comm.SetAlgorithm(algo); err != nil {
					return nil, usageError{err}
				}
				prog.Describe(algo + "/" + tr)
				got, err := bench.RunCollective(ctx, comm, opts.coll, cfg, root, func(row bench.Row) { prog.Done(base, size) })
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
		reports[i] = newReport(comm, tr, opts, base)
		reports[i].WriteHeader(out, opts.style)
		for _, row := range rows[i] {
			bench.WriteRow(out, row, opts.style)
		}
		reports[i].Finish(rows[i])
		reports[i].WriteFooter(out)
	}
	return reports, nil
}

// turnOrder is the order in which --interleave measures n algorithms at
// size k of round q: from algorithm (q + k + seed) mod n on, wrapping.
func turnOrder(n, q, k int, seed uint64) []int {
	first := (q + k + int(seed%uint64(n))) % n
	order := make([]int, n)
	for j := range order {
		order[j] = (first + j) % n
	}
	return order
}

// runOne sweeps the sizes with the communicator's current algorithm.
func runOne(ctx context.Context, comm *collkit.Comm, tr string, opts options, cfg bench.Config, root int, out io.Writer, prog *progress) (bench.Report, error) {
	report := newReport(comm, tr, opts, cfg)
	report.WriteHeader(out, opts.style)
	rows, err := bench.RunCollective(ctx, comm, opts.coll, cfg, root, func(row bench.Row) {
		bench.WriteRow(out, row, opts.style)
		prog.Done(cfg, row.Bytes)
	})
	if err != nil {
		return report, err
	}
	report.Finish(rows)
	report.WriteFooter(out)
	return report, nil
}

// newReport describes a sweep of cfg with the communicator's current
// algorithm.
func newReport(comm *collkit.Comm, tr string, opts options, cfg bench.Config) bench.Report {
	report := bench.NewReport()
	report.Collective, report.Algorithm, report.Transport = opts.coll, comm.Algorithm(), tr
	report.Ranks, report.Streams, report.TransportSettings = comm.Size(), opts.streams, transportSettings(opts)
	if tr == "nccl" || opts.intra == "nccl" {
		report.TransportSettings["memory"] = map[bool]string{true: memDevice, false: memHost}[opts.onDevice(tr)]
	}
	report.Iters, report.Warmup, report.Check, report.Seed = cfg.Iters, cfg.Warmup, cfg.Check, cfg.Seed
	report.RankTime, report.SkipIters = cfg.RankTime.String(), cfg.SkipIters
	if cfg.Sync != bench.SyncNone {
		report.Blocking = cfg.Sync.NCCL()
	}
	if cfg.Group > 1 {
		report.Group, report.PerOperation = cfg.Group, cfg.PerOperation
	}
	if opts.coll != "allreduce" {
		report.Algorithm = "per size (see the algo column)"
	}
	if report.Algorithm == "hierarchical" {
		report.IntraTransport, report.InterTransport, report.Nodes = hierarchy(tr, opts.intra, comm.Nodes(), collkit.TransportAvailable("shm") == nil)
	}
	if report.Iters == 0 {
		report.MinTimeMS, report.MaxIters = float64(cfg.MinTime.Microseconds())/1e3, cfg.MaxIters
	}
	return report
}

// hierarchy says what the hierarchical algorithm runs on: inside every node
// NCCL with --intra nccl; inside a node of several ranks shared memory
// where this host has it (collkit.Connect's default, --intra empty or
// shm), else the main transport; between nodes the main transport, or
// nothing with one node.
func hierarchy(tr, intraFlag string, nodes []int, shm bool) (intra, inter string, count int) {
	perNode := map[int]int{}
	most := 0
	for _, n := range nodes {
		perNode[n]++
		most = max(most, perNode[n])
	}
	intra = tr
	switch {
	case intraFlag == "nccl":
		intra = "nccl"
	case intraFlag == "group":
	case most > 1 && (shm || intraFlag == "shm"):
		intra = "shm"
	}
	if len(perNode) > 1 {
		inter = tr
	}
	return intra, inter, len(perNode)
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
	writeTunedChoices(os.Stdout, bench.TunedChoices(table, opts.transports[0], reports))
	return nil
}
