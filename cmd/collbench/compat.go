package main

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/collkit/collkit/bench"
	"github.com/collkit/collkit/reduce"
)

// This file is where nccl-tests' and OSU's flags meet collbench's. Where
// the two tools give a short flag different meanings, nccl-tests' wins
// (collbench prints its table) unless the value or its absence can only be
// OSU's: `-m 8:1M`, a bare `-f`, `-c`, `-I` or `-z`. Long OSU names
// (--message-size, --iterations, --warmup, --full, --validation) always
// mean what OSU means. A flag whose value cannot apply here fails with one
// line saying what to use instead.

// compatFlags holds the raw values of the flags interpreted here.
type compatFlags struct {
	threads      string // -t
	gpus         int    // -g
	stepBytes    string // -i
	aggIters     string // -m
	messageSize  string // --message-size (OSU -m)
	iterations   int    // --iterations (OSU -i)
	osuWarmup    int    // -x, --warmup (OSU)
	full         bool   // -f alone, --full (OSU)
	validation   bool   // -c alone, --validation (OSU)
	average      string // -a
	blocking     string // -z
	tailLat      bool   // -z alone, --tail-lat (OSU)
	perIter      string // -I
	session      bool   // -I alone (OSU --session)
	perIterSkip  int    // -K
	cycles       int    // -N
	parallelInit int    // -p
	streamNull   int    // -y
	timeout      string // -T, --timeout
	cudaGraph    string // -G
	cpuTime      int    // -C
	timestamps   int    // -S
	register     int    // -R
	ctaPolicy    string // --cta_policy (nccl-tests -x)
	deviceImpl   string // -D
	deviceCTAs   int    // -V
	memory       string // -M
	unalign      int    // -u
	rootRank     string // -k, --root-rank (OSU)
	inPlace      bool   // -l, --in-place (OSU)
	papi         string // -P (OSU)
	version      bool   // -v, --version
	memLimit     string // --mem-limit (OSU -M)
	// osuOnly are OSU's long flags collbench refuses, by name.
	osuOnly map[string]*string
}

// osuOnly are OSU's long flags that collbench refuses, with what to use
// instead.
var osuOnly = map[string]string{
	"accelerator":       "collbench's buffers are GPU memory with --transport nccl (--mem device, the default; --mem host stages host memory), host memory with the other transports",
	"type":              "the data type is -d (float32, int32, uint8, ...)",
	"graph":             "use --plot FILE.png (or .svg) for busbw and time against size",
	"array-size":        "collbench runs no dummy compute on a device",
	"ddt":               "derived datatypes are not supported; collbench sends contiguous buffers",
	"validation-warmup": "the checked iterations run after the timed ones, with no warm-up of their own",
}

