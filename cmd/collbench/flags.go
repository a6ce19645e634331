package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/bench"
	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/reduce"
)

// rawFlags are flag values parseFlags reads as text and interprets.
type rawFlags struct {
	size, minB, maxB, dtype, op, algo, transports, tolerance, baseline, root string
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := pflag.NewFlagSet("collbench", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = false
	var o options
	var c compatFlags
	var raw rawFlags
	if len(args) > 0 && args[0] == "tune" {
		o.tune, args = true, args[1:]
		fs.StringVar(&o.tuneOut, "output", "collkit-tune.json", "tune: where to write the tuning file")
	}
	defineFlags(fs, &o, &c, &raw)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: collbench [flags]\n       collbench tune [flags]\n       collbench compare BASE.json NEW.json [--tolerance 10%%] [--min-bw GB/s]\n       collbench plot RESULT.json... [-o FILE.png|FILE.svg]\n       collbench elastic [--np 8] [--events 100] [--kill-every 1s] [--regrow] (see collbench elastic --help)\n\n"+
			"Measures and verifies collectives (all-reduce by default) between local ranks (or ranks started by torchrun, mpirun or srun).\n"+
			"nccl-tests' and OSU's flags work as there, or say what to use instead (README: Flags of nccl-tests and OSU).\n\nFlags:\n%s", fs.FlagUsages())
	}
	if err := fs.Parse(rewriteOSU(fs, args)); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return o, err
		}
		return o, fmt.Errorf("%v (see collbench --help)", err)
	}
	return interpret(fs, o, c, raw)
}

