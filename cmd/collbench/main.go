package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/collkit/collkit"
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
	tune           bool     // the tune subcommand
	algos          []string // --algo, expanded
	tuningIn       string   // --tuning: tuning file for adaptive
	tuneOut        string   // tune --output
	transport      string
	np             int
	npSet          bool
	streams        int
	nodes          int // --nodes: simulated nodes
	spinWait       time.Duration
	bench          bench.Config
	jsonPath       string
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
	if err := worker(ctx, env, opts, stdout); err != nil {
		fmt.Fprintf(stderr, "collbench: rank %d: %v\n", env.Rank, err)
		var u usageError
		if errors.As(err, &u) {
			return exitUsage
		}
		return exitFailed
	}
	return 0
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

func worker(ctx context.Context, env bootstrap.Env, opts options, stdout io.Writer) error {
	setup, cancel := context.WithTimeout(ctx, opts.connectTimeout)
	defer cancel()
	tlsConfig, err := opts.tls.load()
	if err != nil {
		return usageError{err}
	}
	comm, err := collkit.Connect(setup, env, collkit.Options{
		TLS:            tlsConfig,
		Algorithm:      opts.algos[0],
		Transport:      opts.transport,
		Streams:        opts.streams,
		Timeout:        opts.timeout,
		Tuning:         opts.tuningIn,
		SimulatedNodes: opts.nodes,
		SpinWait:       opts.spinWait,
	})
	if err != nil {
		return usageError{err}
	}
	defer comm.Close()

	lead := comm.Rank() == 0
	out := io.Discard
	if lead {
		out = stdout
	}
	var reports []bench.Report
	for _, algo := range opts.algos {
		if err := comm.SetAlgorithm(algo); err != nil {
			return usageError{err}
		}
		report, err := runOne(ctx, comm, opts, out)
		if err != nil {
			return err
		}
		reports = append(reports, report)
	}
	if opts.tune {
		return writeTuning(opts, comm, reports, lead)
	}
	if len(reports) > 1 {
		compare(out, reports)
	}
	if lead && opts.jsonPath != "" {
		if err := bench.WriteJSONFile(opts.jsonPath, reports); err != nil {
			return err
		}
	}
	var wrong int64
	for _, r := range reports {
		wrong += r.Wrong
	}
	if wrong > 0 {
		return fmt.Errorf("%d wrong elements summed over all ranks: the results are incorrect", wrong)
	}
	return nil
}

// runOne sweeps the sizes with the communicator's current algorithm.
func runOne(ctx context.Context, comm *collkit.Comm, opts options, out io.Writer) (bench.Report, error) {
	report := bench.NewReport()
	report.Collective, report.Algorithm, report.Transport = "allreduce", comm.Algorithm(), opts.transport
	report.Ranks, report.Streams = comm.Size(), opts.streams
	report.Iters, report.Warmup, report.Check, report.Seed = opts.bench.Iters, opts.bench.Warmup, opts.bench.Check, opts.bench.Seed
	report.WriteHeader(out)
	rows, err := bench.Run(ctx, comm, opts.bench, func(row bench.Row) { bench.WriteRow(out, row) })
	if err != nil {
		return report, err
	}
	report.Finish(rows)
	report.WriteFooter(out)
	return report, nil
}

// compare prints, per size, every algorithm's out-of-place time with the
// fastest marked.
func compare(w io.Writer, reports []bench.Report) {
	fmt.Fprintf(w, "# Comparison (out-of-place time in us, * = fastest)\n# %10s", "size")
	for _, r := range reports {
		fmt.Fprintf(w, " %16s", r.Algorithm)
	}
	fmt.Fprintf(w, "  %s\n", "winner")
	for i, row := range reports[0].Rows {
		best := 0
		for j, r := range reports {
			if r.Rows[i].OutOfPlace.TimeUS < reports[best].Rows[i].OutOfPlace.TimeUS {
				best = j
			}
		}
		fmt.Fprintf(w, "  %10d", row.Bytes)
		for j, r := range reports {
			mark := " "
			if j == best {
				mark = "*"
			}
			cell := fmt.Sprintf("%.2f%s", r.Rows[i].OutOfPlace.TimeUS, mark)
			if r.Algorithm == "adaptive" {
				cell = fmt.Sprintf("(%s) %s", r.Rows[i].Algorithm, cell)
			}
			fmt.Fprintf(w, " %16s", cell)
		}
		fmt.Fprintf(w, "  %s\n", reports[best].Algorithm)
	}
}