// addCompatFlags registers nccl-tests' and OSU's flags that collbench did
// not have.
func (c *compatFlags) add(fs *pflag.FlagSet) {
	fs.StringVarP(&c.threads, "nthreads", "t", "1", "nccl-tests: threads per process; collbench runs one rank per process (use --np)")
	fs.IntVarP(&c.gpus, "ngpus", "g", 1, "nccl-tests: GPUs per thread; collbench drives one device per rank (use --np)")
	fs.StringVarP(&c.stepBytes, "stepbytes", "i", "", "nccl-tests: add this many bytes between sizes instead of multiplying by -f (K/M/G suffixes); OSU's -i is --iterations")
	fs.StringVarP(&c.aggIters, "agg_iters", "m", "", "nccl-tests: all-reduces per iteration, fused into one group, times per all-reduce (as --group, but per operation); with a colon, OSU's -m MIN:MAX")
	fs.StringVar(&c.messageSize, "message-size", "", "OSU: [MIN:]MAX message sizes in bytes (sets -b and -e)")
	fs.IntVar(&c.iterations, "iterations", 0, "OSU: timed iterations per size (as -n)")
	fs.IntVarP(&c.osuWarmup, "warmup", "x", 0, "OSU: warm-up iterations per size (as -w)")
	fs.BoolVar(&c.full, "full", false, "OSU -f: add each rank's mean time averaged over ranks, the fastest and the slowest")
	fs.BoolVar(&c.validation, "validation", false, "OSU -c: check the results (collbench does by default, -c 1)")
	fs.StringVarP(&c.average, "average", "a", "3", "nccl-tests: the time column across ranks: 0 rank 0, 1 average, 2 fastest, 3 slowest rank's mean (collbench's default; nccl-tests' is 1)")
	fs.StringVarP(&c.blocking, "blocking", "z", "2", "nccl-tests: 1 barrier after each iteration (timed), 2 none (default), 3 barrier outside the time; collectives always block")
	fs.BoolVar(&c.tailLat, "tail-lat", false, "OSU -z: tail latencies; the table always has p50 and p99")
	fs.StringVarP(&c.perIter, "per_iter_timing", "I", "1", "nccl-tests: per-iteration statistics columns (1, the default here) or not (0); 1 also writes every sample with --json")
	fs.IntVarP(&c.perIterSkip, "per_iter_skip", "K", 0, "nccl-tests: leave this many leading iterations out of the per-iteration statistics")
	fs.IntVarP(&c.cycles, "run_cycles", "N", 1, "nccl-tests: run the whole sweep this many times, printing each")
	fs.IntVarP(&c.parallelInit, "parallel_init", "p", 0, "nccl-tests: ranks always set up in parallel here (0 or 1)")
	fs.IntVarP(&c.streamNull, "stream_null", "y", 0, "nccl-tests: CUDA's null stream; only 0")
	fs.StringVarP(&c.timeout, "timeout", "T", "60s", "fail a collective that takes longer than this (a dead or stuck peer): a duration, or seconds as nccl-tests' -T; 0 disables")
	fs.StringVarP(&c.cudaGraph, "cudagraph", "G", "0", "nccl-tests: CUDA graph launches; only 0")
	fs.IntVarP(&c.cpuTime, "report_cputime", "C", 0, "nccl-tests: report CPU time; only 0 (the time is the host's already)")
	fs.IntVarP(&c.timestamps, "report_timestamps", "S", 0, "nccl-tests: timestamp each row; only 0 (--json records when each sweep started)")
	fs.IntVarP(&c.register, "local_register", "R", 0, "nccl-tests: buffer registration; only 0 (transports register their own)")
	fs.StringVar(&c.ctaPolicy, "cta_policy", "", "nccl-tests -x: CTA policy; has no meaning without GPU kernels (-x is OSU's --warmup here)")
	fs.StringVarP(&c.deviceImpl, "device_implementation", "D", "0", "nccl-tests: device API implementation; only 0")
	fs.IntVarP(&c.deviceCTAs, "device_cta_count", "V", 16, "nccl-tests: CTAs of -D; unused")
	fs.StringVarP(&c.memory, "memory", "M", "0", "nccl-tests: memory report (0 or 1; the header always has the estimate); OSU's -M SIZE caps each rank's memory")
	fs.IntVarP(&c.unalign, "unalign", "u", 0, "nccl-tests: misalign buffers; only 0")
	fs.StringVarP(&c.rootRank, "root-rank", "k", "", "OSU: fixed:N is --root N")
	fs.BoolVarP(&c.inPlace, "in-place", "l", false, "OSU: in-place; collbench times out-of-place and in-place always")
	fs.StringVarP(&c.papi, "papi", "P", "", "OSU: PAPI counters; not supported")
	fs.BoolVarP(&c.version, "version", "v", false, "print collkit's version and exit")
	fs.BoolVar(&c.session, "session", false, "OSU -I: MPI sessions; not supported")
	fs.StringVar(&c.memLimit, "mem-limit", "", "OSU -M: a cap on each rank's estimated buffers")
	c.osuOnly = map[string]*string{}
	for name := range osuOnly {
		c.osuOnly[name] = fs.String(name, "", "OSU: not supported")
		fs.Lookup(name).Hidden = true
	}
	for _, name := range []string{"tail-lat", "cta_policy", "device_cta_count", "session", "mem-limit"} {
		fs.Lookup(name).Hidden = true
	}
}

// rewriteOSU turns OSU's value-less short flags into their long names, so
// that pflag does not take the next argument as their value: -f, -c, -I
// and -z followed by something that is not a number are OSU's --full,
// --validation, --session and --tail-lat.
func rewriteOSU(fs *pflag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	takesValue := func(f *pflag.Flag) bool { return f != nil && f.NoOptDefVal == "" && f.Value.Type() != "bool" }
	for i := 0; i < len(args); i++ {
		a := args[i]
		out = append(out, a)
		switch {
		case a == "--":
			return append(out, args[i+1:]...)
		case strings.HasPrefix(a, "--"):
			if !strings.Contains(a, "=") && takesValue(fs.Lookup(a[2:])) && i+1 < len(args) {
				i++
				out = append(out, args[i])
			}
		case len(a) == 2 && a[0] == '-':
			next := ""
			if i+1 < len(args) {
				next = args[i+1]
			}
			if long, ok := map[string]string{"-f": "--full", "-c": "--validation", "-I": "--session", "-z": "--tail-lat"}[a]; ok {
				if _, err := strconv.Atoi(next); err != nil {
					out[len(out)-1] = long
					continue
				}
			}
			if takesValue(fs.ShorthandLookup(a[1:])) && i+1 < len(args) {
				i++
				out = append(out, args[i])
			}
		}
	}
	return out
}