// defineFlags registers every flag of a run on fs.
func defineFlags(fs *pflag.FlagSet, o *options, c *compatFlags, raw *rawFlags) {
	fs.StringVar(&o.coll, "coll", "allreduce", "collective to measure: "+strings.Join(bench.Collectives(), ", "))
	fs.StringVarP(&raw.root, "root", "r", "0", "root rank of broadcast, reduce, gather and scatter, or all (nccl-tests' -r -1): one sweep per root")
	fs.IntVar(&o.bench.Group, "group", 1, "all-reduces per iteration, issued as one fused group (like ncclGroupStart/End with Horovod's tensor fusion); times are for the whole group")
	fs.BoolVar(&o.bench.NoFusion, "no-fusion", false, "with --group: issue the all-reduces one by one instead, for comparison")
	fs.BoolVar(&o.stats, "stats", false, "print rank 0's communication statistics (ops, bytes, p50/p99 per collective and algorithm) after the run")
	fs.StringVar(&o.tracePath, "trace", "", "write a Chrome/Perfetto trace of every rank's collectives and messages to this file")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus metrics on this host:port during the run (local rank k on port+k)")
	fs.StringVar(&raw.algo, "algo", "ring", "all-reduce algorithm, a comma-separated list, or all: "+strings.Join(collkit.Algorithms(), ", "))
	fs.BoolVar(&o.interleave, "interleave", false, "with several --algo: measure size by size, every algorithm in turn at each size, so that drift of a noisy machine hits them alike (tables print at the end)")
	fs.IntVar(&o.rounds, "rounds", 1, "with --interleave: repeat the sweep this many times and keep each size's median (tune: default 3)")
	fs.StringVar(&o.tuningIn, "tuning", "", "tuning file from 'collbench tune' for --algo adaptive (default $COLLKIT_TUNING)")
	fs.StringVar(&raw.transports, "transport", collkit.AutoTransport, "transport, a comma-separated list, or all: "+strings.Join(collkit.Transports(), ", ")+
		"; auto: shm when every rank is on this host, else tcp")
	fs.IntVar(&o.np, "np", 4, "ranks to launch on this machine when no launcher set RANK/WORLD_SIZE (with --transport nccl: the number of GPUs)")
	fs.StringVar(&o.mem, "mem", "", "where --transport nccl's buffers live: device (GPU memory, the default; the timed loop copies nothing, as nccl-tests) or host (host memory staged through the GPU on every call)")
	fs.StringVar(&o.store, "store", "", "with --np: the ranks meet in this store instead of one collbench hosts, etcd://host:port[,host:port...][/prefix] (under another launcher set COLLKIT_STORE)")
	fs.StringVar(&raw.size, "size", "", "one message size in bytes (K/M/G suffixes); sets -b and -e")
	fs.StringVarP(&raw.minB, "minbytes", "b", "8", "smallest message size in bytes (K/M/G suffixes)")
	fs.StringVarP(&raw.maxB, "maxbytes", "e", "64M", "largest message size in bytes (K/M/G suffixes)")
	fs.Int64VarP(&o.bench.StepFactor, "stepfactor", "f", 2, "multiply the size by this between steps (OSU's -f alone is --full)")
	fs.IntVarP(&o.bench.Iters, "iters", "n", 0, "timed iterations per size (default: as many as --min-time takes)")
	fs.DurationVar(&o.bench.MinTime, "min-time", 100*time.Millisecond, "without -n: iterate each size until this much time is spent timing it")
	fs.IntVar(&o.bench.MaxIters, "max-iters", 1000, "without -n: at most this many iterations per size")
	fs.IntVarP(&o.bench.Warmup, "warmup_iters", "w", 5, "untimed warm-up iterations per size")
	fs.DurationVar(&o.warmupTime, "warmup-time", 50*time.Millisecond, "before the first size, 8-byte all-reduces for this long: a fresh process's first milliseconds of collectives run slower than the rest (0: none)")
	fs.IntVarP(&o.bench.Check, "check", "c", 1, "verified iterations per size (0 disables the check; #wrong is then N/A)")
	fs.StringVarP(&raw.dtype, "datatype", "d", "float32", "element type, a comma-separated list, or all: float32, float64, int32, int64, uint8, float16, bfloat16")
	fs.StringVarP(&raw.op, "op", "o", "sum", "reduction, a comma-separated list, or all: sum, prod, min, max, avg")
	fs.Uint64Var(&o.bench.Seed, "seed", 1, "seed of the checked inputs, and with --interleave of which algorithm goes first at each size")
	fs.IntVar(&o.streams, "streams", 1, "TCP connections per peer")
	fs.StringVar(&o.congestion, "tcp-congestion", "", "TCP congestion control of the connections: empty for cubic, else reno (whichever the kernel allows), system for the kernel's default (net.ipv4.tcp_congestion_control), or any name the kernel lets this process set")
	o.spinWait = autoSpin
	fs.Var(spinFlag{&o.spinWait}, "spin-wait", "how long a TCP receive polls, yielding the core between polls, before sleeping: auto (learned per peer from its recent waits) or a duration (0 disables)")
	fs.StringVar(&o.bind, "bind", "core", "bind each local rank to one core, as mpirun --bind-to core (left alone when a launcher already bound it), or none")
	fs.IntVar(&o.nodes, "nodes", 0, "split the ranks into this many simulated nodes for --algo hierarchical (default: group by host name or $COLLKIT_NODE)")
	fs.StringVar(&o.intra, "intra", "", "with --algo hierarchical, the transport inside each node: shm (the default where /dev/shm exists), group (the main transport) or nccl (NCCL inside every node, --transport tcp or rdma between nodes; on one GPU: --nodes 2 --np 2)")
	fs.StringVarP(&o.jsonPath, "json", "J", "", "write the results as JSON to this file (rank 0; schema in bench/SCHEMA.md; nccl-tests' -J writes its own layout)")
	fs.BoolVar(&o.samples, "samples", false, "with --json: keep every iteration's time, not only the statistics (as -I 1)")
	fs.StringVarP(&o.csvPath, "csv", "F", "", "write the results as CSV to this file (rank 0)")
	fs.StringVar(&o.plotPath, "plot", "", "draw busbw and time against size to this .png or .svg file (rank 0)")
	fs.StringVar(&raw.baseline, "baseline", "", "compare with this earlier --json result and fail (exit 1) on a regression beyond --tolerance")
	addGateFlags(fs, &raw.tolerance, &o.gates.minBW)
	fs.BoolVarP(&o.quiet, "quiet", "q", false, "no progress on stderr")
	fs.DurationVar(&o.connectTimeout, "connect-timeout", 30*time.Second, "give up setting up after this long: all ranks joining the store (the missing ones are named; COLLKIT_DEBUG=INFO logs them every 5 s), and then connecting each transport")
	o.tls.flags(fs)
	c.add(fs)
}