// writeTuning fits the cost model to the sweep of every algorithm and saves
// the tuning file (rank 0).
func writeTuning(opts options, comm *collkit.Comm, reports []bench.Report, lead bool) error {
	table := bench.Tune(reports, opts.transport)
	if !lead {
		return nil
	}
	if err := table.Save(opts.tuneOut); err != nil {
		return err
	}
	fmt.Printf("# tuning for %d ranks over %s written to %s (use: collbench --algo adaptive --tuning %s)\n",
		comm.Size(), opts.transport, opts.tuneOut, opts.tuneOut)
	return nil
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := pflag.NewFlagSet("collbench", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = false
	var o options
	var size, minB, maxB, dtype, op, algo string
	if len(args) > 0 && args[0] == "tune" {
		o.tune, args = true, args[1:]
		fs.StringVar(&o.tuneOut, "output", "collkit-tune.json", "tune: where to write the tuning file")
	}
	fs.StringVarP(&algo, "algo", "a", "ring", "all-reduce algorithm, a comma-separated list, or all: "+strings.Join(collkit.Algorithms(), ", "))
	fs.StringVar(&o.tuningIn, "tuning", "", "tuning file from 'collbench tune' for --algo adaptive (default $COLLKIT_TUNING)")
	fs.StringVarP(&o.transport, "transport", "t", "tcp", "transport: "+strings.Join(collkit.Transports(), ", "))
	fs.IntVar(&o.np, "np", 4, "ranks to launch on this machine when no launcher set RANK/WORLD_SIZE")
	fs.StringVar(&size, "size", "", "one message size in bytes (K/M/G suffixes); sets -b and -e")
	fs.StringVarP(&minB, "minbytes", "b", "8", "smallest message size in bytes (K/M/G suffixes)")
	fs.StringVarP(&maxB, "maxbytes", "e", "64M", "largest message size in bytes (K/M/G suffixes)")
	fs.Int64VarP(&o.bench.StepFactor, "stepfactor", "f", 2, "multiply the size by this between steps")
	fs.IntVarP(&o.bench.Iters, "iters", "n", 20, "timed iterations per size")
	fs.IntVarP(&o.bench.Warmup, "warmup_iters", "w", 5, "untimed warm-up iterations per size")
	fs.IntVarP(&o.bench.Check, "check", "c", 1, "verified iterations per size (0 disables the check)")
	fs.StringVarP(&dtype, "datatype", "d", "float32", "element type: float32, float64, int32, int64, uint8, float16, bfloat16")
	fs.StringVarP(&op, "op", "o", "sum", "reduction: sum, prod, min, max, avg")
	fs.Uint64Var(&o.bench.Seed, "seed", 1, "seed of the checked inputs")
	fs.IntVar(&o.streams, "streams", 1, "TCP connections per peer")
	fs.DurationVar(&o.spinWait, "spin-wait", 0, "poll a TCP socket this long before sleeping (lower latency when every rank has its own core)")
	fs.IntVar(&o.nodes, "nodes", 0, "split the ranks into this many simulated nodes for --algo hierarchical (default: group by host name or $COLLKIT_NODE)")
	fs.StringVar(&o.jsonPath, "json", "", "write the results as JSON to this file (rank 0)")
	fs.DurationVar(&o.timeout, "timeout", 60*time.Second, "fail a collective that takes longer than this (a dead or stuck peer)")
	fs.DurationVar(&o.connectTimeout, "connect-timeout", 30*time.Second, "give up meeting the other ranks after this long")
	o.tls.flags(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: collbench [flags]\n\nMeasures and verifies all-reduce between local ranks (or ranks started by torchrun, mpirun or srun).\n\nFlags:\n%s", fs.FlagUsages())
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
	if o.algos, err = parseAlgos(algo, o.tune); err != nil {
		return o, err
	}
	if !slices.Contains(collkit.Transports(), o.transport) {
		return o, fmt.Errorf("--transport %q: unknown transport (use one of %s)", o.transport, strings.Join(collkit.Transports(), ", "))
	}
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
	case o.bench.Iters < 1:
		return o, fmt.Errorf("--iters %d: must be at least 1", o.bench.Iters)
	case o.bench.Warmup < 0 || o.bench.Check < 0:
		return o, fmt.Errorf("--warmup_iters and --check must not be negative")
	case o.nodes < 0 || o.nodes > o.np && o.npSet:
		return o, fmt.Errorf("--nodes %d: must be between 1 and the number of ranks", o.nodes)
	case o.streams < 1:
		return o, fmt.Errorf("--streams %d: must be at least 1", o.streams)
	case o.spinWait < 0:
		return o, fmt.Errorf("--spin-wait %v: must not be negative", o.spinWait)
	case !o.tls.complete():
		return o, fmt.Errorf("--tls-cert, --tls-key and --tls-ca go together: give all three or none")
	case o.timeout <= 0 || o.connectTimeout <= 0:
		return o, fmt.Errorf("--timeout and --connect-timeout must be positive durations such as 30s")
	}
	return o, nil
}

// parseAlgos expands --algo: a name, a comma-separated list or "all". Tune
// measures the fixed algorithms only, so adaptive is left out of its "all".
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