// apply interprets the compatibility flags into o; fs tells which were
// given.
func (c *compatFlags) apply(fs *pflag.FlagSet, o *options) error {
	var err error
	if c.session {
		return fmt.Errorf("-I without a value is OSU's --session (MPI sessions): collbench has no MPI; drop it (nccl-tests' -I takes 0 or 1)")
	}
	for _, name := range slices.Sorted(maps.Keys(osuOnly)) {
		if fs.Changed(name) {
			return fmt.Errorf("--%s %s: OSU's --%s is not supported: %s", name, *c.osuOnly[name], name, osuOnly[name])
		}
	}
	if n, err := strconv.Atoi(c.threads); err != nil {
		return fmt.Errorf("-t %s: -t is nccl-tests' threads per process here; the transport is --transport %s", c.threads, c.threads)
	} else if n != 1 {
		return fmt.Errorf("-t %d: collbench runs one rank per process, not threads (nccl-tests' -t); use --np %d for %d local ranks", n, n, n)
	}
	switch {
	case fs.Changed("ngpus") && c.gpus != 1:
		return fmt.Errorf("-g %d: each rank drives one device (nccl-tests' -g is GPUs per thread); use --np %d, one rank per GPU, with --transport nccl", c.gpus, c.gpus)
	case c.streamNull != 0:
		return fmt.Errorf("-y %d: collbench runs no CUDA streams of its own; drop -y (nccl-tests' stream_null)", c.streamNull)
	case c.cpuTime != 0:
		return fmt.Errorf("-C %d: collbench's collectives block, so the time column is already the host's time for the whole call; drop -C (nccl-tests' report_cputime)", c.cpuTime)
	case c.timestamps != 0:
		return fmt.Errorf("-S %d: rows carry no timestamps; --json records when each sweep started (nccl-tests' report_timestamps)", c.timestamps)
	case c.register != 0:
		return fmt.Errorf("-R %d: buffer registration is each transport's own business here (rdma registers its buffers); drop -R (nccl-tests' local_register)", c.register)
	case c.ctaPolicy != "":
		return fmt.Errorf("--cta_policy %s: CTA policies need GPU kernels, which collbench does not launch; drop it (and -x is OSU's --warmup here)", c.ctaPolicy)
	case c.unalign != 0:
		return fmt.Errorf("-u %d: misaligned buffers (nccl-tests' -u) are not supported, and OSU's -u (warm-up before validation) has no counterpart: the checked iterations run after the timed ones; drop -u", c.unalign)
	case c.papi != "":
		return fmt.Errorf("-P %s: PAPI counters (OSU's -P) are not supported; use --trace FILE or --stats to see where time goes", c.papi)
	case c.parallelInit != 0 && c.parallelInit != 1:
		return fmt.Errorf("-p %d: want 0 or 1 (nccl-tests' parallel_init; ranks always set up in parallel here)", c.parallelInit)
	case c.cycles < 1:
		return fmt.Errorf("-N %d: give the number of sweeps, at least 1 (nccl-tests' 0, forever, is not supported: for a long burn-in give a large count and stop it with Ctrl-C)", c.cycles)
	case c.perIterSkip < 0:
		return fmt.Errorf("-K %d: must not be negative", c.perIterSkip)
	}
	o.cycles = c.cycles
	o.bench.SkipIters = c.perIterSkip

	if n, err := strconv.Atoi(c.deviceImpl); err != nil || n != 0 {
		if err != nil {
			return fmt.Errorf("-D %s: OSU's derived datatypes (-D, --ddt) are not supported; collbench sends contiguous buffers", c.deviceImpl)
		}
		return fmt.Errorf("-D %d: NCCL's device API implementations (nccl-tests' -D) are not supported; drop -D", n)
	}
	if n, err := strconv.Atoi(c.cudaGraph); err != nil || n != 0 {
		if err != nil {
			return fmt.Errorf("-G %s: OSU's graph output; use --plot FILE.png (or .svg) for busbw and time against size", c.cudaGraph)
		}
		return fmt.Errorf("-G %d: collbench captures no CUDA graphs (nccl-tests' -G); drop -G", n)
	}

	// -a: the time column.
	a, aerr := strconv.Atoi(c.average)
	switch {
	case aerr != nil:
		return fmt.Errorf("-a %s: -a is nccl-tests' --average (0 rank 0, 1 average, 2 min, 3 max over ranks) here; the algorithm is --algo %s", c.average, c.average)
	case a > 3:
		return fmt.Errorf("-a %d: -a is nccl-tests' --average, 0 to 3 (OSU's -a, the device array size, has no counterpart)", a)
	}
	if o.bench.RankTime, err = bench.RankTimeFromNCCL(a); err != nil {
		return err
	}

	// -z: what happens between iterations; bare -z is OSU's tail latency.
	if c.tailLat {
		if fs.Changed("blocking") {
			return fmt.Errorf("-z without a value is OSU's tail latency; give nccl-tests' -z a value, or drop one of them")
		}
	} else {
		z, zerr := strconv.Atoi(c.blocking)
		if zerr != nil {
			return fmt.Errorf("-z %s: collbench's table has p50 and p99 of the per-iteration times, no other percentiles (OSU's -z LIST); nccl-tests' -z takes 1, 2 or 3", c.blocking)
		}
		if o.bench.Sync, err = bench.SyncFromNCCL(z); err != nil {
			return err
		}
	}

	// -I: per-iteration columns, and samples in the JSON.
	switch c.perIter {
	case "0":
		o.style.NoPerIteration = true
	case "1":
		o.samples = o.samples || fs.Changed("per_iter_timing")
	default:
		return fmt.Errorf("-I %s: want 0 or 1 (nccl-tests' per_iter_timing)", c.perIter)
	}
	o.style.RankSpread = c.full

	// -M: nccl-tests' report switch, or OSU's per-rank memory cap.
	if c.memLimit != "" {
		if fs.Changed("memory") {
			return fmt.Errorf("-M and --mem-limit: give one")
		}
		c.memory = c.memLimit
	}
	switch c.memory {
	case "0", "1":
	default:
		if o.memLimit, err = parseSize("-M", c.memory, 1); err != nil {
			return fmt.Errorf("-M %s: want 0 or 1 (nccl-tests' memory report), or a size in bytes (OSU's per-rank memory limit)", c.memory)
		}
	}

	// -T / --timeout: seconds (nccl-tests) or a duration; 0 disables.
	if o.timeout, err = parseTimeout(c.timeout); err != nil {
		return err
	}

	// Iterations and warm-up under OSU's names.
	if fs.Changed("iterations") {
		if fs.Changed("iters") && c.iterations != o.bench.Iters {
			return fmt.Errorf("--iterations %d and -n %d disagree: give one", c.iterations, o.bench.Iters)
		}
		o.bench.Iters = c.iterations
	}
	if fs.Changed("warmup") {
		if fs.Changed("warmup_iters") && c.osuWarmup != o.bench.Warmup {
			return fmt.Errorf("--warmup %d and -w %d disagree: give one", c.osuWarmup, o.bench.Warmup)
		}
		o.bench.Warmup = c.osuWarmup
	}
	if c.validation && fs.Changed("check") && o.bench.Check == 0 {
		return fmt.Errorf("--validation (OSU's -c) and -c 0 disagree: give one")
	}
	if c.validation && o.bench.Check == 0 {
		o.bench.Check = 1
	}

	// -k: OSU's root.
	if c.rootRank != "" {
		r, ok := strings.CutPrefix(c.rootRank, "fixed:")
		if _, err := strconv.Atoi(r); !ok || err != nil {
			return fmt.Errorf("-k %s: collbench takes OSU's fixed:N (the same root in every iteration); for a rotating root use -r all, one sweep per root", c.rootRank)
		}
		if fs.Changed("root") {
			return fmt.Errorf("-k and -r both set the root: give one")
		}
		o.rootText = r
	}
	return nil
}