// interpret validates the parsed flags into options.
func interpret(fs *pflag.FlagSet, o options, c compatFlags, raw rawFlags) (options, error) {
	size, minB, maxB, dtype, op, algo, transports, tolerance, baseline, root := raw.size, raw.minB, raw.maxB, raw.dtype, raw.op, raw.algo, raw.transports, raw.tolerance, raw.baseline, raw.root
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q (see collbench --help)", fs.Arg(0))
	}
	if c.version {
		o.version = true
		return o, nil
	}
	if err := c.apply(fs, &o); err != nil {
		return o, err
	}
	o.npSet = fs.Changed("np")
	if transports == collkit.AutoTransport {
		transports, o.autoWhy = chooseTransport(o)
	}
	o.interleave = o.interleave || o.tune || o.rounds > 1 // tune compares its candidates size by size
	if o.tune && !fs.Changed("rounds") {
		o.rounds = 3
	}
	var err error
	if o.dtypes, err = parseList("--datatype", dtype, reduce.DTypes, reduce.ParseDType, osuAccelerators); err != nil {
		return o, err
	}
	if o.ops, err = parseList("--op", op, reduce.Ops, reduce.ParseOp, nil); err != nil {
		return o, err
	}
	o.bench.DType, o.bench.Op = o.dtypes[0], o.ops[0]
	if o.root, o.rootAll, err = parseRoot(cmpOr(o.rootText, root)); err != nil {
		return o, err
	}
	if o.tune && !fs.Changed("algo") {
		algo = strings.Join(adaptiveCandidates(transports), ",") // what adaptive chooses among
	}
	if o.algos, err = parseAlgos(algo, o.tune); err != nil {
		return o, err
	}
	if o.bench.Group < 1 {
		return o, fmt.Errorf("--group %d: must be at least 1", o.bench.Group)
	}
	es := int64(0)
	for _, d := range o.dtypes {
		es = max(es, int64(d.Size()))
	}
	if err := c.sizes(fs, &o, size, minB, maxB, es); err != nil {
		return o, err
	}
	if o.bench.Group > 1 && o.coll != "allreduce" {
		if o.bench.PerOperation {
			return o, fmt.Errorf("-m %d applies to --coll allreduce only here", o.bench.Group)
		}
		return o, fmt.Errorf("--group applies to --coll allreduce only")
	}
	if !bench.IsCollective(o.coll) {
		return o, fmt.Errorf("--coll %q: unknown collective (use one of %s)", o.coll, strings.Join(bench.Collectives(), ", "))
	}
	if o.coll == "barrier" {
		if size != "" || fs.Changed("minbytes") || fs.Changed("maxbytes") || c.messageSize != "" {
			return o, fmt.Errorf("--coll barrier moves no data: drop --size, -b and -e")
		}
		o.bench.MinBytes, o.bench.MaxBytes = es, es // one row, of 0 bytes
	}
	if o.coll != "allreduce" {
		o.algos = o.algos[:1] // --algo picks the all-reduce algorithm only
	}
	if o.tune && o.coll != "allreduce" {
		return o, fmt.Errorf("--coll %s: tune fits the all-reduce cost model only; drop --coll", o.coll)
	}
	if o.tune && (len(o.dtypes) > 1 || len(o.ops) > 1 || o.rootAll || o.cycles > 1) {
		return o, fmt.Errorf("tune fits one dtype, op and root in one sweep: drop -d all, -o all, -r all and -N")
	}
	if o.root < 0 || o.npSet && o.np >= 1 && o.root >= o.np {
		return o, fmt.Errorf("--root %d: must be a rank, 0 to the number of ranks - 1 (or all)", o.root)
	}
	if o.transports, o.skipped, err = parseTransports(transports, collkit.Transports(), collkit.TransportAvailable); err != nil {
		return o, err
	}
	if err := checkMem(o); err != nil {
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
	// Samples make --baseline's U test possible; --json keeps them only
	// when asked.
	o.bench.KeepSamples = o.samples || baseline != ""
	itersSet := fs.Changed("iters") || fs.Changed("iterations")
	switch {
	case o.bench.MaxBytes < o.bench.MinBytes:
		return o, fmt.Errorf("--maxbytes %d is smaller than --minbytes %d", o.bench.MaxBytes, o.bench.MinBytes)
	case o.np < 1:
		return o, fmt.Errorf("--np %d: the number of ranks must be at least 1", o.np)
	case storeURLErr(o.store) != nil:
		return o, fmt.Errorf("--store %q: %v", o.store, storeURLErr(o.store))
	case o.bench.StepFactor < 2 && o.bench.StepBytes == 0:
		return o, fmt.Errorf("--stepfactor %d: must be at least 2 (or give a fixed step with -i)", o.bench.StepFactor)
	case itersSet && o.bench.Iters < 1:
		return o, fmt.Errorf("-n %d: at least one timed iteration is needed; leave -n out to iterate each size for --min-time (%v)", o.bench.Iters, o.bench.MinTime)
	case o.bench.Iters == 0 && (o.bench.MinTime <= 0 || o.bench.MaxIters < 1):
		return o, fmt.Errorf("--min-time %v, --max-iters %d: without -n both must be positive", o.bench.MinTime, o.bench.MaxIters)
	case o.gates.minBW < 0:
		return o, fmt.Errorf("--min-bw %g: must not be negative", o.gates.minBW)
	case o.bench.Warmup < 0 || o.bench.Check < 0 || o.warmupTime < 0:
		return o, fmt.Errorf("--warmup_iters, --warmup-time and --check must not be negative")
	case o.nodes < 0 || o.nodes > o.np && o.npSet:
		return o, fmt.Errorf("--nodes %d: must be between 1 and the number of ranks", o.nodes)
	case o.intra != "" && o.intra != "shm" && o.intra != "group" && o.intra != "nccl":
		return o, fmt.Errorf("--intra %q: want shm, group or nccl", o.intra)
	case o.intra != "" && !slices.Contains(o.algos, "hierarchical"):
		return o, fmt.Errorf("--intra %s: only --algo hierarchical has an intra-node level; add --algo hierarchical", o.intra)
	case o.intra == "nccl" && slices.Contains(o.transports, "nccl"):
		return o, fmt.Errorf("--intra nccl with --transport nccl: NCCL carries every rank already; use --transport tcp or rdma between the nodes")
	case o.intra == "nccl" && o.mem != memHost && o.coll == "allreduce" && len(o.algos) > 1:
		return o, fmt.Errorf("--intra nccl on GPU memory: only --algo hierarchical runs there; measure the others with --mem host")
	case o.intra == "nccl" && o.mem != memHost && o.bench.Group > 1:
		return o, fmt.Errorf("--group/-m with --intra nccl: grouped all-reduces on GPU memory need --transport nccl; add --mem host")
	case o.intra == "nccl" && collkit.TransportAvailable("nccl") != nil:
		return o, fmt.Errorf("--intra nccl: %v; or keep --transport inside nodes with --intra shm or group", collkit.TransportAvailable("nccl"))
	case o.streams < 1:
		return o, fmt.Errorf("--streams %d: must be at least 1", o.streams)
	case o.rounds < 1:
		return o, fmt.Errorf("--rounds %d: must be at least 1", o.rounds)
	case o.bind != "core" && o.bind != "none":
		return o, fmt.Errorf("--bind %q: want core or none", o.bind)
	case !o.tls.complete():
		return o, fmt.Errorf("--tls-cert, --tls-key and --tls-ca go together: give all three or none")
	case o.connectTimeout <= 0:
		return o, fmt.Errorf("--connect-timeout must be a positive duration such as 30s")
	}
	return o, nil
}

