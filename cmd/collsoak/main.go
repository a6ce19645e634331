package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/launch"
	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/verify"
)

type options struct {
	np        int
	ops       int
	maxBytes  int
	seed      uint64
	algos     []string
	timeout   time.Duration
	warmup    int
	maxGrowth int // KiB
	streams   int
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fs := pflag.NewFlagSet("collsoak", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var algos string
	fs.IntVar(&o.np, "np", 4, "ranks to launch on this machine when no launcher set RANK/WORLD_SIZE")
	fs.IntVar(&o.ops, "ops", 10000, "random all-reduces to run")
	var maxBytes string
	fs.StringVar(&maxBytes, "max-bytes", "1M", "largest message in bytes (K/M suffixes)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the random sequence (the same on every rank)")
	fs.StringVar(&algos, "algos", "ring,tree,halvingdoubling,hierarchical", "algorithms to pick from")
	fs.DurationVar(&o.timeout, "timeout", 60*time.Second, "per-collective timeout")
	fs.IntVar(&o.warmup, "warmup", 500, "operations before the first memory reading")
	fs.IntVar(&o.maxGrowth, "max-growth", 32<<10, "fail when resident memory grew by more than this many KiB")
	fs.IntVar(&o.streams, "streams", 2, "TCP connections per peer")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "collsoak: %v\n", err)
		return 2
	}
	mult := 1
	switch {
	case strings.HasSuffix(maxBytes, "K"):
		mult, maxBytes = 1<<10, strings.TrimSuffix(maxBytes, "K")
	case strings.HasSuffix(maxBytes, "M"):
		mult, maxBytes = 1<<20, strings.TrimSuffix(maxBytes, "M")
	}
	if v, err := strconv.Atoi(maxBytes); err == nil {
		o.maxBytes = v * mult
	}
	o.algos = strings.Split(algos, ",")
	if o.ops < 1 || o.maxBytes < 8 || o.warmup < 0 || o.warmup >= o.ops {
		fmt.Fprintln(stderr, "collsoak: --ops must be positive, --max-bytes at least 8, and --warmup below --ops")
		return 2
	}
	env, err := bootstrap.FromEnv(os.Getenv)
	if errors.Is(err, bootstrap.ErrNoEnv) {
		err := launch.Run(ctx, launch.Config{N: o.np, Args: args, Grace: o.timeout})
		var re *launch.RankError
		if errors.As(err, &re) {
			return re.ExitCode()
		}
		if err != nil {
			fmt.Fprintf(stderr, "collsoak: %v\n", err)
			return 2
		}
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "collsoak: %v\n", err)
		return 2
	}
	if err := soak(ctx, env, o, stdout); err != nil {
		fmt.Fprintf(stderr, "collsoak: rank %d: %v\n", env.Rank, err)
		return 1
	}
	return 0
}

func soak(ctx context.Context, env bootstrap.Env, o options, stdout io.Writer) error {
	setup, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	comm, err := collkit.Connect(setup, env, collkit.Options{Timeout: o.timeout, Streams: o.streams, SimulatedNodes: min(2, env.Size)})
	if err != nil {
		return err
	}
	defer comm.Close()
	n, rank := comm.Size(), comm.Rank()
	out := io.Discard
	if rank == 0 {
		out = stdout
	}
	rng := rand.New(rand.NewPCG(o.seed, 0x50a4)) // same sequence on every rank
	send := make([]byte, o.maxBytes)
	recv := make([]byte, o.maxBytes)
	want := make([]byte, o.maxBytes)
	var rssBefore int64
	start := time.Now()
	counts := map[string]int{}
	for i := range o.ops {
		if i == o.warmup {
			debug.FreeOSMemory()
			if rssBefore, err = maxRSS(ctx, comm); err != nil {
				return err
			}
			fmt.Fprintf(out, "# after %d warm-up operations: resident memory (max over ranks) %d KiB\n", o.warmup, rssBefore)
		}
		algo := o.algos[rng.IntN(len(o.algos))]
		dt := reduce.DTypes[rng.IntN(len(reduce.DTypes))]
		op := reduce.Ops[rng.IntN(len(reduce.Ops))]
		// Sizes spread over every scale: log-uniform from 1 element.
		maxElems := o.maxBytes / dt.Size()
		elems := int(float64(maxElems) * math.Exp2(-rng.Float64()*20))
		elems = max(1, min(elems, maxElems))
		if rng.IntN(10) == 0 {
			elems = 0
		}
		nb := elems * dt.Size()
		inPlace := rng.IntN(2) == 0
		if err := comm.SetAlgorithm(algo); err != nil {
			return err
		}
		seed := o.seed<<20 + uint64(i)
		verify.Fill(dt, op, send[:nb], seed, rank)
		dst := recv[:nb]
		if inPlace {
			dst = send[:nb]
		}
		if err := comm.AllReduce(ctx, dt, op, send[:nb], dst); err != nil {
			return fmt.Errorf("operation %d (%s, %d x %v, %v): %w", i, algo, elems, dt, op, err)
		}
		verify.Expect(dt, op, want[:nb], seed, n)
		if w := verify.Wrong(dt, dst, want[:nb]); w != 0 {
			return fmt.Errorf("operation %d (%s, %d x %v, %v, in place %v): %d wrong elements", i, algo, elems, dt, op, inPlace, w)
		}
		counts[algo]++
	}
	debug.FreeOSMemory()
	rssAfter, err := maxRSS(ctx, comm)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "# %d random all-reduces on %d ranks in %v, every element verified: %v\n",
		o.ops, n, time.Since(start).Round(time.Millisecond), counts)
	fmt.Fprintf(out, "# resident memory (max over ranks): %d KiB after warm-up, %d KiB at the end (%+d KiB)\n",
		rssBefore, rssAfter, rssAfter-rssBefore)
	if rssAfter-rssBefore > int64(o.maxGrowth) {
		return fmt.Errorf("resident memory grew by %d KiB, more than --max-growth %d KiB", rssAfter-rssBefore, o.maxGrowth)
	}
	return nil
}

// maxRSS is the largest resident set size of any rank, in KiB.
func maxRSS(ctx context.Context, comm *collkit.Comm) (int64, error) {
	v := []int64{rssKiB()}
	if err := collkit.AllReduce(ctx, comm, v, v, collkit.Max); err != nil {
		return 0, err
	}
	return v[0], nil
}

// rssKiB reads VmRSS from /proc/self/status; 0 where there is none.
func rssKiB() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			v, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return v
		}
	}
	return 0
}
