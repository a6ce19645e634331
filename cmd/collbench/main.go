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
	algo, transport string
	np              int
	npSet           bool
	streams         int
	bench           bench.Config
	jsonPath        string
	timeout         time.Duration
	connectTimeout  time.Duration
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
		return re.ExitCode() // the ranks have printed their own errors
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
	comm, err := collkit.Connect(setup, env, collkit.Options{
		Algorithm: opts.algo,
		Transport: opts.transport,
		Streams:   opts.streams,
		Timeout:   opts.timeout,
	})
	if err != nil {
		return usageError{err}
	}
	defer comm.Close()

	report := bench.NewReport()
	report.Collective, report.Algorithm, report.Transport = "allreduce", comm.Algorithm(), opts.transport
	report.Ranks, report.Streams = comm.Size(), opts.streams
	report.Iters, report.Warmup, report.Check, report.Seed = opts.bench.Iters, opts.bench.Warmup, opts.bench.Check, opts.bench.Seed
	lead := comm.Rank() == 0
	if lead {
		report.WriteHeader(stdout)
	}
	rows, err := bench.Run(ctx, comm, opts.bench, func(row bench.Row) {
		if lead {
			bench.WriteRow(stdout, row)
		}
	})
	if err != nil {
		return err
	}
	report.Finish(rows)
	if lead {
		report.WriteFooter(stdout)
		if opts.jsonPath != "" {
			if err := report.WriteJSON(opts.jsonPath); err != nil {
				return err
			}
		}
	}
	if report.Wrong > 0 {
		return fmt.Errorf("%d wrong elements summed over all ranks: the results are incorrect", report.Wrong)
	}
	return nil
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := pflag.NewFlagSet("collbench", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = false
	var o options
	var size, minB, maxB, dtype, op string
	fs.StringVarP(&o.algo, "algo", "a", "ring", "all-reduce algorithm: "+strings.Join(collkit.Algorithms(), ", "))
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
	fs.StringVar(&o.jsonPath, "json", "", "write the results as JSON to this file (rank 0)")
	fs.DurationVar(&o.timeout, "timeout", 60*time.Second, "fail a collective that takes longer than this (a dead or stuck peer)")
	fs.DurationVar(&o.connectTimeout, "connect-timeout", 30*time.Second, "give up meeting the other ranks after this long")
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
	if !slices.Contains(collkit.Algorithms(), o.algo) {
		return o, fmt.Errorf("--algo %q: unknown algorithm (use one of %s)", o.algo, strings.Join(collkit.Algorithms(), ", "))
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
	case o.streams < 1:
		return o, fmt.Errorf("--streams %d: must be at least 1", o.streams)
	case o.timeout <= 0 || o.connectTimeout <= 0:
		return o, fmt.Errorf("--timeout and --connect-timeout must be positive durations such as 30s")
	}
	return o, nil
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