// osuAccelerators are OSU's -d values, which name where buffers live.
var osuAccelerators = []string{"cuda", "managed", "openacc", "rocm", "cxl"}

// parseList reads a comma-separated list of names, or all.
func parseList[T comparable](flag, s string, every []T, parse func(string) (T, error), osu []string) ([]T, error) {
	if strings.TrimSpace(s) == "all" {
		return slices.Clone(every), nil
	}
	var out []T
	for _, name := range strings.Split(s, ",") {
		if slices.Contains(osu, strings.ToLower(strings.TrimSpace(name))) {
			return nil, fmt.Errorf("-d %s: OSU's accelerator flag; -d is nccl-tests' data type here (float32, ..., or all); with --transport nccl the buffers are GPU memory (--mem device, the default), with the other transports host memory", name)
		}
		v, err := parse(name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w (or all)", flag, err)
		}
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out, nil
}

// parseRoot reads --root: a rank, or all (nccl-tests' -r -1).
func parseRoot(s string) (root int, all bool, err error) {
	s = strings.TrimSpace(s)
	if s == "all" || s == "-1" {
		return 0, true, nil
	}
	r, err := strconv.Atoi(s)
	if err != nil {
		if s == "cpu" || s == "gpu" || s == "both" {
			return 0, false, fmt.Errorf("-r %s: OSU's compute target has no counterpart; -r is nccl-tests' root here (a rank, or all)", s)
		}
		return 0, false, fmt.Errorf("--root %q: want a rank or all", s)
	}
	return r, false, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// adaptiveCandidates names the algorithms the adaptive algorithm chooses
// among over transport, which tune measures unless --algo says otherwise.
func adaptiveCandidates(transport string) []string {
	var names []string
	for _, a := range bench.Candidates(transport) {
		names = append(names, a.Name)
	}
	return names
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

// storeURLErr says what is wrong with a --store URL, or nil (also for none).
func storeURLErr(s string) error {
	if s == "" {
		return nil
	}
	_, err := bootstrap.ParseStoreURL(s)
	return err
}

// chooseTransport resolves --transport auto as the library does
// (collkit.ChooseTransport) for the job this run is part of: the ranks
// collbench launches (--np), or those of the launcher that started it.
func chooseTransport(o options) (name, why string) {
	env, err := bootstrap.FromEnv(os.Getenv)
	if err != nil { // collbench launches the ranks, all on this host
		env = bootstrap.Env{Size: o.np, LocalSize: o.np}
	}
	opts := collkit.Options{Streams: o.streams, TCPCongestion: o.congestion, SpinWait: spinWait(o.spinWait),
		SimulatedNodes: o.nodes, IntraNode: o.intra}
	if o.tls != (tlsFiles{}) {
		opts.TLS = new(tls.Config) // only whether it is set counts
	}
	return collkit.ChooseTransport(env, opts)
}