// sizes resolves the sweep from --size, -b/-e, OSU's -m or
// --message-size, and -f or -i.
func (c *compatFlags) sizes(fs *pflag.FlagSet, o *options, size, minB, maxB string, es int64) error {
	var err error
	osuRange := c.messageSize
	osuFlag := "--message-size"
	if c.aggIters != "" {
		if v, ok := aggIters(c.aggIters); ok {
			if v > 1024 {
				return fmt.Errorf("-m %d: nccl-tests' -m fuses that many all-reduces per iteration; for OSU's largest message size write -m :%d or --message-size %d", v, v, v)
			}
			if v < 1 {
				return fmt.Errorf("-m %d: at least 1 operation per iteration (nccl-tests' agg_iters)", v)
			}
			if fs.Changed("group") && o.bench.Group != v {
				return fmt.Errorf("-m %d and --group %d disagree: give one (-m reports times per all-reduce, --group per group)", v, o.bench.Group)
			}
			o.bench.Group, o.bench.PerOperation = v, true
		} else {
			if osuRange != "" {
				return fmt.Errorf("-m %s and --message-size %s: give one", c.aggIters, osuRange)
			}
			osuRange, osuFlag = c.aggIters, "-m"
		}
	}
	if osuRange != "" {
		if size != "" || fs.Changed("minbytes") || fs.Changed("maxbytes") {
			return fmt.Errorf("%s %s: give the sizes once, with %s or with --size / -b and -e", osuFlag, osuRange, osuFlag)
		}
		lo, hi, ok := strings.Cut(osuRange, ":")
		if !ok {
			lo, hi = "", lo
		}
		if lo != "" {
			minB = lo
		}
		if hi != "" {
			maxB = hi
		}
		if o.bench.MinBytes, err = parseSize(osuFlag, minB, es); err != nil {
			return err
		}
		if o.bench.MaxBytes, err = parseSize(osuFlag, maxB, es); err != nil {
			return err
		}
	} else {
		if size != "" {
			minB, maxB = size, size
		}
		flagName := map[bool]string{true: "--size", false: "--minbytes"}[size != ""]
		if o.bench.MinBytes, err = parseSize(flagName, minB, es); err != nil {
			return err
		}
		flagName = map[bool]string{true: "--size", false: "--maxbytes"}[size != ""]
		if o.bench.MaxBytes, err = parseSize(flagName, maxB, es); err != nil {
			return err
		}
	}
	if c.stepBytes != "" {
		if fs.Changed("stepfactor") {
			return fmt.Errorf("-i %s and -f %d: give one step, a fixed increment (-i) or a factor (-f)", c.stepBytes, o.bench.StepFactor)
		}
		if o.bench.StepBytes, err = parseSize("-i", c.stepBytes, 1); err != nil {
			return fmt.Errorf("%v; OSU's -i (iterations) is --iterations or -n here", err)
		}
	}
	if n := o.bench.NumSizes(); n > maxSizes {
		if c.stepBytes != "" {
			return fmt.Errorf("-i %s: %d sizes from %d to %d bytes in steps of %d (nccl-tests' --stepbytes), more than %d; for OSU's iteration count use -n %s or --iterations %s",
				c.stepBytes, n, o.bench.MinBytes, o.bench.MaxBytes, o.bench.StepBytes, maxSizes, c.stepBytes, c.stepBytes)
		}
		return fmt.Errorf("%d sizes, more than %d: raise -f or narrow -b/-e", n, maxSizes)
	}
	return nil
}

// maxSizes bounds a sweep's sizes: more is a typo (OSU's -i meaning
// iterations, read as nccl-tests' step in bytes) more often than a plan.
const maxSizes = 1000

// aggIters reads -m as nccl-tests' operation count: a plain number.
// Anything with a colon or a size suffix is OSU's message size.
func aggIters(s string) (int, bool) {
	v, err := strconv.Atoi(strings.TrimSpace(s))
	return v, err == nil
}

// parseTimeout reads --timeout / -T: a Go duration, or a number of seconds
// as nccl-tests gives it; zero (or less) means no timeout, returned as -1.
func parseTimeout(s string) (time.Duration, error) {
	if secs, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil {
		if secs <= 0 {
			return -1, nil
		}
		return time.Duration(secs * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		if _, derr := reduce.ParseDType(strings.TrimPrefix(strings.ToLower(s), "mpi_")); derr == nil || strings.HasPrefix(strings.ToLower(s), "mpi_") {
			return 0, fmt.Errorf("-T %s: OSU's data type flag; -T is nccl-tests' timeout here, the data type is -d (float32, int32, uint8, ...)", s)
		}
		return 0, fmt.Errorf("--timeout %q: want a duration such as 30s, or seconds as nccl-tests' -T 30 (0 disables)", s)
	}
	if d <= 0 {
		return -1, nil
	}
	return d, nil
}
